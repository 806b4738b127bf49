import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

@Suite("FrameDecoder")
struct FrameDecoderTests {
    struct Outcome: Equatable {
        var frames: [[UInt8]] = []
        var error: String?
        var remainder = 0
    }

    /// Feeds `input` in the given chunks, as reads would deliver it.
    static func decode(_ input: [UInt8], chunks: [Int], maxFrameBytes: Int) -> Outcome {
        var decoder = FrameDecoder(maxFrameBytes: maxFrameBytes)
        var outcome = Outcome()
        var offset = 0
        for size in chunks + [input.count] where offset < input.count {
            let end = min(input.count, offset + size)
            decoder.append(ByteBuffer(bytes: input[offset..<end]))
            offset = end
            // `hasCompleteFrame` says, before every `next()`, whether it gives a frame or throws.
            var complete = false
            do {
                while true {
                    complete = decoder.hasCompleteFrame
                    guard let frame = try decoder.next() else {
                        #expect(!complete, "hasCompleteFrame was true, next() returned nil")
                        break
                    }
                    #expect(complete, "hasCompleteFrame was false, next() returned a frame")
                    outcome.frames.append(Array(frame.readableBytesView))
                }
            } catch {
                #expect(complete, "hasCompleteFrame was false, next() threw")
                outcome.error = error.code.rawValue
                return outcome
            }
        }
        outcome.remainder = decoder.bufferedBytes
        return outcome
    }

    static func expected(_ vector: JSONValue) -> Outcome {
        Outcome(
            frames: (vector["frames_hex"]?.arrayValue ?? []).map { RawConnection.bytes(hex: $0.stringValue!) },
            error: vector["error"]?.stringValue,
            remainder: Int(vector["remainder"]?.intValue ?? 0)
        )
    }

    @Test("every framing vector, in one read", arguments: try Vectors.load("framing.json"))
    func wholeInput(vector: JSONValue) {
        let input = RawConnection.bytes(hex: vector["input_hex"]!.stringValue!)
        let max = Int(vector["max_frame_bytes"]!.intValue!)
        #expect(Self.decode(input, chunks: [input.count], maxFrameBytes: max) == Self.expected(vector), "\(vector["name"]!)")
    }

    @Test("every framing vector, split at every point and byte by byte", arguments: try Vectors.load("framing.json"))
    func splitInput(vector: JSONValue) {
        let input = RawConnection.bytes(hex: vector["input_hex"]!.stringValue!)
        let max = Int(vector["max_frame_bytes"]!.intValue!)
        let expected = Self.expected(vector)
        for split in 0...input.count {
            #expect(Self.decode(input, chunks: [split], maxFrameBytes: max) == expected, "split at \(split)")
        }
        #expect(Self.decode(input, chunks: Array(repeating: 1, count: input.count), maxFrameBytes: max) == expected)
    }

    @Test("an oversized length fails on its header alone, before any body byte")
    func oversizedFailsOnHeader() {
        var decoder = FrameDecoder(maxFrameBytes: 1024)
        decoder.append(ByteBuffer(bytes: [0x00, 0x00, 0x04]))
        #expect((try? decoder.next()) == .some(nil))
        decoder.append(ByteBuffer(bytes: [0x01]))
        #expect(throws: ProtocolError.frameTooLarge(length: 1025, maximum: 1024)) { try decoder.next() }
        // Spent: later bytes never yield a frame.
        decoder.append(ByteBuffer(bytes: [0, 0, 0, 1, 0x31]))
        #expect((try? decoder.next()) == .some(nil))
    }

    @Test("a frame of exactly the maximum is accepted")
    func exactlyMaximum() throws {
        var decoder = FrameDecoder(maxFrameBytes: 300)
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(300))
        buffer.writeRepeatingByte(0x20, count: 300)
        decoder.append(buffer)
        #expect(try decoder.next()?.readableBytes == 300)
        #expect(decoder.bufferedBytes == 0)
    }

    @Test("a long pipelined stream does not accumulate consumed bytes")
    func longStreamStaysSmall() throws {
        var decoder = FrameDecoder(maxFrameBytes: 65536)
        var frames = 0
        for _ in 0..<10_000 {
            var chunk = ByteBuffer()
            FrameEncoder.writeFrame(into: &chunk) { $0.writeString("{\"op\":\"ping\",\"id\":12345}") }
            // Split each frame across two appends so the decoder keeps a partial frame between reads.
            decoder.append(chunk.getSlice(at: 0, length: 7)!)
            while try decoder.next() != nil { frames += 1 }
            decoder.append(chunk.getSlice(at: 7, length: chunk.readableBytes - 7)!)
            while try decoder.next() != nil { frames += 1 }
        }
        #expect(frames == 10_000)
        #expect(decoder.bufferedBytes == 0)
    }

    @Test("once its frames are taken, the decoder lets go of the read buffer, so the channel can reuse it")
    func releasesReadBuffer() throws {
        var decoder = FrameDecoder(maxFrameBytes: 1024)
        var read = ByteBuffer()
        FrameEncoder.writeFrame(into: &read) { $0.writeString("{\"op\":\"ping\"}") }
        FrameEncoder.writeFrame(into: &read) { $0.writeString("{\"op\":\"stats\"}") }
        // A partial frame is kept: the buffer is still shared.
        var partial = ByteBuffer()
        FrameEncoder.writeFrame(into: &partial) { $0.writeString("{\"op\":\"ping\"}") }
        partial.moveWriterIndex(to: 6)
        decoder.append(partial)
        #expect(try decoder.next() == nil)
        #expect(partial.modifyIfUniquelyOwned { _ in true } == nil)

        var whole = FrameDecoder(maxFrameBytes: 1024)
        whole.append(read)
        #expect(try whole.next().map { String(buffer: $0) } == "{\"op\":\"ping\"}")
        #expect(read.modifyIfUniquelyOwned { _ in true } == nil)
        #expect(try whole.next().map { String(buffer: $0) } == "{\"op\":\"stats\"}")
        #expect(read.modifyIfUniquelyOwned { _ in true } == true)
        #expect(try whole.next() == nil)
        #expect(whole.bufferedBytes == 0)
    }
}
