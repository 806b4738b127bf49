import KeyholeProtocol
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The operations every keyholed offers (PROTOCOL.md section 7).
enum BuiltinOperations {
    /// `metrics`: the Prometheus text `stats` answers with `{"format": "prometheus"}`; `nil`: none.
    static func standard(stats: ServerStats, metrics: (@Sendable () -> String)?) -> [String: Operation] {
        [
            "ping": .writing { request, _, buffer throws(ProtocolError) in
                try Arguments(request).finish()
                let uptime = stats.uptimeMs
                // Members in the sorted order every answer has.
                buffer.writeJSON(guess: 96) { out in
                    out.write("{\"protocol\":")
                    out.write(integer: Int64(KeyholeVersion.protocolVersion))
                    out.write(",\"uptime_ms\":")
                    out.write(integer: uptime)
                    out.write(",\"version\":")
                    out.write(string: KeyholeVersion.current)
                    out.write(byte: UInt8(ascii: "}"))
                }
                return nil
            },
            "stats": .sync { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let format = try arguments.string("format", maxBytes: 16)
                try arguments.finish()
                switch format {
                case nil, "json"?: return stats.snapshot
                case "prometheus"?:
                    guard let metrics else { throw .badRequest("this keyholed exports no metrics") }
                    return ["prometheus": .string(metrics())]
                default: throw .badRequest("'format' must be \"json\" or \"prometheus\"")
                }
            },
        ]
    }

    /// Operations for tests and development only, offered with `--enable-debug-ops`.
    static let debug: [String: Operation] = [
        "debug.sleep": .async { request, _ throws(ProtocolError) in
            var arguments = Arguments(request)
            guard let ms = try arguments.int("ms", in: 0...60_000) else { throw .badRequest("'ms' is required") }
            // A large answer that arrives late: how tests make unsent output pile up.
            let padding = Int(try arguments.int("reply_bytes", in: 0...(1 << 20)) ?? 0)
            try arguments.finish()
            do {
                try await Task.sleep(for: .milliseconds(ms))
            } catch {
                throw .shuttingDown()
            }
            if padding > 0 { return ["slept_ms": .int(ms), "padding": .string(String(repeating: "x", count: padding))] }
            return ["slept_ms": .int(ms)]
        },
        "debug.echo": .sync { request, _ in request.args },
        // Blocks the connection's event loop thread: a wedged keyholed, for the watchdog's tests.
        "debug.block": .sync { request, _ throws(ProtocolError) in
            var arguments = Arguments(request)
            guard let ms = try arguments.int("ms", in: 0...10_000) else { throw .badRequest("'ms' is required") }
            try arguments.finish()
            var pause = timespec(tv_sec: Int(ms / 1000), tv_nsec: Int(ms % 1000) * 1_000_000)
            var left = timespec()
            while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
            return ["blocked_ms": .int(ms)]
        },
    ]
}
