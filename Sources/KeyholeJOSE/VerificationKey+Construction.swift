internal import CKeyholeOpenSSL
import KeyholeProtocol

/// Building `EVP_PKEY`s from JWK members with OpenSSL 3's parameter API.
extension VerificationKey {
    static func optionalString(_ jwk: [String: JSONValue], _ name: String) throws(JOSEError) -> String? {
        switch jwk[name] {
        case nil: return nil
        case .string(let value)?: return value
        default: throw .keyInvalid("\(name) must be a string")
        }
    }

    static func bytes(_ jwk: [String: JSONValue], _ name: String) throws(JOSEError) -> [UInt8] {
        guard case .string(let text)? = jwk[name], let bytes = Base64URL.decode(text), !bytes.isEmpty else {
            throw .keyInvalid("\(name) must be a non-empty base64url string")
        }
        return bytes
    }

    static func strippingLeadingZeros(_ bytes: [UInt8]) -> [UInt8] {
        Array(bytes.drop(while: { $0 == 0 }))
    }

    static func rsaKey(modulus: [UInt8], exponent: [UInt8]) throws(JOSEError) -> (OpaquePointer, Kind) {
        // An exponent of 1 makes every "signature" equal its message; even exponents are not RSA.
        guard exponent.count <= 8, let last = exponent.last, last & 1 == 1, exponent != [1] else {
            throw .keyInvalid("RSA exponent must be odd and greater than 1")
        }
        let bits = modulus.count * 8 - (modulus.first.map { $0.leadingZeroBitCount } ?? 8)
        guard bits >= minimumRSABits else { throw .keyInvalid("RSA key of \(bits) bits is below \(minimumRSABits)") }
        guard bits <= maximumRSABits else {
            throw .keyInvalid("RSA key of \(bits) bits is above the \(maximumRSABits) keyholed accepts")
        }
        guard !ROCAFingerprint.matches(modulus: modulus) else {
            throw .keyInvalid("RSA key has the ROCA fingerprint (CVE-2017-15361): its private key can be recovered")
        }
        let n = BN_bin2bn(modulus, Int32(modulus.count), nil)
        let e = BN_bin2bn(exponent, Int32(exponent.count), nil)
        defer {
            BN_free(n)
            BN_free(e)
        }
        let key = try fromData(type: "RSA") { builder in
            OSSL_PARAM_BLD_push_BN(builder, cName("n"), n) == 1 && OSSL_PARAM_BLD_push_BN(builder, cName("e"), e) == 1
        }
        return (key, .rsa(bits: bits))
    }

    static func ecKey(curve: String?, x: [UInt8], y: [UInt8]) throws(JOSEError) -> (OpaquePointer, Kind) {
        let (group, width, kind): (String, Int, Kind)
        switch curve {
        case "P-256": (group, width, kind) = ("prime256v1", 32, .ecP256)
        case "P-384": (group, width, kind) = ("secp384r1", 48, .ecP384)
        default: throw .keyInvalid("unsupported EC curve \(curve.map { "'\($0.prefix(16))'" } ?? "(none)")")
        }
        // RFC 7518 6.2.1.2: coordinates are exactly the field size.
        guard x.count == width, y.count == width else { throw .keyInvalid("EC coordinates must be \(width) bytes") }
        let point = [0x04] + x + y
        // The builder keeps pointers until it makes the parameters: the buffers must outlive that.
        let groupName = Array(group.utf8CString)
        let key = try groupName.withUnsafeBufferPointer { name throws(JOSEError) in
            try point.withUnsafeBufferPointer { pointBytes throws(JOSEError) in
                try fromData(type: "EC") { builder in
                    OSSL_PARAM_BLD_push_utf8_string(builder, cName("group"), name.baseAddress, 0) == 1
                        && OSSL_PARAM_BLD_push_octet_string(builder, cName("pub"), pointBytes.baseAddress, pointBytes.count) == 1
                }
            }
        }
        return (key, kind)
    }

    /// A parameter name with a lifetime as long as the program's: OSSL_PARAM_BLD keeps the pointer, so a
    /// temporary C string bridged from a Swift String would dangle.
    private static func cName(_ name: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// Makes the key from the parameters `push` adds, and checks it: a point must lie on its curve, an RSA
    /// modulus must be sane. Everything `push` points to must stay valid until this returns.
    private static func fromData(type: String, push: (OpaquePointer) -> Bool) throws(JOSEError) -> OpaquePointer {
        defer { ERR_clear_error() }
        guard let builder = OSSL_PARAM_BLD_new() else { throw .keyInvalid("out of memory") }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard push(builder), let params = OSSL_PARAM_BLD_to_param(builder) else {
            throw .keyInvalid("cannot build \(type) key")
        }
        defer { OSSL_PARAM_free(params) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw .keyInvalid("no \(type) support") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &key, ckeyhole_evp_pkey_public_key(), params) == 1, let key
        else { throw .keyInvalid("invalid \(type) key") }
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else {
            EVP_PKEY_free(key)
            throw .keyInvalid("cannot check \(type) key")
        }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else {
            EVP_PKEY_free(key)
            throw .keyInvalid("\(type) public key fails its validity check")
        }
        return key
    }

    /// r‖s of `width` bytes each, as DER `ECDSA-Sig-Value`; `nil` for a wrong length.
    static func derSignature(rawRS: [UInt8], width: Int) -> [UInt8]? {
        guard rawRS.count == 2 * width, let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let r = BN_bin2bn(rawRS, Int32(width), nil)
        let s = rawRS.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + width, Int32(width), nil) }
        guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(sig, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var pointer: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(sig, &pointer)
        }
        return written == length ? der : nil
    }
}
