import Glibc

/// The id of this process's thread named `name` (`/proc/self/task/*/comm`), if there is one.
public func threadID(named name: String) -> String? {
    guard let dir = opendir("/proc/self/task") else { return nil }
    defer { closedir(dir) }
    while let entry = readdir(dir) {
        let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard tid.first?.isNumber == true else { continue }
        if readSmallFile("/proc/self/task/\(tid)/comm") == name + "\n" { return tid }
    }
    return nil
}

/// How many times the thread `tid` of this process gave up the CPU to wait
/// (`voluntary_ctxt_switches`): an idle thread's count does not move.
public func voluntarySwitches(ofThread tid: String) -> Int? {
    guard let text = readSmallFile("/proc/self/task/\(tid)/status") else { return nil }
    let line = text.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
    return line.flatMap { Int($0.split(separator: "\t").last ?? "") }
}

/// True while the thread `tid` of this process sleeps in `epoll_wait` (its `wchan`; where the
/// kernel hides that, asleep at all): an event loop that has nothing left to do.
public func isWaitingInEpoll(thread tid: String) -> Bool {
    guard let wchan = readSmallFile("/proc/self/task/\(tid)/wchan") else { return false }
    if wchan.contains("epoll") { return true }
    guard wchan == "0", let stat = readSmallFile("/proc/self/task/\(tid)/stat"), let end = stat.lastIndex(of: ")") else { return false }
    return stat[stat.index(after: end)...].split(separator: " ").first == "S"
}

private func readSmallFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes = [UInt8](repeating: 0, count: 8192)
    let count = read(fd, &bytes, bytes.count)
    return count > 0 ? String(decoding: bytes[0..<count], as: UTF8.self) : nil
}
