import KeyholeJOSE
import NIOCore

/// The pending authorizations of Sign in with Apple's web flow (APPLE_WEB.md, "What keyholed keeps"):
/// one record per `apple.authorize`, found by the SHA-256 of its `state`, taken out by the callback
/// whatever the outcome (single use), expiring, and bounded per peer and in all. A state machine:
/// the caller gives the time and keeps it under a lock; no I/O.
struct AppleWebPending {
    /// The bounds (a record's lifetime is its own `expiresAt`).
    struct Configuration: Sendable, Equatable {
        /// Records one uid may have pending; past it, its oldest goes.
        var perPeer = 10_000
        /// Records in all; past it, the asking uid's oldest goes, or, with none, the new one is refused.
        var total = 100_000
    }

    /// What an authorization request left for its callback.
    struct Record: Sendable, Equatable {
        /// SHA-256 of the binding cookie's value.
        var binding: SHA256.Digest
        /// SHA-256 of the nonce sent to Apple.
        var nonce: SHA256.Digest
        var clientID: String
        var redirectURI: String
        var returnTo: String
        var peer: UInt32
        var expiresAt: Int64
    }

    /// Why a callback finds no record it may use: every case is `state_invalid` to the caller.
    enum Refusal: Error, Equatable {
        /// No record for the state (unknown, already used, or pushed out).
        case unknown
        case expired
        /// The record's binding is another browser's.
        case notThisBrowser
    }

    let configuration: Configuration
    private var records: [SHA256.Digest: Record] = [:]
    /// Each uid's states, oldest first; a state taken since is skipped when met.
    private var queues: [UInt32: CircularBuffer<SHA256.Digest>] = [:]
    private var counts: [UInt32: Int] = [:]

    init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// Records pending now (expired ones not yet swept included).
    var count: Int { records.count }

    /// Keeps `record` under `state`; `false` when the bound in all is reached and the peer has none
    /// of its own to give up (the request is then refused, `overloaded`).
    mutating func insert(state: SHA256.Digest, record: Record) -> Bool {
        insertReporting(state: state, record: record).kept
    }

    /// `insert(state:record:)`, saying which state, if any, it pushed out (a store shared with other
    /// hosts must drop it too).
    mutating func insertReporting(state: SHA256.Digest, record: Record) -> (kept: Bool, dropped: SHA256.Digest?) {
        let peer = record.peer
        var dropped: SHA256.Digest?
        if counts[peer, default: 0] >= configuration.perPeer || records.count >= configuration.total {
            guard let oldest = dropOldest(of: peer) else { return (false, nil) }
            dropped = oldest
        }
        records[state] = record
        queues[peer, default: CircularBuffer()].append(state)
        // States taken since stay in the queue until met: compacted before they outnumber the bound.
        if let queue = queues[peer], queue.count > 2 * configuration.perPeer {
            queues[peer] = CircularBuffer(queue.filter { records[$0] != nil })
        }
        counts[peer, default: 0] += 1
        return (true, dropped)
    }

    /// Takes the record of `state` out, then checks it: a record is used once, even by a callback it
    /// refuses (a state seen by someone else cannot be probed, and the browser starts again).
    mutating func take(state: SHA256.Digest, binding: SHA256.Digest, now: Int64) -> Result<Record, Refusal> {
        guard let record = records.removeValue(forKey: state) else { return .failure(.unknown) }
        released(record.peer)
        return Self.judge(record, binding: binding, now: now)
    }

    /// Whether `record`, just taken out, may be used by the browser holding `binding` at `now`.
    static func judge(_ record: Record, binding: SHA256.Digest, now: Int64) -> Result<Record, Refusal> {
        guard now < record.expiresAt else { return .failure(.expired) }
        guard equalInConstantTime(record.binding, binding) else { return .failure(.notThisBrowser) }
        return .success(record)
    }

    /// Forgets `state`'s record if this host has it (it was taken on another host): `true` if it did.
    mutating func forget(state: SHA256.Digest) -> Bool {
        guard let record = records.removeValue(forKey: state) else { return false }
        released(record.peer)
        return true
    }

    /// Drops every expired record; returns how many. Each peer's queue is in the order its records
    /// were made, which is their order of expiry (every record lives as long): the sweep reads each
    /// queue from its front only while what it finds is expired or taken, so it costs what it
    /// removes plus one look per peer, not a pass over every record under the lock.
    mutating func sweep(now: Int64) -> Int {
        var swept = 0
        for peer in Array(queues.keys) {
            while let state = queues[peer]?.first {
                guard let record = records[state] else {
                    queues[peer]?.removeFirst()  // taken since
                    continue
                }
                guard record.expiresAt <= now else { break }
                queues[peer]?.removeFirst()
                records[state] = nil
                swept += 1
                released(peer)
            }
        }
        return swept
    }

    /// One of `peer`'s records is gone: a peer with none left is forgotten, queue and all.
    private mutating func released(_ peer: UInt32) {
        counts[peer, default: 1] -= 1
        if counts[peer] == 0 {
            counts[peer] = nil
            queues[peer] = nil
        }
    }

    /// Drops `peer`'s oldest pending record: its state, or `nil` when it has none.
    private mutating func dropOldest(of peer: UInt32) -> SHA256.Digest? {
        while let state = queues[peer]?.popFirst() {
            guard records.removeValue(forKey: state) != nil else { continue }
            released(peer)
            return state
        }
        return nil
    }

    /// Whether two digests are equal, looking at every byte whatever the first difference.
    static func equalInConstantTime(_ a: SHA256.Digest, _ b: SHA256.Digest) -> Bool {
        (a.words.0 ^ b.words.0) | (a.words.1 ^ b.words.1) | (a.words.2 ^ b.words.2) | (a.words.3 ^ b.words.3) == 0
    }
}
