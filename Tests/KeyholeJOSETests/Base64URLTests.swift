import Foundation
import KeyholeJOSE
import Testing

@Suite("Base64URL")
struct Base64URLTests {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    /// Foundation's base64, made url-safe and unpadded: an independent encoder to compare with.
    static func reference(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test(
        "RFC 4648 section 10 vectors, unpadded",
        arguments: [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ])
    func rfc4648(plain: String, encoded: String) {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test("the two url-safe characters stand for 62 and 63")
    func urlSafeCharacters() {
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
        #expect(Base64URL.decode("____") == [0xFF, 0xFF, 0xFF])
        #expect(Base64URL.decode("----") == [0xFB, 0xEF, 0xBE])
    }

    @Test("encoding matches Foundation and decoding inverts it, for every length up to 100")
    func roundTrip() {
        for length in 0...100 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 73 &+ length &* 31 &+ 7) }
            let encoded = Base64URL.encode(bytes)
            #expect(encoded == Self.reference(bytes), "length \(length)")
            #expect(Base64URL.decode(encoded) == bytes, "length \(length)")
        }
    }

    @Test("every byte value survives a round trip")
    func allBytes() {
        let bytes = (0...255).map { UInt8($0) }
        #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
    }

    @Test("substrings decode like strings")
    func substring() {
        let token = "xx.Zm9vYmFy.yy"
        let middle = token.split(separator: ".")[1]
        #expect(Base64URL.decode(middle) == Array("foobar".utf8))
    }

    @Test(
        "padding, whitespace and characters outside the alphabet are refused",
        arguments: [
            "Zg==", "Zm8=", "Zm9v=", "=Zm9v", "Zm9v ", " Zm9v", "Zm 9v", "Zm9v\n", "Zm9v\r\n", "Zm9v\t", "Zm+v", "Zm/v",
            "Zm9v.", "Zm9\u{0}", "Zm9é", "Zm9v\u{FF21}", "%Zm9",
        ])
    func refusesForeignCharacters(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test("a length of 4n + 1 cannot encode whole bytes", arguments: ["A", "Zm9vY", "Zm9vYmFyZ"])
    func refusesImpossibleLength(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test("every two-character tail decodes exactly when it is canonical")
    func twoCharacterTails() {
        var accepted = 0
        for first in Self.alphabet {
            for second in Self.alphabet {
                let text = String([first, second])
                if let decoded = Base64URL.decode(text) {
                    accepted += 1
                    #expect(decoded.count == 1)
                    #expect(Base64URL.encode(decoded) == text)
                }
            }
        }
        // One byte has 256 values: only one of the 16 spellings of the last 4 bits is canonical.
        #expect(accepted == 256)
    }

    @Test("every three-character tail decodes exactly when it is canonical")
    func threeCharacterTails() {
        var accepted = 0
        for second in Self.alphabet {
            for third in Self.alphabet {
                let text = "AAAA" + String(["Q", second, third])
                if let decoded = Base64URL.decode(text) {
                    accepted += 1
                    #expect(decoded.count == 5)
                    #expect(Base64URL.encode(decoded) == text)
                }
            }
        }
        // With the first character fixed, 64 * 16 spellings of the last 10 bits are canonical.
        #expect(accepted == 64 * 16)
    }

    @Test("non-zero unused bits are refused (Wycheproof JWS tcId 374: 'AB')")
    func refusesNonCanonical() {
        #expect(Base64URL.decode("AA") == [0])
        #expect(Base64URL.decode("AB") == nil)
        #expect(Base64URL.decode("Zh") == nil)  // "f" is "Zg"
        #expect(Base64URL.decode("Zm9") == nil)  // "fo" is "Zm8"
        #expect(Base64URL.decode("Zm9vYmF") == nil)  // "fooba" is "Zm9vYmE"
    }

    @Test("encoding with a prefix, and into a buffer, give the same characters as plain encoding")
    func prefixAndBuffer() {
        var generator = SystemRandomNumberGenerator()
        for count in 0...40 {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let plain = Base64URL.encode(bytes)
            #expect(plain == Self.reference(bytes))
            #expect(Base64URL.encode(bytes, prefix: "kh_") == "kh_" + plain)
            #expect(Base64URL.encode(bytes[...], prefix: "") == plain)
            #expect(Base64URL.encodedCount(count) == plain.utf8.count)
            var output = [UInt8](repeating: 0, count: Base64URL.encodedCount(count) + 2)
            let written = bytes.withUnsafeBytes { input in
                output.withUnsafeMutableBufferPointer { Base64URL.encode(input, into: $0) }
            }
            #expect(written == plain.utf8.count)
            #expect(Array(output[..<written]) == Array(plain.utf8))
            #expect(output[written...].allSatisfy { $0 == 0 })
        }
    }
}
