/// Detects RSA moduli made by the flawed Infineon generator (ROCA, CVE-2017-15361), whose private keys
/// can be recovered from the public key.
///
/// Such a modulus n = k·M + (65537^a mod M) for a primorial M, so for every small prime p dividing M,
/// n mod p lies in the subgroup that 65537 generates modulo p. For other moduli that happens for all the
/// primes below only with negligible probability (the published detector's test).
enum ROCAFingerprint {
    /// The primes of the published detector.
    static let primes: [UInt32] = [
        11, 13, 17, 19, 37, 53, 61, 71, 73, 79, 97, 103, 107, 109, 127, 151, 157,
    ]

    /// For each prime, the residues 65537^k mod p.
    private static let subgroups: [Set<UInt32>] = primes.map { p in
        var residues: Set<UInt32> = []
        var value: UInt32 = 1
        let generator = 65537 % p
        repeat {
            residues.insert(value)
            value = value * generator % p
        } while !residues.contains(value)
        return residues
    }

    /// Whether the big-endian `modulus` has the ROCA fingerprint.
    static func matches(modulus: [UInt8]) -> Bool {
        for (index, p) in primes.enumerated() {
            var remainder: UInt32 = 0
            for byte in modulus { remainder = (remainder << 8 | UInt32(byte)) % p }
            if !subgroups[index].contains(remainder) { return false }
        }
        return true
    }
}
