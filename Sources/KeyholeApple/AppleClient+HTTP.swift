import AsyncHTTPClient
import KeyholeIssuers
import KeyholeProtocol
import NIOCore
import NIOHTTP1

extension AppleClient {
    /// An answer as received.
    struct Answer {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: ByteBuffer
    }

    /// POSTs to the token endpoint and reads a successful answer.
    func tokenRequest(_ form: [(String, String)], clientID: String, grant: String) async throws(AppleError) -> TokenResponse {
        let answer = try await post("/auth/token", form: form)
        guard answer.status == .ok else { throw refusal(answer, clientID: clientID, grant: grant) }
        guard case .object(let members)? = try? JSONValue.parse(answer.body) else {
            throw .unavailable("Apple's token endpoint answered HTTP 200 without a JSON object", retryAfterMs: retryAfterMs(nil))
        }
        func string(_ name: String) throws(AppleError) -> String? {
            switch members[name] {
            case nil, .null?: return nil
            case .string(let value)? where !value.isEmpty: return value
            default: throw .unavailable("Apple's token endpoint answered a '\(name)' that is not a non-empty string", retryAfterMs: retryAfterMs(nil))
            }
        }
        return TokenResponse(
            accessToken: try string("access_token"), refreshToken: try string("refresh_token"),
            idToken: try string("id_token"), expiresIn: members["expires_in"]?.intValue)
    }

    /// The error for a non-200 answer: Apple's OAuth error for a 4xx with one (other than 429), else
    /// `unavailable`.
    func refusal(_ answer: Answer, clientID: String, grant: String) -> AppleError {
        let status = answer.status.code
        if (400..<500).contains(status), status != 429,
            case .object(let members)? = try? JSONValue.parse(answer.body),
            case .string(let error)? = members["error"], !error.isEmpty, error.utf8.count <= 64,
            error.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) })
        {
            return .rejected(error, Self.explanation(of: error, clientID: clientID, grant: grant))
        }
        // A 4xx without an OAuth error is not Apple's API speaking (a proxy, a wrong endpoint): say so.
        let hint = (400..<500).contains(status) && status != 429 ? " without an OAuth error: check [apple] endpoint" : ""
        return .unavailable("Apple answered HTTP \(status) to a \(grant) request\(hint)", retryAfterMs: retryAfterMs(answer.headers))
    }

    /// What to check, for Apple's OAuth errors (RFC 6749 section 5.2, as Apple uses them).
    static func explanation(of error: String, clientID: String, grant: String) -> String {
        switch error {
        case "invalid_grant" where grant == "authorization code":
            "Apple refused the authorization code: it expired (codes live 5 minutes), was already used, or was issued to another client id than '\(clientID)' or another redirect URI"
        case "invalid_grant":
            "Apple refused the \(grant): it was revoked, or the user withdrew consent"
        case "invalid_client":
            "Apple refused the client: check [apple] team_id and key_id, that the .p8 key is the one with that key id, and that '\(clientID)' is a bundle ID or Services ID of that team"
        case "invalid_request":
            "Apple found the request malformed: check the redirect URI configured for '\(clientID)' under [apple] redirect_uris"
        case "unauthorized_client":
            "Apple does not allow '\(clientID)' this request: check that Sign in with Apple is enabled for it"
        case "unsupported_grant_type", "invalid_scope":
            "Apple refused the \(grant) request (\(error))"
        default:
            "Apple refused the \(grant) request with '\(error)'"
        }
    }

    /// How long to wait before retrying: the answer's `Retry-After` in seconds (1 s to 1 h), else the
    /// configured hint.
    func retryAfterMs(_ headers: HTTPHeaders?) -> Int {
        if let text = headers?.first(name: "Retry-After"), let seconds = Int(text.filter { $0 != " " }) {
            return min(max(seconds, 1), 3600) * 1000
        }
        return Int(configuration.retryAfter.nanoseconds / 1_000_000)
    }

    /// POSTs a form to `path` under the endpoint, bounded by the total timeout.
    func post(_ path: String, form: [(String, String)], bearer: String? = nil) async throws(AppleError) -> Answer {
        let url = configuration.endpoint + path
        let timeout = configuration.totalTimeout
        let retry = retryAfterMs(nil)
        guard RemoteURL.permits(url) else {
            throw .unavailable("\(url) is neither https nor http to a loopback host", retryAfterMs: retry)
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "keyholed")
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        request.body = .bytes(ByteBuffer(string: Self.formEncode(form)))
        let limit = configuration.maximumBytes
        let ready = request
        let client = self.client
        let timedOut = AppleError.unavailable("Apple did not answer \(path) within \(timeout.nanoseconds / 1_000_000) ms", retryAfterMs: retry)
        return try await withDeadline(timeout) {
            timedOut
        } cancelled: {
            AppleError.unavailable("the request to Apple's \(path) was cancelled", retryAfterMs: retry)
        } _: { () async throws(AppleError) -> Answer in
            do {
                let response = try await client.execute(ready, timeout: timeout)
                let body: ByteBuffer
                do {
                    body = try await response.body.collect(upTo: limit)
                } catch {
                    throw AppleError.unavailable("Apple's answer to \(path) was larger than \(limit) bytes, or broke off", retryAfterMs: retry)
                }
                return Answer(status: response.status, headers: response.headers, body: body)
            } catch let error as AppleError {
                throw error
            } catch let error as HTTPClientError where error == .deadlineExceeded {
                throw timedOut
            } catch {
                throw AppleError.unavailable("could not reach Apple at \(url): \(error)", retryAfterMs: retry)
            }
        }
    }

    /// `application/x-www-form-urlencoded`: unreserved characters as they are, every other byte %XX.
    static func formEncode(_ form: [(String, String)]) -> String {
        func encode(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                default:
                    let hex = Array("0123456789ABCDEF".utf8)
                    out += "%"
                    out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                    out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0xF)]))
                }
            }
            return out
        }
        return form.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }
}
