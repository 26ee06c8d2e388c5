// libFuzzer target for the ANCS protocol core: the Data Source reassembler and the Notification
// Source / Control Point decoders. Built by `make fuzz` together with Sources/ANCS/*.swift and
// Fuzz/ReferenceReassembler.swift into one module. Every broken invariant traps (`check`, `fatalError`),
// which libFuzzer reports as a crash. The input format is described in Fuzz/README.md:
//
//   byte 0 % 3 == 0: the rest is a Notification Source value
//   byte 0 % 3 == 1: the rest is a Control Point value
//   byte 0 % 3 == 2: reassembler session:
//     byte 1: limits (< 0x80: the defaults; else maxAttributeLength = (b & 0x7F) * 4,
//             maxResponseLength = (b & 0x7F) * 16)
//     byte 2: request (< 0xF0: realRequests[b % count]; else the next byte is a length L and the
//             next L bytes are a Control Point value to decode, which may be invalid)
//     then operations until the input ends, each introduced by a byte n:
//       0xFF: finishEarly()    0xFE: expect the request again    else: feed the next n bytes
//       (fewer if the input ends), as [UInt8], ArraySlice or a non-contiguous collection in turn.

/// The Control Point requests of the real captures (Tests/ANCSCaptureTests/Fixtures/captures).
let realRequests: [[UInt8]] = [
    "001700000000", "001700000005", "001700000001ffff", "001700000003ffff",
    "01636f6d2e6170706c652e4d6f62696c65534d530000",
    "01636f6d2e676574706562626c652e706562626c6574696d652e656e74657270726973650000",
    "007500000006070001280002280003c80005", "000d0000000001ffff02ffff03ffff05",
    "003c0000000501ffff02ffff03ffff04", "00970000000001ffff02ffff03ffff",
    "00140000000001ffff02ffff03ffff04050607", "021400000001",
].map(hexBytes)

func hexBytes(_ hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    func nibble(_ c: UInt8) -> UInt8 { c <= UInt8(ascii: "9") ? c - UInt8(ascii: "0") : c - UInt8(ascii: "a") + 10 }
    return stride(from: 0, to: digits.count, by: 2).map { nibble(digits[$0]) << 4 | nibble(digits[$0 + 1]) }
}

