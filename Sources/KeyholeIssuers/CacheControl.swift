/// The part of an HTTP `Cache-Control` response header (RFC 9111 section 5.2.2) that sets how long a
/// key set stays fresh.
public enum CacheControl {
    /// The `max-age` of a header value in seconds, or `nil` when it has none, has a malformed one, or
    /// forbids reuse (`no-store`, `no-cache`): the caller then applies its default.
    public static func maxAge(_ header: String?) -> Int64? {
        guard let header else { return nil }
        var maxAge: Int64?
        for directive in header.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map {
                $0.trimmingPrefix(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed()
            }
            let name = String(parts[0]).lowercased()
            switch name {
            case "no-store", "no-cache":
                return nil
            case "max-age":
                guard parts.count == 2 else { return nil }
                let value = String(parts[1]).trimmingCharacters(in: "\"")
                guard !value.isEmpty, value.count <= 12, value.allSatisfy({ $0.isASCII && $0.isNumber }), let seconds = Int64(value)
                else { return nil }
                maxAge = seconds
            default:
                continue
            }
        }
        return maxAge
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        String(drop(while: { set.contains($0) }).reversed().drop(while: { set.contains($0) }).reversed())
    }
}
