import Foundation

/// Apple's checks of a client secret (TN3107), made without the project's JOSE code: the parts
/// decoded here, the header and claims read by Foundation's JSONDecoder, and the ES256 signature
/// verified by `openssl dgst -sha256 -verify` with the team's public key. A bug keyholed's signer
/// and verifier shared would pass a fake that verified with KeyholeJOSE; it does not pass this one.
extension FakeApple {
    private struct Header: Decodable {
        var alg: String
        var kid: String
    }

    /// Exactly the types Apple expects: `aud` a string, `iat` and `exp` integers (1.5 or true fail).
    private struct Claims: Decodable {
        var iss: String
        var sub: String
        var aud: String
        var iat: Int64
        var exp: Int64
    }

    /// Why Apple would refuse `secret` as `clientID`'s client secret, or nil when it would take it.
    package func checkClientSecret(_ secret: String, clientID: String) -> String? {
        let parts = secret.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = OpenSSLTool.bytes(base64URL: parts[0]),
            let payloadBytes = OpenSSLTool.bytes(base64URL: parts[1]), let signature = OpenSSLTool.bytes(base64URL: parts[2])
        else { return "client secret is not a compact JWS of three base64url parts" }
        guard let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else {
            return "client secret header is not JSON with alg and kid: \(String(decoding: headerBytes, as: UTF8.self))"
        }
        guard header.alg == "ES256" else { return "client secret alg is \(header.alg), not ES256" }
        let team = team.withLock { $0 }
        guard header.kid == team.keyID else { return "client secret kid is \(header.kid), not the key id \(team.keyID)" }
        guard let der = OpenSSLTool.derSignature(raw: signature) else {
            return "client secret signature is \(signature.count) bytes, not the 64 of r and s"
        }
        // The same bytes verified once verify again: openssl runs once per secret, not per request.
        if !state.withLock({ $0.verifiedSecrets.contains(secret) }) {
            do {
                guard try verifies(signingInput: Array(secret.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count)), der: der, publicKeyPath: team.publicKeyPath) else {
                    return "client secret signature does not verify with the team's key"
                }
            } catch {
                return "openssl could not check the client secret: \(error)"
            }
            state.withLock { _ = $0.verifiedSecrets.insert(secret) }
        }
        let claims: Claims
        do {
            claims = try JSONDecoder().decode(Claims.self, from: Data(payloadBytes))
        } catch {
            return "client secret claims (iss, sub, aud strings; iat, exp integers): \(error)"
        }
        let now = clock()
        guard claims.iss == teamID else { return "client secret iss \(claims.iss) is not the team id \(teamID)" }
        guard claims.sub == clientID else { return "client secret sub \(claims.sub) is not the client_id \(clientID)" }
        guard claims.aud == Self.issuer else { return "client secret aud \(claims.aud) is not \(Self.issuer)" }
        guard claims.iat <= now + 60 else { return "client secret iat \(claims.iat) is in the future (now \(now))" }
        guard claims.exp > now else { return "client secret expired at \(claims.exp) (now \(now))" }
        guard claims.exp > claims.iat, claims.exp - claims.iat <= 15_777_000 else {
            return "client secret lives \(claims.exp - claims.iat) s: not after its iat, or longer than six months"
        }
        return nil
    }

    /// `openssl dgst -sha256 -verify team.pub -signature sig.der input`: true for "Verified OK".
    private func verifies(signingInput: [UInt8], der: [UInt8], publicKeyPath: String) throws -> Bool {
        let input = OpenSSLTool.scratch(files, "in")
        let signature = OpenSSLTool.scratch(files, "der")
        defer {
            try? FileManager.default.removeItem(at: input)
            try? FileManager.default.removeItem(at: signature)
        }
        try Data(signingInput).write(to: input)
        try Data(der).write(to: signature)
        let result = try ChildProcess.run(
            ["/usr/bin/openssl", "dgst", "-sha256", "-verify", publicKeyPath, "-signature", signature.path, input.path])
        // 0 and "Verified OK", or 1 and "Verification failure"; anything else is openssl's trouble.
        if result.status == 0, result.stdout.contains("Verified OK") { return true }
        if result.status == 1, (result.stdout + result.stderr).contains("Verification failure") { return false }
        throw OpenSSLTool.Failure(description: "openssl dgst -verify: exit \(result.status): \(result.stdout)\(result.stderr)")
    }
}