/// Traps with the message (kept in -O builds, unlike `precondition`'s) if an invariant is broken.
func check(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition { fatalError(message(), file: file, line: line) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let mode = input.first else { return 0 }
    switch mode % 3 {
    case 0: checkNotificationSource(input[1...])
    case 1:
        checkControlPoint(input[1...])
        checkExpectValidation(input[1...])
    default:
        var session = ReassemblerSession(input)
        session.run()
    }
    return 0
}

// MARK: - Notification Source and Control Point decoders

func checkNotificationSource(_ bytes: ArraySlice<UInt8>) {
    do {
        let event = try NotificationSourceEvent(decoding: bytes)
        check(bytes.count == NotificationSourceEvent.size, "NS decoded from \(bytes.count) bytes")
        check(event.encoded == Array(bytes), "NS encoding differs from the decoded bytes")
        check(event.reservedFields.isEmpty == (!event.eventID.isReserved && event.flags.reservedBits == 0
            && !event.categoryID.isReserved), "NS reservedFields inconsistent")
    } catch {
        check(error == .wrongLength(bytes.count) && bytes.count != NotificationSourceEvent.size,
                     "NS refused with \(error) for \(bytes.count) bytes")
    }
}

func checkControlPoint(_ bytes: ArraySlice<UInt8>) {
    let request: ControlPointRequest
    do {
        request = try ControlPointRequest(decoding: bytes)
    } catch {
        return
    }
    let encoded: [UInt8]
    do {
        encoded = try request.encoded()
    } catch {
        // Only an app identifier that was not UTF-8 can grow (each bad byte becomes U+FFFD).
        guard case .tooLong = error, case .getAppAttributes(let identifier, _) = request,
              identifier.utf8.count > bytes.count else {
            fatalError("a decoded CP request does not encode: \(error)")
        }
        return
    }
    if case .getAppAttributes(let identifier, _) = request,
       let nul = bytes.dropFirst().firstIndex(of: 0),
       !bytes[(bytes.startIndex + 1)..<nul].elementsEqual(identifier.utf8) {
        // Not UTF-8: decoding repaired it, so only a second round trip must be stable.
        let again: ControlPointRequest
        do { again = try ControlPointRequest(decoding: encoded) } catch {
            fatalError("re-decoding an encoded CP request failed: \(error)")
        }
        check(again == request, "CP decode(encode(decode(x))) != decode(x)")
        return
    }
    check(encoded == Array(bytes), "CP encode(decode(x)) != x")
    check(request.commandID.rawValue == bytes.first, "CP commandID differs from byte 0")
}

/// Builds a request straight from the bytes (not through the decoder, so it can break every rule
/// of the specification) and checks that `expect` refuses it exactly as `encoded()` does.
func checkExpectValidation(_ bytes: ArraySlice<UInt8>) {
    guard let kind = bytes.first else { return }
    let rest = Array(bytes.dropFirst())
    let request: ControlPointRequest
    switch kind % 3 {
    case 0:
        var attributes: [NotificationAttributeRequest] = []
        for pair in stride(from: 0, to: rest.count, by: 2) {
            let id = NotificationAttributeID(rawValue: rest[pair] & 0x8F)  // mostly 0...15, some reserved
            let flag = pair + 1 < rest.count ? rest[pair + 1] : 0
            attributes.append(NotificationAttributeRequest(id, maxLength: flag & 1 == 1 ? UInt16(flag) : nil))
        }
        request = .getNotificationAttributes(uid: UInt32(kind), attributes: attributes)
    case 1:
        let split = rest.firstIndex(of: 0xFF) ?? rest.count
        let identifier = String(decoding: rest[..<split], as: UTF8.self)  // may hold NUL
        let ids = rest[min(split + 1, rest.count)...].map { AppAttributeID(rawValue: $0 & 0x03) }
        request = .getAppAttributes(appIdentifier: identifier, attributes: ids)
    default:
        request = .performNotificationAction(uid: 7, action: ActionID(rawValue: rest.first ?? 0))
    }
    var encodeError: ControlPointError?
    do { _ = try request.encoded() } catch { encodeError = error }
    var reassembler = DataSourceReassembler()
    var expectError: ControlPointError?
    do { try reassembler.expect(request) } catch { expectError = error }
    var reference = ReferenceReassembler()
    var referenceError: ControlPointError?
    do { try reference.expect(request) } catch { referenceError = error }
    check(expectError == encodeError && referenceError == encodeError,
          "expect threw \(String(describing: expectError)), encoded() \(String(describing: encodeError))")
    check(reassembler.pendingRequest == reference.pendingRequest, "pendingRequest after expect differs")
}

// MARK: - Reassembler

/// One fuzz input driving `DataSourceReassembler` and the pre-optimisation `ReferenceReassembler`
/// side by side, with a model of what must hold after every call.
struct ReassemblerSession {
    let input: [UInt8]
    var position = 0
    var limits = DataSourceLimits()
    var request: ControlPointRequest?
    var reassembler = DataSourceReassembler()
    var reference = ReferenceReassembler()
    /// Bytes fed since the pending request was expected, while one is pending.
    var fed: [UInt8] = []
    var pending = false
    var fragmentCount = 0

    init(_ input: [UInt8]) { self.input = input }

    mutating func nextByte() -> UInt8? {
        guard position < input.count else { return nil }
        defer { position += 1 }
        return input[position]
    }

    mutating func run() {
        position = 1
        guard let limitsByte = nextByte(), let requestByte = nextByte() else { return }
        if limitsByte >= 0x80 {
            let scale = Int(limitsByte & 0x7F)
            limits = DataSourceLimits(maxAttributeLength: scale * 4, maxResponseLength: scale * 16)
        }
        reassembler = DataSourceReassembler(limits: limits)
        reference = ReferenceReassembler(limits: limits)
        if requestByte < 0xF0 {
            request = try? ControlPointRequest(decoding: realRequests[Int(requestByte) % realRequests.count])
        } else {
            let length = Int(nextByte() ?? 0)
            let end = min(position + length, input.count)
            request = try? ControlPointRequest(decoding: input[position..<end])
            position = end
        }
        expect()
        while let operation = nextByte() {
            switch operation {
            case 0xFF: finishEarly()
            case 0xFE: expect()
            default:
                let end = min(position + Int(operation), input.count)
                feed(input[position..<end])
                position = end
            }
        }
        // The stream ends: whatever is pending must be what one single fragment would leave.
        if pending { checkOneShot(DataSourceOutput.needMore) }
        finishEarly()
    }

    mutating func expect() {
        guard let request else {
            // No valid request: the reassembler keeps whatever it had; check it still agrees.
            checkSameState()
            return
        }
        var threw = false
        do { try reassembler.expect(request) } catch { threw = true
            var referenceError: ControlPointError?
            do { try reference.expect(request) } catch let e { referenceError = e }
            check(referenceError == error, "expect threw \(error), the reference \(String(describing: referenceError))")
            check((try? request.encoded()) == nil, "expect threw for a request that encodes")
        }
        if !threw {
            do { try reference.expect(request) } catch { fatalError("only the reference's expect threw \(error)") }
            pending = request.expectsDataSourceResponse
            fed = []
            check(reassembler.pendingRequest == (pending ? request : nil), "pendingRequest after expect")
            check(reassembler.bytesReceived == 0, "bytesReceived after expect")
        }
        checkSameState()
    }

    mutating func finishEarly() {
        let response = reassembler.finishEarly()
        let referenceResponse = reference.finishEarly()
        check(response == referenceResponse, "finishEarly differs from the reference")
        check(reassembler.pendingRequest == nil && reassembler.bytesReceived == 0, "pending after finishEarly")
        guard pending, let request else {
            check(response == nil, "finishEarly returned a response while idle")
            return
        }
        guard let response else { fatalError("finishEarly returned nil while pending") }
        checkResponse(response, for: request, complete: false)
        pending = false
        fed = []
    }

    mutating func feed(_ fragment: ArraySlice<UInt8>) {
        fragmentCount += 1
        let output: DataSourceOutput
        switch fragmentCount % 4 {
        case 0: output = reassembler.feed(Array(fragment))
        case 1: output = reassembler.feed(fragment)
        case 2: output = reassembler.feed(fragment.lazy.map { $0 })  // no contiguous storage
        default:  // the response handed over in place
            var response: DataSourceResponse? = nil
            let error = Array(fragment).withUnsafeBufferPointer { reassembler.feed($0, completing: { response = $0.response }) }
            output = DataSourceOutput(response: response, error: error)
        }
        let referenceOutput = reference.feed(Array(fragment))
        check(output == referenceOutput, "feed: \(output) but the reference gives \(referenceOutput)")
        defer { checkSameState() }

        guard pending, let request else {
            let expected = fragment.isEmpty ? DataSourceOutput.needMore
                : DataSourceOutput(error: DataSourceError(.noPendingRequest, offset: 0))
            check(output == expected, "feed while idle gave \(output)")
            return
        }
        fed += fragment
        if let response = output.response {
            checkResponse(response, for: request, complete: true)
            if let error = output.error {
                guard case .trailingBytes(let count) = error.kind else { fatalError("response with \(error)") }
                check(count > 0 && count <= fragment.count && error.offset + count == fed.count,
                             "trailing bytes \(count) at \(error.offset) after \(fed.count) fed")
            } else {
                check(encodedLength(response) == fed.count, "a complete response left bytes unaccounted")
            }
        } else if let error = output.error {
            switch error.kind {
            case .noPendingRequest, .trailingBytes: fatalError("\(error) without a response while pending")
            default: break
            }
            check(error.offset >= 0 && error.offset <= fed.count, "error offset \(error.offset) of \(fed.count) fed")
        } else {
            check(reassembler.pendingRequest == request, "pendingRequest changed on needMore")
            check(reassembler.bytesReceived == fed.count, "bytesReceived \(reassembler.bytesReceived) != \(fed.count)")
            return
        }
        check(reassembler.pendingRequest == nil && reassembler.bytesReceived == 0, "still pending after \(output)")
        checkOneShot(output)
        pending = false
        fed = []
    }

    /// Feeding everything since `expect` as one fragment must give the same outcome: fragment
    /// boundaries never change what a response holds, what fails, or where.
    func checkOneShot(_ output: DataSourceOutput) {
        guard let request else { return }
        var single = DataSourceReassembler(limits: limits)
        do { try single.expect(request) } catch { fatalError("one-shot expect threw \(error)") }
        let oneShot = single.feed(fed)
        check(oneShot == output, "split feeding gave \(output), one fragment \(oneShot)")
    }

    func checkSameState() {
        check(reassembler.pendingRequest == reference.pendingRequest, "pendingRequest differs from the reference")
        check(reassembler.bytesReceived == reference.bytesReceived, "bytesReceived differs from the reference")
    }

    /// The invariants of any response: right subject, known and requested IDs each at most once,
    /// received + missing = requested, values within the limits, and its bytes are exactly a
    /// prefix of what was fed (the whole of it, for a response that completed).
    func checkResponse(_ response: DataSourceResponse, for request: ControlPointRequest, complete: Bool) {
        let requestedIDs: [UInt8]
        switch request {
        case .getNotificationAttributes(let uid, let attributes):
            check(response.subject == .notification(uid: uid), "wrong subject \(response.subject)")
            requestedIDs = attributes.map(\.id.rawValue)
        case .getAppAttributes(let identifier, let attributes):
            check(response.subject == .app(identifier: identifier), "wrong subject \(response.subject)")
            requestedIDs = attributes.map(\.rawValue)
        case .performNotificationAction:
            fatalError("a response to PerformNotificationAction")
        }
        let receivedIDs = response.attributes.map(\.rawID)
        check(Set(receivedIDs).count == receivedIDs.count, "an attribute ID twice: \(receivedIDs)")
        check(receivedIDs.allSatisfy(requestedIDs.contains), "an unrequested ID in \(receivedIDs)")
        check(response.missingAttributeIDs == requestedIDs.filter { !receivedIDs.contains($0) },
                     "missing IDs \(response.missingAttributeIDs) for received \(receivedIDs) of \(requestedIDs)")
        if complete {
            check(response.isComplete && receivedIDs.count == requestedIDs.count, "incomplete response from feed")
        }
        for attribute in response.attributes {
            check(attribute.value.count <= limits.maxAttributeLength, "value over maxAttributeLength")
        }
        // finishEarly before the header arrived gives an empty response that stands for no bytes.
        if !complete && response.attributes.isEmpty { return }
        let length = encodedLength(response)
        check(length <= fed.count, "the response holds \(length) bytes, \(fed.count) were fed")
        check(length <= limits.maxResponseLength, "the response is over maxResponseLength")
        var expected: [UInt8] = []
        expected.reserveCapacity(length)
        switch response.subject {
        case .notification(let uid):
            expected += [0, UInt8(truncatingIfNeeded: uid), UInt8(truncatingIfNeeded: uid >> 8),
                         UInt8(truncatingIfNeeded: uid >> 16), UInt8(truncatingIfNeeded: uid >> 24)]
        case .app(let identifier):
            expected += [1] + Array(identifier.utf8) + [0]
        }
        for attribute in response.attributes {
            let count = attribute.value.count
            expected += [attribute.rawID, UInt8(truncatingIfNeeded: count), UInt8(truncatingIfNeeded: count >> 8)]
            expected += attribute.value
        }
        check(fed.starts(with: expected), "the response's bytes are not what was fed")
    }

    /// The length on the wire of a response's header and tuples.
    func encodedLength(_ response: DataSourceResponse) -> Int {
        let header: Int = switch response.subject {
        case .notification: 5
        case .app(let identifier): 2 + identifier.utf8.count
        }
        return response.attributes.reduce(header) { $0 + 3 + $1.value.count }
    }
}
