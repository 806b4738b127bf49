import ArgumentParser

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct Keygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a new store key: 32 random bytes, mode 0600, for [apple] store_key_file.",
        discussion: """
            keyholed encrypts the refresh tokens Apple issues with this key (AES-256-GCM) before they \
            reach its state directory. Keep it apart from the state directory's backups, and keep it: \
            without it, stored refresh tokens cannot be used (users then simply sign in again). \
            Refuses to overwrite an existing file. Does not need keyholed.
            """)

    @Argument(help: "The file to create.")
    var file: String

    func run() throws {
        var key = [UInt8](repeating: 0, count: 32)
        // getentropy: the kernel's CSPRNG, blocking only until it is seeded.
        guard key.withUnsafeMutableBytes({ getentropy($0.baseAddress!, $0.count) }) == 0 else {
            Output.error("keyhole keygen: the random number generator failed: \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        defer {
            key.withUnsafeMutableBytes { bytes in
                #if canImport(Glibc)
                explicit_bzero(bytes.baseAddress!, bytes.count)
                #else
                _ = memset_s(bytes.baseAddress!, bytes.count, 0, bytes.count)
                #endif
            }
        }
        // O_EXCL: never replace a key that may already protect stored tokens.
        let descriptor = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            Output.error("keyhole keygen: cannot create \(file): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        let written = key.withUnsafeBytes { write(descriptor, $0.baseAddress!, $0.count) }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == key.count, synced else {
            unlink(file)
            Output.error("keyhole keygen: cannot write \(file)")
            throw ExitCode(1)
        }
        // The new name durable too, not only its bytes.
        let parent = String(file.utf8.contains(UInt8(ascii: "/")) ? file[..<file.lastIndex(of: "/")!] : ".")
        let directory = open(parent.isEmpty ? "/" : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
        print("wrote a 32-byte store key to \(file) (mode 0600); give it to keyholed as [apple] store_key_file")
    }
}
