/// The unstructured tasks one owner starts (an actor that outlives each of them): each is
/// forgotten when it ends, and `cancelAll()` cancels those still running when the owner stops,
/// so no task outlives its owner unnoticed.
///
/// The owner keeps it in its isolated state and starts each task with `add`, whose task ends by
/// calling `finished` on the owner (see `Daemon.spawn`).
public struct OwnedTasks: Sendable {
    private var running: [UInt64: Task<Void, Never>] = [:]
    private var last: UInt64 = 0

    public init() {}

    /// Starts a task made by `make`, given the number it must hand `finished`.
    public mutating func add(_ make: (UInt64) -> Task<Void, Never>) {
        last &+= 1
        running[last] = make(last)
    }

    /// The task `id` has ended.
    public mutating func finished(_ id: UInt64) {
        running[id] = nil
    }

    /// Cancels every task still running.
    public mutating func cancelAll() {
        for task in running.values { task.cancel() }
        running = [:]
    }

    /// The tasks still running.
    public var count: Int { running.count }
}
