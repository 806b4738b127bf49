import Foundation
import KeyholeTestSupport
import Testing

/// The Debian packages of the binaries under test, built by packaging/deb/build-deb.sh (what `make
/// deb` runs) once per version for the whole test process, in a directory of its own that goes when
/// the process ends. Every test that installs the package (DebianPackageTests, SystemdAccessTests,
/// SystemdPostgresTests, SystemdRestartTests) takes a copy: the same binaries and arguments make the
/// same package, and building it for each of them cost the suite about three minutes of CPU on two
/// cores while the rest of it ran, enough to hold other tests past their time limits.
actor BuiltPackages {
    static let shared = BuiltPackages()

    private var builds: [String: Task<URL, any Error>] = [:]
    private let directory: URL

    private init() {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyhole-debs-\(getpid())")
        BuiltPackages.removeAtExit = directory.path
        atexit { if let path = BuiltPackages.removeAtExit { try? FileManager.default.removeItem(atPath: path) } }
    }

    /// Set once, before `atexit`'s handler can run (which may capture nothing).
    nonisolated(unsafe) private static var removeAtExit: String?

    /// The package of `version`, built by the first caller; the others wait for that build.
    func package(version: String) async throws -> URL {
        if let build = builds[version] { return try await build.value }
        let directory = self.directory
        let build = Task {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let out = directory.appendingPathComponent("keyhole_\(version).deb")
            let run = try await ChildProcess.runOffPool([
                DebianPackageTests.top.appendingPathComponent("packaging/deb/build-deb.sh").path,
                "--bin", DaemonProcess.binary.deletingLastPathComponent().path,
                "--out", out.path, "--version", version, "--allow-unpackaged-libs", "--fast", "--strip",
            ])
            guard run.status == 0 else { throw RawConnection.Failure(description: "build-deb.sh: \(run.stderr)") }
            return out
        }
        builds[version] = build
        return try await build.value
    }
}

extension Trait where Self == ConditionTrait {
    /// For the suites that install `BuiltPackages` and run the packaged service under systemd: not in
    /// the second pass on another loop (`DaemonProcess.onAnotherLoop`), which the service would not
    /// take (it runs its shipped configuration).
    static var packagedServiceOnFirstPass: Self {
        .disabled(if: DaemonProcess.onAnotherLoop, "the packaged service runs its shipped configuration's loop, whatever KEYHOLE_TEST_LOOP says: the first pass ran it")
    }
}
