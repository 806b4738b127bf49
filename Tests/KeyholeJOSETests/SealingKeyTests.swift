import KeyholeJOSE
import Testing

/// AES-256-GCM sealing of secrets at rest (refresh tokens).
@Suite("Sealing keys")
struct SealingKeyTests {
    static func hex(_ text: String) -> [UInt8] {
        let utf8 = Array(text.utf8)
        return stride(from: 0, to: utf8.count, by: 2).map { UInt8(String(decoding: utf8[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
    }

    static let key = try! SealingKey(bytes: (0..<32).map { UInt8($0 * 7 & 0xFF) })
    static let owner = Array("https://appleid.apple.com\u{0}001234.abcdef".utf8)

    @Test("the GCM specification's AES-256 test case 16 opens (key, IV, AAD, ciphertext and tag as published)")
    func knownAnswer() throws {
        let key = try SealingKey(bytes: Self.hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"))
        let box = [1] + Self.hex("cafebabefacedbaddecaf888")
            + Self.hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662")
            + Self.hex("76fc6ece0f4e1768cddf8853bb2d551b")
        let plaintext = key.open(box, associatedData: Self.hex("feedfacedeadbeeffeedfacedeadbeefabaddad2"))
        #expect(plaintext == Self.hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39"))
    }

    @Test("sealed secrets of any length open again with the same key and owner", arguments: [0, 1, 15, 16, 17, 64, 1000])
    func roundTrip(length: Int) throws {
        let secret = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }
        let box = try #require(Self.key.seal(secret, associatedData: Self.owner))
        #expect(box.count == secret.count + SealingKey.overhead)
        #expect(box[0] == 1)
        #expect(Self.key.open(box, associatedData: Self.owner) == secret)
        if length >= 16 {
            // The plaintext does not appear in the box.
            #expect(box.firstRange(of: secret[..<16]) == nil)
        }
    }

    @Test("every seal draws a new nonce")
    func freshNonces() throws {
        let secret = Array("r.refresh-token".utf8)
        let boxes = try (0..<50).map { _ in try #require(Self.key.seal(secret, associatedData: Self.owner)) }
        #expect(Set(boxes.map { Array($0[1...12]) }).count == 50)
    }

    @Test("another owner, another key, a changed byte or a cut box does not open")
    func tampering() throws {
        let secret = Array("r.refresh-token-value".utf8)
        let box = try #require(Self.key.seal(secret, associatedData: Self.owner))
        #expect(Self.key.open(box, associatedData: Array("https://appleid.apple.com\u{0}001235.abcdef".utf8)) == nil)
        #expect(Self.key.open(box, associatedData: []) == nil)
        let otherKey = try SealingKey(bytes: [UInt8](repeating: 9, count: 32))
        #expect(otherKey.open(box, associatedData: Self.owner) == nil)
        for index in box.indices {
            var changed = box
            changed[index] ^= 0x40
            #expect(Self.key.open(changed, associatedData: Self.owner) == nil, "byte \(index)")
        }
        for length in [0, 1, 12, 13, SealingKey.overhead - 1, box.count - 1] {
            #expect(Self.key.open(Array(box.prefix(length)), associatedData: Self.owner) == nil)
        }
    }

    @Test("a key is exactly 32 bytes", arguments: [0, 16, 31, 33, 64])
    func keyLength(count: Int) {
        let error = #expect(throws: JOSEError.self) { try SealingKey(bytes: [UInt8](repeating: 1, count: count)) }
        #expect(error?.code == .keyInvalid)
    }

    @Test("an empty secret with no associated data seals and opens")
    func emptyEverything() throws {
        let box = try #require(Self.key.seal([], associatedData: []))
        #expect(box.count == SealingKey.overhead)
        #expect(Self.key.open(box, associatedData: []) == [])
        #expect(Self.key.open(box, associatedData: [0]) == nil)
    }

    @Test("printing or dumping a key shows none of its bytes")
    func redacted() throws {
        let key = try SealingKey(bytes: [UInt8](repeating: 0xAB, count: 32))
        var dumped = ""
        dump(key, to: &dumped)
        for text in ["\(key)", String(reflecting: key), dumped] {
            #expect(!text.contains("171"))
            #expect(!text.lowercased().contains("ab, "))
        }
        #expect("\(key)" == "AES-256-GCM key")
    }

    @Test("a secret over the limit is not sealed")
    func oversized() {
        #expect(Self.key.seal([UInt8](repeating: 1, count: SealingKey.maximumPlaintextBytes + 1), associatedData: []) == nil)
    }
}
