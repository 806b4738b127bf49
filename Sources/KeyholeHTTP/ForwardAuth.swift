import KeyholeProtocol
import KeyholeStore
import NIOHTTP1

/// `/authz`'s decisions, without I/O (HTTP.md, "GET /authz"): what a request asks, and the answer
/// once the store has said what it knows of the session.
enum ForwardAuth {
    /// What a request to `/authz` asks.
    enum Ask: Equatable {
        /// Look up this token, then check the conditions.
        case lookUp(token: String, conditions: [RequireCondition])
        /// Answered at once.
        case answer(Status)
    }

    /// An answer decided before any lookup.
    enum Status: Equatable {
        case unauthorized
        case badRequest(String)
    }

    /// What the store said.
    enum Found {
        case session(Session, User?)
        case none
        case unavailable
    }

    /// Reads the request's query and credential.
    static func ask(query: Substring?, headers: HTTPHeaders, cookieName: String) -> Ask {
        let conditions: [RequireCondition]
        do {
            conditions = try query.map(RequireCondition.parse(query:)) ?? []
        } catch {
            return .answer(.badRequest(error.message))
        }
        guard let token = SessionCredential.token(in: headers, cookieName: cookieName) else { return .answer(.unauthorized) }
        return .lookUp(token: token, conditions: conditions)
    }

    /// The answer to an `Ask.answer`.
    static func answer(_ status: Status) -> HTTPAnswer {
        switch status {
        case .unauthorized: return .authz(.unauthorized)
        case .badRequest(let message):
            var answer = HTTPAnswer.authz(.badRequest)
            answer.body = message
            answer.headers.append(("Content-Type", "text/plain; charset=utf-8"))
            return answer
        }
    }

    /// The answer once the store has been asked; `refusal` names a header too long to pass on (logged
    /// by the caller, never its value).
    static func answer(_ found: Found, conditions: [RequireCondition]) -> (HTTPAnswer, refusal: String?) {
        switch found {
        case .none: return (.authz(.unauthorized), nil)
        case .unavailable: return (.authz(.serviceUnavailable), nil)
        case .session(let session, let user):
            if !conditions.isEmpty {
                let data: [String: JSONValue]? =
                    if let bytes = session.data, case .object(let object)? = try? JSONValue.parse(bytes: bytes) { object } else { nil }
                guard conditions.allSatisfy({ $0.holds(in: data) }) else { return (.authz(.forbidden), nil) }
            }
            let email: String = if case .string(let email)? = user?.fields["email"] { email } else { "" }
            let idleEnd = session.lastSeenAt + Int64(session.idleSeconds)
            var headers: [(name: String, value: String)] = [
                ("X-Auth-Request-User", session.principal.sub),
                ("X-Auth-Request-Issuer", session.principal.issuer),
                ("X-Auth-Request-Email", email),
                ("X-Keyhole-Session-Id", session.id.description),
                ("X-Keyhole-Session-Expires", String(min(session.expiresAt, idleEnd))),
            ]
            for index in headers.indices {
                guard let encoded = HeaderValue.encode(headers[index].value) else { return (.authz(.forbidden), headers[index].name) }
                headers[index].value = encoded
            }
            return (HTTPAnswer(.ok, headers: headers), nil)
        }
    }
}
