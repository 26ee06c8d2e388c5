import ANCS
import ANCSCapture
import Foundation
import JSON

/// The real captures copied from shared/captures (see Fixtures/captures/README.md for provenance).
enum Fixtures {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/captures")

    /// Every capture file, by name.
    static var captureFiles: [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasSuffix(".jsonl") }.sorted().map { directory.appendingPathComponent($0) }
    }

    /// The case file with the expected values for a capture.
    static func caseFile(for capture: URL) -> URL {
        directory.appendingPathComponent("cases")
            .appendingPathComponent(capture.deletingPathExtension().lastPathComponent + ".json")
    }

    static func json(_ url: URL) throws -> JSONValue {
        try JSONValue(parsing: Array(try Data(contentsOf: url)))
    }

    /// The records of a capture file, parsed with the production parser.
    static func records(_ url: URL) throws -> [CaptureRecord] {
        let text = try String(contentsOf: url, encoding: .utf8)
        var parser = CaptureParser()
        return try text.split(separator: "\n", omittingEmptySubsequences: false).compactMap { try parser.parse(line: String($0)) }
    }
}

/// A capture's single request and the phone's Data Source fragments.
struct DataSourceExchange {
    var request: ControlPointRequest
    var fragments: [[UInt8]]

    init?(_ records: [CaptureRecord]) throws {
        var request: ControlPointRequest?
        var fragments: [[UInt8]] = []
        for case .value(_, let char, let bytes, _) in records {
            switch char {
            case .cp: request = try ControlPointRequest(decoding: bytes)
            case .ds: fragments.append(bytes)
            case .ns: break
            }
        }
        guard let request else { return nil }
        self.request = request
        self.fragments = fragments
    }

    var stream: [UInt8] { fragments.flatMap { $0 } }
}

/// What reassembling a stream for one request came to: the first response or error, or what
/// `finishEarly` returned when the stream ended first.
enum Outcome: Equatable, CustomStringConvertible {
    case response(DataSourceResponse)
    case error(DataSourceError)
    case endedEarly(DataSourceResponse)

    var description: String {
        switch self {
        case .response(let r): "response(\(r.attributes.map(\.rawID)), missing \(r.missingAttributeIDs))"
        case .error(let e): "error(\(e))"
        case .endedEarly(let r): "endedEarly(\(r.attributes.map(\.rawID)), missing \(r.missingAttributeIDs))"
        }
    }
}

/// Feeds the fragments to a fresh reassembler until something comes out.
func reassemble(_ request: ControlPointRequest, _ fragments: [ArraySlice<UInt8>], limits: DataSourceLimits = DataSourceLimits()) throws -> Outcome {
    var reassembler = DataSourceReassembler(limits: limits)
    try reassembler.expect(request)
    for fragment in fragments {
        let output = reassembler.feed(fragment)
        if let response = output.response { return .response(response) }
        if let error = output.error { return .error(error) }
    }
    guard let response = reassembler.finishEarly() else { throw OutcomeError.nothingPending }
    return .endedEarly(response)
}

enum OutcomeError: Error { case nothingPending }

/// Cuts `bytes` at the given positions.
func split(_ bytes: [UInt8], at cuts: [Int]) -> [ArraySlice<UInt8>] {
    var pieces: [ArraySlice<UInt8>] = []
    var start = 0
    for cut in cuts.sorted() where cut >= start && cut <= bytes.count {
        pieces.append(bytes[start..<cut])
        start = cut
    }
    pieces.append(bytes[start...])
    return pieces
}

