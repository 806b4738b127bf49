import NIOCore

/// Reads Redis replies (RESP2) off a stream, only as far as telling them apart and whether each one
/// succeeded: the bench drives Redis with the same client and connections as keyholed.
struct RESPReplyReader {
    /// What the bytes read so far hold next.
    enum Reply: Equatable {
        /// A status, an integer or a bulk string.
        case success
        /// An error, or a nil bulk string (a GET of a missing key, which a fair run never sends).
        case failure
    }

    private var buffer = ByteBuffer()

    mutating func append(_ bytes: ByteBuffer) {
        // Replies read are dropped first, so the buffer is reused instead of growing for the whole run.
        if buffer.readableBytes == 0 { buffer.clear() }
        var bytes = bytes
        buffer.writeBuffer(&bytes)
    }

    /// The next whole reply, or `nil` until more bytes arrive.
    mutating func next() throws -> Reply? {
        let view = buffer.readableBytesView
        guard let lineEnd = view.firstRange(of: "\r\n".utf8) else { return nil }
        let line = view[view.startIndex..<lineEnd.lowerBound]
        guard let kind = line.first else { throw RESPError.malformed }
        let afterLine = lineEnd.upperBound - view.startIndex
        switch kind {
        case UInt8(ascii: "+"), UInt8(ascii: ":"):
            buffer.moveReaderIndex(forwardBy: afterLine)
            return .success
        case UInt8(ascii: "-"):
            buffer.moveReaderIndex(forwardBy: afterLine)
            return .failure
        case UInt8(ascii: "$"):
            guard let length = Int(String(decoding: line.dropFirst(), as: UTF8.self)) else { throw RESPError.malformed }
            if length < 0 {
                buffer.moveReaderIndex(forwardBy: afterLine)
                return .failure
            }
            guard buffer.readableBytes >= afterLine + length + 2 else { return nil }
            buffer.moveReaderIndex(forwardBy: afterLine + length + 2)
            return .success
        default:
            throw RESPError.malformed
        }
    }

    /// A command as RESP's array of bulk strings.
    static func command(_ parts: [[UInt8]]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeString("*\(parts.count)\r\n")
        for part in parts {
            buffer.writeString("$\(part.count)\r\n")
            buffer.writeBytes(part)
            buffer.writeStaticString("\r\n")
        }
        return buffer
    }
}

/// A reply the reader cannot parse.
enum RESPError: Error {
    case malformed
}
