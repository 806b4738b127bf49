import KeyholeProtocol
import KeyholeIssuers
import Logging

extension Keyholed {
    /// Makes each issuer's keys. A key-set file is read now (one that cannot be used is a
    /// configuration error). A remote issuer that `previous` (the running issuers, on a reload) holds
    /// with the same key-set location goes on with that object when nothing changed, or with its keys
    /// when only its rules did; any other starts from the key set persisted by an earlier run, if
    /// any, and is fetched by the refresher.
    static func makeIssuers(
        _ configurations: [IssuerConfiguration], cache: KeySetCacheState.Configuration, store: KeySetStore,
        previous: [IssuerKeys] = [], logger: Logger
    ) throws(ConfigError) -> [IssuerKeys] {
        var issuers: [IssuerKeys] = []
        for (index, issuer) in configurations.enumerated() {
            guard case .file(let path) = issuer.keySet else {
                if let running = previous.first(where: { ExactString.equal($0.configuration.name, issuer.name) && $0.configuration.keySet == issuer.keySet }) {
                    issuers.append(running.configuration == issuer ? running : IssuerKeys(configuration: issuer, cache: cache, continuing: running))
                    continue
                }
                var persisted: KeySetStore.Entry?
                do {
                    persisted = try store.load(issuer)
                } catch {
                    logger.warning("issuer.persisted_keys_unusable", metadata: ["issuer": "\(issuer.name)", "error": "\(error)"])
                }
                if let persisted {
                    logger.info("issuer.keys_restored", metadata: [
                        "issuer": "\(issuer.name)", "keys": "\(persisted.keys.keys.count)",
                        "kids": "\(persisted.keys.keys.compactMap(\.kid).joined(separator: ","))",
                        "fetched_at": "\(Int(persisted.fetchedAt))",
                    ])
                }
                issuers.append(IssuerKeys(configuration: issuer, cache: cache, persisted: persisted))
                continue
            }
            do {
                let set = try KeySetFile.load(path)
                issuers.append(IssuerKeys(configuration: issuer, keys: set))
                logger.info("issuer.keys_loaded", metadata: [
                    "issuer": "\(issuer.name)", "keys": "\(set.keys.count)",
                    "kids": "\(set.keys.compactMap(\.kid).joined(separator: ","))", "skipped": "\(set.skipped.count)",
                ])
            } catch {
                throw ConfigError(key: "issuer[\(index)].jwks_uri", line: nil, message: error.description)
            }
        }
        return issuers
    }
}
