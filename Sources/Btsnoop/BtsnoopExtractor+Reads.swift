/// The reads of AMS characteristics: a Read Request and the Read Blob Requests that continue it,
/// their responses joined into one value (`AMSRecord`), per ATT bearer.
extension BtsnoopExtractor {
    /// A Read or Read Blob Request of an AMS characteristic, or a response part of the read in
    /// progress.
    mutating func readPDU(
        _ att: ATTPDU, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, into out: inout [ExtractedRecord]
    ) {
        let pdu = att.bytes
        switch att.opcode {
        case 0x0A:  // Read Request: handle
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
            guard pdu.count >= 3, att.fromClient, let characteristic = att.handles.amsCharacteristic(att.u16(1)) else { return }
            startRead(PendingRead(characteristic: characteristic, handle: att.u16(1), direction: direction, requestRecord: att.record,
                                  requestTime: time),
                      bearer: bearer, key: key)
        case 0x0C:  // Read Blob Request: handle, offset
            if pdu.count >= 5, let read = read(on: bearer, key: key), read.direction == direction, !read.asked, read.handle == att.u16(1),
               Int(att.u16(3)) == read.value.count {
                readStates[key]?.reads[bearer]?.asked = true  // the next part of the value
                return
            }
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
            guard pdu.count >= 5, att.u16(3) == 0, att.fromClient, let characteristic = att.handles.amsCharacteristic(att.u16(1)) else { return }
            startRead(PendingRead(characteristic: characteristic, handle: att.u16(1), direction: direction, requestRecord: att.record,
                                  requestTime: time),
                      bearer: bearer, key: key)
        case 0x0B, 0x0D:  // Read Response / Read Blob Response: value
            guard openReads > 0 else { return }
            readPart(UnsafeBufferPointer(rebasing: pdu[1...]), bearer: bearer, key: key, direction: direction, time: time,
                     record: att.record, into: &out)
        default:
            break
        }
    }

    /// A read starts on `bearer` (one in progress there is over: the caller gave it first).
    private mutating func startRead(_ read: PendingRead, bearer: UInt16, key: ConnectionKey) {
        if readStates[key, default: ReadState()].reads.updateValue(read, forKey: bearer) == nil { openReads += 1 }
    }

    /// The read in progress on `bearer`, taken out of it.
    private mutating func takeRead(bearer: UInt16, key: ConnectionKey) -> PendingRead? {
        guard openReads > 0, let read = readStates[key]?.reads.removeValue(forKey: bearer) else { return nil }
        openReads -= 1
        return read
    }

    /// The read in progress on `bearer`, left there.
    private func read(on bearer: UInt16, key: ConnectionKey) -> PendingRead? {
        openReads > 0 ? readStates[key]?.reads[bearer] : nil
    }

    /// Ends the read in progress on `bearer` (on every bearer when nil), giving its value as it is.
    mutating func endReads(key: ConnectionKey, bearer: UInt16? = nil, into out: inout [ExtractedRecord]) {
        guard openReads > 0, let reads = readStates[key]?.reads, !reads.isEmpty else { return }
        for readBearer in reads.keys.sorted() where bearer == nil || bearer == readBearer {
            if let read = takeRead(bearer: readBearer, key: key) { giveRead(read, attError: nil, key: key, into: &out) }
        }
    }

    /// A read's value as a record: complete unless a request still waited for its response.
    private mutating func giveRead(_ read: PendingRead, attError: UInt8?, key: ConnectionKey, into out: inout [ExtractedRecord]) {
        let answered = read.record != 0
        let value = AMSRecord(time: answered ? read.time : read.requestTime, characteristic: read.characteristic, direction: .read,
                              bytes: read.value, attError: attError, complete: attError != nil || !read.asked)
        emit(.ams(value), key: key, record: answered ? read.record : read.requestRecord, peer: nil, into: &out)
    }

    /// The ATT MTU of `bearer`, when the capture told it: Exchange MTU on channel 0x0004, the
    /// channel's setup for an EATT bearer.
    private func mtu(of bearer: UInt16, key: ConnectionKey) -> Int? {
        if bearer == 0x0004 {
            guard let client = readStates[key]?.clientMTU, let server = readStates[key]?.serverMTU else { return nil }
            return Int(max(23, min(client, server)))
        }
        return states[key]?.channels.mtu(of: bearer)
    }

    /// A response part of a read on `bearer`: joined to the value; the read ends with a part
    /// shorter than the most a response carries (ATT MTU - 1; with the MTU unknown, 22, the
    /// least it can be: a longer part waits for the next request on the bearer).
    private mutating func readPart(
        _ part: UnsafeBufferPointer<UInt8>, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, record: Int,
        into out: inout [ExtractedRecord]
    ) {
        guard let asked = read(on: bearer, key: key), asked.asked, asked.direction == direction.opposite,
              var read = takeRead(bearer: bearer, key: key)
        else { return }
        if read.record == 0 {
            read.record = record
            read.time = time
        }
        read.value += part
        read.asked = false
        let limit = mtu(of: bearer, key: key).map { $0 - 1 } ?? 22
        if part.count < limit {
            giveRead(read, attError: nil, key: key, into: &out)
        } else {
            startRead(read, bearer: bearer, key: key)
        }
    }

    /// A request on `bearer` that is not the next part of the read in progress there: that
    /// read is over (a bearer carries one request at a time).
    mutating func endRead(bearer: UInt16, key: ConnectionKey, direction: HCIDirection, into out: inout [ExtractedRecord]) {
        guard let open = read(on: bearer, key: key), open.direction == direction, let read = takeRead(bearer: bearer, key: key) else { return }
        giveRead(read, attError: nil, key: key, into: &out)
    }

    /// An Error Response to a Read or Read Blob Request on `bearer`. Refusing a Read Blob ends a
    /// long value (Invalid Offset, Attribute Not Long: the value was a multiple of the part's
    /// size); any other refusal is the read's answer, with the ATT error.
    mutating func readRefused(
        bearer: UInt16, handle: UInt16, attError: UInt8, key: ConnectionKey, direction: HCIDirection, into out: inout [ExtractedRecord]
    ) {
        guard let open = read(on: bearer, key: key), open.asked, open.direction == direction.opposite, open.handle == handle,
              let read = takeRead(bearer: bearer, key: key)
        else { return }
        let ended = read.record != 0 && (attError == 0x07 || attError == 0x0B)
        var given = read
        if ended { given.asked = false }
        giveRead(given, attError: ended ? nil : attError, key: key, into: &out)
    }
}
