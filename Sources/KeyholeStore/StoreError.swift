/// Why the store cannot do what was asked: corruption found at start-up, or an I/O failure.
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case corrupt
        case io
        case unavailable
        case locked
    }

    private let code: Code
    /// What went wrong, naming the file and, for corruption, the offset.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Damage in the log or a snapshot: keyholed refuses to start (see `--repair`).
    public static func corrupt(file: String, offset: Int, _ reason: String) -> StoreError {
        StoreError(.corrupt, "\(file) is corrupt at offset \(offset): \(reason)")
    }

    /// A read, write or sync failed.
    public static func io(_ message: String) -> StoreError { StoreError(.io, message) }

    /// Writes are refused for now: the disk failed and has not recovered yet, or the store is stopping.
    public static func unavailable(_ message: String) -> StoreError { StoreError(.unavailable, message) }

    /// Another process holds the state directory.
    public static func locked(_ message: String) -> StoreError { StoreError(.locked, message) }

    /// Whether writes are refused for now (retry later), as opposed to a failure found at start-up.
    public var isUnavailable: Bool { code == .unavailable }

    /// Whether another process holds the state directory.
    public var isLocked: Bool { code == .locked }

    /// Whether this is corruption (as opposed to an I/O failure).
    public var isCorruption: Bool { code == .corrupt }

    /// Errors compare by code, not message.
    public static func == (lhs: StoreError, rhs: StoreError) -> Bool { lhs.code == rhs.code }

    /// The message.
    public var description: String { message }
}
