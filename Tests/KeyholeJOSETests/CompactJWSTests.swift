import KeyholeJOSE
import KeyholeProtocol
import Testing

@Suite("CompactJWS parsing")
struct CompactJWSTests {
    static let malformed = JOSEError.malformed("")

    static func segment(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }

    /// A token from a header's JSON text, a payload and signature bytes.
    static func token(header: String, payload: String = #"{"sub":"x"}"#, signature: [UInt8] = [1, 2, 3]) -> String {
        segment(header) + "." + segment(payload) + "." + Base64URL.encode(signature)
    }

    static let header = #"{"alg":"RS256","kid":"k1"}"#

    @Test("a well-formed token yields its header, alg, kid, payload, signing input and signature")
    func wellFormed() throws {
        let text = Self.token(header: Self.header, payload: #"{"sub":"x"}"#, signature: [9, 8, 7, 6])
        let jws = try CompactJWS.parse(text)
        #expect(jws.algorithm == "RS256")
        #expect(jws.keyID == "k1")
        #expect(jws.header == ["alg": "RS256", "kid": "k1"])
        #expect(jws.payload == Array(#"{"sub":"x"}"#.utf8))
        #expect(jws.signature == [9, 8, 7, 6])
        // The signing input is the text as sent, up to the second dot.
        #expect(jws.signingInput == Array(text.split(separator: ".").prefix(2).joined(separator: ".").utf8))
    }

    @Test("a substring parses like a string")
    func substring() throws {
        let text = "  " + Self.token(header: Self.header) + "  "
        let jws = try CompactJWS.parse(text.dropFirst(2).dropLast(2))
        #expect(jws.keyID == "k1")
    }

    @Test("tokens over 16 KiB are refused; one of exactly 16 KiB is parsed")
    func lengthLimit() throws {
        #expect(CompactJWS.maximumLength == 16_384)
        // Pad the header until the whole token is exactly the limit (base64 lengths skip 4n + 1, so the
        // signature length varies too).
        var exact: String?
        search: for padding in 12_000...12_400 {
            for signatureLength in 1...3 {
                let candidate = Self.token(
                    header: #"{"alg":"RS256","pad":""# + String(repeating: "p", count: padding) + #""}"#,
                    payload: "", signature: [UInt8](repeating: 1, count: signatureLength))
                if candidate.utf8.count == CompactJWS.maximumLength {
                    exact = candidate
                    break search
                }
            }
        }
        let atLimit = try #require(exact)
        #expect(try CompactJWS.parse(atLimit).algorithm == "RS256")
        // One more byte in the signature segment: still valid base64url, only the length is wrong.
        let overLimit = atLimit + "A"
        #expect(overLimit.utf8.count == CompactJWS.maximumLength + 1)
        let error = #expect(throws: Self.malformed) { try CompactJWS.parse(overLimit) }
        #expect(error?.message.contains("longer than") == true)
        // Length is checked before anything else, so even garbage only gets a length error.
        let huge = String(repeating: "!", count: 1 << 20)
        #expect(throws: Self.malformed) { try CompactJWS.parse(huge) }
    }

    @Test(
        "anything but three segments is refused",
        arguments: [
            "", ".", "..", "abc", "eyJhbGciOiJSUzI1NiJ9", "eyJhbGciOiJSUzI1NiJ9.e30",
            "eyJhbGciOiJSUzI1NiJ9.e30.AQID.", "eyJhbGciOiJSUzI1NiJ9.e30.AQID.AQID", "eyJhbGciOiJSUzI1NiJ9..e30.AQID",
        ])
    func segmentCount(text: String) {
        #expect(throws: Self.malformed) { try CompactJWS.parse(text) }
    }

    @Test("the header and signature segments must not be empty; the payload may be")
    func emptySegments() throws {
        let header = Self.segment(Self.header)
        #expect(throws: Self.malformed) { try CompactJWS.parse(".e30.AQID") }
        #expect(throws: Self.malformed) { try CompactJWS.parse(header + ".e30.") }
        let jws = try CompactJWS.parse(header + "..AQID")
        #expect(jws.payload.isEmpty)
        #expect(jws.signingInput == Array((header + ".").utf8))
    }

    @Test("each segment must be canonical unpadded base64url", arguments: [0, 1, 2])
    func segmentEncoding(index: Int) throws {
        // Header 26 bytes, payload 2, signature 4: every segment ends in a partial quantum.
        let good = Self.token(header: Self.header, payload: "{}", signature: [1, 2, 3, 4])
        #expect(throws: Never.self) { try CompactJWS.parse(good) }
        for damage in ["=", " ", "\n", "+", "/", "*"] {
            var segments = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            segments[index] += damage
            #expect(throws: Self.malformed, "\(damage.debugDescription) in segment \(index)") {
                try CompactJWS.parse(segments.joined(separator: "."))
            }
        }
        // The same segment with a non-zero unused bit: a lenient decoder would read the same bytes.
        var segments = good.split(separator: ".").map(String.init)
        #expect(segments[index].utf8.count % 4 != 0, "the segment must end in a partial quantum")
        segments[index] = Self.settingUnusedBit(segments[index])
        #expect(throws: Self.malformed) { try CompactJWS.parse(segments.joined(separator: ".")) }
    }

