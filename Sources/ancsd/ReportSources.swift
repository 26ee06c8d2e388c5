#if canImport(Glibc)
import Glibc
#endif
import ANCSDaemon
import CSpawn
import JSON

/// What a program run for `ancsd report` printed.
struct ProgramOutput {
    /// The exit status, or nil when it was killed (its timeout) or could not start.
    var status: Int32?
    /// Standard output and standard error together, at most `ReportPrograms.maxOutput` bytes.
    var text: String
    /// Why it did not run or finish, if so.
    var failure: String?
}

/// The programs `ancsd report` asks (bluetoothd, journalctl, gzip), through `/bin/sh` with a
/// fixed command line (never anything from outside), a plain environment and a timeout. A
/// short-lived command: blocking here holds nothing else up.
enum ReportPrograms {
    static let maxOutput = 4 << 20
    /// Where Debian and others keep bluetoothd and the system tools, beside the usual PATH.
    static let environment = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0",
    ]

    /// Runs `command` with standard input `/dev/null`; gives its output after it exits, or
    /// after `timeout` seconds (then it is killed).
    static func run(_ command: String, timeout: Double = 15) -> ProgramOutput {
        var pipe: [Int32] = [-1, -1]
        guard ancsd_pipe_cloexec(&pipe) == 0 else { return ProgramOutput(status: nil, text: "", failure: "pipe: \(String(cString: strerror(errno)))") }
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { if null >= 0 { close(null) } }
        var pid: pid_t = 0
        let error = withEnvironment { ancsd_spawn_shell(command, $0, null, pipe[1], pipe[1], &pid) }
        close(pipe[1])
        defer { close(pipe[0]) }
        guard error == 0 else { return ProgramOutput(status: nil, text: "", failure: "cannot start /bin/sh: \(String(cString: strerror(error)))") }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = monotonic() + timeout
        var timedOut = false
        while true {
            let left = deadline - monotonic()
            if left <= 0 { timedOut = true; break }
            var entry = pollfd(fd: pipe[0], events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(left * 1000) + 1)
            if ready < 0 { if errno == EINTR { continue } else { break } }
            if ready == 0 { continue }
            let count = read(pipe[0], &buffer, buffer.count)
            if count < 0 { if errno == EINTR { continue } else { break } }
            if count == 0 { break }
            if output.count < maxOutput { output += buffer.prefix(min(count, maxOutput - output.count)) }
        }
        if timedOut { kill(-pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = String(decoding: output, as: UTF8.self)
        if timedOut { return ProgramOutput(status: nil, text: text, failure: "no answer within \(Int(timeout)) s; stopped") }
        if ancsd_exited(status) != 0 { return ProgramOutput(status: ancsd_exit_status(status), text: text, failure: nil) }
        return ProgramOutput(status: nil, text: text, failure: "killed by signal \(ancsd_term_signal(status))")
    }

    /// Compresses `bytes` with gzip into `fd`. gzip, not zlib: gzip is Essential in Debian (on
    /// every system ancsd runs on), so the report adds no library to the build, the package and
    /// the arm64 cross build for one short command that runs once per bug report. Throws a
    /// message when gzip cannot be started or fails.
    static func gzip(_ bytes: [UInt8], into fd: Int32) throws(ReportError) {
        var pipe: [Int32] = [-1, -1]
        guard ancsd_pipe_cloexec(&pipe) == 0 else { throw ReportError("pipe: \(String(cString: strerror(errno)))") }
        var pid: pid_t = 0
        let error = withEnvironment { ancsd_spawn_shell("exec gzip -c -n -9", $0, pipe[0], fd, STDERR_FILENO, &pid) }
        close(pipe[0])
        guard error == 0 else {
            close(pipe[1])
            throw ReportError("cannot start gzip: \(String(cString: strerror(error)))")
        }
        let written = bytes.withUnsafeBufferPointer { buffer in
            var offset = 0
            while offset < buffer.count {
                let count = write(pipe[1], buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
                if count < 0 { if errno == EINTR { continue } else { return false } }
                offset += count
            }
            return true
        }
        close(pipe[1])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard written, ancsd_exited(status) != 0, ancsd_exit_status(status) == 0 else {
            throw ReportError("gzip failed (is gzip installed? it is on every Debian system)")
        }
    }

    private static func withEnvironment<Result>(_ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>?) -> Result) -> Result {
        let strings = environment.map { strdup($0) }
        defer { strings.forEach { free($0) } }
        return (strings + [nil]).withUnsafeBufferPointer { body($0.baseAddress) }
    }

    private static func monotonic() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// A failure of `ancsd report` that stops it, for a person.
struct ReportError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) { self.description = description }
}

