import KeyholeJOSE
import Testing

@Suite("ConstantTime")
struct ConstantTimeTests {
    @Test("constant-time comparison: equal bytes of every length up to a few words, at any alignment, and one bit off anywhere")
    func constantTimeEqual() {
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            // The same bytes in storage of their own, starting 0 to 7 bytes into it.
            for shift in 0..<8 {
                let other = [UInt8](repeating: 0xAA, count: shift) + bytes
                bytes.withUnsafeBytes { a in
                    other.withUnsafeBytes { whole in
                        let b = UnsafeRawBufferPointer(rebasing: whole[shift...])
                        if count > 0 { #expect(a.baseAddress != b.baseAddress) }
                        #expect(ConstantTime.equal(a, b))
                    }
                }
            }
            bytes.withUnsafeBytes { a in
                for index in 0..<count {
                    var other = bytes
                    other[index] ^= 0x80
                    other.withUnsafeBytes { b in #expect(!ConstantTime.equal(a, b)) }
                }
                (bytes + [0]).withUnsafeBytes { b in #expect(!ConstantTime.equal(a, b)) }
            }
        }
    }
}
