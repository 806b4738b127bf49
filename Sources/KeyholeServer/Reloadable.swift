import Synchronization

/// A setting a reload may replace while requests read it: each read is one short lock hold and a
/// copy, and a request reads it once, so it never sees half of an old and half of a new value.
public final class Reloadable<Value: Sendable>: Sendable {
    private let value: Mutex<Value>

    /// A setting starting at `value`.
    public init(_ value: Value) {
        self.value = Mutex(value)
    }

    /// The value now.
    public var current: Value { value.withLock { $0 } }

    /// Puts `new` in place for the reads that follow.
    public func replace(_ new: Value) {
        value.withLock { $0 = new }
    }
}
