import CDBus

/// Method calls serialized in the D-Bus wire format (little-endian) by Swift, then handed to
/// libdbus with `dbus_message_demarshal`, which checks them as it checks every incoming message.
///
/// Building a message with libdbus's iterators costs thousands of instructions per container
/// (every top-level argument rewrites the header's signature field): a Control Point write,
/// `WriteValue(ay, a{sv})`, took about 50,000. Serialized here and demarshalled it takes a
/// fraction of that. Values must have been validated (`DBusValue.validate`); anything this
/// does not write (Unix fds, which travel beside the bytes) is left to the iterator path,
/// and so is a message libdbus refuses to demarshal.
enum Wire {
    /// Header flags.
    static let noReplyExpected: UInt8 = 0x1
    static let noAutoStart: UInt8 = 0x2

    /// The wire form of a method call with serial 1 (the copy that is sent gets its own), or
    /// nil when the iterator path must build it.
    static func methodCall(
        destination: String?, path: String, interface: String?, member: String,
        signature: String, arguments: [DBusValue], flags: UInt8
    ) -> [UInt8]? {
        var body = Writer()
        for argument in arguments {
            guard body.append(argument) else { return nil }
        }
        var header = methodCallHeader(
            destination: destination, path: path, interface: interface, member: member, signature: signature,
            flags: flags, bodyLength: body.bytes.count, extraCapacity: body.bytes.count)
        header.append(contentsOf: body.bytes)
        return header
    }

    /// A method call's header with serial 1, padded to 8 (the body follows it), with room
    /// reserved for `extraCapacity` more bytes.
    static func methodCallHeader(
        destination: String?, path: String, interface: String?, member: String,
        signature: String, flags: UInt8, bodyLength: Int, extraCapacity: Int
    ) -> [UInt8] {
        var header = Writer()
        header.bytes.reserveCapacity(
            64 + path.utf8.count + member.utf8.count + (destination?.utf8.count ?? 0) + (interface?.utf8.count ?? 0)
                + signature.utf8.count + extraCapacity)
        header.bytes.append(contentsOf: [UInt8(ascii: "l"), 1 /* METHOD_CALL */, flags, 1 /* version */])
        header.appendUInt32(UInt32(truncatingIfNeeded: bodyLength))
        header.appendUInt32(1)  // serial
        let fieldsLength = header.bytes.count
        header.appendUInt32(0)  // the fields' length, filled in below
        let fieldsStart = header.bytes.count
        // In libdbus's order, so the bytes are the very ones its iterators make.
        header.field(1, UInt8(ascii: "o"), path)
        if let destination { header.field(6, UInt8(ascii: "s"), destination) }
        if let interface { header.field(2, UInt8(ascii: "s"), interface) }
        header.field(3, UInt8(ascii: "s"), member)
        if !signature.isEmpty { header.field(8, UInt8(ascii: "g"), signature) }
        header.setUInt32(UInt32(header.bytes.count - fieldsStart), at: fieldsLength)
        header.pad(to: 8)
        return header.bytes
    }

    /// A method call whose first argument is a byte array (`ay`) that changes from call to call
    /// while everything else stays: the header and the arguments after the array are marshalled
    /// once, and each message copies them around its bytes (a GATT write: `WriteValue(ay, a{sv})`).
    struct ByteArrayCall: Sendable {
        /// The header for an empty body; its body length (bytes 4 to 7) is set per message.
        let header: [UInt8]
        /// The arguments after the array, marshalled from each place they can start: index
        /// `n` holds them written from an offset of `n` modulo 8 into the body (the padding
        /// they need first included), since the array's length moves them.
        let trailers: [[UInt8]]

        /// Nil for arguments this writer leaves to libdbus (Unix fds). `trailing` must have
        /// been validated, and `signature` must be `ay` followed by theirs.
        init?(
            destination: String?, path: String, interface: String?, member: String,
            signature: String, trailing: [DBusValue], flags: UInt8
        ) {
            var trailers: [[UInt8]] = []
            for offset in 0..<8 {
                var writer = Writer()
                writer.bytes = [UInt8](repeating: 0, count: offset)
                for argument in trailing {
                    guard writer.append(argument) else { return nil }
                }
                trailers.append(Array(writer.bytes.dropFirst(offset)))
            }
            self.trailers = trailers
            header = Wire.methodCallHeader(
                destination: destination, path: path, interface: interface, member: member, signature: signature,
                flags: flags, bodyLength: 0, extraCapacity: 0)
        }

        /// The wire form of the call with `array` as its first argument (serial 1).
        func bytes(_ array: [UInt8]) -> [UInt8] {
            // The body: the array's length (at offset 0, aligned), its bytes, then the rest.
            let trailer = trailers[(4 + array.count) & 7]
            let bodyLength = 4 + array.count + trailer.count
            var message = Writer()
            message.bytes.reserveCapacity(header.count + bodyLength)
            message.bytes.append(contentsOf: header)  // padded to 8: the body starts aligned
            message.setUInt32(UInt32(truncatingIfNeeded: bodyLength), at: 4)
            message.appendUInt32(UInt32(truncatingIfNeeded: array.count))
            message.bytes.append(contentsOf: array)
            message.bytes.append(contentsOf: trailer)
            return message.bytes
        }
    }

