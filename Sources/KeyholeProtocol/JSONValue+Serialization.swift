import NIOCore

extension JSONValue {
    /// Writes compact JSON straight into `buffer`, without an intermediate `Data` or `String`.
    ///
    /// Object members are written in sorted order so that output is deterministic. Non-finite numbers,
    /// which JSON cannot carry, are written as `null`.
    public func write(to buffer: inout ByteBuffer) {
        // Sized by trying: most values fit what the buffer has spare, bigger ones are written again.
        buffer.writeJSON(guess: Swift.max(512, buffer.writableBytes)) { $0.write(value: self) }
    }

    /// The compact JSON text of this value.
    public var jsonText: String {
        var buffer = ByteBuffer()
        write(to: &buffer)
        return String(buffer: buffer)
    }

    /// Writes a JSON string literal, escaping what RFC 8259 requires and nothing else.
    public static func writeString(_ string: String, to buffer: inout ByteBuffer) {
        // Room for the string as it is; one with escapes is written again with more.
        buffer.writeJSON(guess: 2 + string.utf8.count) { $0.write(string: string) }
    }

    /// Writes an integer in decimal, without making a `String` of it first.
    public static func writeInteger(_ value: Int64, to buffer: inout ByteBuffer) {
        buffer.writeJSON(reserving: 20) { $0.write(integer: value) }
    }
}
