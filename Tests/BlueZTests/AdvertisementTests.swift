import BlueZ
import Testing

/// The name `ancsd pair` and `ancsd run` advertise: never empty, recognisable, cut to fit.
@Suite struct AdvertisementNameTests {
    @Test func keepsAShortName() {
        #expect(Advertisement.fitted("kitchen-pc") == "kitchen-pc")
        #expect(Advertisement(localName: "  desk  ", discoverable: true).localName == "desk")
    }

    @Test func cutsAtACharacterBoundaryWithin29Bytes() {
        let long = "Ada's very long workstation name in the lab"
        #expect(Advertisement.fitted(long) == "Ada's very long workstation n")
        #expect(Advertisement.fitted(long).utf8.count == 29)
        // 14 two-byte characters fill 28 bytes; the 15th would need 30.
        let greek = String(repeating: "β", count: 20)
        #expect(Advertisement.fitted(greek) == String(repeating: "β", count: 14))
        let emoji = String(repeating: "🦋", count: 10)  // 4 bytes each
        #expect(Advertisement.fitted(emoji).utf8.count == 28)
    }

    @Test func neverEmpty() {
        #expect(Advertisement.fitted("") == "ancsd")
        #expect(Advertisement.fitted("   ") == "ancsd")
    }

    @Test func prefersTheHostNameToBlueZsDefault() {
        #expect(Advertisement.recognisableName(alias: "BlueZ 5.66", hostName: "kitchen") == "kitchen")
        #expect(Advertisement.recognisableName(alias: "", hostName: "kitchen") == "kitchen")
        #expect(Advertisement.recognisableName(alias: "Ada's desk", hostName: "kitchen") == "Ada's desk")
        #expect(Advertisement.recognisableName(alias: "BlueZ fan club", hostName: "kitchen") == "BlueZ fan club")
    }

    /// What the phone lists must say something: never "(none)", "localhost", "BlueZ 5.66" or
    /// nothing, whatever the adapter and the host are called.
    @Test func fallsBackToAFixedReadableName() {
        for alias in ["", "  ", "BlueZ 5.66", "BlueZ 5.82", "(none)", "localhost"] {
            for host in ["", "(none)", "localhost", "localhost.localdomain", "LOCALHOST", "BlueZ 5.66"] {
                #expect(Advertisement.recognisableName(alias: alias, hostName: host) == "ancsd", "alias '\(alias)', host '\(host)'")
            }
        }
        #expect(Advertisement.recognisableName(alias: "(none)", hostName: "desk") == "desk")
        #expect(Advertisement.recognisableName(alias: "BlueZ ", hostName: "") == "BlueZ")
    }
}
