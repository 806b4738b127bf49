import KeyholeIssuers
import KeyholeProtocol
import Logging
import NIOCore
import KeyholeTestSupport
import Testing

@testable import KeyholeServer

/// A misspelt argument must never pass silently: every operation refuses what it does not read,
/// naming it, before doing anything.
@Suite("Unknown arguments")
struct UnknownArgumentsTests {
    /// The error `operation` answers `args` with, or `nil` when it succeeds.
    static func error(_ operation: Operation, _ args: [String: JSONValue]) async -> ProtocolError? {
        let request = Request(id: nil, op: "test", args: args)
        let context = RequestContext(logger: Logger(label: "test"))
        do throws(ProtocolError) {
            switch operation.body {
            case .sync(let body): _ = try body(request, context)
            case .async(let body): _ = try await body(request, context)
            case .deferrable(let body):
                if case .later(let work) = try body(request, context) { _ = try await work() }
            case .writing(let body):
                var buffer = ByteBuffer()
                if case .later(let work)? = try body(request, context, &buffer) { _ = try await work() }
            }
            return nil
        } catch {
            return error
        }
    }

    static var operations: [String: Operation] {
        let stats = ServerStats(operations: ["ping", "stats"])
        let registry = IssuerRegistry(issuers: [], keySets: [:])
        return BuiltinOperations.standard(stats: stats, metrics: nil)
            .merging(BuiltinOperations.debug) { $1 }
            .merging(TokenOperations.make(registry: registry, now: { 0 })) { $1 }
            .merging(KeySetOperations.make(registry: registry)) { $1 }
    }

    @Test("each operation refuses an argument it does not know, by name", arguments: [
        ("ping", [:]), ("stats", [:]), ("debug.sleep", ["ms": 0]), ("debug.block", ["ms": 0]),
        ("jwks.status", [:]), ("jwks.refresh", [:]),
        ("token.verify", ["token": "a.b.c", "issuer": "apple", "audience": "x", "nonce": "n"]),
    ] as [(String, [String: JSONValue])])
    func refused(op: String, args: [String: JSONValue]) async {
        let operation = Self.operations[op]!
        var misspelt = args
        misspelt["isuer"] = "apple"
        let error = await Self.error(operation, misspelt)
        #expect(error?.code == .badRequest, "\(op)")
        #expect(error?.message == "unknown argument 'isuer'", "\(op): \(error?.message ?? "none")")
    }

    @Test("arguments are typed and bounded", arguments: [
        ("debug.sleep", ["ms": 60_001]), ("debug.sleep", ["ms": "1"]), ("debug.sleep", ["ms": 1, "reply_bytes": 1_048_577]),
        ("debug.block", ["ms": 10_001]), ("jwks.status", ["issuer": .string(String(repeating: "a", count: 256))]),
        ("token.verify", ["token": 1]), ("token.verify", [:]),
        ("token.verify", ["token": "a.b.c", "nonce": .string(String(repeating: "n", count: 1025))]),
        ("token.verify", ["token": "a.b.c", "audience": ["x"]]),
    ] as [(String, [String: JSONValue])])
    func bounded(op: String, args: [String: JSONValue]) async {
        let error = await Self.error(Self.operations[op]!, args)
        #expect(error?.code == .badRequest, "\(op) \(args): \(error?.message ?? "accepted")")
    }
}
