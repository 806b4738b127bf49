import NIOCore

/// Writes frames: a 4-byte big-endian length, then the JSON body (PROTOCOL.md section 2).
public enum FrameEncoder {
    /// Writes one frame whose body `body` produces, straight into `buffer`.
    ///
    /// The length is reserved first and filled in afterwards, so the body is serialised once, in place.
    /// When `body` throws, what it wrote stays in `buffer` with the length unset: the caller discards it.
    public static func writeFrame<Failure: Error>(
        into buffer: inout ByteBuffer, body: (inout ByteBuffer) throws(Failure) -> Void
    ) throws(Failure) {
        let lengthIndex = buffer.writerIndex
        buffer.writeInteger(UInt32(0))
        let bodyStart = buffer.writerIndex
        try body(&buffer)
        buffer.setInteger(UInt32(buffer.writerIndex - bodyStart), at: lengthIndex)
    }
}
