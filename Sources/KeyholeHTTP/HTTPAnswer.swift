import NIOCore
import NIOHTTP1

/// One answer of the HTTP listener: a status, its headers and a small body. Every answer says
/// `Cache-Control: no-store` and its length; none sets a cookie or redirects (HTTP.md, "Requests").
/// Written straight into the connection's bytes: /authz answers thousands of times a second, and a
/// header dictionary and a general encoder cost more than the answer itself.
struct HTTPAnswer {
    var status: HTTPResponseStatus
    var headers: [(name: String, value: String)]
    var body: String

    init(_ status: HTTPResponseStatus, headers: [(name: String, value: String)] = [], body: String = "") {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON body.
    static func json(_ status: HTTPResponseStatus, _ body: String) -> HTTPAnswer {
        HTTPAnswer(status, headers: [("Content-Type", "application/json")], body: body)
    }

    /// The identity headers of `/authz`, empty, for every answer but a 200: a proxy that copies only
    /// the headers an answer carries then overwrites whatever a client sent under those names.
    static let identityHeaderNames = [
        "X-Auth-Request-User", "X-Auth-Request-Issuer", "X-Auth-Request-Email", "X-Keyhole-Session-Id",
        "X-Keyhole-Session-Expires",
    ]

    /// `status` with the identity headers present and empty.
    static func authz(_ status: HTTPResponseStatus) -> HTTPAnswer {
        var answer = HTTPAnswer(status, headers: identityHeaderNames.map { ($0, "") })
        if status == .unauthorized { answer.headers.append(("WWW-Authenticate", "Bearer realm=\"keyhole\"")) }
        return answer
    }

    /// Writes the answer for a request of `version`: without its body for a HEAD (the length stays
    /// the body's), with `Connection: close` when the connection ends after it.
    func write(into buffer: inout ByteBuffer, version: HTTPVersion, keepAlive: Bool, head: Bool) {
        buffer.writeStaticString(version.minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ")
        buffer.writeString(String(status.code))
        buffer.writeInteger(UInt8(ascii: " "))
        buffer.writeString(status.reasonPhrase)
        buffer.writeStaticString("\r\n")
        for (name, value) in headers {
            buffer.writeString(name)
            buffer.writeStaticString(": ")
            buffer.writeString(value)
            buffer.writeStaticString("\r\n")
        }
        buffer.writeStaticString("Cache-Control: no-store\r\nContent-Length: ")
        buffer.writeString(String(body.utf8.count))
        if !keepAlive {
            buffer.writeStaticString("\r\nConnection: close")
        } else if version.minor == 0 {
            buffer.writeStaticString("\r\nConnection: keep-alive")
        }
        buffer.writeStaticString("\r\n\r\n")
        if !head { buffer.writeString(body) }
    }
}
