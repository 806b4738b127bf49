#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A dedicated thread for work that blocks in the kernel (pwrite, fdatasync): on Swift's cooperative
/// pool it would hold up one of only a few threads (two on a two-core host).
///
/// On Linux the thread runs as SCHED_BATCH, under a name `top -H` shows. A batch thread that wakes
/// (an fdatasync returned) does not preempt the thread running on its core, usually the event loop:
/// it waits for the next scheduling point, and meanwhile more changes queue for its next sync. On the
/// two-core host with 64 clients doing durable session.create, that took the event loop's
/// involuntary context switches from about 40 000 to 9 000 in 5 s, the syncs from 57 000 to 33 000,
/// and the throughput from 59.6k to 64.3k per second (4 interleaved rounds against the same build
/// without it). It costs latency only while the CPUs
/// are saturated, by at most a scheduler slice; an idle core runs the thread at once.
enum StoreThread {
    private final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Starts `body` on a new detached thread called `name` (at most 15 bytes: the kernel's limit).
    static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box({
            becomeBackgroundThread(name: name)
            body()
        })).toOpaque()
        #if canImport(Glibc)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        let result = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
            box.body()
            return nil
        }, box)
        precondition(result == 0, "pthread_create failed: \(result)")
        #if canImport(Glibc)
        pthread_detach(thread)
        #else
        pthread_detach(thread!)
        #endif
    }
}

extension StoreThread {
    /// Names the calling thread and makes it SCHED_BATCH; either may fail (a seccomp filter, an old
    /// kernel) and the thread then runs as it was, which is only slower.
    private static func becomeBackgroundThread(name: String) {
        #if os(Linux)
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        if fd >= 0 {
            let bytes = Array(name.utf8.prefix(15))
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        // SCHED_BATCH (3) is not exported by Glibc's module: <sched.h> defines it only under _GNU_SOURCE.
        let schedBatch: Int32 = 3
        var parameters = sched_param()
        parameters.sched_priority = 0
        _ = pthread_setschedparam(pthread_self(), schedBatch, &parameters)
        #endif
    }
}
