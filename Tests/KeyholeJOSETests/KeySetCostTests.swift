import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// What making a key set may cost (issue 26, finding 5): RSA moduli of at most 8192 bits, and a
/// refetched set takes its unchanged entries from the previous one instead of making them again.
@Suite("Key set cost")
struct KeySetCostTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    /// Apple's three keys of October 2024.
    static func apple() throws -> [UInt8] {
        Array(try Data(contentsOf: fixtures.appendingPathComponent("apple/apple_jwks_panva-wellknown-20241001.json")))
    }

    /// A base64url modulus of `bits` bits: top bit set, odd, not a real key (refused before any check).
    static func modulus(bits: Int) -> String {
        var bytes = [UInt8](repeating: 0xA5, count: (bits + 7) / 8)
        bytes[0] = bits % 8 == 0 ? 0x80 : UInt8(1) << UInt8(bits % 8 - 1)
        return Base64URL.encode(bytes)
    }

    @Test("RSA moduli above 8192 bits are refused, saying so", arguments: [8193, 8200, 16_384])
    func oversizedModulus(bits: Int) {
        do {
            _ = try VerificationKey(jwk: ["kty": "RSA", "n": .string(Self.modulus(bits: bits)), "e": "AQAB"])
            Issue.record("an RSA key of \(bits) bits was made")
        } catch {
            #expect(error.code == .keyInvalid)
            #expect(error.message == "RSA key of \(bits) bits is above the 8192 keyholed accepts", "\(error)")
        }
        // Leading zero bytes do not count: they are stripped before the size is taken.
        #expect(throws: JOSEError.keyInvalid("")) {
            try VerificationKey(jwk: ["kty": "RSA", "n": .string(Base64URL.encode([0, 0] + Base64URL.decode(Self.modulus(bits: bits))!)), "e": "AQAB"])
        }
    }

    @Test("a real 8192-bit RSA key is still accepted")
    func largestModulus() throws {
        let text = try String(contentsOf: Self.fixtures.appendingPathComponent("keys/rsa8192-public.jwk"), encoding: .utf8)
        guard case .object(let jwk) = try JSONValue.parse(ByteBuffer(string: text)) else { throw JOSEError.keyInvalid("not a JWK") }
        let key = try VerificationKey(jwk: jwk)
        #expect(key.description.hasPrefix("RSA-8192"))
    }

    @Test("a refetch of an unchanged set makes no key: every key is the previous object, every refusal remembered")
    func unchangedRefetch() throws {
        // Apple's keys, plus entries that are refused: a symmetric key, a short RSA key, an oversized one.
        guard case .object(var document) = try JSONValue.parse(ByteBuffer(bytes: try Self.apple())),
            case .array(var entries)? = document["keys"]
        else { throw JOSEError.keyInvalid("fixture is not a key set") }
        entries += [
            ["kty": "oct", "k": "c2VjcmV0", "kid": "sym"],
            ["kty": "RSA", "n": .string(Self.modulus(bits: 1024)), "e": "AQAB", "kid": "short"],
            ["kty": "RSA", "n": .string(Self.modulus(bits: 16_384)), "e": "AQAB", "kid": "huge"],
        ]
        document["keys"] = .array(entries)
        var buffer = ByteBuffer()
        JSONValue.object(document).write(to: &buffer)
        let bytes = Array(buffer.readableBytesView)

        let first = try JWKSet(json: bytes)
        #expect(first.keys.count == 3 && first.skipped.count == 3)
        #expect(first.built == 6)
        let second = try JWKSet(json: bytes, reusing: first)
        #expect(second.built == 0)
        #expect(zip(first.keys, second.keys).allSatisfy { $0 === $1 })
        #expect(second.skipped == first.skipped)
        // And the set after that: what was reused is passed on.
        let third = try JWKSet(json: bytes, reusing: second)
        #expect(third.built == 0 && zip(first.keys, third.keys).allSatisfy { $0 === $1 })

        // The same members in another order and spacing are the same JWKs.
        let original = try Self.apple()
        let reordered = String(decoding: original, as: UTF8.self).replacingOccurrences(of: "\"e\": \"AQAB\"", with: "\"e\"  :\"AQAB\"")
        #expect(Array(reordered.utf8) != original)
        let fromReordered = try JWKSet(json: Array(reordered.utf8), reusing: first)
        #expect(fromReordered.built == 0 && zip(first.keys, fromReordered.keys).allSatisfy { $0 === $1 })
    }

    @Test("a rotation makes only the new key; a changed member makes that key anew")
    func rotation() throws {
        let first = try JWKSet(json: try Self.apple())
        let ec = #"{"kty":"EC","crv":"P-256","kid":"new","x":"KSexBRK64-3c_kZ4KBKLrSkDJpkZ9whgacjE32xzKDg","y":"x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT4"}"#
        let rotated = String(decoding: try Self.apple(), as: UTF8.self).replacingOccurrences(of: "\"keys\": [", with: "\"keys\": [\(ec),")
        let second = try JWKSet(json: Array(rotated.utf8), reusing: first)
        #expect(second.keys.map(\.kid) == ["new"] + first.keys.map(\.kid))
        #expect(second.built == 1)
        #expect(zip(first.keys, second.keys.dropFirst()).allSatisfy { $0 === $1 })

        // A key whose `use` changed is another JWK: made again, not taken with its old rules.
        let changed = String(decoding: try Self.apple(), as: UTF8.self).replacingOccurrences(of: "\"kid\": \"FftONTxoEg\",\n      \"use\": \"sig\"", with: "\"kid\": \"FftONTxoEg\",\n      \"use\": \"enc\"")
        let third = try JWKSet(json: Array(changed.utf8), reusing: first)
        #expect(third.built == 1)
        #expect(third.keys.map(\.kid) == ["FftONTxoEg", "T8tIJ1zSrO", "pggnQeNCOU"])
        #expect(third.keys[0] !== first.keys[0] && !third.keys[0].permits(.rs256))
        #expect(third.keys[1] === first.keys[1] && third.keys[2] === first.keys[2])
    }
}
