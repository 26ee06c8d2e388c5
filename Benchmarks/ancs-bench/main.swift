// ancs-bench: throughput of `DataSourceReassembler` over a realistic stream of fragmented
// Data Source responses, and the heap allocations it makes per response and per fragment.
//
// The stream is pre-built before any timing: a deterministic mix of GetNotificationAttributes
// responses shaped like the real captures in Tests/ANCSCaptureTests/Fixtures/captures (all eight
// attributes requested in ID order; Title/Subtitle up to ~40 bytes, Message up to a few hundred
// bytes of mixed-language text with „“ … é β emoji and direction marks, MessageSize, a Date,
// action labels, sometimes empty) and GetAppAttributes responses (DisplayName), 7 : 1. Each
// response is cut into fragments of the payload size of one ATT notification (20, 182, 244 bytes
// for ATT MTU 23, 185, 247); the last fragment of a response is shorter and no fragment holds
// bytes of two responses, as on the air. The timed loop is `expect` + `feed` of every fragment
// and a look at each output (dropping each response, as a consumer would after using it); each
// size runs for about 1.5 s: calibration, then 5 runs of ~0.25 s, the best one reported.
//
// Allocations are counted in-process by interposing malloc/calloc/realloc (AllocationCounter.swift,
// linked in by `make bench`) around one more, untimed run of the same passes, then divided by the
// responses and fragments fed. A response owns 1 + (non-empty values) heap blocks (its attribute
// array and each value's bytes); the last column is what the reassembler allocates beyond those.
// valgrind agrees: `ancs-bench --alloc-passes 1` vs `3` under memcheck differ by 7,282 allocs
// over 1,024 responses = 7.111 per response, the figure the table prints.

import ANCS

// MARK: - Building the stream

/// SplitMix64: a small deterministic generator, so every run benchmarks the same bytes.
struct Generator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
}

let appIdentifiers = [
    "com.apple.MobileSMS", "com.apple.mobilemail", "com.apple.mobilecal", "com.apple.mobilephone",
    "net.whatsapp.WhatsApp", "com.apple.podcasts", "fm.overcast.overcast", "ph.telegra.Telegraph",
    "com.getpebble.pebbletime.enterprise", "com.kickstarter.kickstarter",
]
let displayNames = ["Messages", "Mail", "Calendar", "Phone", "WhatsApp", "Podcasts", "Overcast", "Telegram", "Pebble Time β"]
let titles = [
    "Nate Stedman", "Françoise Müller", "Hailey's practice", "José Álvarez 🇪🇸", "\u{200E}+49 170 1234567\u{200C}",
    "Kickstarter", "Aaron Heckmann (JIRA)", "陈小明", "Familie Schröder 👨‍👩‍👧", "Ελένη Παπαδοπούλου", "",
]
let subtitles = [
    "", "", "[JIRA] (PBL-8776) Error screen after log", "Re: Treffen am Donnerstag", "TALK: Tuesday 10-28-2014 Scientific Utop",
    "Familienchat 👨‍👩‍👧", "Rechnung Nr. 2024-0042 – Zahlungserinnerung",
]
let words = [
    "Es", "gibt", "eine", "neue", "Folge", "„Stuff", "You", "Should", "Know“", "—", "SYSK", "Selects:", "Is", "brain",
    "size", "related", "to", "intelligence?", "Careful,", "man,", "there's", "a", "beverage", "here!", "Loading…",
    "café", "naïve", "Größe", "β-Test", "😀", "👍🏽", "à", "demain", "これは", "テスト", "です。", "Привет,", "как", "дела?",
    "This", "is", "a", "very", "complicated", "case,", "Maude.", "You", "know,", "a", "lotta", "ins,", "lotta", "outs",
]

/// One pre-built response: the request that asks for it and its bytes as the phone sends them.
struct Sample {
    var request: ControlPointRequest
    var bytes: [UInt8]
    /// The (ID, value) tuples a correct reassembly returns, in order.
    var tuples: [(id: UInt8, value: [UInt8])]
}

func utf8Prefix(_ text: String, maxBytes: Int) -> [UInt8] {
    var out: [UInt8] = []
    for scalar in text.unicodeScalars {
        let encoded = Array(String(scalar).utf8)
        if out.count + encoded.count > maxBytes { break }
        out += encoded
    }
    return out
}

func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