    /// `segment` with its last character one step up the alphabet: the lowest bit, which a partial
    /// quantum never uses, becomes 1.
    static func settingUnusedBit(_ segment: String) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let last = alphabet.firstIndex(of: segment.last!)!
        return String(segment.dropLast()) + String(alphabet[last + 1])
    }

    @Test(
        "the header must be a JSON object",
        arguments: [
            "", "null", "[]", #""RS256""#, "42", #"{"alg":"RS256""#, #"{"alg":"RS256",}"#, "{'alg':'RS256'}",
            #"{"alg":"RS256","alg":"RS256"}"#, #"{"alg":"RS256"} x"#,
        ])
    func headerIsObject(header: String) {
        #expect(throws: Self.malformed) { try CompactJWS.parse(Self.token(header: header)) }
    }

    @Test(
        "the header needs a string alg",
        arguments: [
            "{}", #"{"kid":"k1"}"#, #"{"alg":null}"#, #"{"alg":256}"#, #"{"alg":["RS256"]}"#, #"{"ALG":"RS256"}"#,
        ])
    func algRequired(header: String) {
        #expect(throws: Self.malformed) { try CompactJWS.parse(Self.token(header: header)) }
    }

    @Test("an alg keyholed does not implement still parses: refusing it is the verifier's job")
    func unknownAlgParses() throws {
        #expect(try CompactJWS.parse(Self.token(header: #"{"alg":"none"}"#)).algorithm == "none")
        #expect(try CompactJWS.parse(Self.token(header: #"{"alg":"HS256"}"#)).algorithm == "HS256")
    }

    @Test("kid is optional but must be a string when present")
    func kidType() throws {
        #expect(try CompactJWS.parse(Self.token(header: #"{"alg":"RS256"}"#)).keyID == nil)
        for kid in ["null", "1", "true", #"["k1"]"#, #"{"id":"k1"}"#] {
            #expect(throws: Self.malformed, "kid \(kid)") {
                try CompactJWS.parse(Self.token(header: #"{"alg":"RS256","kid":"# + kid + "}"))
            }
        }
    }

    @Test(
        "a crit header refuses the token, whatever it lists",
        arguments: [
            #"{"alg":"RS256","crit":["exp"],"exp":1}"#, #"{"alg":"RS256","crit":[]}"#,
            #"{"alg":"RS256","crit":["b64"],"b64":false}"#, #"{"alg":"RS256","crit":null}"#,
        ])
    func crit(header: String) {
        #expect(throws: Self.malformed) { try CompactJWS.parse(Self.token(header: header)) }
    }

    @Test("jku, x5u, jwk and x5c are kept in the header but do not change what is parsed")
    func embeddedKeyHeadersIgnored() throws {
        let header =
            #"{"alg":"ES256","kid":"k1","jku":"https://evil.example/jwks","x5u":"https://evil.example/c","#
            + #""jwk":{"kty":"EC","crv":"P-256","x":"AA","y":"AA"},"x5c":["AAAA"]}"#
        let jws = try CompactJWS.parse(Self.token(header: header))
        #expect(jws.algorithm == "ES256")
        #expect(jws.keyID == "k1")
        #expect(jws.header["jwk"] != nil)
    }

    @Test("the payload is kept as raw bytes, even when it is not JSON")
    func rawPayload() throws {
        let bytes: [UInt8] = [0x00, 0xFF, 0x7B, 0x0A]
        let text = Self.segment(Self.header) + "." + Base64URL.encode(bytes) + ".AQID"
        #expect(try CompactJWS.parse(text).payload == bytes)
    }
}
