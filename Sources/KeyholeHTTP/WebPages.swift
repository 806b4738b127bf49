import KeyholeProtocol
import KeyholeServer
import Logging
import NIOCore
import NIOHTTP1

/// Sign in with Apple's pages (HTTP.md, "Sign in with Apple"): what each answers, given what the
/// connection handler read. Every secret stays in a cookie or a redirect's URL, never in a log line
/// or a page.
enum WebPages {
    /// The largest callback body read (Apple's form: a code, an identity token, a state, a user).
    static let maximumBody = 16 << 10
    /// The binding cookie's path: `/`, which the default name's `__Host-` prefix requires (a cookie a
    /// sibling subdomain cannot set).
    static let bindingPath = "/"

    /// `GET /apple/start?return_to=PATH`: `302` to Apple, the binding cookie set.
    static func start(query: Substring?, peer: UInt32?, web: AppleWebSignIn) async -> HTTPAnswer {
        var args: [String: JSONValue] = [:]
        if let query, !query.isEmpty {
            guard let fields = decodeForm(query), fields.count == 1, let returnTo = fields.first, returnTo.name.utf8.elementsEqual("return_to".utf8)
            else { return HTTPAnswer(.badRequest) }
            args["return_to"] = .string(returnTo.value)
        }
        let result: [String: JSONValue]
        do {
            result = try await web.authorize(Request(id: nil, op: "apple.authorize", args: args), peer: peer)
        } catch {
            return refused(error)
        }
        guard let url = result["url"]?.stringValue, let name = result["cookie"]?["name"]?.stringValue,
            let value = result["cookie"]?["value"]?.stringValue, let maxAge = result["cookie"]?["max_age"]?.intValue
        else { return HTTPAnswer(.internalServerError) }
        return HTTPAnswer(.found, headers: [
            ("Location", url),
            ("Set-Cookie", "\(name)=\(value); Max-Age=\(maxAge); Path=\(bindingPath); Secure; HttpOnly; SameSite=None"),
        ])
    }

    /// `POST /apple/callback` with Apple's form (`body`, already bounded and of the right type): `303`
    /// to `return_to` with the session cookie, or to the error path with the code.
    static func callback(
        body: ByteBuffer, headers: HTTPHeaders, web: AppleWebSignIn, configuration: HTTPListener.Configuration, now: Int64, logger: Logger
    ) async -> HTTPAnswer {
        let cookieName = web.configuration?.web.cookieName ?? AppleOperations.Web().cookieName
        let clearBinding = ("Set-Cookie", "\(cookieName)=; Max-Age=0; Path=\(bindingPath); Secure; HttpOnly; SameSite=None")
        func failed(_ code: String) -> HTTPAnswer {
            let separator = configuration.webErrorPath.utf8.contains(UInt8(ascii: "?")) ? "&" : "?"
            return HTTPAnswer(.seeOther, headers: [("Location", "\(configuration.webErrorPath)\(separator)keyhole_error=\(code)"), clearBinding])
        }
        guard let text = String(validating: body.readableBytesView, as: UTF8.self), let fields = decodeForm(text[...]) else {
            return failed(ProtocolError.Code.badRequest.rawValue)
        }
        var form: [String: JSONValue] = [:]
        for field in fields where form[field.name] == nil { form[field.name] = .string(field.value) }
        var binding = ""
        for header in headers[canonicalForm: "cookie"] {
            if let value = SessionCredential.cookie(named: cookieName, in: String(header)) {
                binding = String(value)
                break
            }
        }
        let result: [String: JSONValue]
        do {
            result = try await web.callback(
                Request(id: nil, op: "apple.callback", args: ["form": .object(form), "cookie": .string(binding)]), logger: logger)
        } catch {
            logger.notice("http.web_sign_in_refused", metadata: ["code": "\(error.code)"])
            return failed(error.code.rawValue)
        }
        guard let token = result["session"]?["session"]?.stringValue, let expiresAt = result["session"]?["expires_at"]?.intValue,
            let returnTo = result["return_to"]?.stringValue
        else { return failed(ProtocolError.Code.internal.rawValue) }
        let session = "\(configuration.cookieName)=\(token); Max-Age=\(max(0, expiresAt - now)); Path=/; Secure; HttpOnly; SameSite=Lax"
        return HTTPAnswer(.seeOther, headers: [("Location", returnTo), ("Set-Cookie", session), clearBinding])
    }

