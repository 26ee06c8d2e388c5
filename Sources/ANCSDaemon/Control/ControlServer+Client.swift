#if canImport(Glibc)
import Glibc
#endif
import ANCSSession
import ControlProtocol
import EventLoop
import JSON
import SystemCalls

extension ControlServer {
    /// One connection: reached only through the server's loop-bound state.
    final class Client {
        let id: ClientID
        /// The socket's number, for the calls; `socket` owns it.
        let fd: Int32
        /// The socket and its watch; nil once closed (dropping it cancels, then closes).
        private var socket: OwnedWatch?
        private var framer = ControlLineFramer()
        /// Request lines read and not handed over yet (`maxPipelined` were being answered).
        private var unhandled = FIFO<[UInt8]>()
        private var handingOver = false
        private var output = FIFOBuffer()
        private weak var server: ControlServer?
        private var closed = false
        /// The client shut down its sending side: once every reply it asked for is written,
        /// the connection ends.
        private var inputEnded = false
        var pendingReplies = 0
        private var issued = 0
        private var delivered = 0
        private var waiting: [Int: JSONObject] = [:]
        /// Events that came while replies were pending, and their size.
        private var heldEvents: [String] = []
        private var heldBytes = 0

        /// Serves the client on `socket`; nil (the socket closed) if it cannot be watched.
        init?(id: ClientID, socket: consuming FileDescriptor, loop: EventLoop, server: ControlServer) {
            self.id = id
            fd = socket.rawValue
            self.server = server
            do {
                self.socket = try OwnedWatch(socket, on: loop, interest: .readable) { [weak server] ready in server?.clientReady(id, ready) }
            } catch {
                return nil
            }
        }

        func nextRequestNumber() -> Int {
            defer { issued += 1 }
            return issued
        }

        /// Replies go out in request order, whichever finishes first; events that came while
        /// replies were pending follow them.
        func deliver(_ reply: JSONObject, order: Int) {
            waiting[order] = reply
            while let next = waiting.removeValue(forKey: delivered) {
                delivered += 1
                pendingReplies -= 1
                enqueueReply(next)
            }
            handOver()
            guard !closed else { return }
            if pendingReplies == 0, !heldEvents.isEmpty {
                let events = heldEvents
                heldEvents = []
                heldBytes = 0
                for line in events where !enqueue(line) {
                    server?.clientLog.log(.warning, "control client \(id) stopped reading; disconnected it", kind: "a control client stopped reading; disconnected it")
                    server?.drop(id)
                    return
                }
            }
            endIfDone()
        }

        /// Queues an event line, or holds it while replies are pending; false if the client's
        /// buffer is full.
        func enqueueEvent(_ line: String) -> Bool {
            guard pendingReplies > 0 else { return enqueue(line) }
            guard output.count + heldBytes + line.utf8.count + 1 <= ControlServer.maxPendingBytes else { return false }
            heldEvents.append(line)
            heldBytes += line.utf8.count + 1
            return true
        }

        func enqueueReply(_ reply: JSONObject) {
            if !enqueue(JSONValue.object(reply).serialized) { server?.drop(id) }
        }

        /// Queues a line; false if the buffer is full (the client is not reading).
        func enqueue(_ line: String) -> Bool {
            guard !closed else { return true }
            let bytes = Array(line.utf8) + [0x0A]
            guard output.count + bytes.count <= ControlServer.maxPendingBytes else { return false }
            output.append(bytes)
            flush()
            return true
        }

        /// Reads one chunk (the loop calls again while more waits) and hands its lines over.
        func readAvailable() {
            guard !closed, !inputEnded, unhandled.isEmpty else { return }
            var chunk = [UInt8](repeating: 0, count: 16_384)
            let count = Errno.retryingInterrupts { chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }
            if count > 0 {
                for line in framer.feed(chunk[0..<count]) { unhandled.push(line) }
                if framer.overflowed {
                    enqueueReply(ControlError(.tooLong, "a request line is at most 64 KiB").reply)
                    inputEnded = true
                }
            } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                return
            } else if count < 0 {  // a reset: nobody reads what is left
                server?.drop(id)
                return
            } else {
                // End of input (perhaps only the client's sending side, as socat does at the end
                // of its input): a last line without a newline is a request too.
                if let line = framer.finish() { unhandled.push(line) }
                inputEnded = true
            }
            handOver()
        }

        /// Whether the client's requests are taken now: fewer than `maxPipelined` are being
        /// answered and fewer than `maxUnreadReplies` bytes wait to be written.
        private var takesRequests: Bool {
            pendingReplies < ControlServer.maxPipelined && output.count < ControlServer.maxUnreadReplies
        }

        /// Hands the lines read over while it `takesRequests`; then reads on if it does.
        private func handOver() {
            guard !handingOver else { return }  // a reply written from within `received`
            handingOver = true
            while !closed, takesRequests, let line = unhandled.pop() {
                server?.received(line: line, from: self)
            }
            handingOver = false
            guard !closed else { return }
            updateInterest()
            endIfDone()
        }

        /// After the client's input ended: closes once every reply it asked for is written.
        private func endIfDone() {
            guard inputEnded, !closed, pendingReplies == 0, unhandled.isEmpty, output.isEmpty else { return }
            server?.drop(id)
        }

        func flush() {
            while !closed && !output.isEmpty {
                let written = Errno.retryingInterrupts { output.withFront { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
                if written > 0 {
                    output.consume(written)
                    continue
                }
                if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                server?.drop(id)
                return
            }
            guard !closed else { return }
            handOver()
        }

        /// Readable until the input ends, except while read lines wait to be handed over;
        /// writable only while something waits to be written, so an idle client costs nothing.
        private func updateInterest() {
            let reading = !inputEnded && unhandled.isEmpty && takesRequests
            var interest: Watch.Events = reading ? .readable : []
            if !output.isEmpty { interest.insert(.writable) }
            socket?.watch.update(interest)
        }

        /// Cancels the watch, then closes the socket (its number may be reused at once).
        func close() {
            guard !closed else { return }
            closed = true
            socket = nil
        }
    }
}

/// Bytes waiting to be written, consumed from the front.
struct FIFOBuffer {
    private var bytes: [UInt8] = []
    private var start = 0

    var count: Int { bytes.count - start }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ more: [UInt8]) {
        if start > 0 && start * 2 > bytes.count {
            bytes.removeFirst(start)
            start = 0
        }
        bytes += more
    }

    func withFront<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    }

    mutating func consume(_ count: Int) {
        start += count
        if start == bytes.count {
            bytes = []
            start = 0
        }
    }
}
