import NIOCore

extension JSONValue {
    /// Writes compact JSON straight into `buffer`, without an intermediate `Data` or `String`.
    ///
    /// Object members are written in sorted order so that output is deterministic. Non-finite numbers,
    /// which JSON cannot carry, are written as `null`.
    public func write(to buffer: inout ByteBuffer) {
        switch self {
        case .null:
            buffer.writeStaticString("null")
        case .bool(let value):
            buffer.writeStaticString(value ? "true" : "false")
        case .int(let value):
            Self.writeInteger(value, to: &buffer)
        case .double(let value):
            if value.isFinite {
                // Swift's shortest round-trip form ("2.0", "1e+20") is valid JSON and reads back as a double.
                buffer.writeString(value.description)
            } else {
                buffer.writeStaticString("null")
            }
        case .string(let value):
            Self.writeString(value, to: &buffer)
        case .array(let elements):
            buffer.writeInteger(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
                element.write(to: &buffer)
            }
            buffer.writeInteger(UInt8(ascii: "]"))
        case .object(let members):
            buffer.writeInteger(UInt8(ascii: "{"))
            var first = true
            for (key, value) in members.sorted(by: { $0.key < $1.key }) {
                if !first { buffer.writeInteger(UInt8(ascii: ",")) }
                first = false
                Self.writeString(key, to: &buffer)
                buffer.writeInteger(UInt8(ascii: ":"))
                value.write(to: &buffer)
            }
            buffer.writeInteger(UInt8(ascii: "}"))
        }
    }

    /// The compact JSON text of this value.
    public var jsonText: String {
        var buffer = ByteBuffer()
        write(to: &buffer)
        return String(buffer: buffer)
    }

    /// Writes a JSON string literal, escaping what RFC 8259 requires and nothing else.
    public static func writeString(_ string: String, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "\""))
        let utf8 = string.utf8
        func needsEscape(_ byte: UInt8) -> Bool { byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
        // Fast path: most strings need no escaping and are copied in one go (scanned as raw bytes when
        // the string is native, as almost all are).
        let clean = utf8.withContiguousStorageIfAvailable { !$0.contains(where: needsEscape) } ?? !utf8.contains(where: needsEscape)
        if clean {
            buffer.writeString(string)
        } else {
            for byte in utf8 {
                switch byte {
                case UInt8(ascii: "\""): buffer.writeStaticString("\\\"")
                case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
                case 0x0A: buffer.writeStaticString("\\n")
                case 0x0D: buffer.writeStaticString("\\r")
                case 0x09: buffer.writeStaticString("\\t")
                case 0x08: buffer.writeStaticString("\\b")
                case 0x0C: buffer.writeStaticString("\\f")
                case ..<0x20:
                    buffer.writeStaticString("\\u00")
                    buffer.writeInteger(hexDigit(byte >> 4))
                    buffer.writeInteger(hexDigit(byte & 0x0F))
                default: buffer.writeInteger(byte)
                }
            }
        }
        buffer.writeInteger(UInt8(ascii: "\""))
    }

    /// Writes an integer in decimal, without making a `String` of it first.
    public static func writeInteger(_ value: Int64, to buffer: inout ByteBuffer) {
        // 20 bytes hold any Int64 with its sign; digits are written from the end.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var magnitude = value.magnitude
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude != 0
            if value < 0 {
                start -= 1
                digits[start] = UInt8(ascii: "-")
            }
            buffer.writeBytes(UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
