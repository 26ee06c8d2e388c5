/// The Enhanced ATT bearers of one connection (Bluetooth Core 5.2, Vol 3 Part G §5.3.2): LE
/// credit-based channels with SPSM 0x0027, learnt from the signaling on CID 0x0005, and the
/// SDUs (ATT PDUs) in flight on them. Pure.
///
/// CIDs are per direction: each side names the CID it receives on (a request's source CIDs are
/// the initiator's, a response's destination CIDs the responder's), so a channel is two
/// endpoints, one per direction of travel. The bearer a channel forms is named by the CID the
/// capturing host receives on (0x0004 is the fixed ATT bearer; dynamic CIDs start at 0x0040).
struct EATTChannels: Sendable {
    /// The SPSM of EATT.
    static let spsm: UInt16 = 0x0027
    /// The CIDs an LE link allocates dynamically.
    static let dynamicCIDs: ClosedRange<UInt16> = 0x0040...0x007F

    /// What a signaling frame did.
    struct SignalOutcome: Hashable, Sendable {
        /// What was wrong with it, if anything.
        var warning: String?
        /// The bearers it closed (disconnected, or replaced by a channel reusing a CID).
        var closed: [UInt16] = []
    }

    private struct EndpointKey: Hashable, Sendable {
        var direction: HCIDirection
        var cid: UInt16
    }

    private struct Endpoint: Sendable {
        var bearer: UInt16
        var sdu: SDUReassembler
    }

    private struct RequestKey: Hashable, Sendable {
        var direction: HCIDirection
        var identifier: UInt8
    }

    private struct Request: Sendable {
        var code: UInt8
        /// Whether the channels carry ATT; others only end EATT channels whose CIDs they reuse.
        var eatt: Bool
        var mtu: UInt16
        var sourceCIDs: [UInt16]
    }

    private var endpoints: [EndpointKey: Endpoint] = [:]

    /// True while no EATT channel is open: then no K-frame can belong to one.
    var isEmpty: Bool { endpoints.isEmpty }
    /// Connection requests waiting for their response, by the way they went.
    private var requests: [RequestKey: Request] = [:]

    /// Reads a C-frame of the signaling channel sent in `direction`.
    mutating func signal(_ frame: [UInt8], direction: HCIDirection) -> SignalOutcome {
        let signal: L2CAPSignal
        do {
            signal = try L2CAPSignal(frame: frame)
        } catch {
            return SignalOutcome(warning: "corrupt: \(error.reason); ignored")
        }
        switch signal {
        case .connectionRequest(let code, let identifier, let spsm, let mtu, let sourceCIDs):
            let key = RequestKey(direction: direction, identifier: identifier)
            requests[key] = Request(code: code, eatt: spsm == Self.spsm, mtu: mtu, sourceCIDs: sourceCIDs)
            return SignalOutcome()
        case .connectionResponse(let code, let identifier, let mtu, let destinationCIDs):
            guard let request = requests.removeValue(forKey: RequestKey(direction: direction.opposite, identifier: identifier)) else {
                return SignalOutcome()  // the request came before the capture
            }
            return open(request, responseCode: code, mtu: mtu, destinationCIDs: destinationCIDs, requestDirection: direction.opposite)
        case .reconfigureRequest(let mtu, let cids):
            for cid in cids { endpoints[EndpointKey(direction: direction.opposite, cid: cid)]?.sdu.mtu = Int(mtu) }
            return SignalOutcome()
        case .disconnection(let response, let destinationCID, let sourceCID):
            // The request's receiver receives on DCID, its sender on SCID.
            let requestDirection = response ? direction.opposite : direction
            return SignalOutcome(closed: close([EndpointKey(direction: requestDirection, cid: destinationCID),
                                                EndpointKey(direction: requestDirection.opposite, cid: sourceCID)]))
        case .commandReject(let identifier):
            requests[RequestKey(direction: direction.opposite, identifier: identifier)] = nil
            return SignalOutcome()
        case .other:
            return SignalOutcome()
        }
    }

    /// A K-frame on `cid` sent in `direction`: its bearer and what it did to the SDU in
    /// progress, or nil when `cid` is no EATT channel.
    mutating func kFrame(_ payload: [UInt8], cid: UInt16, direction: HCIDirection) -> (bearer: UInt16, outcome: SDUReassembler.Outcome)? {
        let key = EndpointKey(direction: direction, cid: cid)
        guard let bearer = endpoints[key]?.bearer, let outcome = endpoints[key]?.sdu.feed(payload) else { return nil }
        return (bearer, outcome)
    }

    /// The ATT MTU of an EATT bearer: the smaller of the MTUs its two sides announced (nil when
    /// no channel forms it).
    func mtu(of bearer: UInt16) -> Int? {
        endpoints.values.filter { $0.bearer == bearer }.map(\.sdu.mtu).min()
    }

    /// The channels a response opens: each of the request's source CIDs with the destination
    /// CID in the same place, unless that is 0x0000 (refused). A channel of another SPSM ends
    /// the EATT channels whose CIDs it takes (their disconnection was not seen).
    private mutating func open(
        _ request: Request, responseCode: UInt8, mtu: UInt16, destinationCIDs: [UInt16], requestDirection: HCIDirection
    ) -> SignalOutcome {
        var outcome = SignalOutcome()
        if !request.eatt {
            for (source, destination) in zip(request.sourceCIDs, destinationCIDs) where destination != 0 {
                outcome.closed += close([EndpointKey(direction: requestDirection.opposite, cid: source),
                                         EndpointKey(direction: requestDirection, cid: destination)])
            }
            return outcome
        }
        var problems: [String] = []
        if responseCode != request.code + 1 {
            problems.append("response \(hex2(responseCode)) answers request \(hex2(request.code))")
        } else if destinationCIDs.count != request.sourceCIDs.count {
            problems.append("\(destinationCIDs.count) destination CIDs answer \(request.sourceCIDs.count) source CIDs")
        }
        for (source, destination) in zip(request.sourceCIDs, destinationCIDs) where destination != 0 {
            guard Self.dynamicCIDs.contains(source), Self.dynamicCIDs.contains(destination) else {
                problems.append("CIDs \(hex4(source))/\(hex4(destination)) are not dynamic LE CIDs (0x0040-0x007f)")
                continue
            }
            let initiator = EndpointKey(direction: requestDirection.opposite, cid: source)
            let responder = EndpointKey(direction: requestDirection, cid: destination)
            outcome.closed += close([initiator, responder])
            let bearer = initiator.direction == .received ? source : destination
            endpoints[initiator] = Endpoint(bearer: bearer, sdu: SDUReassembler(mtu: Int(request.mtu)))
            endpoints[responder] = Endpoint(bearer: bearer, sdu: SDUReassembler(mtu: Int(mtu)))
        }
        if !problems.isEmpty {
            outcome.warning = "corrupt: EATT connection response \(hex2(responseCode)): " + problems.joined(separator: "; ")
        }
        return outcome
    }

    /// Forgets the channels that have any of these endpoints; their bearers.
    private mutating func close(_ keys: [EndpointKey]) -> [UInt16] {
        let bearers = Set(keys.compactMap { endpoints[$0]?.bearer })
        guard !bearers.isEmpty else { return [] }
        endpoints = endpoints.filter { !bearers.contains($0.value.bearer) }
        return bearers.sorted()
    }
}
