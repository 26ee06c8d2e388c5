(() => {
    // GNOME Shell 48. Evaluated by org.gnome.Shell.Eval (--unsafe-mode), where shellDBus.js's `Main` is in scope.
    const text = actor => actor ? actor.clutter_text.get_text() : null;
    const buttons = message => message._buttonBox ? message._buttonBox.get_children() : [];
    // The header's source title label (48 shows the source's title in every notification's header).
    const header = message => {
        const content = message._header ? message._header.get_children().find(c => c.style_class === 'message-header-content') : null;
        const label = content ? content.get_children().find(c => c.style_class === 'message-source-title') : null;
        return label ? label.text : null;
    };
    const fdoIds = () => Main.notificationDaemon._fdoNotificationDaemon._notifications;
    const idOf = notification => {
        for (const [id, n] of fdoIds()) if (n === notification) return id;
        return null;
    };
    const describe = message => ({
        id: message.notification ? idOf(message.notification) : null,
        title: text(message.titleLabel),
        body: text(message._bodyLabel),
        buttons: buttons(message).map(button => button.label),
        urgency: message.notification ? message.notification.urgency : null,
        source: message.notification ? message.notification.source.title : null,
        header: header(message),
    });
    const view = () => Main.panel.statusArea.dateMenu._messageList._messageView;
    const groups = () => view().messages.filter(m => m._notificationToMessage);
    const listMessages = () => groups().flatMap(g => [...g._notificationToMessage.values()]);
    const players = () => view().messages.filter(m => m._player);
    const banner = () => {
        const shown = Main.messageTray._banner;
        if (!shown) throw new Error('no banner on screen');
        return shown;
    };
    const inList = title => {
        const found = listMessages().find(m => text(m.titleLabel) === title);
        if (!found) throw new Error(`no notification titled ${title} in the message list`);
        return found;
    };
    // A click on a message of a collapsed group of several expands the group (messageList.js);
    // expand it first, as a user would, so that the click reaches the message.
    const expanded = message => {
        const group = groups().find(g => [...g._notificationToMessage.values()].includes(message));
        if (group && !group.expanded) {
            view()._setExpandedGroup(group).catch(logError);
            group.expand().catch(logError);
        }
        return message;
    };
    const press = (message, label) => {
        const button = buttons(message).find(b => b.label === label);
        if (!button) throw new Error(`no button ${label}: ${buttons(message).map(b => b.label)}`);
        button.emit('clicked', 1);
        return true;
    };
    const player = title => {
        const found = players().find(m => title === undefined || text(m.titleLabel) === title);
        if (!found) throw new Error(`no player ${title ?? ''} in the media controls`);
        return found;
    };
    return {
        version: 48,
        state: () => ({
            banner: Main.messageTray._banner ? describe(Main.messageTray._banner) : null,
            tray: Main.messageTray.getSources().flatMap(source => source.notifications.map(n => ({
                id: idOf(n), source: source.title, title: n.title, body: n.body, urgency: n.urgency }))),
            // notifications waiting for the banner, in the order they will show
            queue: Main.messageTray._notificationQueue.map(n => n.title),
            list: listMessages().map(describe),
            media: players().map(m => ({
                title: text(m.titleLabel), artist: text(m._bodyLabel), source: header(m), status: m._player.status })),
        }),
        clickButton: label => press(banner(), label),
        clickBanner: () => { banner().emit('clicked', 1); return true; },
        closeBanner: () => { banner()._header.closeButton.emit('clicked', 1); return true; },
        clickListButton: (title, label) => press(expanded(inList(title)), label),
        clickListItem: title => { expanded(inList(title)).emit('clicked', 1); return true; },
        closeListItem: title => { expanded(inList(title))._header.closeButton.emit('clicked', 1); return true; },
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
