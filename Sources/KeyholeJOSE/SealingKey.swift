internal import CKeyholeOpenSSL

/// A 256-bit key that seals secrets at rest with AES-256-GCM (libcrypto), such as Apple refresh tokens
/// in the WAL and snapshots.
///
/// A sealed box is `0x01 ‖ nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`: the version byte names the
/// format, the nonce is random for every seal (with 2^32 seals per key the chance of a repeat stays
/// below 2^-32, NIST SP 800-38D 8.3), and the associated data (who the secret belongs to) is
/// authenticated but not stored, so a box copied to another user's record does not open.
/// Printing, dumping or reflecting a key shows nothing of it.
public struct SealingKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The key's length in bytes.
    public static let keyBytes = 32
    /// What sealing adds to the plaintext's length.
    public static let overhead = 1 + nonceBytes + tagBytes
    static let version: UInt8 = 1
    static let nonceBytes = 12
    static let tagBytes = 16

    /// The most one seal takes: secrets are tokens, not files.
    public static let maximumPlaintextBytes = 1 << 20

    private let key: [UInt8]

    /// Names the type only.
    public var description: String { "AES-256-GCM key" }
    /// Names the type only.
    public var debugDescription: String { description }
    /// No children: the key bytes are not reflected.
    public var customMirror: Mirror { Mirror(self, children: []) }

    /// A key from its 32 bytes.
    ///
    /// - Throws: `key_invalid` for any other length.
    public init(bytes: [UInt8]) throws(JOSEError) {
        guard bytes.count == Self.keyBytes else { throw .keyInvalid("a sealing key is \(Self.keyBytes) bytes, not \(bytes.count)") }
        key = bytes
    }

    /// `plaintext` sealed, bound to `associatedData`; `nil` if either is over `maximumPlaintextBytes`,
    /// or the random generator or libcrypto fails.
    public func seal(_ plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        guard plaintext.count <= Self.maximumPlaintextBytes, associatedData.count <= Self.maximumPlaintextBytes else { return nil }
        guard let nonce = SecureRandom.bytes(Self.nonceBytes) else { return nil }
        var tag = [UInt8](repeating: 0, count: Self.tagBytes)
        guard let ciphertext = crypt(encrypting: true, nonce: nonce, input: plaintext[...], associatedData: associatedData, tag: &tag) else {
            return nil
        }
        return [Self.version] + nonce + ciphertext + tag
    }

    /// The plaintext of `box`, or `nil` when it was not sealed by this key with this associated data,
    /// or was altered.
    public func open(_ box: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        guard box.count >= Self.overhead, box[0] == Self.version,
            box.count <= Self.maximumPlaintextBytes + Self.overhead, associatedData.count <= Self.maximumPlaintextBytes
        else { return nil }
        var tag = Array(box[(box.count - Self.tagBytes)...])
        return crypt(
            encrypting: false, nonce: Array(box[1...Self.nonceBytes]),
            input: box[(1 + Self.nonceBytes)..<(box.count - Self.tagBytes)], associatedData: associatedData, tag: &tag)
    }

    /// AES-256-GCM in either direction (`EVP_Cipher*`): encrypting fills `tag`; decrypting checks it
    /// and returns nothing unless it matches.
    private func crypt(
        encrypting: Bool, nonce: [UInt8], input: ArraySlice<UInt8>, associatedData: [UInt8], tag: inout [UInt8]
    ) -> [UInt8]? {
        guard let context = EVP_CIPHER_CTX_new() else { return nil }
        defer {
            EVP_CIPHER_CTX_free(context)
            ERR_clear_error()
        }
        // GCM is a stream mode: the output is as long as the input, and finishing adds nothing.
        var output = [UInt8](repeating: 0, count: input.count + 16)
        var length: Int32 = 0
        let started = EVP_CipherInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce, encrypting ? 1 : 0) == 1
            && (associatedData.isEmpty
                || EVP_CipherUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1)
            && (input.isEmpty
                || input.withUnsafeBufferPointer { EVP_CipherUpdate(context, &output, &length, $0.baseAddress, Int32($0.count)) } == 1)
            && (encrypting || EVP_CIPHER_CTX_ctrl(context, ckeyhole_evp_ctrl_gcm_set_tag(), Int32(Self.tagBytes), &tag) == 1)
        guard started else { return nil }
        let total = input.isEmpty ? 0 : Int(length)
        // Decrypting, the tag is checked here.
        let finished = output.withUnsafeMutableBufferPointer { EVP_CipherFinal_ex(context, $0.baseAddress! + total, &length) == 1 }
        guard finished, !encrypting || EVP_CIPHER_CTX_ctrl(context, ckeyhole_evp_ctrl_gcm_get_tag(), Int32(Self.tagBytes), &tag) == 1 else {
            output.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            return nil
        }
        // Cut in place rather than copy, so no second copy of a plaintext is left behind unzeroed.
        output.removeSubrange((total + Int(length))...)
        return output
    }
}
