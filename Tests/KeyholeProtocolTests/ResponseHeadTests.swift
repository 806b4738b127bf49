import KeyholeProtocol
import NIOCore
import Testing

@Suite("a success's head, written in one piece")
struct ResponseHeadTests {
    static let ids: [RequestID?] = [
        nil, .int(0), .int(-7), .int(.max), .int(.min), .string(""), .string("9e0b56d4d6b9.7"), .string("a\"b\\c\n\u{1}é\u{212A}"),
        .string(String(repeating: "\u{1}", count: 300)),
    ]

    @Test("the head is the id as JSON writes it, framed or not, and a whole answer parses back", arguments: ids)
    func head(id: RequestID?) throws {
        var expected = ByteBuffer(string: "{\"id\":")
        (id?.jsonValue ?? .null).write(to: &expected)
        expected.writeString(",\"ok\":true,\"result\":")

        var plain = ByteBuffer(string: "xy")
        plain.moveReaderIndex(forwardBy: 2)
        Response.writeSuccessHead(id: id, to: &plain)
        #expect(plain == expected)

        var framed = ByteBuffer(string: "before")
        let start = Response.writeFramedSuccessHead(id: id, to: &framed)
        #expect(start == 6)
        #expect(framed.getBytes(at: 6, length: 4) == [0, 0, 0, 0])
        #expect(framed.getSlice(at: 10, length: framed.writerIndex - 10) == expected)

        framed.writeString("{\"k\":1}}")
        framed.setInteger(UInt32(framed.writerIndex - start - 4), at: start)
        framed.moveReaderIndex(to: start + 4)
        let response = try Response.parse(framed)
        #expect(response == Response(id: id, outcome: .success(["k": 1])))
    }
}
