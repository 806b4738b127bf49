import Foundation
import KeyholeIssuers
import Testing

/// Secret files (private keys, the store key): whoever may write one may replace it with their own.
@Suite("LocalFile secrets")
struct LocalFileTests {
    /// A secret file with `mode`, owned by `owner`; the reason it is refused, or nil when it is read.
    static func refusal(mode: mode_t, owner: uid_t = 0, group: gid_t = 0) throws -> String? {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-secret-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("key").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data("secret".utf8)))
        #expect(chmod(path, mode) == 0 && chown(path, owner, group) == 0)
        do {
            #expect(try LocalFile.contents(of: path, maximumBytes: 64, secret: true) == Array("secret".utf8))
            return nil
        } catch {
            return error.description
        }
    }

    @Test("owner-only and group-readable keys of root or keyholed's user are read")
    func accepted() throws {
        #expect(try Self.refusal(mode: 0o600) == nil)
        #expect(try Self.refusal(mode: 0o400) == nil)
        #expect(try Self.refusal(mode: 0o640, group: 33) == nil)
    }

    @Test("a key other users may use, its group may write, or another user owns is refused, saying which")
    func refused() throws {
        #expect(try Self.refusal(mode: 0o604)?.contains("accessible to every user") == true)
        #expect(try Self.refusal(mode: 0o660, group: 33)?.contains("writable by its group") == true)
        #expect(try Self.refusal(mode: 0o620)?.contains("writable by its group") == true)
        #expect(try Self.refusal(mode: 0o600, owner: 33)?.contains("owned by uid 33") == true)
    }
}
