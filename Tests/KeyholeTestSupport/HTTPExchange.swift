import Foundation

/// HTTP/1.1 by hand over a `RawConnection`, so that a test sends exactly the bytes it means (a head
/// cut short, two requests in one write, a body announced and never sent) and reads answers as they
/// come.
package final class HTTPExchange {
    /// One answer: status, headers in order (names as sent), body.
    package struct Answer {
        package var status: Int
        package var headers: [(name: String, value: String)]
        package var body: String

        /// The first value of header `name` (case-insensitive), or `nil`.
        package func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    package let connection: RawConnection
    private var buffer: [UInt8] = []

    package init(_ connection: RawConnection) {
        self.connection = connection
    }

    /// A GET (or `method`) of `target`, keep-alive, with `headers`.
    package func send(_ method: String = "GET", _ target: String, headers: [String: String] = [:]) throws {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: keyhole\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        try connection.send(Array((text + "\r\n").utf8))
    }

    /// Sends a request and reads its answer (`head`: a HEAD request, whose answer has no body).
    package func request(_ method: String = "GET", _ target: String, headers: [String: String] = [:]) throws -> Answer {
        try send(method, target, headers: headers)
        return try readAnswer(head: method == "HEAD")
    }

    /// The next answer; fails if the connection ends first.
    package func readAnswer(head: Bool = false) throws -> Answer {
        let end = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            headEnd = buffer.indices.dropLast(3).first { buffer[$0..<$0 + 4].elementsEqual(end) }
            if headEnd == nil { try fill() }
        }
        let lines = String(decoding: buffer[..<headEnd!], as: UTF8.self).components(separatedBy: "\r\n")
        buffer.removeFirst(headEnd! + 4)
        let statusLine = lines[0].split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw RawConnection.Failure(description: "not a status line: \(lines[0])")
        }
        let headers = lines.dropFirst().map { line -> (String, String) in
            let colon = line.firstIndex(of: ":") ?? line.endIndex
            let value = line[colon...].dropFirst().drop { $0 == " " }
            return (String(line[..<colon]), String(value))
        }
        var answer = Answer(status: status, headers: headers, body: "")
        let length = head ? 0 : Int(answer.header("Content-Length") ?? "0") ?? 0
        while buffer.count < length { try fill() }
        answer.body = String(decoding: buffer.prefix(length), as: UTF8.self)
        buffer.removeFirst(length)
        return answer
    }

    /// Whether the server closed the connection with nothing more to read.
    package func readsEndOfStream() throws -> Bool {
        guard buffer.isEmpty else { return false }
        return try connection.receiveSome().isEmpty
    }

    private func fill() throws {
        let bytes = try connection.receiveSome()
        guard !bytes.isEmpty else { throw RawConnection.Failure(description: "connection closed before a whole answer") }
        buffer += bytes
    }
}
