import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import NIOCore

/// `token.verify` (issue 3): identity tokens checked against the configured issuers.
public enum TokenOperations {
    /// The operations, verifying with `registry` at the time `now` gives (seconds since 1970; injected
    /// so tests can verify real, expired tokens at the moment they were valid).
    public static func make(registry: IssuerRegistry, now: @escaping @Sendable () -> Double) -> [String: Operation] {
        [
            // Inline on the event loop: a verification is ~20 µs of CPU (a cache hit far less), cheaper
            // than a task hop. Only a token whose key is not in hand waits, in a task, for a fetch. The
            // answer is written in place: a cache hit's is a copy of the bytes encoded when it verified.
            "token.verify": .writing { request, _, output throws(ProtocolError) in
                var arguments = Arguments(request)
                // Any string: what a token may be (its length included) is token_malformed's to say.
                // Its bytes where they lie in the frame: a cached token needs no String of them.
                let token = try arguments.anyStringBytes("token")
                let issuer = try arguments.string("issuer")
                let audience = try arguments.string("audience", maxBytes: 1024)
                let nonce = try arguments.string("nonce", maxBytes: 1024)
                try arguments.finish()
                switch try registry.attempt(token: token, issuer: issuer, audience: audience, nonce: nonce, now: now()) {
                case .verified(let verification):
                    if let encoded = verification.encoded {
                        output.writeImmutableBuffer(encoded)
                    } else {
                        output.writeImmutableBuffer(encode(verification))
                    }
                    return nil
                case .needsKeys(let keys, _):
                    // Its own copy: the frame's buffer is not kept for the fetch.
                    let token = String(buffer: token)
                    return .later { () async throws(ProtocolError) in
                        result(try await registry.verifyAfterFetch(
                            of: keys, token: token, issuer: issuer, audience: audience, nonce: nonce, now: now))
                    }
                }
            },
        ]
    }

    /// The result of `result(_:)` encoded as compact JSON, members sorted as `JSONValue` writes them,
    /// with the token's payload bytes standing for `claims` when they are the claims as sent: most of
    /// an answer is then a copy. Give it to `IssuerRegistry` as its encoder, so that a cached token's
    /// answer is made once.
    public static func encode(_ verification: IssuerRegistry.Verification) -> ByteBuffer {
        let token = verification.token
        var buffer = ByteBuffer()
        buffer.reserveCapacity(256 + (verification.payload?.count ?? 1024))
        buffer.writeStaticString("{\"aud\":")
        JSONValue.array(token.audiences.map(JSONValue.string)).write(to: &buffer)
        buffer.writeStaticString(",\"claims\":")
        if let payload = verification.payload {
            buffer.writeBytes(payload)
        } else {
            JSONValue.object(token.claims).write(to: &buffer)
        }
        if let email = token.email {
            buffer.writeStaticString(",\"email\":")
            JSONValue.string(email).write(to: &buffer)
        }
        if let verified = token.emailVerified {
            buffer.writeStaticString(verified ? ",\"email_verified\":true" : ",\"email_verified\":false")
        }
        buffer.writeStaticString(",\"exp\":")
        number(token.expiresAt).write(to: &buffer)
        if let issuedAt = token.issuedAt {
            buffer.writeStaticString(",\"iat\":")
            number(issuedAt).write(to: &buffer)
        }
        if let isPrivate = token.isPrivateEmail {
            buffer.writeStaticString(isPrivate ? ",\"is_private_email\":true" : ",\"is_private_email\":false")
        }
        buffer.writeStaticString(",\"issuer\":")
        JSONValue.string(verification.issuer).write(to: &buffer)
        if let status = token.realUserStatus {
            buffer.writeStaticString(",\"real_user_status\":")
            JSONValue.int(status).write(to: &buffer)
        }
        buffer.writeStaticString(",\"sub\":")
        JSONValue.string(token.subject).write(to: &buffer)
        buffer.writeInteger(UInt8(ascii: "}"))
        return buffer
    }

    /// `{issuer, sub, aud, exp, iat, claims}` and, when present, the Apple-style fields at top level.
    static func result(_ verification: IssuerRegistry.Verification) -> [String: JSONValue] {
        let token = verification.token
        var result: [String: JSONValue] = [
            "issuer": .string(verification.issuer),
            "sub": .string(token.subject),
            "aud": .array(token.audiences.map(JSONValue.string)),
            "exp": number(token.expiresAt),
            "claims": .object(token.claims),
        ]
        if let issuedAt = token.issuedAt { result["iat"] = number(issuedAt) }
        if let email = token.email { result["email"] = .string(email) }
        if let verified = token.emailVerified { result["email_verified"] = .bool(verified) }
        if let isPrivate = token.isPrivateEmail { result["is_private_email"] = .bool(isPrivate) }
        if let status = token.realUserStatus { result["real_user_status"] = .int(status) }
        return result
    }

    private static func number(_ value: Double) -> JSONValue {
        value == value.rounded() && abs(value) < 9e15 ? .int(Int64(value)) : .double(value)
    }
}
