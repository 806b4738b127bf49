import KeyholeProtocol
import KeyholeApple
import KeyholeIssuers
import KeyholeServer

/// The `[apple]` section as read from the file: names and paths; the keys themselves are read at
/// start-up (`AppleSettings+Keys.swift`), so a missing key is a start-up error naming its file, and the
/// team's key again at each reload (`AppleExchangeRenewal`).
struct AppleSettings: Equatable {
    /// Where a key comes from.
    enum KeySource: Equatable, CustomStringConvertible {
        /// A file path.
        case file(String)
        /// A name under `$CREDENTIALS_DIRECTORY` (systemd's `LoadCredential=`).
        case credential(String)

        var description: String {
            switch self {
            case .file(let path): path
            case .credential(let name): "credential '\(name)'"
            }
        }
    }

    /// The `[[issuer]]` whose tokens are Apple's.
    var issuer = "apple"
    var teamID: String?
    var keyID: String?
    var privateKey: KeySource?
    var storeKey: KeySource?
    /// Empty until resolved: the issuer's audiences by default.
    var clientIDs: [String] = []
    var redirectURIs: [String: String] = [:]
    var endpoint = "https://appleid.apple.com"
    /// How stored refresh tokens are checked.
    var refreshChecks = AppleRefreshChecks.Configuration()
    /// Sign in with Apple on the web (`web_*`); its endpoint is `endpoint` (a reload changes it).
    var web = AppleOperations.Web()

    /// Whether codes can be exchanged (and refresh tokens stored).
    var exchanges: Bool { privateKey != nil }

    static let keys: Set<String> = [
        "issuer", "team_id", "key_id", "private_key_file", "private_key_credential", "client_ids", "redirect_uris",
        "endpoint", "store_key_file", "store_key_credential", "refresh_check_interval", "refresh_checks_per_minute",
        "on_revoked", "web_client_id", "web_return_origins", "web_cookie", "web_pending_per_peer", "web_pending_max",
    ]
}

extension DaemonConfiguration {
    /// Reads `[apple]`, checked against the issuers already read.
    static func apple(_ file: ConfigFile, issuers: [IssuerConfiguration]) throws(ConfigError) -> AppleSettings? {
        guard let section = try file.section("apple", keys: AppleSettings.keys) else { return nil }
        var apple = AppleSettings()
        if let name = try section.string("issuer") { apple.issuer = name }
        guard let issuer = issuers.first(where: { ExactString.equal($0.name, apple.issuer) }) else {
            throw section.error("issuer", "names no [[issuer]] '\(apple.issuer)': add one with preset = \"apple\" and your client IDs as audiences")
        }
        apple.teamID = try appleIdentifier(section, "team_id")
        apple.keyID = try appleIdentifier(section, "key_id")
        apple.privateKey = try keySource(section, file: "private_key_file", credential: "private_key_credential")
        apple.storeKey = try keySource(section, file: "store_key_file", credential: "store_key_credential")
        let exchangeParts = [apple.teamID != nil, apple.keyID != nil, apple.privateKey != nil]
        if exchangeParts.contains(true) && exchangeParts.contains(false) {
            throw section.error(apple.teamID == nil ? "team_id" : apple.keyID == nil ? "key_id" : "private_key_file",
                "team_id, key_id and private_key_file (or private_key_credential) go together: code exchange needs all three")
        }
        if apple.exchanges && apple.storeKey == nil {
            throw section.error("store_key_file",
                "is required with a private key (or give store_key_credential): refresh tokens are stored encrypted with it; `keyhole keygen FILE` makes one")
        }

        let audiences = issuer.audiences.sorted()
        if let ids = try section.stringArray("client_ids") {
            guard !ids.isEmpty else { throw section.error("client_ids", "must name at least one client ID") }
            for id in ids where !issuer.audiences.contains(id) {
                throw section.error("client_ids", "'\(id.prefix(64))' is not among the audiences of [[issuer]] '\(issuer.name)': tokens for it would never verify")
            }
            apple.clientIDs = ids
        } else {
            apple.clientIDs = audiences
        }
        if let value = section.table["redirect_uris"] {
            guard let table = value.table else {
                throw section.error("redirect_uris", "must be a table of client ID = \"https://...\", such as { \"com.example.web\" = \"https://example.com/auth/apple\" }")
            }
            for (client, uri) in table {
                guard apple.clientIDs.contains(client) else {
                    throw section.error("redirect_uris", "'\(client.prefix(64))' is not among client_ids")
                }
                // Handed to Apple, never fetched, but parsed as strictly: it names the host Apple sends
                // the user back to with a code. No fragment either (RFC 6749 3.1.2).
                guard let uri = uri.string, RemoteURL.permits(uri), uri.utf8.count <= 2048 else {
                    let reason = uri.string.map { DaemonConfiguration.refusal($0) } ?? ""
                    throw section.error("redirect_uris", "the redirect URI of '\(client.prefix(64))' must be an https:// URL\(reason)")
                }
                apple.redirectURIs[client] = uri
            }
        }
        if let endpoint = try section.string("endpoint") {
            // Paths are appended to it: a query or a trailing / would garble them.
            guard let url = try? RemoteURL(endpoint), url.isPermitted, !url.pathAndQuery.contains("?"), !endpoint.hasSuffix("/") else {
                throw section.error("endpoint", "must be https:// (or http:// to a loopback host, for tests), without a query or a trailing /\(DaemonConfiguration.refusal(endpoint))")
            }
            apple.endpoint = endpoint
        }
        if let text = try section.string("refresh_check_interval") {
            guard let interval = ConfigParsing.duration(text), interval.nanoseconds >= 86_400 * 1_000_000_000,
                interval.nanoseconds <= 90 * 86_400 * 1_000_000_000
            else {
                throw section.error("refresh_check_interval", "must be a duration from \"24h\" to \"90d\": Apple allows one check a day at most")
            }
            apple.refreshChecks.interval = interval.nanoseconds / 1_000_000_000
        }
        if let perMinute = try section.integer("refresh_checks_per_minute", in: 1...600) {
            apple.refreshChecks.perMinute = perMinute
        }
        if let text = try section.string("on_revoked") {
            guard let policy = AppleRefreshChecks.Configuration.OnRevoked(rawValue: text) else {
                throw section.error("on_revoked", "must be \"revoke_sessions\" or \"flag\"")
            }
            apple.refreshChecks.onRevoked = policy
        }
        try web(section, into: &apple)
        return apple
    }

