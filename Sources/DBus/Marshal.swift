import CDBus

/// Writes `DBusValue`s into and reads them out of libdbus messages.
///
/// Writing assumes the values were validated (`DBusValue.validate`): libdbus aborts on
/// anything invalid, so nothing unchecked may reach it. Reading copies everything out of
/// the message (libdbus strings point into the message buffer; fds are dup'ed by libdbus).
enum Marshal {
    static let outOfMemory = DBusError.failed("out of memory while building a message")

    // MARK: Writing

    /// Appends already-validated arguments to `message`.
    static func append(_ arguments: [DBusValue], to message: OpaquePointer) throws(DBusError) {
        guard !arguments.isEmpty else { return }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for a in arguments { try append(a, to: &iter) }
    }

    @inline(__always)
    private static func check(_ ok: dbus_bool_t) throws(DBusError) {
        if ok == 0 { throw outOfMemory }
    }

    private static func appendBasic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ type: Int32, _ value: T) throws(DBusError) {
        let ok = withUnsafePointer(to: value) { dbus_message_iter_append_basic(&iter, type, UnsafeRawPointer($0)) }
        try check(ok)
    }

    private static func appendString(_ iter: inout DBusMessageIter, _ type: Int32, _ s: String) throws(DBusError) {
        let ok = s.withCString { p -> dbus_bool_t in
            var ptr: UnsafePointer<CChar>? = p
            return dbus_message_iter_append_basic(&iter, type, &ptr)
        }
        try check(ok)
    }

    private static func open(
        _ iter: inout DBusMessageIter, _ type: Int32, _ signature: String?, _ sub: inout DBusMessageIter
    ) throws(DBusError) {
        let ok: dbus_bool_t
        if let signature {
            ok = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) }
        } else {
            ok = dbus_message_iter_open_container(&iter, type, nil, &sub)
        }
        try check(ok)
    }

    /// Opens an `a{KV}`: the entry signature `{KV}` is written as a C string on the stack.
    private static func openDictionary(
        _ iter: inout DBusMessageIter, _ key: Signature, _ value: Signature, _ sub: inout DBusMessageIter
    ) throws(DBusError) {
        let length = key.rawValue.utf8.count + value.rawValue.utf8.count + 3
        let ok = withUnsafeTemporaryAllocation(of: CChar.self, capacity: length) { buffer -> dbus_bool_t in
            var index = 0
            func put(_ byte: UInt8) {
                buffer[index] = CChar(bitPattern: byte)
                index += 1
            }
            put(UInt8(ascii: "{"))
            for byte in key.rawValue.utf8 { put(byte) }
            for byte in value.rawValue.utf8 { put(byte) }
            put(UInt8(ascii: "}"))
            put(0)
            return dbus_message_iter_open_container(&iter, CDBUS_TYPE_ARRAY, buffer.baseAddress, &sub)
        }
        try check(ok)
    }

    private static func close(_ iter: inout DBusMessageIter, _ sub: inout DBusMessageIter) throws(DBusError) {
        try check(dbus_message_iter_close_container(&iter, &sub))
    }

    private static func appendFixed<T>(_ iter: inout DBusMessageIter, _ type: Int32, _ items: [T]) throws(DBusError) {
        guard !items.isEmpty else { return }
        let ok = items.withUnsafeBufferPointer { buf -> dbus_bool_t in
            var p: UnsafePointer<T>? = buf.baseAddress
            return dbus_message_iter_append_fixed_array(&iter, type, &p, Int32(buf.count))
        }
        try check(ok)
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) throws(DBusError) {
        switch value {
        case .byte(let v): try appendBasic(&iter, CDBUS_TYPE_BYTE, v)
        case .bool(let v): try appendBasic(&iter, CDBUS_TYPE_BOOLEAN, dbus_bool_t(v ? 1 : 0))
        case .int16(let v): try appendBasic(&iter, CDBUS_TYPE_INT16, v)
        case .uint16(let v): try appendBasic(&iter, CDBUS_TYPE_UINT16, v)
        case .int32(let v): try appendBasic(&iter, CDBUS_TYPE_INT32, v)
        case .uint32(let v): try appendBasic(&iter, CDBUS_TYPE_UINT32, v)
        case .int64(let v): try appendBasic(&iter, CDBUS_TYPE_INT64, v)
        case .uint64(let v): try appendBasic(&iter, CDBUS_TYPE_UINT64, v)
        case .double(let v): try appendBasic(&iter, CDBUS_TYPE_DOUBLE, v)
        case .string(let s): try appendString(&iter, CDBUS_TYPE_STRING, s)
        case .objectPath(let p): try appendString(&iter, CDBUS_TYPE_OBJECT_PATH, p.rawValue)
        case .signature(let g): try appendString(&iter, CDBUS_TYPE_SIGNATURE, g.rawValue)
        case .unixFD(let fd):
            // libdbus dups the descriptor into the message; ours stays open and owned.
            guard let raw = fd.fileDescriptor else { throw .invalidArgument("unix fd argument is closed") }
            try appendBasic(&iter, CDBUS_TYPE_UNIX_FD, raw)
        case .byteArray(let bytes):
            var sub = DBusMessageIter()
            try open(&iter, CDBUS_TYPE_ARRAY, "y", &sub)
            try appendFixed(&sub, CDBUS_TYPE_BYTE, bytes)
            try close(&iter, &sub)
        case .array(let element, let items):
            var sub = DBusMessageIter()
            try open(&iter, CDBUS_TYPE_ARRAY, element.rawValue, &sub)
            if !(try appendFixedElements(&sub, element.rawValue, items)) {
                for item in items { try append(item, to: &sub) }
            }
            try close(&iter, &sub)
        case .dictionary(let key, let val, let entries):
            var sub = DBusMessageIter()
            try openDictionary(&iter, key, val, &sub)
            for (k, v) in entries {
                var entry = DBusMessageIter()
                try open(&sub, CDBUS_TYPE_DICT_ENTRY, nil, &entry)
                try append(k, to: &entry)
                try append(v, to: &entry)
                try close(&sub, &entry)
            }
            try close(&iter, &sub)
        case .structure(let fields):
            var sub = DBusMessageIter()
            try open(&iter, CDBUS_TYPE_STRUCT, nil, &sub)
            for f in fields { try append(f, to: &sub) }
            try close(&iter, &sub)
        case .variant(let inner):
            var sub = DBusMessageIter()
            try open(&iter, CDBUS_TYPE_VARIANT, inner.signatureString, &sub)
            try append(inner, to: &sub)
            try close(&iter, &sub)
        }
    }

    /// Writes the bytes of each top-level `ay` of `arguments` over those of the same argument in
    /// `message`: an unsent copy of a call built from arguments that differ from these only in
    /// those bytes, the lengths the same (`CallHeaders`). libdbus has no call that replaces an
    /// argument; the body belongs to the copy alone until it is sent, and
    /// `dbus_message_iter_get_fixed_array` points into it. False if `message` does not have an
    /// array of that length where `arguments` has one (the copy is then of no use).
    static func overwriteByteArrays(_ arguments: [DBusValue], in message: OpaquePointer) -> Bool {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return arguments.isEmpty }
        for (index, argument) in arguments.enumerated() {
            if index > 0, dbus_message_iter_next(&iter) == 0 { return false }
            guard case .byteArray(let bytes) = argument, !bytes.isEmpty else { continue }
            guard dbus_message_iter_get_arg_type(&iter) == CDBUS_TYPE_ARRAY,
                  dbus_message_iter_get_element_type(&iter) == CDBUS_TYPE_BYTE else { return false }
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var start: UnsafeRawPointer?
            var count: Int32 = 0
            dbus_message_iter_get_fixed_array(&sub, &start, &count)
            guard let start, Int(count) == bytes.count else { return false }
            UnsafeMutableRawPointer(mutating: start).copyMemory(from: bytes, byteCount: bytes.count)
        }
        return true
    }

    /// Writes arrays of fixed-size numbers as one block. Returns false for other element types.
    private static func appendFixedElements(
        _ sub: inout DBusMessageIter, _ element: String, _ items: [DBusValue]
    ) throws(DBusError) -> Bool {
        guard element.utf8.count == 1, let code = element.utf8.first, TypeCode.fixed.contains(code) else {
            return false
        }
        switch code {
        case UInt8(ascii: "y"): try appendFixed(&sub, CDBUS_TYPE_BYTE, items.compactMap(\.byteValue))
        case UInt8(ascii: "b"): try appendFixed(&sub, CDBUS_TYPE_BOOLEAN, items.compactMap { $0.boolValue.map { dbus_bool_t($0 ? 1 : 0) } })
        case UInt8(ascii: "n"): try appendFixed(&sub, CDBUS_TYPE_INT16, items.compactMap(\.int16Value))
        case UInt8(ascii: "q"): try appendFixed(&sub, CDBUS_TYPE_UINT16, items.compactMap(\.uint16Value))
        case UInt8(ascii: "i"): try appendFixed(&sub, CDBUS_TYPE_INT32, items.compactMap(\.int32Value))
        case UInt8(ascii: "u"): try appendFixed(&sub, CDBUS_TYPE_UINT32, items.compactMap(\.uint32Value))
        case UInt8(ascii: "x"): try appendFixed(&sub, CDBUS_TYPE_INT64, items.compactMap(\.int64Value))
        case UInt8(ascii: "t"): try appendFixed(&sub, CDBUS_TYPE_UINT64, items.compactMap(\.uint64Value))
        case UInt8(ascii: "d"): try appendFixed(&sub, CDBUS_TYPE_DOUBLE, items.compactMap(\.doubleValue))
        default: return false
        }
        return true
    }

    // MARK: Reading

    /// Reads every argument of `message`, copying strings and adopting dup'ed fds.
    static func readArguments(_ message: OpaquePointer) throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }
        var out: [DBusValue] = []
        repeat {
            out.append(try readValue(&iter))
        } while dbus_message_iter_next(&iter) != 0
        return out
    }

    private static func basic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ zero: T) -> T {
        var v = zero
        withUnsafeMutablePointer(to: &v) { dbus_message_iter_get_basic(&iter, UnsafeMutableRawPointer($0)) }
        return v
    }

    private static func string(_ iter: inout DBusMessageIter) -> String {
        var p: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &p)
        // Copy: the pointer points into the message, which is freed after decoding.
        return p.map { String(cString: $0) } ?? ""
    }

    private static func fixedArray<T>(_ sub: inout DBusMessageIter, _: T.Type) -> [T] {
        var p: UnsafePointer<T>? = nil
        var n: Int32 = 0
        dbus_message_iter_get_fixed_array(&sub, &p, &n)
        guard let p, n > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: Int(n)))
    }

    /// The signature of the value at `iter`, copied out of libdbus's allocation.
    private static func currentSignature(_ iter: inout DBusMessageIter) throws(DBusError) -> String {
        guard let p = dbus_message_iter_get_signature(&iter) else { throw outOfMemory }
        defer { dbus_free(p) }
        return String(cString: p)
    }

    static func readValue(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case CDBUS_TYPE_BYTE: return .byte(basic(&iter, UInt8(0)))
        case CDBUS_TYPE_BOOLEAN: return .bool(basic(&iter, dbus_bool_t(0)) != 0)
        case CDBUS_TYPE_INT16: return .int16(basic(&iter, Int16(0)))
        case CDBUS_TYPE_UINT16: return .uint16(basic(&iter, UInt16(0)))
        case CDBUS_TYPE_INT32: return .int32(basic(&iter, Int32(0)))
        case CDBUS_TYPE_UINT32: return .uint32(basic(&iter, UInt32(0)))
        case CDBUS_TYPE_INT64: return .int64(basic(&iter, Int64(0)))
        case CDBUS_TYPE_UINT64: return .uint64(basic(&iter, UInt64(0)))
        case CDBUS_TYPE_DOUBLE: return .double(basic(&iter, Double(0)))
        case CDBUS_TYPE_STRING: return .string(string(&iter))
        case CDBUS_TYPE_OBJECT_PATH: return .objectPath(ObjectPath(unchecked: string(&iter)))
        case CDBUS_TYPE_SIGNATURE: return .signature(Signature(unchecked: string(&iter)))
        case CDBUS_TYPE_UNIX_FD:
            // libdbus returns a fresh dup(); it is ours to close.
            let fd = basic(&iter, Int32(-1))
            guard fd >= 0 else { throw .failed("could not duplicate a received file descriptor") }
            return .unixFD(UnixFD(adopting: fd))
        case CDBUS_TYPE_VARIANT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try readValue(&sub))
        case CDBUS_TYPE_STRUCT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != CDBUS_TYPE_INVALID {
                fields.append(try readValue(&sub))
                dbus_message_iter_next(&sub)
            }
            return .structure(fields)
        case CDBUS_TYPE_ARRAY:
            return try readArray(&iter)
        default:
            throw .failed("unsupported D-Bus type code \(type)")
        }
    }

    private static let stringSignature = Signature(unchecked: "s")
    private static let variantSignature = Signature(unchecked: "v")

    private static func readArray(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        let elementType = dbus_message_iter_get_element_type(&iter)
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        if elementType == CDBUS_TYPE_BYTE {
            return .byteArray(fixedArray(&sub, UInt8.self))
        }
        let full = try currentSignature(&iter)
        let element = String(full.dropFirst())
        if elementType == CDBUS_TYPE_DICT_ENTRY {
            // element is "{KV}"; a{sv}, the shape of every property set and option list, is common.
            let key: Signature
            let value: Signature
            if full == "a{sv}" {
                (key, value) = (stringSignature, variantSignature)
            } else {
                let inner = Array(element.utf8.dropFirst().dropLast())
                guard let k = inner.first else { throw .failed("malformed dict entry signature \(full)") }
                key = Signature(unchecked: String(decoding: [k], as: UTF8.self))
                value = Signature(unchecked: String(decoding: inner.dropFirst(), as: UTF8.self))
            }
            var entries: [(key: DBusValue, value: DBusValue)] = []
            while dbus_message_iter_get_arg_type(&sub) == CDBUS_TYPE_DICT_ENTRY {
                var entry = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &entry)
                let kv = try readValue(&entry)
                dbus_message_iter_next(&entry)
                let vv = try readValue(&entry)
                entries.append((key: kv, value: vv))
                dbus_message_iter_next(&sub)
            }
            return .dictionary(key: key, value: value, entries)
        }
        let signature = Signature(unchecked: element)
        switch elementType {
        case CDBUS_TYPE_BOOLEAN: return .array(signature, fixedArray(&sub, dbus_bool_t.self).map { .bool($0 != 0) })
        case CDBUS_TYPE_INT16: return .array(signature, fixedArray(&sub, Int16.self).map { .int16($0) })
        case CDBUS_TYPE_UINT16: return .array(signature, fixedArray(&sub, UInt16.self).map { .uint16($0) })
        case CDBUS_TYPE_INT32: return .array(signature, fixedArray(&sub, Int32.self).map { .int32($0) })
        case CDBUS_TYPE_UINT32: return .array(signature, fixedArray(&sub, UInt32.self).map { .uint32($0) })
        case CDBUS_TYPE_INT64: return .array(signature, fixedArray(&sub, Int64.self).map { .int64($0) })
        case CDBUS_TYPE_UINT64: return .array(signature, fixedArray(&sub, UInt64.self).map { .uint64($0) })
        case CDBUS_TYPE_DOUBLE: return .array(signature, fixedArray(&sub, Double.self).map { .double($0) })
        default:
            var items: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != CDBUS_TYPE_INVALID {
                items.append(try readValue(&sub))
                dbus_message_iter_next(&sub)
            }
            return .array(signature, items)
        }
    }
}
