import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

@Suite("Request envelope")
struct RequestTests {
    static func payload(_ vector: JSONValue) -> ByteBuffer {
        if let text = vector["request"]?.stringValue { return ByteBuffer(string: text) }
        return ByteBuffer(bytes: RawConnection.bytes(hex: vector["request_hex"]!.stringValue!))
    }

    /// Envelope errors are decided by `Request.parse`; `unknown_op` and results by the server (KeyholedTests).
    @Test("every request vector parses or is rejected as specified", arguments: try Vectors.load("requests.json"))
    func vector(vector: JSONValue) {
        let expect = vector["expect"]!
        let expectedID = RequestID(expect["id"]!)
        let code = expect["code"]?.stringValue
        do {
            let request = try Request.parse(Self.payload(vector))
            #expect(code == nil || code == "unknown_op", "\(vector["name"]!) should have failed with \(code ?? "")")
            #expect(request.id == expectedID)
        } catch {
            #expect(error.error.code.rawValue == code, "\(vector["name"]!)")
            #expect(error.id == expectedID, "\(vector["name"]!)")
        }
    }

    @Test("a request written by a client parses back to itself")
    func roundTrip() throws {
        let request = Request(id: .string("a\"b\\c\n"), op: "debug.echo", args: ["x": [1, 2.5, "é", nil, true], "y": ["z": -7]])
        var buffer = ByteBuffer()
        request.write(to: &buffer)
        #expect(try Request.parse(buffer) == request)
    }

    /// The envelope is read member by member, without the general parser's dictionary: its refusals
    /// must still say exactly what the general parser says (offsets included).
    @Test(
        "a malformed envelope is refused with the general parser's message",
        arguments: [
            #"{"op":"ping","id":1,"op":"stats"}"#, #"{"op":"ping","x":1,"y":2,"x":3}"#, #"{"op":"ping","id":2,}"#,
            #"{"op":"ping"} x"#, #"  {"op":"#, "\u{FEFF}{}", #"{"op":"ping","args":{"a":1,"a":2}}"#, "{", "{}}",
            #"{"op" "ping"}"#, #"{op:"ping"}"#, "[1,", "\u{01}",
        ])
    func envelopeMessages(payload: String) {
        let expected: String
        do {
            _ = try JSONValue.parse(ByteBuffer(string: payload))
            Issue.record("\(payload) should not parse")
            return
        } catch {
            expected = error.message
        }
        #expect(throws: Request.Rejection.self) { try Request.parse(ByteBuffer(string: payload)) }
        do {
            _ = try Request.parse(ByteBuffer(string: payload))
        } catch {
            #expect(error.error.message == expected)
            #expect(error.error.code == .badRequest)
            #expect(error.id == nil)
        }
    }

    @Test("a request nests at most 32 arrays and objects deep, the envelope included")
    func depth() throws {
        func nested(_ depth: Int) -> ByteBuffer {
            ByteBuffer(string: #"{"op":"debug.echo","args":{"x":"# + String(repeating: "[", count: depth - 2)
                + String(repeating: "]", count: depth - 2) + "}}")
        }
        #expect(try Request.parse(nested(32)).op == "debug.echo")
        do {
            _ = try Request.parse(nested(33))
            Issue.record("33 levels parsed")
        } catch {
            #expect(error.error.code == .badRequest)
            #expect(error.error.message.hasSuffix("nesting deeper than 32 levels"), "\(error.error.message)")
        }
        // Other JSON (key sets, token payloads) keeps the general limit.
        #expect(throws: Never.self) { try JSONValue.parse(nested(33)) }
    }

    @Test("members outside the envelope's four are ignored; the envelope's own are read wherever they stand")
    func memberOrder() throws {
        let request = try Request.parse(ByteBuffer(string: #"{"args":{"k":[1]},"x":{"op":"no"},"id":"r","v":1,"op":"o"}"#))
        #expect(request == Request(id: .string("r"), op: "o", args: ["k": [1]]))
    }
}

@Suite("Response envelope")
struct ResponseTests {
    @Test("results and errors round-trip, retry hint included")
    func roundTrip() throws {
        let responses = [
            Response(id: .int(-9_223_372_036_854_775_808), outcome: .success(["protocol": 1, "s": "\u{1}\u{1F}"])),
            Response(id: nil, outcome: .failure(.overloaded("too many connections", retryAfterMs: 250))),
            Response(id: .string("x"), outcome: .failure(.unknownOp("nope"))),
        ]
        for response in responses {
            var buffer = ByteBuffer()
            response.write(to: &buffer)
            let parsed = try Response.parse(buffer)
            #expect(parsed == response)
            if case .failure(let error) = parsed.outcome, case .failure(let original) = response.outcome {
                #expect(error.message == original.message)
                #expect(error.retryAfterMs == original.retryAfterMs)
            }
        }
    }

    @Test("a code this version does not know is read as internal, keeping the original in the message")
    func unknownCode() throws {
        let parsed = try Response.parse(ByteBuffer(string: #"{"id":1,"ok":false,"error":{"code":"from_the_future","message":"m"}}"#))
        guard case .failure(let error) = parsed.outcome else {
            Issue.record("expected an error")
            return
        }
        #expect(error.code == .internal)
        #expect(error.message.contains("from_the_future"))
    }

    @Test("malformed responses are refused")
    func malformed() {
        for text in [#"{"id":1,"ok":true}"#, #"{"id":1,"ok":"yes","result":{}}"#, "[]", #"{"id":1,"ok":false,"error":"x"}"#] {
            #expect(throws: ProtocolError.self) { try Response.parse(ByteBuffer(string: text)) }
        }
    }
}

@Suite("Error codes")
struct ErrorCodeTests {
    @Test("the closed list has exactly the protocol's codes, each round-tripping through its wire string")
    func closedList() {
        let expected = [
            "bad_frame", "frame_too_large", "bad_request", "unknown_op", "unsupported_version",
            "permission_denied", "overloaded", "shutting_down", "internal",
            "token_malformed", "token_alg_not_allowed", "token_key_unknown", "token_signature_invalid",
            "token_expired", "token_not_yet_valid", "token_issuer_unknown", "token_audience_invalid",
            "token_nonce_mismatch", "token_claim_invalid", "keys_unavailable", "session_not_found",
            "user_not_found", "storage_unavailable", "data_too_large", "upstream_rejected", "upstream_unavailable",
            "not_configured", "config_invalid",
        ]
        #expect(ProtocolError.Code.allCases.map(\.rawValue) == expected)
        for code in ProtocolError.Code.allCases { #expect(ProtocolError.Code(rawValue: code.rawValue) == code) }
        #expect(ProtocolError.Code(rawValue: "BAD_REQUEST") == nil)
    }

    @Test("errors compare by code, not message")
    func equalityByCode() {
        #expect(ProtocolError.badRequest("a") == ProtocolError.badRequest("b"))
        #expect(ProtocolError.badRequest("a") != ProtocolError.internal("a"))
    }
}
