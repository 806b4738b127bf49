import NIOCore

/// Splits a byte stream into frames: a 4-byte big-endian length N, then N bytes (PROTOCOL.md section 2).
///
/// The length is checked as soon as its four bytes are in, so an oversized frame is refused without
/// reading or buffering its body. After an error the decoder is spent: framing can no longer be trusted.
public struct FrameDecoder: Sendable {
    /// The largest frame body accepted.
    public let maxFrameBytes: Int
    private var buffer = ByteBuffer()
    private var failed = false
    /// The length at the front of `buffer`, once its four bytes are in: read once per frame, where
    /// bytes come in or a frame leaves, not again by every `hasCompleteFrame` and `next()` (a read
    /// from a `ByteBuffer` costs a dynamic exclusivity check, about 70 instructions).
    private var headLength: UInt32?

    /// The largest `maxFrameBytes` the protocol allows: 16 MiB.
    public static let limit = 16 * 1024 * 1024

    /// A decoder refusing frames longer than `maxFrameBytes` (1...16 MiB).
    public init(maxFrameBytes: Int) {
        precondition((1...Self.limit).contains(maxFrameBytes), "maxFrameBytes out of range")
        self.maxFrameBytes = maxFrameBytes
    }

    /// Bytes received but not yet returned as a frame: non-zero means a frame has started.
    public var bufferedBytes: Int { buffer.readableBytes }

    /// Whether `next()` would return a frame or throw now, without waiting for more bytes.
    public var hasCompleteFrame: Bool {
        guard !failed, let length = headLength else { return false }
        return length == 0 || UInt64(length) > UInt64(maxFrameBytes) || buffer.readableBytes >= 4 + Int(length)
    }

    /// Adds received bytes; ignored once the decoder has failed.
    public mutating func append(_ bytes: ByteBuffer) {
        guard !failed else { return }
        if buffer.readableBytes == 0 {
            // Adopting the read buffer avoids a copy in the common case of whole frames per read.
            buffer = bytes
        } else {
            // Reclaim consumed space before growing, so a long pipelined stream does not grow without bound.
            if buffer.readerIndex > 64 * 1024 { buffer.discardReadBytes() }
            var bytes = bytes
            buffer.writeBuffer(&bytes)
        }
        if headLength == nil { readHead() }
    }

    /// Reads the length at the front of `buffer`, if its four bytes are in.
    private mutating func readHead() {
        headLength = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self)
    }

    /// The next complete frame body, or `nil` until more bytes arrive.
    ///
    /// - Throws: `bad_frame` for a length of 0, `frame_too_large` for a length over the maximum.
    public mutating func next() throws(ProtocolError) -> ByteBuffer? {
        guard !failed, let length = headLength else {
            return nil
        }
        if length == 0 {
            return try fail(.badFrame())
        }
        if UInt64(length) > UInt64(maxFrameBytes) {
            return try fail(.frameTooLarge(length: length, maximum: maxFrameBytes))
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 4)
        let frame = buffer.readSlice(length: Int(length))
        if buffer.readableBytes == 0 {
            // Let go of the read buffer once it is used up: the channel reuses its receive buffer
            // only when nobody else holds it, and otherwise allocates a new one for every read.
            // (An empty `ByteBuffer()` is NIO's shared zero-capacity buffer: no allocation.)
            buffer = ByteBuffer()
            headLength = nil
        } else {
            readHead()
        }
        return frame
    }

    private mutating func fail(_ error: ProtocolError) throws(ProtocolError) -> ByteBuffer? {
        failed = true
        buffer = ByteBuffer()
        headLength = nil
        throw error
    }
}
