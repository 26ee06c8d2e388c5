/// A value that belongs to one `EventLoop`: it may be carried anywhere (it is `Sendable`), but
/// read or changed only on that loop, which every access checks (`precondition`, in release
/// builds too). The shape of swift-nio's `NIOLoopBound`; it replaces a class marked
/// `@unchecked Sendable` with a comment saying "touched only on the loop".
///
/// ```swift
/// let clients = LoopBound([Int32: Client](), loop: loop)
/// loop.execute { clients.value[fd] = client }
/// ```
///
/// Its accessors are inlinable: specialized in the caller, a read is the loop's check and a load
/// (the generic call it was cost about 160 instructions, on the daemon's per-notification path).
public struct LoopBound<Value>: @unchecked Sendable {
    /// The loop whose thread may touch `value`.
    public let loop: EventLoop
    @usableFromInline let box: Box

    @usableFromInline final class Box: @unchecked Sendable {  // reached only through the checked `value`
        @usableFromInline var value: Value
        @usableFromInline init(_ value: Value) { self.value = value }
    }

    /// Binds `value` to `loop`. Makes no check: a value may be made off the loop and then sent
    /// to it.
    @inlinable public init(_ value: Value, loop: EventLoop) {
        self.loop = loop
        box = Box(value)
    }

    /// The value; reading or writing it off `loop` stops the process.
    @inlinable public var value: Value {
        get {
            loop.checkIsolated()
            return box.value
        }
        nonmutating set {
            loop.checkIsolated()
            box.value = newValue
        }
        nonmutating _modify {
            loop.checkIsolated()
            yield &box.value
        }
    }

    /// Runs `body` with the value on the loop (`EventLoop.perform`: at once when already there).
    public func withValue(_ body: @escaping @Sendable (inout Value) -> Void) {
        let bound = self
        loop.perform { body(&bound.value) }
    }
}
