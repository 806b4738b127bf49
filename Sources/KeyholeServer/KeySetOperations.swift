import KeyholeIssuers
import KeyholeProtocol

/// `jwks.status` and `jwks.refresh` (issue 3): what each issuer's key set is, and a fetch on demand.
public enum KeySetOperations {
    /// The operations over `registry`'s issuers.
    public static func make(registry: IssuerRegistry) -> [String: Operation] {
        [
            "jwks.status": .sync { request, _ throws(ProtocolError) in
                let issuers = try selected(registry, request)
                var result: [String: JSONValue] = ["issuers": .array(issuers.map { .object(status($0.status())) })]
                if let cache = registry.verifiedTokens {
                    let statistics = cache.statistics
                    result["verified_cache"] = [
                        "capacity": .int(Int64(cache.capacity)), "entries": .int(Int64(statistics.entries)),
                        "hits": .int(Int64(statistics.hits)), "misses": .int(Int64(statistics.misses)),
                        "evictions": .int(Int64(statistics.evictions)),
                    ]
                }
                return result
            },
            // Under the same cool-down as unknown keys: a loop of refreshes cannot hammer an issuer.
            "jwks.refresh": .async { request, _ throws(ProtocolError) in
                let issuers = try selected(registry, request)
                let results = await withTaskGroup(of: (Int, JSONValue).self) { group in
                    for (index, keys) in issuers.enumerated() {
                        group.addTask { (index, .object(refreshed(keys, await keys.refresh()))) }
                    }
                    var results = [JSONValue](repeating: .null, count: issuers.count)
                    for await (index, result) in group { results[index] = result }
                    return results
                }
                return ["issuers": .array(results)]
            },
        ]
    }

    /// The issuer named by the optional `issuer` argument, else all of them.
    private static func selected(_ registry: IssuerRegistry, _ request: Request) throws(ProtocolError) -> [IssuerKeys] {
        var arguments = Arguments(request)
        let name = try arguments.string("issuer")
        try arguments.finish()
        guard let name else { return registry.issuers }
        guard let keys = registry.issuers.first(where: { ExactString.equal($0.configuration.name, name) }) else {
            throw .badRequest("no issuer named '\(name.prefix(64))' is configured")
        }
        return [keys]
    }

    private static func refreshed(_ keys: IssuerKeys, _ outcome: IssuerKeys.FetchOutcome) -> [String: JSONValue] {
        var result = status(keys.status())
        switch outcome {
        case .succeeded:
            result["outcome"] = "fetched"
        case .failed(let error):
            result["outcome"] = "failed"
            result["error"] = .string(error)
        case .rateLimited(let retryAfter):
            result["outcome"] = "rate_limited"
            result["retry_after_ms"] = .int(Int64((retryAfter * 1000).rounded(.up)))
        case .notFetched:
            result["outcome"] = keys.configuration.keySet.isRemote ? "stopped" : "not_remote"
        }
        return result
    }

    /// One issuer's `jwks.status` entry; absent values are null, so every entry has every member.
    static func status(_ status: IssuerKeys.Status) -> [String: JSONValue] {
        [
            "issuer": .string(status.issuer),
            "source": .string(status.source),
            "remote": .bool(status.isRemote),
            "kids": .array(status.kids.map(JSONValue.string)),
            "keys": .int(Int64(status.keyCount)),
            "usable": .bool(status.usable),
            "fetched_at": time(status.fetchedAt),
            "expires_at": time(status.expiresAt),
            "next_fetch_at": time(status.nextFetchAt),
            "last_error": status.lastError.map(JSONValue.string) ?? .null,
            "fetches": .int(Int64(status.fetches)),
            "failures": .int(Int64(status.failures)),
            "fetching": status.fetching.map(JSONValue.string) ?? .null,
            "waiting": .int(Int64(status.waiting)),
        ]
    }

    /// Seconds since 1970, to the millisecond.
    private static func time(_ seconds: Double?) -> JSONValue {
        guard let seconds, seconds.isFinite else { return .null }
        return .double((seconds * 1000).rounded() / 1000)
    }
}
