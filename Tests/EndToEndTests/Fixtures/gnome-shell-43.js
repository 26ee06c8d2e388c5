(() => {
    // GNOME Shell 43. Evaluated by org.gnome.Shell.Eval (--unsafe-mode), where shellDBus.js's `Main` is in scope.
    const text = actor => actor ? actor.clutter_text.get_text() : null;
    const buttons = message => message._buttonBox ? message._buttonBox.get_children() : [];
    const fdoIds = () => Main.notificationDaemon._fdoNotificationDaemon._notifications;
    const idOf = notification => {
        const found = Object.entries(fdoIds()).find(([, ndata]) => ndata.notification === notification);
        return found ? Number(found[0]) : null;
    };
    const describe = message => ({
        id: message.notification ? idOf(message.notification) : null,
        title: text(message.titleLabel),
        body: message.bodyLabel ? text(message.bodyLabel) : null,
        buttons: buttons(message).map(button => button.label),
        urgency: message.notification ? message.notification.urgency : null,
        source: message.notification ? message.notification.source.title : null,
        header: null, // 43's banners and list messages show no source title
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
    const player = title => {
        const found = messageList._mediaSection._messages.find(m => m.visible && (title === undefined || text(m.titleLabel) === title));
        if (!found) throw new Error(`no player ${title ?? ''} in the media controls`);
        return found;
    };
    return {
        version: 43,
        state: () => ({
            banner: Main.messageTray._banner ? describe(Main.messageTray._banner) : null,
            tray: Main.messageTray.getSources().flatMap(source => source.notifications.map(n => ({
                id: idOf(n), source: source.title, title: n.title, body: n.bannerBodyText, urgency: n.urgency }))),
            // notifications waiting for the banner, in the order they will show
            queue: Main.messageTray._notificationQueue.map(n => n.title),
            list: messageList._notificationSection._messages.map(describe),
            media: messageList._mediaSection._messages.filter(m => m.visible).map(m => ({
                title: text(m.titleLabel), artist: text(m.bodyLabel), source: null, status: m._player.status })),
        }),
        clickButton: label => press(banner(), label),
        clickBanner: () => { banner().emit('clicked', 1); return true; },
        closeBanner: () => { banner()._closeButton.emit('clicked', 1); return true; },
        // 43's message list shows no buttons: clickListButton always throws "no button".
        clickListButton: (title, label) => press(inList(title), label),
        clickListItem: title => { inList(title).emit('clicked', 1); return true; },
        closeListItem: title => { inList(title)._closeButton.emit('clicked', 1); return true; },
        mediaPlayPause: title => { player(title)._playPauseButton.emit('clicked', 1); return true; },
        mediaNext: title => { player(title)._nextButton.emit('clicked', 1); return true; },
        clear: () => { Main.messageTray.getSources().forEach(source => source.destroy()); return true; },
        openList: () => { Main.panel.statusArea.dateMenu.menu.open(); return true; },
        closeList: () => { Main.panel.statusArea.dateMenu.menu.close(); return true; },
        // The tray shows its next queued banner when its state machine runs again: after a
        // banner whose notification was destroyed (a button pressed) that is the user's next
        // move (idle monitor, pointer), which a headless shell never sees.
        nudge: () => { Main.messageTray._updateState(); return true; },
    };
})()
