// The Notification Provider side of the Data Source: what an iPhone sends back for a
// Control Point request. Used by the phone simulator and by benchmarks; standard library only.

/// Options that reproduce how real iOS versions deviate from the specification.
public struct DataSourceEncodingOptions: Hashable, Sendable {
    /// Notification attributes whose tuple is left out of the response entirely, even when
    /// requested (seen for PositiveActionLabel in 2014-era captures). The specification says
    /// a missing attribute is sent with length 0; this set breaks that on purpose.
    public var omittedAttributes: Set<NotificationAttributeID>
    /// Append "…" (U+2026) to a Title, Subtitle or Message that was cut, as iOS does.
    public var appendEllipsis: Bool

    public init(omittedAttributes: Set<NotificationAttributeID> = [], appendEllipsis: Bool = true) {
        self.omittedAttributes = omittedAttributes
        self.appendEllipsis = appendEllipsis
    }
}

/// Builds Data Source responses and splits them into GATT notification values.
///
/// Response layout (all lengths little-endian):
/// - GetNotificationAttributes: `00 UID(4) {AttrID u8, Len u16, bytes}…`
/// - GetAppAttributes: `01 AppIdentifier NUL {AttrID u8, Len u16, bytes}…`
///
/// Tuples come in request order. A requested attribute the phone has no value for is sent
/// with length 0. Title, Subtitle and Message are cut to the request's max length.
public enum DataSourceEncoder {
    /// The UTF-8 bytes of "…" (U+2026).
    public static let ellipsis: [UInt8] = [0xE2, 0x80, 0xA6]

    /// The largest value one tuple can carry (its length field is a u16).
    public static let maxValueLength = Int(UInt16.max)

    /// The response to `request`, or nil for PerformNotificationAction (answered by the
    /// write's acknowledgement only).
    ///
    /// - Parameters:
    ///   - notificationAttributes: the notification's values, used for GetNotificationAttributes.
    ///   - appAttributes: the app's values, used for GetAppAttributes.
    public static func response(
        to request: ControlPointRequest,
        notificationAttributes: [NotificationAttributeID: [UInt8]] = [:],
        appAttributes: [AppAttributeID: [UInt8]] = [:],
        options: DataSourceEncodingOptions = DataSourceEncodingOptions()
    ) -> [UInt8]? {
        switch request {
        case .getNotificationAttributes(let uid, let requested):
            notificationResponse(uid: uid, requested: requested, values: notificationAttributes, options: options)
        case .getAppAttributes(let identifier, let requested):
            appResponse(appIdentifier: identifier, requested: requested, values: appAttributes)
        case .performNotificationAction:
            nil
        }
    }

    /// `00 UID(4) {AttrID, Len, bytes}…` for the requested attributes, in request order.
    public static func notificationResponse(
        uid: UInt32, requested: [NotificationAttributeRequest], values: [NotificationAttributeID: [UInt8]],
        options: DataSourceEncodingOptions = DataSourceEncodingOptions()
    ) -> [UInt8] {
        var out: [UInt8] = [CommandID.getNotificationAttributes.rawValue]
        appendLittleEndian(uid, to: &out)
        for attribute in requested where !options.omittedAttributes.contains(attribute.id) {
            var value = values[attribute.id] ?? []
            if let max = attribute.maxLength {
                value = truncated(value, maxLength: Int(max), ellipsis: options.appendEllipsis)
            }
            appendTuple(attribute.id.rawValue, value, to: &out)
        }
        return out
    }

    /// `01 AppIdentifier NUL {AttrID, Len, bytes}…` for the requested attributes, in request order.
    public static func appResponse(
        appIdentifier: String, requested: [AppAttributeID], values: [AppAttributeID: [UInt8]]
    ) -> [UInt8] {
        var out: [UInt8] = [CommandID.getAppAttributes.rawValue] + Array(appIdentifier.utf8) + [0]
        for id in requested { appendTuple(id.rawValue, values[id] ?? [], to: &out) }
        return out
    }

    private static func appendTuple(_ id: UInt8, _ value: [UInt8], to out: inout [UInt8]) {
        let bytes = value.count > maxValueLength ? Array(value.prefix(maxValueLength)) : value
        out.append(id)
        out.append(UInt8(truncatingIfNeeded: bytes.count))
        out.append(UInt8(truncatingIfNeeded: bytes.count >> 8))
        out += bytes
    }

    /// `value` cut to at most `maxLength` bytes on a UTF-8 character boundary. When it is cut
    /// and `ellipsis` is set, "…" is appended and counted in the budget (the result never
    /// exceeds `maxLength`); below 3 bytes of budget no ellipsis fits and none is added.
    public static func truncated(_ value: [UInt8], maxLength: Int, ellipsis: Bool = true) -> [UInt8] {
        guard value.count > maxLength else { return value }
        let mark = ellipsis && maxLength >= Self.ellipsis.count ? Self.ellipsis : []
        var end = max(0, maxLength - mark.count)
        // Back up over continuation bytes (10xxxxxx) so a character is never split.
        while end > 0, end < value.count, value[end] & 0xC0 == 0x80 { end -= 1 }
        return Array(value[..<end]) + mark
    }

    /// Splits a response into GATT notification values of at most `mtu - 3` bytes (the ATT
    /// notification header takes 3). An MTU below 23, the ATT minimum, is treated as 23.
    public static func fragments(of response: [UInt8], mtu: Int) -> [[UInt8]] {
        fragments(of: response, valueSize: max(mtu, 23) - 3)
    }

    /// Splits a response into values of at most `valueSize` bytes (at least 1).
    public static func fragments(of response: [UInt8], valueSize: Int) -> [[UInt8]] {
        let size = max(valueSize, 1)
        var out: [[UInt8]] = []
        out.reserveCapacity(response.count / size + 1)
        var start = 0
        while start < response.count {
            let end = min(start + size, response.count)
            out.append(Array(response[start..<end]))
            start = end
        }
        return out
    }
}
