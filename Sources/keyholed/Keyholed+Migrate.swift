import ArgumentParser
import Foundation
import KeyholePostgres
import KeyholeServer
import KeyholeStore
import Logging

extension Keyholed {
    /// `--migrate-to-postgres` (POSTGRES.md, "From one host to several"): opens the local store in the
    /// state directory as keyholed does (its lock taken: refused while a keyholed runs on it), brings
    /// the configured PostgreSQL's schema up to date as keyholed does, copies the store into it
    /// (`StoreImporter`), and prints what it copied. A flag of keyholed rather than a command of the
    /// `keyhole` CLI: the configuration, the state directory's checks, the password's reading and the
    /// connection's settings all live here, and the copy goes exactly where the switched keyholed
    /// will read from.
    ///
    /// Exit status: 0 copied (or nothing left to copy); 78 a configuration problem (no `[postgres]`,
    /// no state directory, a schema from a newer keyholed); 1 anything else (the directory in use,
    /// a damaged log, PostgreSQL unreachable or refusing). Prints and logs counts only: the store
    /// holds no token, and no check is ever shown.
    func migrateStore(_ configuration: DaemonConfiguration) async throws {
        guard !repair else {
            Self.fail("--repair and --migrate-to-postgres go one at a time: repair first, then migrate")
            throw ExitCode(78)
        }
        guard let settings = configuration.postgres else {
            Self.fail("--migrate-to-postgres copies into the configuration's PostgreSQL: set [storage] backend = \"postgres\" and a [postgres] section first")
            throw ExitCode(78)
        }
        let level = LogLevelControl(configuration.logLevel)
        Self.bootstrapLogging(level: level)
        let logger = Logger(label: "keyholed")
        // Never made here: a missing directory is a mistyped path, not an empty store to copy.
        let directory = configuration.stateDirectory
        guard FileManager.default.fileExists(atPath: directory) else {
            Self.fail("no state directory at \(directory): nothing to migrate (give the old one with --state-dir or [storage] dir)")
            throw ExitCode(78)
        }
        do {
            try StateDirectory.prepare(directory)
        } catch {
            Self.fail("\(error)")
            throw ExitCode(error.isConfiguration ? 78 : 1)
        }
        // keyholed's clock: the real one, or a test's fixed moment.
        let fixed = fixedClock.map(TestClock.init(start:))
        let clock: @Sendable () -> Double = { fixed?.now ?? Date().timeIntervalSince1970 }
        let now = Int64(clock().rounded(.down))

        let source: Store
        let opened: Store.OpenReport
        do {
            (source, opened) = try Store.open(stateDirectory: directory, configuration: configuration.store, now: now)
        } catch {
            if error.isLocked {
                Self.fail("\(error.message): stop keyholed before migrating (systemctl stop keyholed)")
            } else if error.isCorruption {
                Self.fail("\(error.message). Nothing was copied. `keyholed --repair` (with the same --config and --state-dir) cuts the log at the damage first.")
            } else {
                Self.fail("cannot open the store in \(directory): \(error.message)")
            }
            throw ExitCode(1)
        }
        for warning in opened.warnings {
            logger.warning("storage.recovered_tail", metadata: ["detail": "\(warning)"])
        }

        var pool: Task<Void, Never>?
        defer { pool?.cancel() }
        // Exits 78 or 1 by itself, as at keyholed's start.
        let shared = try await Self.openPostgres(settings, clock: clock, pool: &pool, logger: logger)
        let importer = StoreImporter(source: source, target: shared.store, logger: logger)
        let report: StoreImporter.Report
        do {
            report = try await importer.run(now: now)
        } catch {
            logger.critical("postgres.import_failed", metadata: ["error": "\(error.message)"])
            Self.fail("PostgreSQL: \(error.message). What was committed stays; run the migration again to go on.")
            throw ExitCode(1)
        }
        logger.notice("postgres.imported", metadata: [
            "users": "\(report.users.copied)", "sessions": "\(report.sessions.copied)", "outbox": "\(report.outbox.copied)",
            "already_there": "\(report.users.present + report.sessions.present + report.outbox.present)",
        ])
        let expired = opened.expired + report.expiredSessions
        print("""
            keyholed: migrated \(directory) to PostgreSQL (schema \(settings.schema)); every host told to drop its cache
              users: \(report.users)
              sessions: \(report.sessions); \(expired) expired, not copied
              outbox: \(report.outbox)
            """)
    }

    private static func fail(_ message: String) {
        FileHandle.standardError.write(Data("keyholed: \(message)\n".utf8))
    }
}
