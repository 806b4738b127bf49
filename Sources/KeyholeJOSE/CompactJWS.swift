import KeyholeProtocol
import NIOCore

/// A JWS in compact serialisation (RFC 7515 section 7.1), parsed but not yet verified.
///
/// Parsing is strict because everything after it trusts the parts it yields: three segments of
/// canonical base64url (`Base64URL`), a header that is a JSON object with a string `alg`. Nothing here
/// is trusted yet: the header only names the algorithm and key the verifier will look up in the
/// issuer's own key set, and the payload stays raw bytes until the signature over them has verified.
public struct CompactJWS: Sendable {
    /// The longest token accepted, in bytes. Identity tokens are 1-2 KiB; the limit keeps a hostile
    /// client from making the daemon decode and parse megabytes before the signature check refuses them.
    public static let maximumLength = 16 * 1024

    /// The protected header, as sent. `jku`, `x5u`, `jwk` and `x5c` stay in it but are never used:
    /// a key named by the token itself would let anyone sign.
    public let header: [String: JSONValue]
    /// The header's `alg`, exactly as sent (it may name an algorithm keyholed does not implement).
    public let algorithm: String
    /// The header's `kid`, when present.
    public let keyID: String?
    /// The decoded payload, unparsed: it is read only once its signature has verified.
    public let payload: [UInt8]
    /// What the signature covers: the ASCII of the header and payload segments joined by `.`.
    public let signingInput: [UInt8]
    /// The decoded signature (for ECDSA the raw r||s that JWS uses).
    public let signature: [UInt8]

    /// Parses a compact JWS.
    ///
    /// - Throws: `token_malformed` when the token is over `maximumLength` bytes, does not have exactly
    ///   three `.`-separated segments, a segment is not canonical base64url, the header or signature
    ///   segment is empty, the header is not a JSON object with a string `alg` (and a string `kid` if
    ///   any), or the header has a `crit` member.
    public static func parse(_ token: some StringProtocol) throws(JOSEError) -> CompactJWS {
        let utf8 = token.utf8
        // Checked before copying or decoding anything: an oversized token costs only its length.
        guard utf8.count <= maximumLength else {
            throw .malformed("token is longer than \(maximumLength) bytes")
        }
        let bytes = Array(utf8)
        let dot = UInt8(ascii: ".")
        guard let firstDot = bytes.firstIndex(of: dot),
            let secondDot = bytes[(firstDot + 1)...].firstIndex(of: dot)
        else {
            throw .malformed("token does not have three segments separated by '.'")
        }
        guard !bytes[(secondDot + 1)...].contains(dot) else {
            throw .malformed("token has more than three segments")
        }
        guard firstDot > 0 else { throw .malformed("header segment is empty") }
        guard secondDot + 1 < bytes.count else { throw .malformed("signature segment is empty") }

        // An empty payload segment is allowed: RFC 7515 signs empty payloads, and a JWT's claims check
        // refuses it later as not being a JSON object.
        let headerBytes = try decodeSegment(bytes[..<firstDot], name: "header")
        let payload = try decodeSegment(bytes[(firstDot + 1)..<secondDot], name: "payload")
        let signature = try decodeSegment(bytes[(secondDot + 1)...], name: "signature")

        let header = try parseHeader(headerBytes)
        guard case .string(let algorithm)? = header["alg"] else {
            throw .malformed("header has no string 'alg'")
        }
        var keyID: String?
        if let kid = header["kid"] {
            guard case .string(let string) = kid else { throw .malformed("header 'kid' is not a string") }
            keyID = string
        }
        // RFC 7515 section 4.1.11: a recipient must refuse extensions it does not understand, and this
        // verifier understands none (not even RFC 7797's unencoded payloads), so any `crit` refuses.
        guard header["crit"] == nil else {
            throw .malformed("header has a 'crit' member; no header extensions are supported")
        }

        return CompactJWS(
            header: header,
            algorithm: algorithm,
            keyID: keyID,
            payload: payload,
            signingInput: Array(bytes[..<secondDot]),
            signature: signature
        )
    }

    private init(
        header: [String: JSONValue], algorithm: String, keyID: String?, payload: [UInt8], signingInput: [UInt8],
        signature: [UInt8]
    ) {
        self.header = header
        self.algorithm = algorithm
        self.keyID = keyID
        self.payload = payload
        self.signingInput = signingInput
        self.signature = signature
    }

    private static func decodeSegment(_ segment: ArraySlice<UInt8>, name: String) throws(JOSEError) -> [UInt8] {
        let decoded = segment.withUnsafeBufferPointer { Base64URL.decode(bytes: $0) }
        guard let decoded else { throw .malformed("\(name) segment is not canonical unpadded base64url") }
        return decoded
    }

    private static func parseHeader(_ bytes: [UInt8]) throws(JOSEError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes: bytes)
        } catch {
            // The parser's message names the offset and the problem, never the header's content.
            throw .malformed("header: \(error.message)")
        }
        guard case .object(let members) = value else { throw .malformed("header is not a JSON object") }
        return members
    }
}
