import Foundation
import KeyholeTestSupport
import KeyholeClient
import KeyholeProtocol
import NIOCore
import Testing

/// The safe-to-repeat table the client embeds is Protocol/ops.json's, operation for operation.
@Suite("Operations table", .ownThreads)
struct OperationsTableTests {
    @Test("KeyholeOperations lists every operation of Protocol/ops.json with the same flags, and no other")
    func matchesOpsJSON() throws {
        let url = ScriptProcess.repositoryRoot.appendingPathComponent("Protocol/ops.json")
        let file = try JSONValue.parse(ByteBuffer(bytes: try Data(contentsOf: url)))
        let operations = try #require(file["operations"]?.arrayValue)
        #expect(operations.count == KeyholeOperations.all.count)
        for entry in operations {
            let name = try #require(entry["op"]?.stringValue)
            let embedded = KeyholeOperations.all.first { $0.name == name }
            #expect(embedded != nil, "\(name) is missing from KeyholeOperations")
            #expect(embedded?.safeToRepeat == entry["safe_to_repeat"]?.boolValue, "\(name): safe_to_repeat")
            #expect(embedded?.debug == entry["debug"]?.boolValue, "\(name): debug")
            #expect(KeyholeOperations.isSafeToRepeat(name) == entry["safe_to_repeat"]?.boolValue, "\(name)")
        }
        let names = Set(operations.compactMap { $0["op"]?.stringValue })
        for extra in KeyholeOperations.all where !names.contains(extra.name) {
            Issue.record("\(extra.name) is not in Protocol/ops.json")
        }
    }

    @Test("an operation the client does not know is not safe to repeat")
    func unknownIsUnsafe() {
        #expect(!KeyholeOperations.isSafeToRepeat("session.get_v2"))
        #expect(!KeyholeOperations.isSafeToRepeat(""))
    }
}
