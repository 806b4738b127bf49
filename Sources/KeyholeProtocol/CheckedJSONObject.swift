import NIOCore

/// A JSON object already checked as `JSONValue.parse` checks one (syntax, UTF-8, depth, repeated
/// names), kept as its bytes and read where they lie: a request's `args`, so that an operation looks
/// up the two or three members it knows without a dictionary being built of all of them.
///
/// It holds a slice of the frame it came in (no copy), and with it the buffer that frame was read
/// into: keep what was read from it, not the object, past the request's synchronous part.
public struct CheckedJSONObject: Sendable {
    /// The object's text, from its `{` to its `}`.
    private let text: ByteBuffer
    /// How many members it has.
    public let count: Int

    /// `text`, checked by the caller, with `count` members.
    init(checked text: ByteBuffer, count: Int) {
        self.text = text
        self.count = count
    }

    /// The value of the member whose name is exactly `name`'s UTF-8 bytes, or `nil` when there is none.
    public func value(of name: String) -> JSONValue? {
        var name = name
        return name.withUTF8 { value(of: UnsafeRawBufferPointer($0)) }
    }

    /// The value of the member whose name is exactly the UTF-8 bytes `name`, or `nil` when there is none.
    public func value(of name: UnsafeRawBufferPointer) -> JSONValue? {
        switch member(name) {
        case .value(let value)?: return value
        case .string(let bytes)?: return .string(String(buffer: bytes))
        case nil: return nil
        }
    }

    /// A member's value, with a string's bytes read where they lie.
    public enum Member: Sendable {
        /// A string: its UTF-8 bytes, unescaped (in place when it had no escapes).
        case string(ByteBuffer)
        /// Any other value.
        case value(JSONValue)
    }

    /// The member whose name is exactly the UTF-8 bytes `name`, or `nil` when there is none; a string
    /// comes as its bytes, without a `String` made of them (a session token, say).
    public func member(_ name: UnsafeRawBufferPointer) -> Member? {
        let found = text.withUnsafeReadableBytes { bytes -> Result<Member?, JSONParser.Failure> in
            var parser = JSONParser(bytes: bytes)
            do throws(JSONParser.Failure) {
                guard try parser.findMember(named: name) else { return .success(nil) }
                guard parser.bytes[parser.index] == UInt8(ascii: "\"") else {
                    return .success(.value(try parser.parseValue()))
                }
                // A string was checked with the envelope: made without a second check of its bytes.
                let (content, hasEscapes) = parser.scanCheckedString()
                if hasEscapes {
                    return .success(.string(ByteBuffer(string: JSONParser.decodeEscapes(UnsafeRawBufferPointer(rebasing: bytes[content])))))
                }
                return .success(.string(text.getSlice(at: text.readerIndex + content.lowerBound, length: content.count)!))
            } catch {
                return .failure(error)
            }
        }
        switch found {
        case .success(let member):
            return member
        case .failure(let failure):
            assertionFailure("a checked object failed to parse: \(failure.message)")
            return nil
        }
    }

    /// Every member.
    public var dictionary: [String: JSONValue] {
        switch text.withUnsafeReadableBytes({ JSONParser.parseResult($0) }) {
        case .success(.object(let members)):
            return members
        case .success:
            assertionFailure("a checked object parsed as something else")
            return [:]
        case .failure(let failure):
            assertionFailure("a checked object failed to parse: \(failure.message)")
            return [:]
        }
    }

    /// The object with its text copied out of the frame it came in, holding nothing else.
    public var owned: CheckedJSONObject {
        CheckedJSONObject(checked: ByteBuffer(bytes: text.readableBytesView), count: count)
    }
}