func makeNotification(uid: UInt32, _ rng: inout Generator) -> Sample {
    let messageMax = 400
    var message = ""
    let messageTarget = [0, 12, 40, 90, 150, 200, 280, 380][rng.below(8)]
    while message.utf8.count < messageTarget { message += (message.isEmpty ? "" : " ") + rng.pick(words) }
    var messageBytes = utf8Prefix(message, maxBytes: messageMax)
    if rng.below(4) == 0, messageBytes.count > 3 {  // iOS's cut with "…"
        messageBytes = utf8Prefix(String(decoding: messageBytes, as: UTF8.self), maxBytes: messageBytes.count - 3)
            + Array("…".utf8)
    }
    let date = "20\(10 + rng.below(15))\(twoDigits(1 + rng.below(12)))\(twoDigits(1 + rng.below(28)))T"
        + "\(twoDigits(rng.below(24)))\(twoDigits(rng.below(60)))\(twoDigits(rng.below(60)))"
    let positive = rng.pick(["", "", "Answer", "Reply"])
    let negative = rng.pick(["Clear", "Dismiss", "Decline"])
    let tuples: [(id: UInt8, value: [UInt8])] = [
        (0, Array(rng.pick(appIdentifiers).utf8)),
        (1, utf8Prefix(rng.pick(titles), maxBytes: 40)),
        (2, utf8Prefix(rng.pick(subtitles), maxBytes: 40)),
        (3, messageBytes),
        (4, Array(String(message.utf16.count).utf8)),
        (5, rng.below(10) == 0 ? [] : Array(date.utf8)),  // incoming calls send an empty Date
        (6, Array(positive.utf8)),
        (7, Array(negative.utf8)),
    ]
    let request = ControlPointRequest.getNotificationAttributes(uid: uid, attributes: [
        NotificationAttributeRequest(.appIdentifier),
        NotificationAttributeRequest(.title, maxLength: 40),
        NotificationAttributeRequest(.subtitle, maxLength: 40),
        NotificationAttributeRequest(.message, maxLength: UInt16(messageMax)),
        NotificationAttributeRequest(.messageSize),
        NotificationAttributeRequest(.date),
        NotificationAttributeRequest(.positiveActionLabel),
        NotificationAttributeRequest(.negativeActionLabel),
    ])
    var bytes: [UInt8] = [0, UInt8(truncatingIfNeeded: uid), UInt8(truncatingIfNeeded: uid >> 8),
                          UInt8(truncatingIfNeeded: uid >> 16), UInt8(truncatingIfNeeded: uid >> 24)]
    for (id, value) in tuples {
        bytes += [id, UInt8(truncatingIfNeeded: value.count), UInt8(truncatingIfNeeded: value.count >> 8)] + value
    }
    return Sample(request: request, bytes: bytes, tuples: tuples)
}

func makeApp(_ rng: inout Generator) -> Sample {
    let identifier = rng.pick(appIdentifiers)
    let name = Array(rng.pick(displayNames).utf8)
    let bytes: [UInt8] = [1] + Array(identifier.utf8) + [0, 0, UInt8(name.count), 0] + name
    return Sample(request: .getAppAttributes(appIdentifier: identifier, attributes: [.displayName]),
                  bytes: bytes, tuples: [(0, name)])
}

func makeSamples(count: Int) -> [Sample] {
    var rng = Generator(state: 0xA5C5_2024)
    return (0..<count).map { index in
        index % 8 == 7 ? makeApp(&rng) : makeNotification(uid: UInt32(0x100 + index), &rng)
    }
}

/// The samples cut into fragments of one size, flattened for the timed loop.
struct Stream {
    var requests: [ControlPointRequest]
    /// Fragments of response `i` are `fragments[firstFragment[i]..<firstFragment[i + 1]]`.
    var fragments: [[UInt8]]
    var firstFragment: [Int]
    var totalBytes: Int
    /// Heap blocks the responses themselves own: an attribute array plus each non-empty value.
    var ownedBlocks: Int

    init(_ samples: [Sample], fragmentSize: Int) {
        requests = samples.map(\.request)
        fragments = []
        firstFragment = [0]
        totalBytes = 0
        ownedBlocks = 0
        for sample in samples {
            var start = 0
            while start < sample.bytes.count {
                let end = min(start + fragmentSize, sample.bytes.count)
                fragments.append(Array(sample.bytes[start..<end]))
                start = end
            }
            firstFragment.append(fragments.count)
            totalBytes += sample.bytes.count
            ownedBlocks += 1 + sample.tuples.filter { !$0.value.isEmpty }.count
        }
    }
}

// MARK: - Running

/// Feeds every response of the stream once; returns the attributes received, so nothing is dead code.
@inline(never)
func feedAll(_ stream: Stream, into reassembler: inout DataSourceReassembler) -> Int {
    var received = 0
    for index in stream.requests.indices {
        do {
            try reassembler.expect(stream.requests[index])
        } catch {
            preconditionFailure("bench request refused: \(error)")
        }
        for fragmentIndex in stream.firstFragment[index]..<stream.firstFragment[index + 1] {
            let output = reassembler.feed(stream.fragments[fragmentIndex])
            if let response = output.response { received &+= response.attributes.count }
            if let error = output.error { preconditionFailure("bench response \(index) failed: \(error)") }
        }
    }
    return received
}

/// Checks once, untimed, that every response reassembles to exactly the tuples it was built from.
func verify(_ stream: Stream, _ samples: [Sample]) {
    var reassembler = DataSourceReassembler()
    for (index, sample) in samples.enumerated() {
        do { try reassembler.expect(stream.requests[index]) } catch { preconditionFailure("\(error)") }
        var responses: [DataSourceResponse] = []
        for fragmentIndex in stream.firstFragment[index]..<stream.firstFragment[index + 1] {
            let output = reassembler.feed(stream.fragments[fragmentIndex])
            precondition(output.error == nil, "unexpected error \(String(describing: output.error))")
            if let response = output.response { responses.append(response) }
        }
        precondition(responses.count == 1 && responses[0].isComplete, "response \(index) did not complete")
        precondition(responses[0].attributes.map(\.rawID) == sample.tuples.map(\.id), "IDs differ in \(index)")
        precondition(responses[0].attributes.map(\.value) == sample.tuples.map(\.value), "values differ in \(index)")
        precondition(reassembler.pendingRequest == nil, "still pending after \(index)")
    }
}

