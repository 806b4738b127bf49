import KeyholeJOSE

/// One identity-token issuer keyholed trusts: who it is, where its keys are, whom its tokens may be for.
public struct IssuerConfiguration: Sendable, Equatable {
    /// Where the issuer's key set (JWKS) comes from.
    public enum KeySetLocation: Sendable, Equatable, CustomStringConvertible {
        /// A local file, for air-gapped hosts and tests: read at start-up.
        case file(String)
        /// A URL: https, or http to a loopback host (tests).
        case url(String)
        /// OpenID Connect discovery: the `jwks_uri` of `<issuer URL>/.well-known/openid-configuration`,
        /// whose `issuer` must be this URL exactly (OpenID Connect Discovery 1.0 section 4.3).
        case discovery(String)

        /// Whether the keys come over the network (and so are refreshed, cached and persisted).
        public var isRemote: Bool {
            if case .file = self { return false }
            return true
        }

        /// The location as configured.
        public var description: String {
            switch self {
            case .file(let path): path
            case .url(let url): url
            case .discovery(let issuer): "discovery of \(issuer)"
            }
        }
    }

    /// The name requests use to pick this issuer (`issuer` argument of `token.verify`).
    public var name: String
    /// The `iss` its tokens carry.
    public var issuer: String
    /// Other spellings of `iss` it uses.
    public var alternativeIssuers: Set<String> = []
    /// Its key set.
    public var keySet: KeySetLocation
    /// The audiences (client IDs) its tokens may be for: at least one.
    public var audiences: Set<String>
    /// The algorithms it signs with.
    public var algorithms: Set<JWSAlgorithm> = [.rs256]
    /// Clock skew forgiven, in seconds.
    public var leeway: Int64 = ClaimsPolicy.defaultLeeway
    /// How its claims are normalised.
    public var profile: ClaimsProfile = .standard
    /// Whether a request's nonce accepts its tokens that carry none (`allow_missing_nonce`).
    public var allowsMissingNonce = false

    /// An issuer.
    public init(name: String, issuer: String, keySet: KeySetLocation, audiences: Set<String>) {
        self.name = name
        self.issuer = issuer
        self.keySet = keySet
        self.audiences = audiences
    }

    /// The claims policy of this issuer.
    public var policy: ClaimsPolicy {
        ClaimsPolicy(
            issuer: issuer, alternativeIssuers: alternativeIssuers, audiences: audiences, leeway: leeway,
            profile: profile, allowsMissingNonce: allowsMissingNonce)
    }
}
