import KeyholeProtocol
import KeyholeIssuers
import KeyholeJOSE

extension DaemonConfiguration {
    static let issuerKeys: Set<String> = [
        "name", "preset", "iss", "jwks_uri", "discovery", "audiences", "algorithms", "leeway", "allow_missing_nonce",
    ]

    /// Reads the `[[issuer]]` tables.
    static func issuers(_ file: ConfigFile) throws(ConfigError) -> [IssuerConfiguration] {
        var issuers: [IssuerConfiguration] = []
        for section in try file.arraySections("issuer", keys: issuerKeys) {
            let issuer = try issuer(section)
            guard !issuers.contains(where: { $0.name == issuer.name }) else {
                throw section.error("name", "issuer '\(issuer.name)' is configured twice")
            }
            issuers.append(issuer)
        }
        return issuers
    }

    private static func issuer(_ section: ConfigFile.Section) throws(ConfigError) -> IssuerConfiguration {
        guard let name = try section.string("name") else { throw section.error("name", "is required") }
        guard !name.isEmpty, name.utf8.count <= 64, name.allSatisfy({ $0.isLetter || $0.isNumber || "._-".contains($0) })
        else { throw section.error("name", "must be 1 to 64 letters, digits, '.', '_' or '-'") }
        guard let audiences = try section.stringArray("audiences"), !audiences.isEmpty, !audiences.contains("") else {
            throw section.error("audiences", "is required: the client IDs (bundle ID, Services ID) tokens may be for")
        }

        var configuration: IssuerConfiguration
        if let presetName = try section.string("preset") {
            guard let preset = IssuerPreset(rawValue: presetName) else {
                let names = IssuerPreset.allCases.map(\.rawValue).joined(separator: ", ")
                throw section.error("preset", "unknown preset '\(presetName.prefix(32))' (one of: \(names))")
            }
            configuration = preset.configuration(name: name, audiences: Set(audiences))
        } else {
            let discovery = section.table["discovery"] != nil
            guard section.table["iss"] != nil || discovery else {
                throw section.error("iss", "is required without a preset or discovery")
            }
            guard section.table["jwks_uri"] != nil || discovery else {
                throw section.error("jwks_uri", "is required without a preset or discovery")
            }
            configuration = IssuerConfiguration(name: name, issuer: "", keySet: .file(""), audiences: Set(audiences))
        }
        if let iss = try section.string("iss") {
            guard !iss.isEmpty else { throw section.error("iss", "must not be empty") }
            configuration.issuer = iss
        }
        if let location = try section.string("jwks_uri") {
            configuration.keySet = try keySetLocation(location, section: section)
        }
        if let discovery = try section.string("discovery") {
            guard section.table["jwks_uri"] == nil else {
                throw section.error("discovery", "give either discovery or jwks_uri, not both")
            }
            // OpenID Connect Discovery 3: the issuer is a URL without query or fragment.
            guard let url = try? RemoteURL(discovery), url.isPermitted, !url.pathAndQuery.contains("?") else {
                throw section.error("discovery", "must be an https:// issuer URL (or http:// to a loopback host) without a query\(refusal(discovery))")
            }
            // OpenID Connect Discovery 4.3: the issuer's identifier is the URL its document is found under.
            if section.table["iss"] == nil && !ExactString.equal(configuration.issuer, discovery) {
                configuration.issuer = discovery
                configuration.alternativeIssuers = []
            } else if !ExactString.equal(configuration.issuer, discovery) {
                throw section.error("discovery", "must equal iss: an OpenID Connect issuer is found under its own URL")
            }
            configuration.keySet = .discovery(discovery)
        }
        if let names = try section.stringArray("algorithms") {
            configuration.algorithms = try algorithms(names, section: section)
        }
        if let text = try section.string("leeway") {
            guard let leeway = ConfigParsing.duration(text), leeway >= .zero, leeway <= .minutes(10) else {
                throw section.error("leeway", "must be a duration from \"0s\" to \"10m\"")
            }
            configuration.leeway = leeway.nanoseconds / 1_000_000_000
        } else if section.table["leeway"] != nil {
            throw section.error("leeway", "must be a duration string such as \"60s\"")
        }
        if let allow = try section.bool("allow_missing_nonce") {
            configuration.allowsMissingNonce = allow
        }
        return configuration
    }

    /// An absolute path or `file://` URL is a local key set; https, or http to a loopback host, is remote.
    private static func keySetLocation(_ text: String, section: ConfigFile.Section) throws(ConfigError) -> IssuerConfiguration.KeySetLocation {
        if text.hasPrefix("/") { return .file(text) }
        if text.hasPrefix("file:///") { return .file(String(text.dropFirst("file://".count))) }
        if RemoteURL.permits(text) { return .url(text) }
        throw section.error("jwks_uri", "must be https://, http:// to a loopback host, or an absolute file path\(refusal(text))")
    }

    /// ": why" when `text` is no `RemoteURL` at all, for a configuration error's message; else "".
    static func refusal(_ text: String) -> String {
        do {
            _ = try RemoteURL(text)
            return ""
        } catch {
            return ": \(error)"
        }
    }

    private static func algorithms(_ names: [String], section: ConfigFile.Section) throws(ConfigError) -> Set<JWSAlgorithm> {
        guard !names.isEmpty else { throw section.error("algorithms", "must name at least one algorithm") }
        var algorithms: Set<JWSAlgorithm> = []
        for name in names {
            guard let algorithm = JWSAlgorithm(rawValue: name) else {
                let known = JWSAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")
                throw section.error("algorithms", "'\(name.prefix(16))' is not accepted (one of: \(known); HMAC and none never are)")
            }
            algorithms.insert(algorithm)
        }
        return algorithms
    }
}
