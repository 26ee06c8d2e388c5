/// Values per connection, read and changed in place, that remember the last connection asked
/// for: the records of a capture come in runs of one link, so most lookups cost a comparison
/// instead of hashing the key. Reads borrow the stored value (an `Array` element would be
/// copied, with every table it holds retained, for each read of one field). A value type:
/// copies share storage until one of them changes.
struct ConnectionTable<Value: Sendable>: Sendable {
    /// The slots, in memory of their own so that a read can borrow one.
    private final class Storage: @unchecked Sendable {
        // @unchecked: changed only through a table that holds the only reference
        // (`makeUnique()` copies it first otherwise).
        var base: UnsafeMutablePointer<Value?>
        var count = 0
        var capacity: Int

        init(capacity: Int) {
            self.capacity = capacity
            base = UnsafeMutablePointer<Value?>.allocate(capacity: capacity)
        }

        func copy() -> Storage {
            let other = Storage(capacity: capacity)
            other.base.initialize(from: base, count: count)
            other.count = count
            return other
        }

        func append(_ value: Value) {
            if count == capacity {
                let larger = UnsafeMutablePointer<Value?>.allocate(capacity: capacity * 2)
                larger.moveInitialize(from: base, count: count)
                base.deallocate()
                base = larger
                capacity *= 2
            }
            (base + count).initialize(to: value)
            count += 1
        }

        deinit {
            base.deinitialize(count: count)
            base.deallocate()
        }
    }

    private var storage = Storage(capacity: 4)
    private var slotOf: [ConnectionKey: Int] = [:]
    /// Slots emptied by removals, for the next insertions.
    private var free: [Int] = []
    /// The key last looked up and its slot (always a live one).
    private var last: (key: ConnectionKey, slot: Int)?

    /// The connections present, in no particular order.
    var keys: Dictionary<ConnectionKey, Int>.Keys { slotOf.keys }

    /// True if `key` has a value.
    func contains(_ key: ConnectionKey) -> Bool { slot(of: key) != nil }

    private func slot(of key: ConnectionKey) -> Int? {
        if let last, last.key == key { return last.slot }
        return slotOf[key]
    }

    private mutating func makeUnique() {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
    }

    /// The value of `key`; setting nil removes it.
    subscript(key: ConnectionKey) -> Value? {
        _read {
            if let slot = slot(of: key) { yield storage.base[slot] } else { yield nil }
        }
        _modify {
            makeUnique()
            if let slot = slot(of: key) {
                last = (key, slot)
                defer {
                    if storage.base[slot] == nil {
                        slotOf[key] = nil
                        free.append(slot)
                        last = nil
                    }
                }
                yield &storage.base[slot]
            } else {
                var value: Value? = nil
                defer { if let value { insert(value, for: key) } }
                yield &value
            }
        }
    }

    private mutating func insert(_ value: Value, for key: ConnectionKey) {
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
            storage.base[slot] = value
        } else {
            slot = storage.count
            storage.append(value)
        }
        slotOf[key] = slot
        last = (key, slot)
    }
}
