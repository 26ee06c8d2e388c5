(() => {
    const text = actor => actor ? actor.clutter_text.get_text() : null;
    const buttons = message => message._buttonBox ? message._buttonBox.get_children() : [];
    const describe = message => ({
        title: text(message.titleLabel),
        body: message.bodyLabel ? text(message.bodyLabel) : null,
        buttons: buttons(message).map(button => button.label),
        urgency: message.notification ? message.notification.urgency : null,
        source: message.notification ? message.notification.source.title : null,
    });
    const messageList = Main.panel.statusArea.dateMenu._messageList;
    const banner = () => {
        const shown = Main.messageTray._banner;
        if (!shown) throw new Error('no banner on screen');
        return shown;
    };
    const inList = title => {
        const found = messageList._notificationSection._messages.find(m => text(m.titleLabel) === title);
        if (!found) throw new Error(`no notification titled ${title} in the message list`);
        return found;
    };
    const press = (message, label) => {
        const button = buttons(message).find(b => b.label === label);
        if (!button) throw new Error(`no button ${label}: ${buttons(message).map(b => b.label)}`);
        button.emit('clicked', 1);
        return true;
    };
    const player = () => {
        const found = messageList._mediaSection._messages.find(m => m.visible);
        if (!found) throw new Error('no player in the media controls');
        return found;
    };
    return {
        state: () => ({
            banner: Main.messageTray._banner ? describe(Main.messageTray._banner) : null,
            queue: Main.messageTray._notificationQueue.map(n => n.title),
            list: messageList._notificationSection._messages.map(describe),
            media: messageList._mediaSection._messages.filter(m => m.visible).map(m => ({
                title: text(m.titleLabel), artist: text(m.bodyLabel) })),
        }),
        clickButton: label => press(banner(), label),
        clickBanner: () => { banner().vfunc_clicked(); return true; },
        closeBanner: () => { banner()._closeButton.emit('clicked', 1); return true; },
        clickListButton: (title, label) => press(inList(title), label),
        mediaPlayPause: () => { player()._playPauseButton.emit('clicked', 1); return true; },
        mediaNext: () => { player()._nextButton.emit('clicked', 1); return true; },
        // The tray shows its next queued banner when its state machine runs again: after a
        // banner whose notification was destroyed (a button pressed) that is the user's next
        // move (idle monitor, pointer), which a headless shell never sees.
        nudge: () => { Main.messageTray._updateState(); return true; },
        clear: () => { Main.messageTray.getSources().forEach(source => source.destroy()); return true; },
        openList: () => { Main.panel.statusArea.dateMenu.menu.open(); return true; },
        closeList: () => { Main.panel.statusArea.dateMenu.menu.close(); return true; },
    };
})()