    /// Turns wire bytes into a libdbus message ready to send (serial 0, unlocked), or nil if
    /// libdbus refuses them.
    static func message(from bytes: [UInt8]) -> OpaquePointer? {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        let parsed = bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress.flatMap { base in
                base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                    dbus_message_demarshal($0, Int32(buffer.count), &error)
                }
            }
        }
        guard let parsed else { return nil }
        defer { dbus_message_unref(parsed) }
        // A copy has serial 0, so the connection numbers it as it numbers every message it sends.
        return dbus_message_copy(parsed)
    }

    /// Appends values with the alignment rules of the D-Bus specification; offsets count from
    /// the start of its bytes, which must start at an 8-aligned place of the message (the
    /// header is padded to 8 and the body follows it).
    struct Writer {
        var bytes: [UInt8] = []

        mutating func pad(to alignment: Int) {
            // alignment is a power of two (1, 2, 4 or 8)
            while bytes.count & (alignment - 1) != 0 { bytes.append(0) }
        }

        mutating func appendUInt32(_ v: UInt32) {
            pad(to: 4)
            bytes.append(UInt8(truncatingIfNeeded: v))
            bytes.append(UInt8(truncatingIfNeeded: v >> 8))
            bytes.append(UInt8(truncatingIfNeeded: v >> 16))
            bytes.append(UInt8(truncatingIfNeeded: v >> 24))
        }

        mutating func setUInt32(_ v: UInt32, at offset: Int) {
            withUnsafeBytes(of: v.littleEndian) { raw in
                for i in 0..<4 { bytes[offset + i] = raw[i] }
            }
        }

        private mutating func appendFixed<T: FixedWidthInteger>(_ v: T) {
            pad(to: MemoryLayout<T>.size)
            withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
        }

        /// A string or object path: length, bytes, NUL.
        private mutating func appendString(_ s: String) {
            var s = s
            s.withUTF8 { utf8 in
                appendUInt32(UInt32(utf8.count))
                bytes.append(contentsOf: utf8)
            }
            bytes.append(0)
        }

        /// A signature: one length byte, bytes, NUL.
        private mutating func appendSignature(_ s: String) {
            var s = s
            s.withUTF8 { utf8 in
                bytes.append(UInt8(utf8.count))
                bytes.append(contentsOf: utf8)
            }
            bytes.append(0)
        }

        /// A header field: a (yv) struct whose variant holds a string of type `type` (s, o or g).
        mutating func field(_ code: UInt8, _ type: UInt8, _ value: String) {
            pad(to: 8)
            bytes.append(code)
            bytes.append(1)
            bytes.append(type)
            bytes.append(0)
            if type == UInt8(ascii: "g") { appendSignature(value) } else { appendString(value) }
        }

        /// Appends one value; false for what this writer leaves to libdbus (Unix fds).
        mutating func append(_ value: DBusValue) -> Bool {
            switch value {
            case .byte(let v): bytes.append(v)
            case .bool(let v): appendUInt32(v ? 1 : 0)
            case .int16(let v): appendFixed(v)
            case .uint16(let v): appendFixed(v)
            case .int32(let v): appendFixed(v)
            case .uint32(let v): appendFixed(v)
            case .int64(let v): appendFixed(v)
            case .uint64(let v): appendFixed(v)
            case .double(let v): appendFixed(v.bitPattern)
            case .string(let s): appendString(s)
            case .objectPath(let p): appendString(p.rawValue)
            case .signature(let g): appendSignature(g.rawValue)
            case .unixFD: return false
            case .byteArray(let b):
                appendUInt32(UInt32(b.count))
                bytes.append(contentsOf: b)
            case .array(let element, let items):
                return appendArray(elementAlignment: Self.alignment(of: element.rawValue)) { writer in
                    for item in items {
                        guard writer.append(item) else { return false }
                    }
                    return true
                }
            case .dictionary(_, _, let entries):
                return appendArray(elementAlignment: 8) { writer in
                    for (key, value) in entries {
                        writer.pad(to: 8)
                        guard writer.append(key), writer.append(value) else { return false }
                    }
                    return true
                }
            case .structure(let fields):
                pad(to: 8)
                for field in fields {
                    guard append(field) else { return false }
                }
            case .variant(let inner):
                appendSignature(inner.signatureString)
                return append(inner)
            }
            return true
        }

        /// An array: its length in bytes (after the padding to the first element), the
        /// padding, then the elements `body` appends.
        private mutating func appendArray(elementAlignment: Int, _ body: (inout Writer) -> Bool) -> Bool {
            appendUInt32(0)
            let lengthAt = bytes.count - 4
            pad(to: elementAlignment)
            let start = bytes.count
            guard body(&self) else { return false }
            setUInt32(UInt32(bytes.count - start), at: lengthAt)
            return true
        }

        /// The alignment of a complete type by its first code.
        static func alignment(of signature: String) -> Int {
            switch signature.utf8.first {
            case UInt8(ascii: "y"), UInt8(ascii: "g"), UInt8(ascii: "v"): 1
            case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
            case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): 8
            default: 4  // b, i, u, s, o, a, h
            }
        }
    }
}
