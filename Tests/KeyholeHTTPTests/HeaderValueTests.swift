import Testing

@testable import KeyholeHTTP

@Suite struct HeaderValueTests {
    @Test func printableASCIIStaysAsItIs() {
        #expect(HeaderValue.encode("001542.b04100c51acb48d3a570684f17d6394d.1603") == "001542.b04100c51acb48d3a570684f17d6394d.1603")
        #expect(HeaderValue.encode("a@b.example") == "a@b.example")
    }

    @Test func controlSpacePercentAndNonASCIIAreEncoded() {
        #expect(HeaderValue.encode("alice\r\nX-Evil: 1") == "alice%0D%0AX-Evil:%201")
        #expect(HeaderValue.encode("50%") == "50%25")
        #expect(HeaderValue.encode("José") == "Jos%C3%A9")
        #expect(HeaderValue.encode("\u{0}\u{7F}\t") == "%00%7F%09")
        #expect(HeaderValue.encode("") == "")
    }

    @Test func aValueTooLongOnceEncodedIsRefusedNotCut() {
        #expect(HeaderValue.encode(String(repeating: "a", count: 1024))?.utf8.count == 1024)
        #expect(HeaderValue.encode(String(repeating: "a", count: 1025)) == nil)
        // 342 bytes that each take three once encoded: 1026.
        #expect(HeaderValue.encode(String(repeating: "\n", count: 342)) == nil)
    }
}
