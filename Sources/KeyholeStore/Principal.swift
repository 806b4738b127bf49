/// Who a user or session belongs to: an issuer name as configured, and the subject it vouches for.
public struct Principal: Hashable, Sendable, CustomStringConvertible {
    /// The issuer's name (`apple`, `google`, `local`, ...).
    public var issuer: String
    /// The subject (`sub`) the issuer gave.
    public var sub: String

    /// A principal.
    public init(issuer: String, sub: String) {
        self.issuer = issuer
        self.sub = sub
    }

    /// `issuer/sub`.
    public var description: String { "\(issuer)/\(sub)" }

    /// The longest issuer name and subject a record can carry (a `str` of WALRecordTypes.md).
    public static let maximumFieldBytes = 255
}
