#ifndef CKEYHOLE_LINUX_SHIM_H
#define CKEYHOLE_LINUX_SHIM_H

// Linux calls Swift's Glibc module leaves out, for keyholed's own event loop (issue 31,
// Sources/KeyholeServer/REQUEST_LOOP.md) and keyhole-bench's raw-floor-server: epoll, eventfd, and
// accept4, which glibc declares only under _GNU_SOURCE, a macro Glibc's module was built without.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sys/socket.h>

static inline int ckeyhole_accept4(int fd, int flags) {
    extern int accept4(int, struct sockaddr *, socklen_t *, int);
    return accept4(fd, 0, 0, flags);
}

// Names a thread (15 bytes show), as top -H and /proc/PID/task/TID/comm show it: named by its
// creator, it has its name before anyone can see it.
static inline int ckeyhole_name_thread(pthread_t thread, const char *name) {
    extern int pthread_setname_np(pthread_t, const char *);
    return pthread_setname_np(thread, name);
}

#endif