/// The versions a report starts with: ancsd's, BlueZ's (and where that came from), the kernel's
/// and the operating system's.
enum ReportVersions {
    static func collect() -> JSONValue {
        var object: JSONObject = ["ancsd": .string(ancsdVersion)]
        object.append("bluez", bluez())
        object.append("kernel", kernel())
        object.append("os", .string(osName() ?? "unknown (no PRETTY_NAME in /etc/os-release)"))
        return .object(object)
    }

    /// bluetoothd's `--version`, from the first of its usual places; else the Debian package's version.
    static func bluez() -> JSONValue {
        for path in ["/usr/libexec/bluetooth/bluetoothd", "/usr/lib/bluetooth/bluetoothd", "/usr/sbin/bluetoothd"] where access(path, X_OK) == 0 {
            let output = ReportPrograms.run("\(path) --version", timeout: 5)
            let version = output.text.trimmingWhitespace
            if output.status == 0, !version.isEmpty {
                return .object(["version": .string(version), "source": .string("\(path) --version")])
            }
        }
        let package = ReportPrograms.run("dpkg-query -W -f '${Version}' bluez", timeout: 5)
        if package.status == 0, !package.text.trimmingWhitespace.isEmpty {
            return .object(["version": .string(package.text.trimmingWhitespace), "source": .string("dpkg-query (the bluez package)")])
        }
        return .object(["version": .null,
                        "source": .string("none: no bluetoothd in /usr/libexec/bluetooth, /usr/lib/bluetooth or /usr/sbin, and no bluez package")])
    }

    /// uname(2).
    static func kernel() -> JSONValue {
        var name = utsname()
        guard uname(&name) == 0 else { return .string("unknown (uname: \(String(cString: strerror(errno))))") }
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return .object(["sysname": .string(field(name.sysname)), "release": .string(field(name.release)),
                        "version": .string(field(name.version)), "machine": .string(field(name.machine))])
    }

    /// PRETTY_NAME of /etc/os-release (or /usr/lib/os-release).
    static func osName() -> String? {
        for path in ["/etc/os-release", "/usr/lib/os-release"] {
            guard let text = readSmallFile(path) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("PRETTY_NAME=") {
                var value = line.dropFirst("PRETTY_NAME=".count)
                if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = value.dropFirst().dropLast() }
                return String(value)
            }
        }
        return nil
    }

    static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 20 {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            bytes += buffer.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The daemon's recent log, from the journal.
enum ReportJournal {
    /// The unit's last 2,000 lines at priority info and above, with a header that says what was
    /// asked and why debug lines are left out; or why there is no log.
    static func collect() -> String {
        let command = "journalctl -u ancsd.service -n 2000 --no-pager -o short-iso -p info"
        var header = """
            # \(command)
            # Lines at debug priority are left out: at log-level debug ancsd logs notification
            # content there (it never does above debug). Names ancsd knows are replaced below.

            """
        let found = ReportPrograms.run("command -v journalctl", timeout: 5)
        guard found.status == 0 else {
            return header + "no log: journalctl is not installed (no systemd journal on this system); ancsd's log is where its standard error went\n"
        }
        let unit = ReportPrograms.run("systemctl show -p LoadState --value ancsd.service", timeout: 5)
        if unit.status == 0, unit.text.trimmingWhitespace == "not-found" {
            header += "# systemctl: ancsd.service is not installed here: the journal holds no ancsd.service log\n"
        }
        let output = ReportPrograms.run(command, timeout: 20)
        if let failure = output.failure { return header + "no log: journalctl: \(failure)\n" + output.text }
        if output.status != 0 { return header + "journalctl exited with \(output.status ?? -1):\n" + output.text }
        return header + output.text
    }
}

extension String {
    var trimmingWhitespace: String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}
