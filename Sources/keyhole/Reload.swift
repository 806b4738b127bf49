import ArgumentParser

struct Reload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Have keyholed read its configuration file again (admin.reload), as SIGHUP does.",
        discussion: """
            Prints which settings are now in use ("applied") and which wait for a restart \
            ("needs_restart"), as JSON. When the file does not load, keyholed keeps its running \
            configuration, and this prints the reason and exits 1. The unit's ExecReload runs this, so \
            `systemctl reload keyholed` fails when the file is wrong.
            """)

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await connection.print("admin.reload", [:])
    }
}
