import Foundation
import KeyholeClient
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// `token.verify` and `keyhole verify` through keyholed, with the real Sign in with Apple tokens.
@Suite("token.verify, end to end", .serialized, .ownThreads)
struct TokenEndToEndTests {
    static let apple = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("KeyholeJOSETests/Fixtures/apple")

    /// (token file, key-set file), as the fixtures' README pairs them.
    static let tokens = [
        ("apple_token_1.jwt", "apple_jwks_go-pkgz-auth.json"),
        ("apple_token_2.jwt", "apple_jwks_namecare-authcare.json"),
        ("apple_token_3.jwt", "apple_jwks_namecare-authcare.json"),
        ("apple_token_4.jwt", "apple_jwks_panva-wellknown-20241001.json"),
        ("apple_token_5.jwt", "apple_jwks_unresolved-ruby-2025.json"),
    ]

    static func token(_ file: String) throws -> String {
        try String(contentsOf: apple.appendingPathComponent(file), encoding: .utf8).filter { !$0.isWhitespace }
    }

    /// The token's claims, read without verification (tests only).
    static func claims(_ token: String) throws -> JSONValue {
        try JSONValue.parse(ByteBuffer(bytes: try CompactJWS.parse(token).payload))
    }

    static func config(keySet: String, audiences: [String], extra: String = "") -> String {
        """
        [[issuer]]
        name = "apple"
        preset = "apple"
        jwks_uri = "\(apple.appendingPathComponent(keySet).path)"
        audiences = [\(audiences.map { "\"\($0)\"" }.joined(separator: ", "))]
        \(extra)
        """
    }

    @Test("every real Apple token verifies through keyholed at the moment it was valid", arguments: tokens)
    func appleTokens(tokenFile: String, keySet: String) async throws {
        let token = try Self.token(tokenFile)
        let claims = try Self.claims(token)
        let audience = claims["aud"]!.stringValue!
        let iat = claims["iat"]!.intValue!
        let daemon = try DaemonProcess.start(
            config: Self.config(keySet: keySet, audiences: [audience]),
            arguments: ["--enable-debug-ops", "--fixed-clock", "\(iat + 60)"])
        let client = try await KeyholeClient.connect(socketPath: daemon.socketPath)
        let result = try await client.call("token.verify", args: ["token": .string(token)])
        #expect(result["issuer"] == "apple")
        #expect(result["sub"] == claims["sub"])
        #expect(result["aud"] == [.string(audience)])
        #expect(result["iat"] == .int(iat))
        #expect(result["email_verified"] == true)
        // Normalised claims: Apple's "true" strings are booleans.
        #expect(result["claims"]?["email_verified"] == true)
        try await client.close()
        #expect(try daemon.terminate() == 0)
    }

    @Test("each way a token can fail answers its own code, and the connection stays usable")
    func failures() async throws {
        let token = try Self.token("apple_token_4.jwt")
        let claims = try Self.claims(token)
        let exp = claims["exp"]!.intValue!
        let daemon = try DaemonProcess.start(
            config: Self.config(keySet: "apple_jwks_panva-wellknown-20241001.json", audiences: ["dev.timc.siwa-demo.TILiOS", "com.example.web"]),
            arguments: ["--enable-debug-ops", "--fixed-clock", "\(exp + 61)"])
        let client = try await KeyholeClient.connect(socketPath: daemon.socketPath)
        func code(_ args: [String: JSONValue]) async throws -> String? {
            let response = try await client.send("token.verify", args: args)
            if case .failure(let error) = response.outcome { return error.code.rawValue }
            return nil
        }
        #expect(try await code(["token": .string(token)]) == "token_expired")
        #expect(try await code(["token": .string(token), "audience": "com.example.web"]) == "token_audience_invalid")
        #expect(try await code(["token": .string(token), "audience": "com.not.configured"]) == "token_audience_invalid")
        #expect(try await code(["token": .string(token), "issuer": "google"]) == "token_issuer_unknown")
        #expect(try await code(["token": "abc.def"]) == "token_malformed")
        #expect(try await code(["token": .int(7)]) == "bad_request")
        #expect(try await code([:]) == "bad_request")
        // Tampered payload: the signature no longer verifies.
        var parts = token.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"iss":"https://appleid.apple.com","sub":"attacker","aud":"dev.timc.siwa-demo.TILiOS","exp":9999999999}"#.utf8))
        #expect(try await code(["token": .string(parts.joined(separator: "."))]) == "token_signature_invalid")
        // alg none, and a token from an issuer nobody configured.
        let none = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + ".AAAA"
        #expect(try await code(["token": .string(none)]) == "token_alg_not_allowed")
        let foreign = parts[0] + "." + Base64URL.encode(Array(#"{"iss":"https://evil.example","sub":"x","aud":"a","exp":1}"#.utf8)) + "." + parts[2]
        #expect(try await code(["token": .string(foreign)]) == "token_issuer_unknown")
        #expect(try await client.ping().protocolVersion == 1)
        try await client.close()
        #expect(try daemon.terminate() == 0)
    }

    /// Apple's token 1 carries neither `nonce` nor `nonce_supported`: a request's nonce must not let it
    /// through unless the issuer says its tokens may lack one (issue 26, finding 7).
    @Test("a request's nonce refuses a token without one; allow_missing_nonce = true lets it through", arguments: [false, true])
    func missingNonce(allowed: Bool) async throws {
        let token = try Self.token("apple_token_1.jwt")
        let claims = try Self.claims(token)
        #expect(claims["nonce"] == nil && claims["nonce_supported"] == nil)
        let daemon = try DaemonProcess.start(
            config: Self.config(
                keySet: "apple_jwks_go-pkgz-auth.json", audiences: [claims["aud"]!.stringValue!],
                extra: allowed ? "allow_missing_nonce = true" : ""),
            arguments: ["--enable-debug-ops", "--fixed-clock", "\(claims["iat"]!.intValue! + 60)"])
        let client = try await KeyholeClient.connect(socketPath: daemon.socketPath)
        // Without a nonce in the request there is nothing to match: it verifies either way.
        #expect(try await client.call("token.verify", args: ["token": .string(token)])["sub"] == claims["sub"])
        let response = try await client.send("token.verify", args: ["token": .string(token), "nonce": "n-0S6_WzA2Mj"])
        switch response.outcome {
        case .failure(let error):
            #expect(!allowed, "\(error)")
            #expect(error.code == .tokenNonceMismatch)
        default:
            #expect(allowed, "a token without nonce passed a request's nonce")
        }
        try await client.close()
        #expect(try daemon.terminate() == 0)
    }

    @Test("keyhole verify: the token from stdin or the argument; exit 0 valid, 1 refused")
    func commandLine() throws {
        let token = try Self.token("apple_token_4.jwt")
        let iat = try Self.claims(token)["iat"]!.intValue!
        let daemon = try DaemonProcess.start(
            config: Self.config(keySet: "apple_jwks_panva-wellknown-20241001.json", audiences: ["dev.timc.siwa-demo.TILiOS"]),
            arguments: ["--enable-debug-ops", "--fixed-clock", "\(iat + 60)"])
        let cli = ChildProcess.builtProduct("keyhole").path
        let valid = try ChildProcess.run([cli, "verify", token, "--json", "--socket", daemon.socketPath])
        #expect(valid.status == 0)
        #expect(try JSONValue.parse(ByteBuffer(string: valid.stdout))["issuer"] == "apple")
        let refused = try ChildProcess.run([cli, "verify", token, "--audience", "com.other", "--socket", daemon.socketPath])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("token_audience_invalid"))
        #expect(try daemon.terminate() == 0)
    }