    /// `POST /logout`: the request's session revoked, its cookie cleared, `303` to `/`.
    static func logout(headers: HTTPHeaders, web: AppleWebSignIn, configuration: HTTPListener.Configuration) async -> HTTPAnswer {
        let cleared = ("Set-Cookie", "\(configuration.cookieName)=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Lax")
        if let token = SessionCredential.token(in: headers, cookieName: configuration.cookieName) {
            do {
                _ = try await web.signOut(token: token)
            } catch {
                // Not revoked (storage failing): say so rather than pretend the user is out.
                return HTTPAnswer(.serviceUnavailable, headers: [("Retry-After", "1")])
            }
        }
        return HTTPAnswer(.seeOther, headers: [("Location", "/"), cleared])
    }

    /// Whether a request's `Origin` header, when it has one, is the site's own (its `Host`) or one of
    /// the configured origins: a form on another site must not sign a user out.
    static func sameOrigin(_ headers: HTTPHeaders, origins: [String]) -> Bool {
        let sent = headers[canonicalForm: "origin"]
        guard let origin = sent.first else { return true }
        guard sent.count == 1, let normalized = AppleOperations.Web.origin(String(origin)) ?? hostOrigin(String(origin)) else { return false }
        if origins.contains(where: { $0.utf8.elementsEqual(normalized.utf8) }) { return true }
        let hosts = headers[canonicalForm: "host"]
        guard hosts.count == 1, let host = hosts.first else { return false }
        let lowered = host.lowercased()
        return normalized.utf8.elementsEqual("https://\(lowered)".utf8) || normalized.utf8.elementsEqual("http://\(lowered)".utf8)
    }

    /// An `http://host[:port]` origin of any host, lower-cased (`AppleOperations.Web.origin` takes
    /// plain http only for loopback: here it is compared with the request's own Host).
    private static func hostOrigin(_ text: String) -> String? {
        let lowered = text.lowercased()
        guard lowered.hasPrefix("http://"), lowered.utf8.count > 7,
            lowered.utf8.dropFirst(7).allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "@") })
        else { return nil }
        return lowered
    }

    /// The answer to a refusal of `apple.authorize`.
    private static func refused(_ error: ProtocolError) -> HTTPAnswer {
        switch error.code {
        case .badRequest: HTTPAnswer(.badRequest)
        case .overloaded: HTTPAnswer(.serviceUnavailable, headers: [("Retry-After", "1")])
        case .notConfigured: HTTPAnswer(.notFound)
        default: HTTPAnswer(.internalServerError)
        }
    }

    /// `application/x-www-form-urlencoded` (and a query): `name=value` pairs split on `&`, each side
    /// decoded as `/authz`'s query is (RequireCondition.percentDecode), in order; `nil` for a
    /// malformed escape or a name or value that is not UTF-8.
    static func decodeForm(_ text: Substring) -> [(name: String, value: String)]? {
        var fields: [(name: String, value: String)] = []
        for pairBytes in text.utf8.split(separator: UInt8(ascii: "&")) {
            let pair = Substring(pairBytes)
            let (rawName, rawValue) = pair.utf8.firstIndex(of: UInt8(ascii: "=")).map {
                (pair[..<$0], pair[pair.utf8.index(after: $0)...])
            } ?? (pair, pair[pair.endIndex...])
            guard let name = RequireCondition.percentDecode(rawName).flatMap({ String(validating: $0, as: UTF8.self) }),
                let value = RequireCondition.percentDecode(rawValue).flatMap({ String(validating: $0, as: UTF8.self) })
            else { return nil }
            fields.append((name, value))
        }
        return fields
    }
}
