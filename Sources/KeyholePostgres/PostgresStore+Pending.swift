import KeyholeStore
import NIOCore
import PostgresNIO

/// Pending web sign-ins in `apple_pending` (POSTGRES.md, "Sign in with Apple across hosts"): started
/// on one host, taken by the callback on any. Rows hold digests only; an expired one is refused by
/// the caller and removed by the pruner.
extension PostgresStore {
    /// Keeps `pending`, removing `dropped` (states this host's bounds pushed out) in the same transaction.
    public func addPending(_ pending: PendingSignIn, dropping dropped: [[UInt8]]) async throws(PostgresStoreError) {
        let table = table("apple_pending"), logger = self.logger
        _ = try await transaction("keeping a pending sign-in") { connection in
            if !dropped.isEmpty {
                var binds = PostgresBindings()
                binds.append(dropped.map { ByteBuffer(bytes: $0) })
                try await connection.query(
                    PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE state_hash = ANY($1::bytea[])", binds: binds), logger: logger)
            }
            var binds = PostgresBindings()
            binds.append(PostgresRows.bytes(pending.stateHash))
            binds.append(PostgresRows.bytes(pending.bindingHash))
            binds.append(PostgresRows.bytes(pending.nonceHash))
            binds.append(PostgresRows.bytes(pending.clientID))
            binds.append(PostgresRows.bytes(pending.redirectURI))
            binds.append(PostgresRows.bytes(pending.returnTo))
            binds.append(Int64(pending.peer))
            binds.append(pending.expiresAt)
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO \(table) (state_hash, binding_hash, nonce_hash, client_id, redirect_uri, return_to, peer, expires_at)
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                        """,
                    binds: binds),
                logger: logger)
        }
    }

    /// Takes the record of `stateHash` out, if there is one.
    public func takePending(stateHash: [UInt8]) async throws(PostgresStoreError) -> PendingSignIn? {
        let table = table("apple_pending"), logger = self.logger
        typealias Row = (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64)
        let row = try await transaction("taking a pending sign-in") { connection -> Row? in
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        DELETE FROM \(table) WHERE state_hash = $1
                        RETURNING binding_hash, nonce_hash, client_id, redirect_uri, return_to, peer, expires_at
                        """,
                    binds: Self.binds(stateHash)),
                logger: logger)
            var found: Row?
            for try await row in rows.decode(Row.self) { found = row }
            return found
        }
        guard let (binding, nonce, client, redirect, returnTo, peer, expiresAt) = row else { return nil }
        // A row is input: digests of 32 bytes, UTF-8 text, a uid; anything else keyholed never wrote.
        func text(_ buffer: ByteBuffer) -> String? { String(validating: buffer.readableBytesView, as: UTF8.self) }
        guard binding.readableBytes == 32, nonce.readableBytes == 32, let client = text(client), let redirect = text(redirect),
            let returnTo = text(returnTo), let peer = UInt32(exactly: peer)
        else {
            throw .corrupt("a pending sign-in keyholed could not have written")
        }
        return PendingSignIn(
            stateHash: stateHash, bindingHash: Array(binding.readableBytesView), nonceHash: Array(nonce.readableBytesView), clientID: client,
            redirectURI: redirect, returnTo: returnTo, peer: peer, expiresAt: expiresAt)
    }
}

extension PostgresSessionStoring: PendingSignInStoring {
    public func addPending(_ pending: PendingSignIn, dropping dropped: [[UInt8]]) async throws(StoreError) {
        try await mapped { () async throws(PostgresStoreError) in try await store.addPending(pending, dropping: dropped) }
    }

    public func takePending(stateHash: [UInt8]) async throws(StoreError) -> PendingSignIn? {
        try await mapped { () async throws(PostgresStoreError) in try await store.takePending(stateHash: stateHash) }
    }
}
