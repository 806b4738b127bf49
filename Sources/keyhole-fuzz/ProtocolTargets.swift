#if KEYHOLE_FUZZ
import KeyholeProtocol
import NIOCore

/// The protocol's decoders: framing, the request envelope and JSON.
enum ProtocolTargets {
    /// Input: two bytes choosing `maxFrameBytes` (1 to 65 536), one seeding the read sizes, then the
    /// byte stream a client sends.
    ///
    /// However the stream is cut into reads, the decoder must return the frames a one-pass reading of
    /// the whole stream finds and fail where it fails; `hasCompleteFrame` must say whether `next()`
    /// returns or throws; after a failure it returns nothing more. Each frame is parsed as a request.
    static func frame(_ input: [UInt8]) {
        var control = ControlBytes(input)
        let maxFrameBytes = 1 + control.uint16()
        var random = UInt32(control.byte()) | 0x100
        let stream = control.rest
        let expected = FramingModel(stream, maxFrameBytes: maxFrameBytes)

        var decoder = FrameDecoder(maxFrameBytes: maxFrameBytes)
        var frames: [[UInt8]] = []
        var failure: ProtocolError.Code?
        var offset = 0
        reading: while offset < stream.count {
            // Reads of 1 to 64 bytes, or the whole rest: pipelined frames split anywhere, and whole.
            random ^= random << 13; random ^= random >> 17; random ^= random << 5
            let size = random % 8 == 0 ? stream.count - offset : 1 + Int(random % 64)
            let end = min(stream.count, offset + size)
            decoder.append(ByteBuffer(bytes: stream[offset..<end]))
            offset = end
            while true {
                let complete = decoder.hasCompleteFrame
                do throws(ProtocolError) {
                    guard let frame = try decoder.next() else {
                        fuzzCheck(!complete, "hasCompleteFrame was true, next() returned nil")
                        break
                    }
                    fuzzCheck(complete, "hasCompleteFrame was false, next() returned a frame")
                    frames.append(Array(frame.readableBytesView))
                    // What the server does with each frame; its refusal is an answer, not a failure.
                    _ = try? Request.parse(frame)
                } catch {
                    fuzzCheck(complete, "hasCompleteFrame was false, next() threw \(error.code)")
                    failure = error.code
                    break reading
                }
            }
        }
        fuzzCheck(frames == expected.frames, "frames differ from the model's: \(frames.count) vs \(expected.frames.count)")
        fuzzCheck(
            failure == expected.failure,
            "failure \(String(describing: failure)) where the model has \(String(describing: expected.failure))")
        if failure != nil {
            // Spent: nothing more comes out, whatever goes in.
            decoder.append(ByteBuffer(bytes: [0, 0, 0, 1, 0x7B]))
            fuzzCheck((try? decoder.next()) == .some(nil), "a failed decoder returned a frame")
            fuzzCheck(decoder.bufferedBytes == 0, "a failed decoder keeps bytes")
        } else {
            fuzzCheck(decoder.bufferedBytes == stream.count - expected.consumed, "bufferedBytes \(decoder.bufferedBytes)")
        }
    }

    /// Input: one frame body. A request that parses must write out as one that parses to the same
    /// text again, and so must any JSON value.
    static func request(_ input: [UInt8]) {
        let buffer = ByteBuffer(bytes: input)
        // With the server's table of operation names the parse is the same, and the index names the op.
        let plain = Result { () throws(Request.Rejection) in try Request.parse(buffer) }
        let tabled = Result { () throws(Request.Rejection) in try Request.parse(buffer, operations: operations) }
        switch (plain, tabled) {
        case (.success(let a), .success(let b)):
            fuzzCheck(a == b && Array(a.op.utf8) == Array(b.op.utf8), "a table changed the request parsed")
            fuzzCheck(b.operationIndex == operations.index(of: b.op), "operationIndex is not the op's index")
            fuzzCheck(b.operationIndex.map { operations.names[$0] == b.op } ?? true, "operationIndex names another op")
        case (.failure(let a), .failure(let b)):
            fuzzCheck(a.error.message == b.error.message && a.id == b.id, "a table changed the refusal")
        default:
            fuzzCheck(false, "a table changed whether the request parses")
        }
        if let request = try? Request.parse(buffer) {
            var written = ByteBuffer()
            request.write(to: &written)
            guard let again = try? Request.parse(written) else {
                fuzzCheck(false, "a parsed request does not parse once written: \(String(buffer: written))")
                return
            }
            fuzzCheck(again.op == request.op && again.id == request.id, "op or id changed in a round trip")
            var rewritten = ByteBuffer()
            again.write(to: &rewritten)
            fuzzCheck(rewritten == written, "a request's text changed in a second round trip")
        }
        if let value = try? JSONValue.parse(buffer) {
            let text = value.jsonText
            guard let again = try? JSONValue.parse(ByteBuffer(string: text)) else {
                fuzzCheck(false, "a parsed JSON value does not parse once written: \(text)")
                return
            }
            fuzzCheck(again.jsonText == text, "a JSON text changed in a second round trip")
        }
    }
    /// Names as the server's are: the operations of PROTOCOL.md section 7, and a few near them.
    static let operations = OperationNames([
        "ping", "stats", "token.verify", "jwks.status", "jwks.refresh", "session.create", "session.get", "session.revoke",
        "session.revoke_all", "session.list", "user.get", "user.update", "user.delete", "apple.sign_in", "apple.notification",
        "apple.refresh_check", "apple.transfer.export", "apple.transfer.import", "apple.pending", "apple.authorize", "apple.callback",
        "admin.snapshot", "admin.reload", "debug.sleep", "debug.echo", "debug.block", "K", "é",
    ])
}

/// PROTOCOL.md section 2 read in one pass over the whole stream: the frames, then where it stops.
struct FramingModel {
    var frames: [[UInt8]] = []
    var failure: ProtocolError.Code?
    /// The bytes the frames took, headers included.
    var consumed = 0

    init(_ stream: [UInt8], maxFrameBytes: Int) {
        while stream.count - consumed >= 4 {
            let length = stream[consumed..<consumed + 4].reduce(0) { $0 << 8 | Int($1) }
            if length == 0 {
                failure = .badFrame
                return
            }
            if length > maxFrameBytes {
                failure = .frameTooLarge
                return
            }
            guard stream.count - consumed - 4 >= length else { return }
            frames.append(Array(stream[(consumed + 4)..<(consumed + 4 + length)]))
            consumed += 4 + length
        }
    }
}
#endif
