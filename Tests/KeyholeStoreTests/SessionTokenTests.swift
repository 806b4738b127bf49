import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

@testable import KeyholeStore

/// Session tokens and ids in their text forms (WALRecordTypes.md).
@Suite("Session tokens and ids")
struct SessionTokenTests {
    @Test("a new token is kh_ and 43 base64url characters of 32 bytes, and its id is its hash's first half")
    func generate() throws {
        var seen = Set<String>()
        for _ in 0..<300 {
            let (token, id, check) = try #require(SessionToken.generate())
            #expect(token.utf8.count == SessionToken.length)
            #expect(token.hasPrefix("kh_"))
            #expect(SessionToken.isWellFormed(token))
            let bytes = try #require(Base64URL.decode(token.dropFirst(3)))
            #expect(bytes.count == 32)
            let digest = try #require(SessionToken.digest(token))
            #expect(digest.0 == id)
            #expect(digest.1.matches(check))
            #expect(seen.insert(token).inserted)
        }
    }

    @Test("only the token's exact form is well formed", arguments: [
        "", "kh_", "kh", "KH_" + String(repeating: "A", count: 43), "kh-" + String(repeating: "A", count: 43),
        "kh_" + String(repeating: "A", count: 42), "kh_" + String(repeating: "A", count: 44),
        "kh_" + String(repeating: "A", count: 42) + "=", "kh_" + String(repeating: "A", count: 42) + "+",
        "kh_" + String(repeating: "A", count: 41) + "é",
    ])
    func malformed(text: String) {
        #expect(!SessionToken.isWellFormed(text))
        #expect(SessionToken.digest(text) == nil)
    }

    @Test("every byte at every position of a token's 43 letters: well formed exactly when it is base64url")
    func everyByteEveryPosition() {
        let token = Array(SessionToken.generate()!.token.utf8)
        for position in 3..<token.count {
            for byte in UInt8.min...UInt8.max {
                var text = token
                text[position] = byte
                let wellFormed = text.withUnsafeBufferPointer { SessionToken.isWellFormed($0) }
                #expect(wellFormed == Base64URL.isAlphabet(byte), "byte \(byte) at \(position)")
            }
        }
    }

    @Test("a token cut from a longer string is well formed")
    func cutToken() {
        let token = "xx" + "kh_" + String(repeating: "a", count: 43)
        #expect(SessionToken.isWellFormed(String(token.dropFirst(2))))
    }

    @Test("an id's text is the base64url of its 16 big-endian bytes, with or without a String")
    func idText() throws {
        var generator = SystemRandomNumberGenerator()
        let edges = [SessionID(high: 0, low: 0), SessionID(high: .max, low: .max), SessionID(high: 0xF, low: 0xC000_0000_0000_0003),
                     SessionID(high: 1 << 63, low: 1)]
        for id in edges + (0..<500).map({ _ in SessionID(high: generator.next(), low: generator.next()) }) {
            #expect(id.description == Base64URL.encode(id.bytes))
            #expect(id.description.utf8.count == 22)
            #expect(id.withText { String(decoding: $0, as: UTF8.self) } == id.description)
            var written = ByteBuffer()
            written.writeJSON(guess: 22) { id.writeText(to: &$0) }
            #expect(String(buffer: written) == id.description)
            #expect(SessionID(text: id.description) == id)
        }
    }
}