    @Test("issuer configuration errors stop keyholed with exit 78 naming the key", arguments: [
        ("[[issuer]]\nname = \"apple\"\npreset = \"apple\"\njwks_uri = \"http://appleid.apple.com/auth/keys\"\naudiences = [\"a\"]\n", "jwks_uri"),
        ("[[issuer]]\nname = \"x\"\npreset = \"facebook\"\naudiences = [\"a\"]\n", "preset"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"/nonexistent/keys.json\"\naudiences = [\"a\"]\n", "jwks_uri"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"/k.json\"\naudiences = []\n", "audiences"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"/k.json\"\naudiences = [\"a\"]\nalgorithms = [\"HS256\"]\n", "algorithms"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"ftp://k\"\naudiences = [\"a\"]\n", "jwks_uri"),
        ("[[issuer]]\nname = \"x\"\ndiscovery = \"https://accounts.google.com\"\njwks_uri = \"/k.json\"\naudiences = [\"a\"]\n", "discovery"),
        ("[[issuer]]\nname = \"x\"\ndiscovery = \"http://accounts.google.com\"\naudiences = [\"a\"]\n", "discovery"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\ndiscovery = \"https://y\"\naudiences = [\"a\"]\n", "discovery"),
        ("[jwks]\nrefetch_cooldown = \"0s\"\n", "refetch_cooldown"),
        ("[jwks]\nmax_stale = \"forever\"\n", "max_stale"),
        ("[tokens]\ncache_entries = -1\n", "cache_entries"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"/k.json\"\naudiences = [\"a\"]\ncolour = \"red\"\n", "colour"),
        ("[issuer]\nname = \"x\"\n", "issuer"),
        ("[[issuer]]\nname = \"x\"\niss = \"https://x\"\njwks_uri = \"/k.json\"\naudiences = [\"a\"]\nallow_missing_nonce = \"yes\"\n", "allow_missing_nonce"),
        ("[[issuer]]\nname = \"x\"\niss = \"x\"\njwks_uri = \"http://127.0.0.1:80@evil.example/keys\"\naudiences = [\"a\"]\n", "jwks_uri"),
    ])
    func badIssuerConfig(text: String, key: String) throws {
        let daemon = try DaemonProcess(config: text)
        #expect(try daemon.waitForExit() == 78, "\(text)")
        // The configuration error names the key (the line, not just anything logged before it).
        let error = daemon.stderr.split(separator: "\n").first { $0.contains("configuration error") }
        #expect(error?.contains(key) == true, "\(daemon.stderr)")
    }

    @Test("fixed-clock is refused without --enable-debug-ops")
    func fixedClockNeedsDebugOps() throws {
        let daemon = try DaemonProcess(arguments: ["--fixed-clock", "1"])
        #expect(try daemon.waitForExit() == 78)
        let error = daemon.stderr.split(separator: "\n").first { $0.contains("configuration error") }
        #expect(error?.contains("--fixed-clock") == true && error?.contains("--enable-debug-ops") == true, "\(daemon.stderr)")
    }
}
