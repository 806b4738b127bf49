import KeyholeProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The output of a transfer run, `item<TAB>answer` per line: held under an exclusive lock for the
/// run (two runs appending to one file would each skip nothing of the other's work and interleave),
/// its complete lines the items already done, each new line appended and synced before the next item.
final class TransferOutput {
    /// Why the output cannot be used, with the exit status to end with.
    struct Failure: Error {
        let message: String
        let exitCode: Int32
    }

    let path: String
    /// The first column of every complete two-column line, by its bytes: two subs that differ only
    /// in Unicode normalisation are two users.
    let done: Set<ExactString>
    /// Whether an incomplete last line, left by a run cut off mid-write, was cut off.
    let cutPartialLine: Bool
    private let descriptor: Int32

    init(path: String) throws(Failure) {
        let descriptor = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure(message: "cannot open \(path): \(Self.reason())", exitCode: 1) }
        do throws(Failure) {
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                throw errno == EWOULDBLOCK
                    ? Failure(message: "\(path) is being written by another run; let it end first", exitCode: 75)
                    : Failure(message: "cannot lock \(path): \(Self.reason())", exitCode: 1)
            }
            let contents = try Self.contents(of: descriptor, path: path)
            let end = contents.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
            if end < contents.count {
                guard ftruncate(descriptor, off_t(end)) == 0, fsync(descriptor) == 0 else {
                    throw Failure(message: "cannot cut the incomplete last line of \(path): \(Self.reason())", exitCode: 1)
                }
            }
            var done = Set<ExactString>()
            for line in contents[..<end].split(separator: UInt8(ascii: "\n")) {
                let fields = line.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false)
                if fields.count == 2, !fields[0].isEmpty, !fields[1].isEmpty { done.insert(ExactString(String(decoding: fields[0], as: UTF8.self))) }
            }
            self.path = path
            self.done = done
            self.cutPartialLine = end < contents.count
            self.descriptor = descriptor
        } catch {
            close(descriptor)
            throw error
        }
    }

    deinit { close(descriptor) }

    /// Appends `item<TAB>answer` and syncs it: once this returns, a rerun skips the item.
    func append(_ item: String, _ answer: String) throws(Failure) {
        let line = Array("\(item)\t\(answer)\n".utf8)
        var written = 0
        while written < line.count {
            let count = line.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(message: "cannot write to \(path): \(Self.reason())", exitCode: 1)
            }
            written += count
        }
        guard fsync(descriptor) == 0 else { throw Failure(message: "cannot sync \(path): \(Self.reason())", exitCode: 1) }
    }

    private static func contents(of descriptor: Int32, path: String) throws(Failure) -> [UInt8] {
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(contents.count)) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(message: "cannot read \(path): \(reason())", exitCode: 1)
            }
            if count == 0 { return contents }
            contents += chunk[..<count]
        }
    }

    private static func reason() -> String { String(cString: strerror(errno)) }
}
