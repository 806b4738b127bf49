/*
 * dispatch-main-shim: lets valgrind run keyholed, for instructions per request (issue 31,
 * Scripts/ab_instructions.py).
 *
 *   LD_PRELOAD=.build/lean/dispatch_main_shim.so valgrind --tool=callgrind keyholed ...
 *
 * A Swift program with an async main ends its main thread in libdispatch's dispatch_main(), which
 * calls pthread_exit() and leaves the main queue to dispatch. Valgrind 3.19 (Debian 12) then dies of
 * an internal SIGSEGV as the next thread starts: a five-line async main does it, a synchronous main
 * with a semaphore does not. This dispatch_main() keeps the main thread and drains the main queue
 * on it, as CoreFoundation's run loop does on Linux: wait on the main queue's eventfd, clear it, then
 * run what the queue holds. Only the thread that runs main-actor work changes (keyholed's is idle
 * while it serves); its loops, tasks and system calls are the same, so its instructions per request
 * are the shipped build's. Unlike the real one, it does not block signals on the main thread: a
 * signal may interrupt its poll (EINTR, waited again), and keyholed's handlers run as before.
 *
 * The two functions below are libdispatch's exports for that run loop; they are resolved in the
 * process that loads this library (keyholed links libdispatch), so it links against nothing.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

extern int _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *message);

void dispatch_main(void) __attribute__((noreturn));

void dispatch_main(void) {
    struct pollfd main_queue = { .fd = _dispatch_get_main_queue_handle_4CF(), .events = POLLIN };
    for (;;) {
        if (poll(&main_queue, 1, -1) < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "dispatch_main_shim: poll: %s\n", strerror(errno));
            abort();
        }
        if (main_queue.revents & (POLLERR | POLLNVAL)) {
            fprintf(stderr, "dispatch_main_shim: the main queue's descriptor failed\n");
            abort();
        }
        // Cleared before draining, as CoreFoundation does: a wake-up left set would make every poll
        // return at once, and the thread spin. The descriptor is non-blocking: nothing to read is fine.
        eventfd_t wakeups;
        (void)eventfd_read(main_queue.fd, &wakeups);
        _dispatch_main_queue_callback_4CF(0);
    }
}
