import KeyholeProtocol

/// Who a user or session belongs to: an issuer name as configured, and the subject it vouches for.
///
/// Two principals are the same only when their issuers and subjects have the same UTF-8 bytes: not
/// under Unicode canonical equivalence, as Swift's `String` compares. "\u{212A}ate" (KELVIN SIGN) is
/// not "Kate", and an NFD "José" is not the NFC one; for apps whose subjects are user names, the
/// other way is an account takeover.
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

    /// Byte for byte.
    public static func == (lhs: Principal, rhs: Principal) -> Bool {
        ExactString.equal(lhs.sub, rhs.sub) && ExactString.equal(lhs.issuer, rhs.issuer)
    }

    /// The bytes, as `==` compares them.
    public func hash(into hasher: inout Hasher) {
        ExactString.hash(issuer, into: &hasher)
        ExactString.hash(sub, into: &hasher)
    }
}
