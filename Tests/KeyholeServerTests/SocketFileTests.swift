import Foundation
import Testing

@testable import KeyholeServer

/// The socket file's group decides who the default policy's clients are: it must come from the
/// socket keyholed listens on, never from a file put at its path since.
@Suite("SocketFile")
struct SocketFileTests {
    @Test("the group is the bound inode's; a symlink put at the path since lends none")
    func groupOfTheBoundInode() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-socket-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("k.sock").path
        var file = SocketFile(path: path)
        let descriptor = try file.bind(mode: 0o660, backlog: 1)
        defer { close(descriptor) }
        var info = stat()
        #expect(lstat(path, &info) == 0)
        #expect(file.group == UInt32(info.st_gid))
        #expect(SocketFile.group(ofListening: descriptor) == UInt32(info.st_gid))

        // Someone swaps the path for a symlink to a file of another group (33): the passed-descriptor
        // path must not take that group.
        let other = directory.appendingPathComponent("other").path
        #expect(FileManager.default.createFile(atPath: other, contents: Data()))
        #expect(chown(other, 0, 33) == 0)
        #expect(unlink(path) == 0 && symlink(other, path) == 0)
        #expect(SocketFile.group(ofListening: descriptor) == nil)
        // Nor does a regular file there.
        #expect(unlink(path) == 0 && FileManager.default.createFile(atPath: path, contents: Data()) && chown(path, 0, 33) == 0)
        #expect(SocketFile.group(ofListening: descriptor) == nil)
        // The bound group read at bind time stays what it was.
        #expect(file.group == UInt32(info.st_gid))
    }
}
