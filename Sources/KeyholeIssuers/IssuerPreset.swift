import KeyholeJOSE

/// Well-known issuers, so that a configuration names one instead of copying its URLs.
public enum IssuerPreset: String, Sendable, CaseIterable {
    case apple
    case google

    /// The preset's issuer, with the given name and audiences.
    public func configuration(name: String, audiences: Set<String>) -> IssuerConfiguration {
        switch self {
        case .apple:
            var configuration = IssuerConfiguration(
                name: name, issuer: "https://appleid.apple.com",
                keySet: .url("https://appleid.apple.com/auth/keys"), audiences: audiences)
            configuration.profile = .apple
            return configuration
        case .google:
            var configuration = IssuerConfiguration(
                name: name, issuer: "https://accounts.google.com",
                keySet: .url("https://www.googleapis.com/oauth2/v3/certs"), audiences: audiences)
            // Google's ID tokens carry either spelling (OpenID Connect Core, Google's documentation).
            configuration.alternativeIssuers = ["accounts.google.com"]
            return configuration
        }
    }
}
