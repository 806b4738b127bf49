import KeyholeProtocol
import NIOCore

/// Work keyholed owes the outside world, kept in the log until it is done: a revocation at Apple
/// for a user deleted while Apple could not be reached must not be forgotten by a restart
/// (WALRecordTypes.md, outbox.put and outbox.done).
///
/// The store only keeps entries; whoever added one does the work and marks it done.
public struct OutboxEntry: Sendable, Equatable {
    /// Chosen at random when the entry is added, never reused.
    public var id: UInt64
    /// What work it is, such as `apple.revoke`: the component that does it picks its entries by kind.
    public var kind: String
    /// When it was added.
    public var createdAt: Int64
    /// What the work needs, as that component wrote it.
    public var payload: [String: JSONValue]

    /// An entry.
    public init(id: UInt64, kind: String, createdAt: Int64, payload: [String: JSONValue]) {
        self.id = id
        self.kind = kind
        self.createdAt = createdAt
        self.payload = payload
    }

    /// The id as operators see it (`apple.pending`): 16 lowercase hex digits.
    public var idText: String {
        let hex = String(id, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// The payload as compact JSON, as it is logged.
    var payloadJSON: [UInt8] {
        var buffer = ByteBuffer()
        JSONValue.object(payload).write(to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// Appends the fields outbox.put and a snapshot's outbox entry share: id, kind, created_at, payload.
    func appendFields(to bytes: inout [UInt8]) {
        bytes.appendBigEndian(id)
        bytes.appendString(kind)
        bytes.appendBigEndian(createdAt)
        bytes.appendBlob(payloadJSON)
    }

    /// Reads those fields; `nil` when they do not parse (the payload must be a JSON object).
    init?(reading reader: inout ByteReader) {
        guard let id = reader.uint64(), let kind = reader.string(), let createdAt = reader.int64(),
            let blob = reader.blob(), let blob, case .object(let payload)? = try? JSONValue.parse(ByteBuffer(bytes: blob))
        else { return nil }
        self.init(id: id, kind: kind, createdAt: createdAt, payload: payload)
    }
}
