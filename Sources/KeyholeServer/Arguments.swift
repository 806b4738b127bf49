#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import KeyholeProtocol
import NIOCore

/// A request's `args`, read member by member with types and bounds checked; `finish()` refuses any
/// member nobody read, so a misspelt argument never passes silently.
///
/// `finish()` compares how many distinct members were found with how many were sent. The names read
/// are kept inline (8 of them; more spill into an array), not in an array: this runs on every request.
struct Arguments: ~Copyable {
    /// The arguments as sent, read in place (a request from a frame), or as built.
    private let sent: CheckedJSONObject?
    private let built: [String: JSONValue]
    /// How many members were sent.
    private let count: Int
    /// How many distinct names read were present.
    private var found = 0
    /// The names read, for `finish()` and for counting each name once. Names are the operations'
    /// literals: kept as `StaticString`s, which copy without reference counting.
    private var names = InlineArray<8, StaticString>(repeating: "")
    private var nameCount = 0
    private var moreNames: [StaticString] = []

    init(_ request: borrowing Request) {
        sent = request.sentArgs
        built = sent == nil ? request.args : Dictionary()  // not `[:]`: a literal's list, built every time
        count = sent?.count ?? built.count
    }

    /// The member `name`, counted as read.
    private mutating func member(_ name: StaticString) -> JSONValue? {
        let read = wasRead(name)
        let value: JSONValue?
        if count == 0 || allFound(besides: read) {
            value = nil
        } else if let sent {
            value = name.withUTF8Buffer { sent.value(of: UnsafeRawBufferPointer($0)) }
        } else {
            // By its bytes, as in place: the dictionary finds keys equal as Swift strings.
            let key = name.description
            if let index = built.index(forKey: key), Self.bytes(of: name, equal: built[index].key) {
                value = built[index].value
            } else {
                value = nil
            }
        }
        if !read { noteRead(name, present: value != nil) }
        return value
    }

    /// Whether every member sent was found already, under names read before that are not the one
    /// asked for (`read`: whether it was read before): then it is not among them, and is not looked
    /// for (which would read the whole object again, past a token of hundreds of bytes, for each
    /// optional argument absent). The names sent are distinct (the envelope's check refused a
    /// repeat), and each name read found at most one of them.
    private func allFound(besides read: Bool) -> Bool {
        found == count && !read
    }

    /// Counts `name`, not read before, as read. Callers look the name up once (`wasRead`) for this and
    /// for `allFound`: the lookup is most of what reading an argument costs.
    private mutating func noteRead(_ name: StaticString, present: Bool) {
        if nameCount < names.count {
            names[nameCount] = name
            nameCount += 1
        } else {
            moreNames.append(name)
        }
        if present { found += 1 }
    }

    /// Names are compared by their bytes, as `CheckedJSONObject` finds them: a name sent that only
    /// looks like one read (a Kelvin sign for a K) was not read. `mutating` though it changes nothing:
    /// through a borrowed `self`, each `names[index]` copied the whole inline array (192 bytes, a
    /// `memcpy`) before reading one name; through `inout` it is read in place.
    private mutating func wasRead(_ name: StaticString) -> Bool {
        for index in 0..<nameCount where Self.same(names[index], name) { return true }
        return moreNames.contains { Self.same($0, name) }
    }

    /// Whether two names have the same bytes: a literal read twice is the same memory, so most
    /// answers need no comparison of bytes (a generic `elementsEqual` cost more than the lookup).
    @inline(__always)
    private static func same(_ a: StaticString, _ b: StaticString) -> Bool {
        guard a.hasPointerRepresentation, b.hasPointerRepresentation else { return sameScalarForm(a, b) }
        guard a.utf8CodeUnitCount == b.utf8CodeUnitCount else { return false }
        return a.utf8Start == b.utf8Start || memcmp(a.utf8Start, b.utf8Start, a.utf8CodeUnitCount) == 0
    }

