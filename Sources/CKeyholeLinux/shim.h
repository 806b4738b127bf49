#ifndef CKEYHOLE_LINUX_SHIM_H
#define CKEYHOLE_LINUX_SHIM_H

// Linux calls Swift's Glibc module leaves out, for a plain event loop (issue 31: keyhole-bench's
// raw-floor-server measures what one costs): epoll, and accept4, which glibc declares only under
// _GNU_SOURCE, a macro Glibc's module was built without.
#include <sys/epoll.h>
#include <sys/socket.h>

static inline int ckeyhole_accept4(int fd, int flags) {
    extern int accept4(int, struct sockaddr *, socklen_t *, int);
    return accept4(fd, 0, 0, flags);
}

#endif
