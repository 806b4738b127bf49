import KeyholeJOSE
import Testing

#if canImport(Glibc)
import Glibc
#endif

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

    @Test("known digests, through the bytes and the UTF-8 entry points")
    func knownDigests() {
        for (input, expected) in Self.vectors {
            #expect(SHA256.hexDigest(Array(input.utf8)) == expected)
            #expect(SHA256.digest(utf8: input).map(Self.hex) == expected)
        }
    }

    @Test("a context reused for digest after digest gives each its own (no state carried over)")
    func reusedContext() {
        for _ in 0..<3 {
            for (input, expected) in Self.vectors.reversed() {
                #expect(SHA256.digest(utf8: input).map(Self.hex) == expected)
            }
        }
    }

    @Test("threads digesting at once each use their own context")
    func concurrentThreads() {
        // Plain threads, each making its own context on its first digest (and freeing it as it ends).
        final class Outcome: @unchecked Sendable {
            var mismatches = 0
            let lock = Tally()
        }
        let outcome = Outcome()
        var threads: [pthread_t] = []
        for seed in 0..<8 {
            let box = Unmanaged.passRetained(ThreadWork(seed: seed, outcome: { wrong in
                outcome.lock.locked { outcome.mismatches += wrong }
            }))
            var thread = pthread_t()
            let made = pthread_create(&thread, nil, { argument in
                let work = Unmanaged<ThreadWork>.fromOpaque(argument!).takeRetainedValue()
                work.run()
                return nil
            }, box.toOpaque())
            #expect(made == 0)
            threads.append(thread)
        }
        for thread in threads { pthread_join(thread, nil) }
        #expect(outcome.mismatches == 0)
    }
}

/// One thread's share: digests of the vectors, many times, counting wrong ones.
private final class ThreadWork: @unchecked Sendable {
    let seed: Int
    let outcome: @Sendable (Int) -> Void

    init(seed: Int, outcome: @escaping @Sendable (Int) -> Void) {
        self.seed = seed
        self.outcome = outcome
    }

    func run() {
        var wrong = 0
        for round in 0..<2000 {
            let (input, expected) = SHA256Tests.vectors[(round + seed) % SHA256Tests.vectors.count]
            if SHA256.digest(utf8: input).map(SHA256Tests.hex) != expected { wrong += 1 }
        }
        outcome(wrong)
    }
}

/// A pthread mutex around the test's count of wrong digests.
private final class Tally: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func locked(_ body: () -> Void) {
        pthread_mutex_lock(&mutex)
        body()
        pthread_mutex_unlock(&mutex)
    }
}
