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
 * on it, as Foundation's run loop does on Linux: wait on the main queue's descriptor, then run what
 * it holds. Only the thread that runs main-actor work changes; keyholed's own loops, tasks and
 * system calls are the same, so its instructions per request are the shipped build's.
 *
 * The two functions below are libdispatch's exports for that run loop; they are resolved in the
 * process that loads this library (keyholed links libdispatch), so it links against nothing.
 */
#include <errno.h>
#include <poll.h>

extern int _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *message);

void dispatch_main(void) __attribute__((noreturn));

void dispatch_main(void) {
    struct pollfd main_queue = { .fd = _dispatch_get_main_queue_handle_4CF(), .events = POLLIN };
    for (;;) {
        if (poll(&main_queue, 1, -1) < 0 && errno != EINTR) continue;
        _dispatch_main_queue_callback_4CF(0);
    }
}
