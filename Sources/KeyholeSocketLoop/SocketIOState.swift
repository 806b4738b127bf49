/// What one connection's socket is watched for, and whether it takes more output, decided from what
/// happened to it: no I/O here, so every transition is unit-tested without a socket.
///
/// Writability follows two marks, as SwiftNIO's channels do: output waiting to be sent past the high
/// mark makes the connection unwritable (its owner stops taking requests), and it becomes writable
/// again only once the waiting output is below the low mark, so that it does not flap around one value.
public struct SocketIOState: Sendable, Equatable {
    /// Output past `high` bytes makes the connection unwritable; below `low` writable again.
    public struct Marks: Sendable, Equatable {
        public var low: Int
        public var high: Int

        public init(low: Int, high: Int) {
            precondition(0 <= low && low < high, "the low mark must be below the high mark")
            self.low = low
            self.high = high
        }
    }

    /// What a change asks of the loop.
    public struct Effects: Sendable, Equatable {
        /// The events the socket is watched for changed: `epoll_ctl(EPOLL_CTL_MOD)`.
        public var eventsChanged = false
        /// Writability changed to this: tell the owner.
        public var writability: Bool?
        /// Every byte asked for is written after `closeAfterWrites`: close now.
        public var close = false

        public init(eventsChanged: Bool = false, writability: Bool? = nil, close: Bool = false) {
            self.eventsChanged = eventsChanged
            self.writability = writability
            self.close = close
        }
    }

    public let marks: Marks
    /// The owner wants input.
    public private(set) var reading = true
    /// A write could not finish: the socket is watched for room (EPOLLOUT) until it does.
    public private(set) var watchingWrites = false
    /// Waiting output is below the marks (see above).
    public private(set) var writable = true
    /// The owner asked to close once everything written so far is sent; nothing is read meanwhile.
    public private(set) var closingAfterWrites = false
    /// The peer finished sending: there is nothing more to read.
    public private(set) var inputEnded = false
    /// Closed: nothing more happens.
    public private(set) var closed = false

    public init(marks: Marks) {
        self.marks = marks
    }

    /// Whether the socket is watched for input.
    public var watchingReads: Bool { reading && !inputEnded && !closingAfterWrites && !closed }

    /// The owner wants input, or does not (back pressure, or reading ended).
    public mutating func setReading(_ wanted: Bool) -> Effects {
        guard !closed, wanted != reading else { return Effects() }
        let before = watchingReads
        reading = wanted
        return Effects(eventsChanged: before != watchingReads)
    }

    /// A read found the end of the input.
    public mutating func endOfInput() -> Effects {
        guard !closed, !inputEnded else { return Effects() }
        let before = watchingReads
        inputEnded = true
        return Effects(eventsChanged: before != watchingReads)
    }

    /// A write attempt ended with `unsent` bytes still waiting (0: all sent).
    public mutating func wrote(unsent: Int) -> Effects {
        guard !closed else { return Effects() }
        var effects = Effects()
        let incomplete = unsent > 0
        if incomplete != watchingWrites {
            watchingWrites = incomplete
            effects.eventsChanged = true
        }
        effects.writability = queued(unsent)
        if closingAfterWrites, !incomplete {
            effects.close = true
        }
        return effects
    }

    /// Output was added and `unsent` bytes now wait (no write attempted yet): the connection may
    /// become unwritable.
    public mutating func queued(_ unsent: Int) -> Bool? {
        if writable, unsent > marks.high {
            writable = false
            return false
        }
        if !writable, unsent < marks.low {
            writable = true
            return true
        }
        return nil
    }

    /// Close once every byte written so far is sent; stop reading now. `unsent` bytes wait.
    public mutating func closeAfterWrites(unsent: Int) -> Effects {
        guard !closed, !closingAfterWrites else { return Effects() }
        let before = watchingReads
        closingAfterWrites = true
        return Effects(eventsChanged: before != watchingReads, close: unsent == 0 && !watchingWrites)
    }

    /// The socket is closed.
    public mutating func close() {
        closed = true
        watchingWrites = false
    }
}
