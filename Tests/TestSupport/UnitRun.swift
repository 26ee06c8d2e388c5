#if canImport(Glibc)
import Glibc
#endif

/// `make unit` runs only the tests that need nothing installed beyond the Swift toolchain and
/// the -dev packages, and sets `ANCSD_UNIT=1` for them. A test that then starts an installed
/// program (dbus-daemon, mosquitto, socat, btmon, tshark, …) fails with this error, which names
/// the program: such a test belongs to `make test`, and its suite goes in the Makefile's
/// `UNIT_SKIP`.
public enum UnitRun {
    /// True under `make unit`.
    public static var isActive: Bool { getenv("ANCSD_UNIT") != nil }

    /// Throws under `make unit`: the calling test is about to start `program`.
    public static func needs(_ program: String) throws {
        guard isActive else { return }
        throw TestFailure("make unit: this test starts \(program), which make unit does not install; add its suite to UNIT_SKIP in the Makefile")
    }
}
