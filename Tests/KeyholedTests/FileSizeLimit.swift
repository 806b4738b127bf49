import Foundation
import KeyholeTestSupport

/// Sets RLIMIT_FSIZE of process `pid` (`nil`: unlimited), as a full disk would stop its writes.
func setFileSizeLimit(of pid: pid_t, to bytes: UInt?) throws {
    typealias Prlimit = @convention(c) (pid_t, Int32, UnsafePointer<rlimit>?, UnsafeMutablePointer<rlimit>?) -> Int32
    guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "prlimit") else { throw RawConnection.Failure(description: "no prlimit") }
    let prlimit = unsafeBitCast(symbol, to: Prlimit.self)
    var limit = rlimit(rlim_cur: bytes.map { rlim_t($0) } ?? rlim_t.max, rlim_max: rlim_t.max)
    guard prlimit(pid, Int32(RLIMIT_FSIZE.rawValue), &limit, nil) == 0 else {
        throw RawConnection.Failure(description: "prlimit failed: \(errno)")
    }
}
