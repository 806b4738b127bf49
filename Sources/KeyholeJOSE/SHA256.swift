internal import CKeyholeOpenSSL

/// SHA-256 through libcrypto.
public enum SHA256 {
    /// The 32-byte digest of `bytes`.
    public static func digest(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let input = Array(bytes)
        _ = output.withUnsafeMutableBufferPointer { out in
            EVP_Digest(input, input.count, out.baseAddress, &length, EVP_sha256(), nil)
        }
        return output
    }

    /// The digest as lowercase hex, as native Apple apps send a hashed nonce.
    public static func hexDigest(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(64)
        for byte in digest(bytes) {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
