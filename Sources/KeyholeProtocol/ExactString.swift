#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A string compared and hashed by its UTF-8 bytes.
///
/// Swift's `String` is equal to another under Unicode canonical equivalence: "\u{212A}ate" (KELVIN
/// SIGN) equals "Kate", an NFD "José" equals the NFC one. Identities (issuers, subjects, notification
/// ids, names) must not be: two subjects an issuer or an app tells apart are two accounts. Use this
/// type, or `ExactString.equal(_:_:)` and `hash(_:into:)`, wherever such a string is a key or is
/// compared.
public struct ExactString: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The string.
    public var string: String

    /// The string, compared by its bytes.
    public init(_ string: String) {
        self.string = string
    }

    /// A literal.
    public init(stringLiteral value: String) {
        self.string = value
    }

    /// The string itself.
    public var description: String { string }

    /// Whether the two have the same UTF-8 bytes.
    public static func == (lhs: ExactString, rhs: ExactString) -> Bool {
        equal(lhs.string, rhs.string)
    }

    /// Hashes the UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        Self.hash(string, into: &hasher)
    }

    /// Whether `lhs` and `rhs` have the same UTF-8 bytes (not merely canonically equivalent ones).
    /// Not constant time: identities are not secrets (those are compared with a constant-time check).
    @inlinable
    public static func equal(_ lhs: String, _ rhs: String) -> Bool {
        // A native string's bytes are read where they are, through the borrowed string: `withUTF8`,
        // which is mutating, needed a copy of each (a reference counted twice per string, on every
        // cache hit's issuer checks). Others are made native first, which is rare and still linear.
        let inPlace = lhs.utf8.withContiguousStorageIfAvailable { left in
            rhs.utf8.withContiguousStorageIfAvailable { right in sameBytes(left, right) }
        }
        if let inPlace, let inPlace { return inPlace }
        var lhs = lhs, rhs = rhs
        return lhs.withUTF8 { left in rhs.withUTF8 { right in sameBytes(left, right) } }
    }

    @inlinable
    static func sameBytes(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
        left.count == right.count && (left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0)
    }

    /// Feeds the UTF-8 bytes of `string`, and their count, to `hasher`.
    @inlinable
    public static func hash(_ string: String, into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { bytes in
            hasher.combine(bytes.count)
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
    }
}

extension Sequence where Element == String {
    /// Whether one of the strings has exactly the UTF-8 bytes of `string`.
    public func containsExactly(_ string: String) -> Bool {
        contains { ExactString.equal($0, string) }
    }
}
