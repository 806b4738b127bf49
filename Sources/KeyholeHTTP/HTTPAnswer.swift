import NIOCore
import NIOHTTP1

/// One answer of the HTTP listener: a status, its headers and a small body. Every answer says
/// `Cache-Control: no-store` and its length; none sets a cookie or redirects (HTTP.md, "Requests").
struct HTTPAnswer {
    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    var body: String

    init(_ status: HTTPResponseStatus, headers: HTTPHeaders = [:], body: String = "") {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON body.
    static func json(_ status: HTTPResponseStatus, _ body: String) -> HTTPAnswer {
        HTTPAnswer(status, headers: ["Content-Type": "application/json"], body: body)
    }

    /// The identity headers of `/authz`, empty, for every answer but a 200: a proxy that copies only
    /// the headers an answer carries then overwrites whatever a client sent under those names.
    static let identityHeaderNames = [
        "X-Auth-Request-User", "X-Auth-Request-Issuer", "X-Auth-Request-Email", "X-Keyhole-Session-Id",
        "X-Keyhole-Session-Expires",
    ]

    /// `status` with the identity headers present and empty.
    static func authz(_ status: HTTPResponseStatus) -> HTTPAnswer {
        var answer = HTTPAnswer(status)
        for name in identityHeaderNames { answer.headers.add(name: name, value: "") }
        if status == .unauthorized { answer.headers.add(name: "WWW-Authenticate", value: "Bearer realm=\"keyhole\"") }
        return answer
    }

    /// The head and body to write; `keepAlive` false adds `Connection: close`.
    func parts(version: HTTPVersion, keepAlive: Bool, allocator: ByteBufferAllocator) -> (HTTPResponseHead, ByteBuffer) {
        var headers = self.headers
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "Content-Length", value: String(body.utf8.count))
        if !keepAlive {
            headers.add(name: "Connection", value: "close")
        } else if version.minor == 0 {
            headers.add(name: "Connection", value: "keep-alive")
        }
        return (HTTPResponseHead(version: version, status: status, headers: headers), allocator.buffer(string: body))
    }
}
