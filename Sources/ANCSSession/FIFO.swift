/// A first-in first-out queue with O(1) amortized push and pop (the session's work queues;
/// the daemon's output buffers use it too).
public struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    public init() {}

    public var isEmpty: Bool { head == storage.count }
    public var count: Int { storage.count - head }

    public mutating func push(_ element: Element) { storage.append(element) }

    public mutating func pop() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head > 64 && head * 2 > storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    /// Room for this many elements without allocating, the popped ones not yet dropped counted.
    public var capacity: Int { storage.capacity }

    /// Makes room for `minimumCapacity` elements, the popped ones not yet dropped counted.
    public mutating func reserveCapacity(_ minimumCapacity: Int) {
        storage.reserveCapacity(minimumCapacity)
    }

    public mutating func removeAll(keepingCapacity: Bool = false) {
        storage.removeAll(keepingCapacity: keepingCapacity)
        head = 0
    }
}

extension FIFO: Sendable where Element: Sendable {}