func seconds(_ duration: Duration) -> Double {
    let (whole, attoseconds) = duration.components
    return Double(whole) + Double(attoseconds) * 1e-18
}

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
}

func format(_ value: Double, decimals: Int) -> String {
    var scale = 1
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int(value * Double(scale) + 0.5)  // values here are >= 0
    guard decimals > 0 else { return "\(scaled)" }
    let fraction = String(scaled % scale)
    return "\(scaled / scale)." + String(repeating: "0", count: decimals - fraction.count) + fraction
}

let samples = makeSamples(count: 512)
let arguments = CommandLine.arguments.dropFirst()

// `ancs-bench --alloc-passes N`: only N untimed passes at 20-byte fragments, for counting
// allocations externally (valgrind); prints nothing but a checksum.
if arguments.first == "--alloc-passes", arguments.count == 2, let passes = Int(arguments.last ?? "") {
    let stream = Stream(samples, fragmentSize: 20)
    var reassembler = DataSourceReassembler()
    var received = 0
    for _ in 0..<passes { received &+= feedAll(stream, into: &reassembler) }
    print("\(passes) passes, \(passes * samples.count) responses, \(passes * stream.fragments.count) fragments, \(received) attributes")
} else {
    runBenchmark()
}

func runBenchmark() {
    let sampleBytes = samples.reduce(0) { $0 + $1.bytes.count }
    let notificationCount = samples.filter { $0.request.commandID == .getNotificationAttributes }.count
    print("ancs-bench: DataSourceReassembler expect + feed, \(samples.count) responses per pass "
          + "(\(notificationCount) GetNotificationAttributes, \(samples.count - notificationCount) GetAppAttributes), "
          + "\(sampleBytes) bytes, mean \(sampleBytes / samples.count) bytes per response")
    print("")
    print(pad("fragment", 8) + pad("frags/resp", 12) + pad("MB/s", 10) + pad("responses/s", 14)
          + pad("allocs/resp", 13) + pad("allocs/frag", 13) + pad("beyond own values/resp", 24))

    let runs = 5
    let secondsPerRun = 0.25
    var sink = 0
    for fragmentSize in [20, 182, 244] {
        let stream = Stream(samples, fragmentSize: fragmentSize)
        verify(stream, samples)
        var reassembler = DataSourceReassembler()
        // Calibrate: passes per run so that one run takes about `secondsPerRun`.
        let clock = ContinuousClock()
        var passes = 1
        while true {
            let start = clock.now
            for _ in 0..<passes { sink &+= feedAll(stream, into: &reassembler) }
            let elapsed = seconds(clock.now - start)
            if elapsed >= secondsPerRun / 4 { passes = max(1, Int(Double(passes) * secondsPerRun / elapsed)); break }
            passes *= 2
        }
        var best = Double.infinity
        for _ in 0..<runs {
            let start = clock.now
            for _ in 0..<passes { sink &+= feedAll(stream, into: &reassembler) }
            best = min(best, seconds(clock.now - start))
        }
        // Allocations: counted over one more run of the same passes (the counter costs nothing
        // measurable, but a run that is timed stays free of anything else).
        let before = heapAllocationCount()
        for _ in 0..<passes { sink &+= feedAll(stream, into: &reassembler) }
        let allocations: Int? = heapAllocationsAreCounted ? heapAllocationCount() - before : nil
        let countedPasses = passes
        let megabytesPerSecond = Double(passes * stream.totalBytes) / best / 1e6
        let responsesPerSecond = Double(passes * samples.count) / best
        var row = pad("\(fragmentSize) B", 8)
            + pad(format(Double(stream.fragments.count) / Double(samples.count), decimals: 2), 12)
            + pad(format(megabytesPerSecond, decimals: 1), 10) + pad(format(responsesPerSecond, decimals: 0), 14)
        if let allocations {
            let perResponse = Double(allocations) / Double(countedPasses * samples.count)
            let perFragment = Double(allocations) / Double(countedPasses * stream.fragments.count)
            let owned = Double(stream.ownedBlocks) / Double(samples.count)
            row += pad(format(perResponse, decimals: 3), 13) + pad(format(perFragment, decimals: 3), 13)
                + pad(format(perResponse - owned, decimals: 3), 24)
        } else {
            row += pad("n/a", 13) + pad("n/a", 13) + pad("n/a", 24)
        }
        print(row)
    }
    print("")
    print("targets: >= 500 MB/s at 244 B and >= 100 MB/s at 20 B. A response owns 1 + (non-empty values) heap blocks:")
    print("its attribute array and each value's bytes; the last column is what expect + feed allocate beyond those."
          + (sink == 42 ? " " : ""))
}
