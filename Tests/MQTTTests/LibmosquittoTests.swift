@testable import MQTT
import Testing

/// libmosquitto is looked up when the first client is made; what a missing or wrong library says.
@Suite struct LibmosquittoTests {
    @Test func theInstalledLibraryHasEveryFunction() throws {
        let library = try Libmosquitto(loading: Libmosquitto.soname)
        #expect(library.socket(nil) == -1)
        #expect(library.errorString(0).map { String(cString: $0) } == "No error.")
    }

    @Test func aMissingLibraryNamesItselfAndThePackage() {
        #expect(throws: MQTTLibraryError(description: """
            MQTT needs libmosquitto (libmosquitto-absent.so.1: cannot open shared object file: No such file or directory); \
            install the libmosquitto1 package
            """)) { try Libmosquitto(loading: "libmosquitto-absent.so.1") }
    }

    @Test func aLibraryWithoutTheFunctionsNamesTheFirstMissing() {
        #expect(throws: MQTTLibraryError(description: "libc.so.6 has no mosquitto_lib_init: MQTT needs libmosquitto 2.0 or later")) {
            try Libmosquitto(loading: "libc.so.6")
        }
    }
}