    /// The web flow's keys (APPLE_WEB.md), checked against `client_ids` and `redirect_uris`.
    private static func web(_ section: ConfigFile.Section, into apple: inout AppleSettings) throws(ConfigError) {
        if let client = try section.string("web_client_id") {
            guard apple.clientIDs.contains(where: { ExactString.equal($0, client) }), apple.redirectURIs[client] != nil else {
                throw section.error("web_client_id", "'\(client.prefix(64))' must be among client_ids, with its return URL under redirect_uris")
            }
            apple.web.clientID = client
        }
        if let origins = try section.stringArray("web_return_origins") {
            apple.web.returnOrigins = try origins.map { text throws(ConfigError) in
                guard let origin = AppleOperations.Web.origin(text) else {
                    throw section.error(
                        "web_return_origins",
                        "'\(text.prefix(64))' is not an origin: https://host or https://host:port, without a path (http:// only to a loopback host)")
                }
                return origin
            }
        }
        if let name = try section.string("web_cookie") {
            guard AppleOperations.Web.isCookieName(name) else {
                throw section.error("web_cookie", "must be a cookie name: 1 to 64 printable ASCII characters, none of ()<>@,;:\\\"/[]?={} or space")
            }
            apple.web.cookieName = name
        }
        if let perPeer = try section.integer("web_pending_per_peer", in: 1...1_000_000) { apple.web.pendingPerPeer = perPeer }
        if let total = try section.integer("web_pending_max", in: 1...10_000_000) { apple.web.pendingMax = total }
    }

    /// Apple's team and key ids: ten capital letters and digits.
    private static func appleIdentifier(_ section: ConfigFile.Section, _ key: String) throws(ConfigError) -> String? {
        guard let text = try section.string(key) else { return nil }
        guard ClientSecrets.isAppleIdentifier(text) else {
            throw section.error(key, "must be Apple's 10-character id (capital letters and digits), as shown in the developer account")
        }
        return text
    }

    static func keySource(_ section: ConfigFile.Section, file: String, credential: String) throws(ConfigError) -> AppleSettings.KeySource? {
        let path = try section.string(file)
        let name = try section.string(credential)
        switch (path, name) {
        case (nil, nil):
            return nil
        case (let path?, nil):
            guard path.hasPrefix("/") else { throw section.error(file, "must be an absolute path") }
            return .file(path)
        case (nil, let name?):
            guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), name.utf8.count <= 255 else {
                throw section.error(credential, "must be a credential name (no '/'), as given to LoadCredential=")
            }
            return .credential(name)
        case (_?, _?):
            throw section.error(credential, "give either \(file) or \(credential), not both")
        }
    }
}
