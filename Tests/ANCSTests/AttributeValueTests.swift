import Testing
import ANCS

@Suite struct AttributeValueTests {
    @Test func validUTF8IsKept() {
        let text = AttributeText(Array("Pebble Time β „quotes“ 👍".utf8))
        #expect(text.string == "Pebble Time β „quotes“ 👍")
        #expect(!text.wasRepaired)
    }

    @Test func invalidUTF8IsRepairedAndTheRawBytesKept() {
        let raw: [UInt8] = [0x48, 0x69, 0xFF, 0xE2, 0x80, 0x20]  // "Hi", a stray byte, a cut 3-byte sequence
        let text = AttributeText(raw)
        #expect(text.wasRepaired)
        #expect(text.string == "Hi\u{FFFD}\u{FFFD} ")
        #expect(text.raw == raw)
    }

    /// The decode-and-compare form against `String(validating:)`, the general check it
    /// replaced, on valid text of every sequence length and on ill-formed bytes of each kind.
    @Test func repairVerdictMatchesValidation() {
        var samples: [[UInt8]] = [
            [], Array("plain ASCII, long enough to cross several eight-byte words".utf8), Array("Grüße 日本 👍🏽".utf8),
            [0xEF, 0xBF, 0xBD], [0xFF], [0xC0, 0x80], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xE2, 0x80], [0x61, 0xE2, 0x80], [0xF0, 0x9F, 0x91], [0x80, 0x80, 0x80], [0xC3], [0x00, 0x7F, 0xC2, 0xA0],
        ]
        var seed: UInt32 = 12345
        for length in 0..<2000 {
            seed = seed &* 1_103_515_245 &+ 12345
            let alphabet: [UInt8] = [0x41, 0x7A, 0x00, 0x80, 0xBF, 0xC2, 0xC3, 0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0x9F, 0xA0]
            samples.append((0..<(length % 13)).map { alphabet[Int((seed >> 8 &+ UInt32($0) &* 2_654_435_761) >> 3) % alphabet.count] })
        }
        for raw in samples {
            let text = AttributeText(raw)
            #expect(text.wasRepaired == (String(validating: raw, as: UTF8.self) == nil), "\(raw)")
            #expect(text.string == String(decoding: raw, as: UTF8.self))
        }
        #expect(samples.contains { AttributeText($0).wasRepaired } && samples.contains { !AttributeText($0).wasRepaired })
    }

    @Test func emptyTextIsValid() {
        #expect(AttributeText([]).string == "" && !AttributeText([]).wasRepaired)
    }

    @Test func datesInTheANCSForm() throws {
        let date = try #require(ANCSDate(parsing: Array("20141028T160000".utf8)))
        #expect(date == ANCSDate(year: 2014, month: 10, day: 28, hour: 16, minute: 0, second: 0))
        #expect(date.iso8601 == "2014-10-28T16:00:00")
        #expect(ANCSDate(parsing: Array("20160229T235960".utf8))?.iso8601 == "2016-02-29T23:59:60")
        #expect(ANCSDate(year: 2015, month: 6, day: 15, hour: 1, minute: 2, second: 3) < ANCSDate(year: 2015, month: 6, day: 15, hour: 1, minute: 2, second: 4))
    }

    /// The byte-store form of `iso8601` against the zero-padding reference it replaced, for
    /// every field's edge values, wider ones and negative ones (built by hand, not parsed).
    @Test func iso8601MatchesThePaddedReference() {
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        let years = [0, 1, 9, 10, 99, 100, 999, 1000, 1970, 2014, 2099, 9999, 10000, 123456, -1, -2024]
        let fields = [0, 1, 9, 10, 29, 31, 59, 60, 99, 100, 1234, -1, -45]
        var checked = 0
        for year in years {
            for value in fields {
                for slot in 0..<5 {
                    var parts = [7, 15, 23, 5, 9]
                    parts[slot] = value
                    let date = ANCSDate(year: year, month: parts[0], day: parts[1], hour: parts[2], minute: parts[3], second: parts[4])
                    let expected = "\(pad(year, 4))-\(pad(parts[0], 2))-\(pad(parts[1], 2))T\(pad(parts[2], 2)):\(pad(parts[3], 2)):\(pad(parts[4], 2))"
                    #expect(date.iso8601 == expected)
                    #expect(date.withISO8601 { Array($0) } == Array(expected.utf8))
                    checked += 1
                }
            }
        }
        #expect(checked == years.count * fields.count * 5)
    }

    @Test(arguments: [
        "2014102T160000", "20141028T1600000", "20141028 160000", "2014-10-28T16:00", "20141328T160000",
        "20141000T160000", "20150229T120000", "20140431T120000", "20141028T240000", "20141028T166000",
        "20141028T160061", "2O141028T160000", "+0141028T160000", "20141028t160000",
    ])
    func malformedDates(text: String) {
        #expect(ANCSDate(parsing: Array(text.utf8)) == nil)
        #expect(DateAttribute(Array(text.utf8)) == .malformed(text))
    }

    @Test func emptyDate() {
        #expect(DateAttribute([]) == .empty)
        #expect(DateAttribute([]).date == nil)
    }

    @Test func messageSize() {
        #expect(parseMessageSize(Array("113".utf8)) == 113)
        #expect(parseMessageSize(Array("0".utf8)) == 0)
        #expect(parseMessageSize([]) == nil)
        #expect(parseMessageSize(Array("12a".utf8)) == nil)
        #expect(parseMessageSize(Array("-1".utf8)) == nil)
        #expect(parseMessageSize(Array("9999999999".utf8)) == nil, "bounded, never overflows")
    }

    @Test func truncationVerdict() {
        #expect(isMessageTruncated(message: "The Moth Podcast: Monica Cheru-Mpambawas…", messageSize: 113))
        #expect(!isMessageTruncated(message: "haslhkfjdashfa", messageSize: 14))
        #expect(isMessageTruncated(message: "abc", messageSize: 4))
        #expect(!isMessageTruncated(message: "👍", messageSize: 2), "UTF-16 units, as an NSString counts")
        #expect(!isMessageTruncated(message: "👍", messageSize: 4), "UTF-8 bytes")
        #expect(isMessageTruncated(message: "„Royal…", messageSize: 30))
        #expect(!isMessageTruncated(message: "", messageSize: 0))
    }
}

@Suite struct MessageTruncationFromBytesTests {
    /// The byte form agrees with the String form on random messages: ASCII, multi-byte and astral
    /// text, invalid UTF-8, a trailing "…" after every kind of character (Prepend, combining marks).
    @Test func agreesWithTheStringForm() {
        var state: UInt64 = 0x2026
        func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let pieces: [[UInt8]] = ["a", "é", "β", "…", "👍", "\u{600}", "\u{301}", "\u{200D}", "\r", "\n", "x…", "…\u{301}", "Tea at five, or at six?"]
            .map { Array($0.utf8) } + [[0xFF], [0xE2, 0x80], [0xC3], [0xF0, 0x9F]]
        for _ in 0..<40_000 {
            var bytes: [UInt8] = []
            for _ in 0..<Int(next() % 6) { bytes += pieces[Int(next() % UInt64(pieces.count))] }
            if next() % 2 == 0 { bytes += Array("…".utf8) }
            let size = Int(next() % 30)
            #expect(isMessageTruncated(messageBytes: bytes, messageSize: size)
                == isMessageTruncated(message: String(decoding: bytes, as: UTF8.self), messageSize: size), "\(bytes) \(size)")
        }
    }
}
