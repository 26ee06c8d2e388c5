public import SystemCalls

/// A watch on a descriptor it owns: when it ends, the watch is cancelled (at once: the handler
/// is not called again), then the descriptor closed. What a reader of a socket keeps: dropping
/// it is the whole of closing, in the order `EventLoop`'s rules ask for.
public final class OwnedWatch {
    public let watch: Watch
    public let descriptor: FileDescriptor

    /// Watches `descriptor` (`EventLoop.watch`); the descriptor is closed if it cannot be watched.
    public init(
        _ descriptor: consuming FileDescriptor, on loop: EventLoop, interest: Watch.Events, urgent: Bool = false,
        handler: @escaping @Sendable (Watch.Events) -> Void
    ) throws(EventLoop.Failure) {
        watch = try loop.watch(fd: descriptor.rawValue, interest: interest, urgent: urgent, handler: handler)
        self.descriptor = descriptor
    }

    deinit {
        watch.cancel()
    }
}
