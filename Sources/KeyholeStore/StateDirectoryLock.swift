#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// An exclusive flock on `<state-dir>/lock`, held for the life of the store: two keyholeds writing one
/// log would interleave records and corrupt it.
final class StateDirectoryLock: Sendable {
    private let fd: Int32
    private let released = Atomic(false)

    /// Takes the lock, or throws `StoreError.locked` at once when another process holds it.
    init(stateDirectory: String) throws(StoreError) {
        let path = stateDirectory + "/lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("cannot open \(path): \(WALDirectory.error())") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let busy = errno == EWOULDBLOCK
            let message = WALDirectory.error()
            close(fd)
            if busy { throw .locked("\(stateDirectory) is in use by another keyholed (\(path) is locked)") }
            throw .io("cannot lock \(path): \(message)")
        }
        self.fd = fd
    }

    /// Gives the lock up before the store goes away (tests reopen a directory in one process).
    func release() {
        if !released.exchange(true, ordering: .relaxed) { close(fd) }
    }

    deinit { release() }
}
