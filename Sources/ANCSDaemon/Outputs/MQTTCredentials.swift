#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
public import MQTT

/// The MQTT password as a careful user expects it to be handled (docs/mqtt.md, "Password"):
/// a password file needs a user to go with it, a file others may read is warned about, and so
/// is a password sent in the clear to another machine.
public enum MQTTCredentials {
    /// The password file (or the configuration key) without a user in the URL is a mistake:
    /// MQTT sends a password only with a user name, so it would be ignored without a word.
    public static func check(_ settings: MQTTSettings) throws(SettingError) {
        guard let file = settings.passwordFile, settings.endpoint.username == nil else { return }
        throw SettingError(
            "--mqtt-password-file \(file) needs a user in the --mqtt URL to go with it (mqtt://USER@\(settings.endpoint.host)): "
                + "a broker takes a password only with a user name")
    }

    /// The password (the file's first line) and, when the file is readable by more than needs
    /// it, a warning that names the fix.
    public static func readPassword(_ path: String) throws(SettingError) -> (password: String, warning: String?) {
        let password: String
        switch readTextFile(path) {
        case .success(let text):
            var line = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            if line.last == "\r" { line = line.dropLast() }
            guard !line.isEmpty else { throw SettingError("the MQTT password file \(path) is empty") }
            password = String(line)
        case .failure(let error):
            throw SettingError("cannot read the MQTT password file \(path): \(error.description)")
        }
        var info = stat()
        guard stat(path, &info) == 0 else { return (password, nil) }
        return (password, permissionWarning(path, mode: info.st_mode, owner: info.st_uid, user: geteuid()))
    }

    /// What is wrong with a password file of `mode`, owned by `owner`, read by ancsd running as
    /// `user`; nil when nothing is. Warned about, not refused (as mosquitto does with its own
    /// files, where ssh refuses a key): the documented layout is a file of root's, group
    /// `ancsd`, mode 0640, which ancsd reads through its group, and a file a few more can read
    /// is a risk to point out, not a reason to leave the broker without events.
    ///
    /// - Readable by others: anyone on the machine can read the password.
    /// - Readable by its group while ancsd owns it: ancsd needs no group to read its own file.
    static func permissionWarning(_ path: String, mode: mode_t, owner: uid_t, user: uid_t) -> String? {
        let octal = String(mode & 0o7777, radix: 8)
        if mode & S_IROTH != 0 {
            let fix = owner == user ? "chmod 600 \(path)" : "chmod o-r \(path)"
            return "the MQTT password file \(path) can be read by every user (mode \(octal)): \(fix)"
        }
        if mode & S_IRGRP != 0, owner == user {
            return "the MQTT password file \(path) can be read by its group (mode \(octal)): chmod 600 \(path)"
        }
        return nil
    }

    /// A warning when a password would cross the network in the clear: a user with a password
    /// over `mqtt://` (no TLS) to a host that is not this machine's loopback (by its literal
    /// address or the name `localhost`: a name is not resolved for this).
    public static func plainTextWarning(_ endpoint: MQTTEndpoint, hasPassword: Bool) -> String? {
        guard hasPassword, endpoint.username != nil, !endpoint.tls, !isLoopback(endpoint.host) else { return nil }
        return "the MQTT password goes to \(endpoint.host) unencrypted (mqtt://): anyone on the way can read it; use mqtts:// (docs/mqtt.md)"
    }

    /// `localhost` (and names below it), 127.0.0.0/8, ::1 and ::ffff:127.x.y.z.
    static func isLoopback(_ host: String) -> Bool {
        let name = host.lowercased()
        if name == "localhost" || name.hasSuffix(".localhost") || name == "ip6-localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, name, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes == [UInt8](repeating: 0, count: 15) + [1] { return true }  // ::1
        return bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] && bytes[12] == 127
    }
}
