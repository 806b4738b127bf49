import Foundation
import KeyholeTestSupport
import Testing

/// The test support's process spawning, on which every end-to-end test stands.
@Suite("Spawning children", .ownThreads)
struct ChildProcessTests {
    @Test("a child inherits none of the test process's descriptors, close-on-exec or not")
    func noInheritedDescriptors() throws {
        // As SwiftNIO's accepted connections are: without close-on-exec.
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { fds.forEach { close($0) } }
        #expect(fcntl(fds[0], F_GETFD) & FD_CLOEXEC == 0)
        let listed = try ChildProcess.run(["/bin/sh", "-c", "ls /proc/$$/fd"])
        #expect(listed.status == 0)
        let open = Set(listed.stdout.split(separator: "\n").compactMap { Int32($0) })
        #expect(open.isDisjoint(with: fds), "the child got \(open.sorted())")
        #expect(open.isSuperset(of: [0, 1, 2]))
    }
}
