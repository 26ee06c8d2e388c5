/// A HID report descriptor read item by item (USB HID 1.11, §6.2.2): enough to check what a
/// descriptor declares — its application collections and every usage it names — not to
/// decode reports.
public struct HIDReportDescriptor: Sendable {
    /// One short item (§6.2.2.2); long items (prefix 0xFE) are kept with tag 0xFE.
    public struct Item: Sendable, Hashable {
        public enum Kind: UInt8, Sendable {
            case main = 0, global = 1, local = 2, reserved = 3
        }

        public var kind: Kind
        /// bTag, the item's top four bits (0xFE for a long item).
        public var tag: UInt8
        /// The data bytes, little-endian.
        public var data: [UInt8]
        /// Where the item starts in the descriptor.
        public var offset: Int

        /// The data as an unsigned number.
        public var value: UInt32 {
            data.prefix(4).enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
        }
    }

    /// A usage: its page and its id within the page.
    public struct Usage: Sendable, Hashable, CustomStringConvertible {
        public var page: UInt16
        public var id: UInt16

        public init(page: UInt16, id: UInt16) {
            self.page = page
            self.id = id
        }

        public var description: String {
            "0x" + String(page, radix: 16, uppercase: true) + ":0x" + String(id, radix: 16, uppercase: true)
        }

        /// Generic Desktop (page 0x01), Keyboard (0x06): iOS hides its on-screen keyboard while
        /// such a device is connected.
        public static let keyboard = Usage(page: 0x01, id: 0x06)
        /// Generic Desktop, Keypad (0x07).
        public static let keypad = Usage(page: 0x01, id: 0x07)
        /// Consumer (page 0x0C), Consumer Control (0x01): a media remote.
        public static let consumerControl = Usage(page: 0x0C, id: 0x01)
    }

    /// A descriptor that cannot be read.
    public enum ParseError: Error, Hashable, CustomStringConvertible {
        /// The item at this offset claims more bytes than are left.
        case truncated(offset: Int)

        public var description: String {
            switch self {
            case .truncated(let offset): "HID report descriptor: the item at byte \(offset) is cut short"
            }
        }
    }

    public let items: [Item]
    /// The usages declared right before each Application collection (Collection 0x01).
    public let applicationCollections: [Usage]
    /// Every usage the descriptor names (Usage items, and each end of a Usage Minimum/Maximum
    /// range as a range): what a host sees it claim to be.
    public let usages: [ClosedRange<UInt32>]

    public init(_ bytes: [UInt8]) throws(ParseError) {
        var items: [Item] = []
        var index = 0
        while index < bytes.count {
            let prefix = bytes[index]
            if prefix == 0xFE {  // long item: size, tag, data
                guard index + 2 < bytes.count else { throw .truncated(offset: index) }
                let size = Int(bytes[index + 1])
                guard index + 3 + size <= bytes.count else { throw .truncated(offset: index) }
                items.append(Item(kind: .reserved, tag: 0xFE, data: Array(bytes[(index + 3)..<(index + 3 + size)]), offset: index))
                index += 3 + size
                continue
            }
            let size = [0, 1, 2, 4][Int(prefix & 0x03)]
            guard index + 1 + size <= bytes.count else { throw .truncated(offset: index) }
            items.append(Item(
                kind: Item.Kind(rawValue: (prefix >> 2) & 0x03) ?? .reserved, tag: prefix >> 4,
                data: Array(bytes[(index + 1)..<(index + 1 + size)]), offset: index))
            index += 1 + size
        }
        self.items = items

        // Usage Page is global state; Usage and Usage Minimum/Maximum are local, cleared by
        // every main item. A 4-byte usage carries its own page in the high half.
        var page: UInt32 = 0
        var pageStack: [UInt32] = []
        var local: [ClosedRange<UInt32>] = []
        var minimum: UInt32?
        var applications: [Usage] = []
        var usages: [ClosedRange<UInt32>] = []
        func extended(_ item: Item) -> UInt32 { item.data.count == 4 ? item.value : page << 16 | item.value }
        for item in items {
            switch (item.kind, item.tag) {
            case (.global, 0x0): page = item.value & 0xFFFF  // Usage Page
            case (.global, 0xA): pageStack.append(page)  // Push
            case (.global, 0xB): page = pageStack.popLast() ?? page  // Pop
            case (.local, 0x0): local.append(extended(item)...extended(item))  // Usage
            case (.local, 0x1): minimum = extended(item)  // Usage Minimum
            case (.local, 0x2):  // Usage Maximum
                let maximum = extended(item)
                if let low = minimum { local.append(min(low, maximum)...max(low, maximum)) }
                minimum = nil
            case (.main, let tag):
                if tag == 0xA, item.value == 0x01, let first = local.first {  // Collection (Application)
                    applications.append(Usage(page: UInt16(first.lowerBound >> 16), id: UInt16(first.lowerBound & 0xFFFF)))
                }
                usages += local
                local = []
                minimum = nil
            default: break
            }
        }
        usages += local
        applicationCollections = applications
        self.usages = usages
    }

    /// True if the descriptor names `usage`, alone or inside a range.
    public func names(_ usage: Usage) -> Bool {
        let extended = UInt32(usage.page) << 16 | UInt32(usage.id)
        return usages.contains { $0.contains(extended) }
    }

    /// True if any usage is on `page`.
    public func names(page: UInt16) -> Bool {
        usages.contains { UInt16($0.lowerBound >> 16) <= page && page <= UInt16($0.upperBound >> 16) }
    }

    /// True if the descriptor names the Keyboard usage (Generic Desktop 0x06): the device iOS
    /// takes for a keyboard, hiding its on-screen keyboard while it is connected. A Keypad usage
    /// (0x07) or key codes on the Keyboard/Keypad page alone do not count: the on-screen
    /// keyboard stayed with a Keypad application (T-vK/ESP32-BLE-Keyboard#137).
    public var declaresKeyboard: Bool {
        names(.keyboard)
    }
}
