/// Comparisons of secret bytes whose time says nothing about where they differ.
public enum ConstantTime {
    /// Whether `a` and `b` hold the same bytes. The time depends on the lengths alone: every byte is
    /// read, with no branch on what it holds (a length is not what such a comparison keeps secret).
    /// Eight bytes at a time, where libcrypto's `CRYPTO_memcmp` takes one: a cached identity token's
    /// 1-2 KiB are compared on every hit.
    public static func equal(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        let count = a.count, words = count / 8
        var difference: UInt64 = 0
        for word in 0..<words {
            let offset = word * 8
            difference |= a.loadUnaligned(fromByteOffset: offset, as: UInt64.self) ^ b.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
        }
        for offset in (words * 8)..<count {
            difference |= UInt64(a[offset] ^ b[offset])
        }
        return difference == 0
    }
}