    /// `same` for a one-scalar literal, kept as its scalar, not as bytes. Out of line: inlined, the
    /// compiler encoded the scalar as UTF-8 at the start of every call, taken or not (about 80
    /// instructions a lookup, callgrind).
    @inline(never)
    private static func sameScalarForm(_ a: StaticString, _ b: StaticString) -> Bool {
        a.withUTF8Buffer { a in b.withUTF8Buffer { a.elementsEqual($0) } }
    }

    private func wasRead(_ name: String) -> Bool {
        for index in 0..<nameCount where Self.bytes(of: names[index], equal: name) { return true }
        return moreNames.contains { Self.bytes(of: $0, equal: name) }
    }

    private static func bytes(of name: StaticString, equal string: String) -> Bool {
        name.withUTF8Buffer { $0.elementsEqual(string.utf8) }
    }

    /// A string of 1 to `maxBytes` UTF-8 bytes.
    mutating func string(_ name: StaticString, required: Bool = false, maxBytes: Int = 255) throws(ProtocolError) -> String? {
        try stringBytes(name, required: required, maxBytes: maxBytes).map { String(buffer: $0) }
    }

    /// A string of 1 to `maxBytes` UTF-8 bytes, as its bytes: read where they lie in the frame, without
    /// a `String` made of them (a session token on every session.get).
    mutating func stringBytes(_ name: StaticString, required: Bool = false, maxBytes: Int = 255) throws(ProtocolError) -> ByteBuffer? {
        switch stringMember(name) {
        case .string(let bytes)?:
            guard bytes.readableBytes > 0, bytes.readableBytes <= maxBytes else {
                throw .badRequest("'\(name)' must be 1 to \(maxBytes) bytes long")
            }
            return bytes
        case nil, .value(.null)?:
            if required { throw .badRequest("'\(name)' is required") }
            return nil
        default:
            throw .badRequest("'\(name)' must be a string")
        }
    }

    /// A string of any length (none included), as its bytes read where they lie in the frame; throws
    /// `bad_request` when it is missing or not a string.
    mutating func anyStringBytes(_ name: StaticString) throws(ProtocolError) -> ByteBuffer {
        guard case .string(let bytes)? = stringMember(name) else { throw .badRequest("'\(name)' is required and must be a string") }
        return bytes
    }

    /// A member with a string's bytes read where they lie in the frame, when it came in one.
    private mutating func stringMember(_ name: StaticString) -> CheckedJSONObject.Member? {
        if let sent, count > 0 {
            let read = wasRead(name)
            if allFound(besides: read) {
                noteRead(name, present: false)
                return nil
            }
            let found = name.withUTF8Buffer { sent.member(UnsafeRawBufferPointer($0)) }
            if !read { noteRead(name, present: found != nil) }
            return found
        }
        return member(name).map { value in
            if case .string(let text) = value { return .string(ByteBuffer(string: text)) }
            return .value(value)
        }
    }

    /// An integer within `range`.
    mutating func int(_ name: StaticString, in range: ClosedRange<Int64>) throws(ProtocolError) -> Int64? {
        switch member(name) {
        case .int(let value)?:
            guard range.contains(value) else {
                throw .badRequest("'\(name)' must be from \(range.lowerBound) to \(range.upperBound)")
            }
            return value
        case nil, .null?:
            return nil
        default:
            throw .badRequest("'\(name)' must be an integer")
        }
    }

    /// The member as sent, JSON `null` included (`.some(.null)`), or `nil` when absent.
    mutating func value(_ name: StaticString) -> JSONValue? {
        return member(name)
    }

    /// Refuses members not read.
    func finish() throws(ProtocolError) {
        guard found < count else { return }
        // For the error only: the first member in sorted order that was not read.
        let unknown = (sent?.dictionary ?? built).keys.sorted().first { !wasRead($0) } ?? "?"
        throw .badRequest("unknown argument '\(unknown)'")
    }
}
