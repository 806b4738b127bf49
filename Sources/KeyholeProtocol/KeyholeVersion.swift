/// Versions of Keyhole and of its wire protocol.
public enum KeyholeVersion {
    /// keyholed's semantic version.
    public static let current = "0.1.0"
    /// The protocol version this code speaks (PROTOCOL.md).
    public static let protocolVersion = 1
    /// Where keyholed listens when nothing else is configured.
    public static let defaultSocketPath = "/run/keyhole/keyhole.sock"
}
