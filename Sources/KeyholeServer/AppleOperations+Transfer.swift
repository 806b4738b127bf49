import KeyholeApple
import KeyholeProtocol
import KeyholeStore
import Logging

extension AppleOperations {
    /// Team transfer (Apple's "Transferring your apps and users to another team"): the sending team
    /// exports each user's transfer identifier for the receiving team; once the apps are moved, the
    /// receiving team imports it, learning the user's new sub, and keyholed moves the record kept
    /// under the transfer identifier (with its sessions) to that sub.
    struct Transfer: Sendable {
        let configuration: Configuration
        let store: any AppleStoring
        let now: @Sendable () -> Double
        let logger: Logger

        func exchange(_ op: String) throws(ProtocolError) -> Exchange {
            guard let exchange = configuration.exchange else {
                throw .notConfigured("\(op) needs [apple] team_id, key_id, private_key_file and store_key_file")
            }
            return exchange
        }

        /// The client the request names, else the user's grant's, else the only configured one.
        func client(_ requested: String?, for principal: Principal?) async throws(ProtocolError) -> String {
            if let requested {
                guard configuration.clientIDs.containsExactly(requested) else {
                    throw .badRequest("client_id '\(requested)' is not among [apple] client_ids")
                }
                return requested
            }
            if let principal, let grant = try await StoreCommit.stored({ () async throws(StoreError) in try await store.user(principal) }).flatMap(AppleGrant.init) {
                return grant.clientID
            }
            guard configuration.clientIDs.count == 1, let only = configuration.clientIDs.first else {
                throw .badRequest("several [apple] client_ids: give client_id (the app's primary App ID)")
            }
            return only
        }

        /// `apple.transfer.export {sub, target_team_id, client_id?}` -> `{transfer_sub}`.
        func export(_ request: Request) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            let sub = try arguments.string("sub", required: true, maxBytes: Principal.maximumFieldBytes)!
            let target = try arguments.string("target_team_id", required: true, maxBytes: 10)!
            let requested = try arguments.string("client_id", maxBytes: 255)
            try arguments.finish()
            guard ClientSecrets.isAppleIdentifier(target) else {
                throw .badRequest("'target_team_id' must be the receiving team's 10-character id (capital letters and digits)")
            }
            let exchange = try exchange("apple.transfer.export")
            let principal = Principal(issuer: configuration.issuer, sub: sub)
            let client = try await client(requested, for: principal)
            let transferSub: String
            do {
                transferSub = try await exchange.client.transferSub(for: sub, target: target, clientID: client)
            } catch {
                throw error.protocolError
            }
            // Kept with the user (when keyholed has them), for the record; Apple answers the same again.
            let time = Int64(now().rounded(.down))
            _ = try await StoreCommit.stored { () async throws(StoreError) in
                try await store.modifyUser(principal, now: time, revokeSessions: false) { user in
                    var ext = user.fields["ext"]?.objectValue ?? [:]
                    var apple = ext["apple"]?.objectValue ?? [:]
                    apple["transfer"] = .object(["transfer_sub": .string(transferSub), "target_team_id": .string(target), "at": .int(time)])
                    ext["apple"] = .object(apple)
                    user.fields["ext"] = .object(ext)
                    return true
                }
            }
            return ["transfer_sub": .string(transferSub)]
        }

        /// `apple.transfer.import {transfer_sub, client_id?}` -> `{sub, email?, is_private_email?, moved, sessions_moved}`.
        func `import`(_ request: Request) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            let transferSub = try arguments.string("transfer_sub", required: true, maxBytes: Principal.maximumFieldBytes)!
            let requested = try arguments.string("client_id", maxBytes: 255)
            try arguments.finish()
            let exchange = try exchange("apple.transfer.import")
            let client = try await client(requested, for: nil)
            let user: AppleClient.TransferredUser
            do {
                user = try await exchange.client.transferredUser(transferSub, clientID: client)
            } catch {
                throw error.protocolError
            }
            let time = Int64(now().rounded(.down))
            let moved = try await move(from: transferSub, to: user.sub, now: time)
            if user.email != nil || user.isPrivateEmail != nil {
                _ = try await StoreCommit.stored { () async throws(StoreError) in
                    try await store.modifyUser(Principal(issuer: configuration.issuer, sub: user.sub), now: time, revokeSessions: false) { record in
                        if let email = user.email { record.fields["email"] = .string(email) }
                        if let isPrivate = user.isPrivateEmail { record.fields["is_private_email"] = .bool(isPrivate) }
                        return true
                    }
                }
            }
            var answer: [String: JSONValue] = [
                "sub": .string(user.sub), "moved": .bool(moved != nil), "sessions_moved": .int(Int64(moved ?? 0)),
            ]
            if let email = user.email { answer["email"] = .string(email) }
            if let isPrivate = user.isPrivateEmail { answer["is_private_email"] = .bool(isPrivate) }
            return answer
        }

        /// Moves the record kept under `transferSub` (and its sessions) to `sub`; how many sessions
        /// moved, or `nil` when there was nothing to move.
        func move(from transferSub: String, to sub: String, now time: Int64) async throws(ProtocolError) -> Int? {
            let from = Principal(issuer: configuration.issuer, sub: transferSub)
            let to = Principal(issuer: configuration.issuer, sub: sub)
            let moved = try await StoreCommit.stored { () async throws(StoreError) in
                try await store.moveUser(from, to: to, now: time, adjust: AppleGrant.discard)
            }
            if let moved { logger.info("apple.user_transferred", metadata: ["sub": "\(sub)", "sessions": "\(moved.sessions)"]) }
            return moved?.sessions
        }
    }
}
