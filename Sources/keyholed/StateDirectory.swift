#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The state directory (WAL, snapshots, key sets): created owner-only when missing.
enum StateDirectory {
    static func prepare(_ path: String) throws {
        try FileManager.default.createDirectory(
            atPath: path,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
    }
}
