import KeyholeProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The operations every keyholed offers (PROTOCOL.md section 7).
enum BuiltinOperations {
    static func standard(stats: ServerStats) -> [String: Operation] {
        [
            "ping": .sync { _, _ in
                [
                    "protocol": .int(Int64(KeyholeVersion.protocolVersion)),
                    "version": .string(KeyholeVersion.current),
                    "uptime_ms": .int(stats.uptimeMs),
                ]
            },
            "stats": .sync { _, _ in stats.snapshot },
        ]
    }

    /// Operations for tests and development only, offered with `--enable-debug-ops`.
    static let debug: [String: Operation] = [
        "debug.sleep": .async { request, _ throws(ProtocolError) in
            guard case .int(let ms)? = request.args["ms"], (0...60_000).contains(ms) else {
                throw .badRequest("'ms' must be an integer from 0 to 60000")
            }
            // A large answer that arrives late: how tests make unsent output pile up.
            var padding = 0
            if let bytes = request.args["reply_bytes"] {
                guard case .int(let bytes) = bytes, (0...(1 << 20)).contains(bytes) else {
                    throw .badRequest("'reply_bytes' must be an integer from 0 to 1048576")
                }
                padding = Int(bytes)
            }
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
            guard case .int(let ms)? = request.args["ms"], (0...10_000).contains(ms) else {
                throw .badRequest("'ms' must be an integer from 0 to 10000")
            }
            var pause = timespec(tv_sec: Int(ms / 1000), tv_nsec: Int(ms % 1000) * 1_000_000)
            var left = timespec()
            while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
            return ["blocked_ms": .int(ms)]
        },
    ]
}
