import Dispatch
import KeyholeJOSE
import Synchronization
import Testing

@Suite("SHA256")
struct SHA256Tests {
    /// FIPS 180-2's examples, and the empty input.
    static let vectors: [(String, String)] = [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ]

    static func hex(_ digest: SHA256.Digest) -> String {
        withUnsafeBytes(of: digest.words) { bytes in
            bytes.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        }
    }

    @Test("known digests, through the bytes, the raw bytes and the UTF-8 entry points")
    func knownDigests() {
        for (input, expected) in Self.vectors {
            #expect(SHA256.hexDigest(Array(input.utf8)) == expected)
            #expect(SHA256.digest(utf8: input).map(Self.hex) == expected)
            #expect(Array(input.utf8).withUnsafeBytes { SHA256.digest(bytes: $0) }.map(Self.hex) == expected)
        }
    }

    @Test("digest after digest gives each its own (no state carried over)")
    func reusedContext() {
        for _ in 0..<3 {
            for (input, expected) in Self.vectors.reversed() {
                #expect(SHA256.digest(utf8: input).map(Self.hex) == expected)
            }
        }
    }

    @Test("threads digesting at once each get their own digests")
    func concurrentThreads() {
        let mismatches = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { seed in
            var wrong = 0
            for round in 0..<2000 {
                let (input, expected) = Self.vectors[(round + seed) % Self.vectors.count]
                if SHA256.digest(utf8: input).map(Self.hex) != expected { wrong += 1 }
            }
            mismatches.withLock { $0 += wrong }
        }
        #expect(mismatches.withLock { $0 } == 0)
    }
}
