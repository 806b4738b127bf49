/// The result of `ping`.
public struct PingResult: Sendable, Hashable {
    /// The protocol version the server speaks.
    public var protocolVersion: Int
    /// keyholed's version.
    public var version: String
    /// Milliseconds since keyholed started.
    public var uptimeMs: Int64
}
