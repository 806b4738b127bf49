import NIOCore

/// The value syntaxes of keyholed.toml shared by several keys.
enum ConfigParsing {
    /// A duration such as "500ms", "10s", "5m", "24h", "30d".
    static func duration(_ text: String) -> TimeAmount? {
        let units: [(String, Int64)] = [
            ("ms", 1_000_000), ("s", 1_000_000_000), ("m", 60_000_000_000), ("h", 3_600_000_000_000),
            ("d", 86_400_000_000_000),
        ]
        for (suffix, nanoseconds) in units where text.hasSuffix(suffix) {
            let digits = text.dropLast(suffix.count)
            // "5ms" also ends in "s": the number part must be all digits for a unit to match.
            guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy(\.isASCIIDigit), let value = Int64(digits)
            else { continue }
            let (total, overflow) = value.multipliedReportingOverflow(by: nanoseconds)
            return overflow ? nil : .nanoseconds(total)
        }
        return nil
    }

    /// `amount` as `duration` reads it, in the largest unit that divides it ("10ms", "30d").
    static func durationText(_ amount: TimeAmount) -> String {
        guard amount != .zero else { return "0s" }
        let units: [(String, Int64)] = [
            ("d", 86_400_000_000_000), ("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000),
        ]
        for (suffix, nanoseconds) in units where amount.nanoseconds % nanoseconds == 0 {
            return "\(amount.nanoseconds / nanoseconds)\(suffix)"
        }
        return "\(amount.nanoseconds)ns"
    }

    /// A size: a non-negative integer of bytes, or a string such as "512", "64KiB", "16MiB", "1GiB".
    static func size(_ text: String) -> Int? {
        let units: [(String, Int)] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1), ("", 1)]
        for (suffix, multiplier) in units where text.hasSuffix(suffix) {
            let digits = text.dropLast(suffix.count)
            guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy(\.isASCIIDigit), let value = Int(digits)
            else { continue }
            return value * multiplier
        }
        return nil
    }

    /// A file mode written in octal, such as "0660" or "660".
    static func mode(_ text: String) -> UInt32? {
        guard (3...4).contains(text.count), text.allSatisfy({ ("0"..."7").contains($0) }),
            let mode = UInt32(text, radix: 8), mode <= 0o777
        else { return nil }
        return mode
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
