import ANCS
import ANCSSession
import Testing

@Suite struct AppPatternTests {
    @Test(arguments: [
        ("com.apple.MobileSMS", "com.apple.MobileSMS", true),
        ("com.apple.MobileSMS", "com.apple.mobilesms", false),
        ("com.apple.*", "com.apple.MobileSMS", true),
        ("com.apple.*", "com.apple.", true),
        ("com.apple.*", "com.applex", false),
        ("*.mail", "com.google.mail", true),
        ("*", "anything", true),
        ("com.*.social*", "com.facebook.social.app", true),
        ("com.*.social*", "com.facebook.app", false),
        ("a*a", "a", false),
        ("a*b*c", "abc", true),
        ("a*b*c", "acb", false),
    ])
    func matches(pattern: String, app: String, expected: Bool) throws {
        let p = try #require(AppPattern(pattern))
        #expect(p.matches(app) == expected)
        #expect(!p.matches(nil), "an unknown app matches nothing")
    }

    @Test func refusesWhatNoBundleIdentifierHolds() {
        #expect(AppPattern("") == nil)
        #expect(AppPattern("com apple") == nil)
        #expect(AppPattern("com\u{0}apple") == nil)
    }

    @Test func categoryRulesUseTheOutputsNames() {
        #expect(CategoryRule("social")?.matches(.social) == true)
        #expect(CategoryRule("incoming_call")?.matches(.social) == false)
        #expect(CategoryRule("reserved")?.matches(CategoryID(rawValue: 42)) == true)
        #expect(CategoryRule("reserved")?.matches(.email) == false)
        #expect(CategoryRule("Social") == nil && CategoryRule("sms") == nil)
        #expect(CategoryRule.names.count == 13)
    }
}

@Suite struct SessionFilterTests {
    @Test func aCategoryFilteredOutIsNeverFetched() {
        var h = Harness { $0.filter = NotificationFilter(ignoredCategories: [CategoryRule("email")!]) }
        h.ns(.notificationAdded, uid: 1, category: .email)
        #expect(h.writes.isEmpty, "decided from the Notification Source event alone")
        h.ns(.notificationModified, uid: 1, category: .email)
        #expect(h.writes.isEmpty)
        h.ns(.notificationRemoved, uid: 1, category: .email)
        #expect(h.events.isEmpty && h.session.notifications.isEmpty)
        #expect(h.session.filteredCount == 1)
        #expect(h.session.ruleMatches == [.ignoreCategory(CategoryRule("email")!): 1])
        // Other categories go on as before.
        h.ns(.notificationAdded, uid: 2, category: .social)
        #expect(h.writes.count == 1)
    }

    @Test func anAppFilteredOutCostsOnlyItsAppIdentifier() throws {
        var h = Harness { $0.filter = NotificationFilter(ignoredApps: [AppPattern("com.example.*")!]) }
        h.ns(.notificationAdded, uid: 1)
        #expect(h.lastRequest == .getNotificationAttributes(uid: 1, attributes: [.init(.appIdentifier)]))
        h.answer(notificationResponse(uid: 1, [(.appIdentifier, "com.example.game")]))
        #expect(h.writes.count == 1, "nothing more is asked for a dropped notification: no attributes, no app name")
        #expect(h.events.isEmpty && h.session.notifications.isEmpty)
        #expect(h.session.filteredCount == 1)
        h.ns(.notificationRemoved, uid: 1)
        #expect(h.events.isEmpty, "its removal is not shown either")

        // A kept one: the rest of its attributes next (without the AppIdentifier again), then the app name.
        h.ns(.notificationAdded, uid: 2)
        h.answer(notificationResponse(uid: 2, [(.appIdentifier, "com.apple.MobileSMS")]))
        guard case .getNotificationAttributes(2, let attributes)? = h.lastRequest else { throw Failure("no second request") }
        #expect(attributes.map(\.id) == [.title, .subtitle, .message, .messageSize, .date])
        h.answer(notificationResponse(uid: 2, Array(basicAttributes.dropFirst())))
        h.answer(appResponse("com.apple.MobileSMS", name: "Messages"))
        let event = try #require(h.events.first)
        #expect(event.kind == .added && event.notification.appIdentifier == "com.apple.MobileSMS")
        #expect(event.notification.appName == "Messages" && event.notification.title == "Ada")
        #expect(h.session.ruleMatches == [.ignoreApp(AppPattern("com.example.*")!): 1], "matched only the dropped one")
        #expect(h.session.filteredCount == 1)
    }

    @Test func onlyAppKeepsTheMatchingAppsAndCountsThem() {
        var h = Harness { $0.filter = NotificationFilter(onlyApps: [AppPattern("com.apple.MobileSMS")!, AppPattern("org.never.*")!]) }
        h.ns(.notificationAdded, uid: 1)
        h.answer(notificationResponse(uid: 1, [(.appIdentifier, "com.apple.MobileSMS")]))
        h.answer(notificationResponse(uid: 1, Array(basicAttributes.dropFirst())))
        h.answer(appResponse("com.apple.MobileSMS", name: "Messages"))
        h.ns(.notificationAdded, uid: 2)
        h.answer(notificationResponse(uid: 2, [(.appIdentifier, "com.example.game")]))
        #expect(h.events.map(\.notification.uid) == [1])
        #expect(h.session.filteredCount == 1)
        #expect(h.session.ruleMatches == [.onlyApp(AppPattern("com.apple.MobileSMS")!): 1], "org.never.* matched nothing")
    }

    @Test func onlyAppDropsANotificationWhoseAppIsUnknown() {
        var h = Harness { $0.filter = NotificationFilter(onlyApps: [AppPattern("com.apple.*")!]) }
        h.ns(.notificationAdded, uid: 1)
        h.written(.attError(.invalidCommand))  // the phone refuses: the app stays unknown
        #expect(h.events.isEmpty && h.session.filteredCount == 1)
        var keep = Harness { $0.filter = NotificationFilter(ignoredApps: [AppPattern("com.example.*")!]) }
        keep.ns(.notificationAdded, uid: 1)
        keep.written(.attError(.invalidCommand))
        #expect(keep.events.count == 1 && keep.events.first?.notification.attributesComplete == false,
                "ignore-app keeps what it cannot recognise")
    }

    @Test func aNewFilterAppliesToWhatComesNext() {
        var h = Harness()
        h.ns(.notificationAdded, uid: 1, category: .news)
        #expect(h.writes.count == 1)
        h.session.updateFilter(NotificationFilter(ignoredCategories: [CategoryRule("news")!]))
        h.answer(notificationResponse(uid: 1, basicAttributes))
        h.answer(appResponse("com.apple.MobileSMS", name: "Messages"))
        #expect(h.events.count == 1, "already on its way")
        h.ns(.notificationAdded, uid: 2, category: .news)
        #expect(h.writes.count == 2 && h.session.filteredCount == 1)
    }
}
