import ArgumentParser
import KeyholeJOSE
import KeyholeProtocol
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// `keyhole-bench verify`: the cost of one token verification on one thread, in process.
///
/// Reports CPU time per verification, to set beside `openssl speed rsa2048`'s verify time on the same
/// machine: the signature check dominates, and everything keyholed adds must stay small next to it.
struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Time token verification (parse, key choice, signature, claims) on one thread."
    )

    @Option(help: "A file holding one compact JWS.")
    var token: String

    @Option(help: "A file holding the issuer's JWKS document.")
    var jwks: String

    @Option(help: "The issuer (iss).")
    var issuer: String

    @Option(help: "An accepted audience.")
    var audience: String

    @Option(help: "The clock, in seconds since 1970 (default: the token's iat + 60).")
    var now: Double?

    @Option(help: "Verifications to time, in all.")
    var iterations = 40_000

    @Option(help: "Rounds to split them into; the fastest round is reported.")
    var rounds = 8

    func run() throws {
        let tokenText = String(try Self.read(token).filter { !$0.isWhitespace })
        let keys = try JWKSet(json: Array(try Self.read(jwks).utf8))
        let verifier = JWTVerifier(
            keys: keys, algorithms: Set(JWSAlgorithm.allCases),
            policy: ClaimsPolicy(issuer: issuer, audiences: [audience]))
        let clock = try now ?? (Self.issuedAt(tokenText) + 60)
        // Warm up, and fail loudly on a token that does not verify: timing a failure says nothing.
        _ = try verifier.verify(tokenText, now: clock)
        let jws = try CompactJWS.parse(tokenText)
        let signatureOnly = JWSVerifier(keys: keys, algorithms: Set(JWSAlgorithm.allCases))

        // The best of several rounds: on a shared or virtual machine, noise only ever adds time.
        let perRound = max(1, iterations / rounds)
        var full = Double.infinity
        var signature = Double.infinity
        for _ in 0..<rounds {
            full = min(full, Self.cpuTime { for _ in 0..<perRound { _ = try? verifier.verify(tokenText, now: clock) } })
            signature = min(signature, Self.cpuTime { for _ in 0..<perRound { _ = try? signatureOnly.verify(jws) } })
        }
        let fullMicros = full / Double(perRound) * 1e6
        let signatureMicros = signature / Double(perRound) * 1e6
        print("\(jws.algorithm) token, best of \(rounds) rounds of \(perRound) verifications on one thread:")
        print("  whole token (parse, key, signature, claims): \(Self.format(fullMicros)) µs CPU each, \(Int(1e6 / fullMicros))/s")
        print("  signature and key choice only:               \(Self.format(signatureMicros)) µs CPU each, \(Int(1e6 / signatureMicros))/s")
        print("  compare: openssl speed rsa2048 (verify column) on this machine")
    }

    /// Thread CPU seconds spent in `body`.
    static func cpuTime(_ body: () -> Void) -> Double {
        var start = timespec()
        var end = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start)
        body()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end)
        return Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
    }

    static func format(_ value: Double) -> String {
        let hundredths = Int((value * 100).rounded())
        return "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
    }

    static func read(_ path: String) throws -> String {
        guard let file = fopen(path, "r") else { throw ValidationError("cannot read \(path)") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while case let count = fread(&chunk, 1, chunk.count, file), count > 0 { bytes += chunk[..<count] }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func issuedAt(_ token: String) throws -> Double {
        let jws = try CompactJWS.parse(token)
        guard case .object(let claims) = try JSONValue.parse(ByteBuffer(bytes: jws.payload)), let iat = claims["iat"] else {
            throw ValidationError("token has no iat; pass --now")
        }
        switch iat {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: throw ValidationError("token's iat is not a number; pass --now")
        }
    }
}
