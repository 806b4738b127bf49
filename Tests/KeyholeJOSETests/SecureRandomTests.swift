import KeyholeJOSE
import Testing

@Suite("Secure random")
struct SecureRandomTests {
    @Test("32-byte draws are whole, distinct and not a constant pattern")
    func draws() throws {
        var seen: Set<[UInt8]> = []
        for _ in 0..<300 {
            let bytes = try #require(SecureRandom.bytes32())
            #expect(bytes.count == 32)
            #expect(bytes.contains { $0 != 0 })
            seen.insert(bytes)
        }
        #expect(seen.count == 300)
        // Each bit position is set in some draws and clear in others: not a constant pattern.
        let ones = (0..<256).map { bit in seen.filter { $0[bit / 8] & (1 << (bit % 8)) != 0 }.count }
        #expect(ones.allSatisfy { $0 > 60 && $0 < 240 })
    }
}
