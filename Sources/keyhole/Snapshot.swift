import ArgumentParser

struct Snapshot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Have keyholed write a snapshot of its users and sessions now (admin.snapshot).",
        discussion: """
            keyholed takes one by itself whenever its log reaches [storage] snapshot_wal_bytes, or \
            snapshot_wal_percent of the last snapshot's size when that is more; this forces one, for example before a backup of the state directory. Prints what it wrote as JSON.
            """)

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await connection.print("admin.snapshot", [:])
    }
}
