/// Why the store cannot do what was asked: corruption found at start-up, or an I/O failure.
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case corrupt
        case io
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

    /// Whether this is corruption (as opposed to an I/O failure).
    public var isCorruption: Bool { code == .corrupt }

    /// Errors compare by code, not message.
    public static func == (lhs: StoreError, rhs: StoreError) -> Bool { lhs.code == rhs.code }

    /// The message.
    public var description: String { message }
}
