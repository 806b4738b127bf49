/*
 * malloc-count: counts a process's heap allocations, for allocations per request (issue 31).
 *
 *   LD_PRELOAD=.build/lean/malloc_count.so MALLOC_COUNT_FILE=/tmp/counts keyholed ...
 *
 * Every malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign and valloc adds one to a
 * 64-bit counter, and its size to another, kept in MALLOC_COUNT_FILE (three little-endian unsigned
 * 64-bit words, mapped shared: allocations, bytes, frees): a reader takes the counts before and after
 * a run of requests and divides by the requests answered (lean-load --count-file does). The allocator itself is
 * glibc's, called through its __libc_* entry points, so nothing changes but the counting; a
 * process that runs without the variable set is not counted at all.
 *
 * As swift-nio's own allocation tests count (malloc-interposer), in a C library loaded first rather
 * than in the process's code: no build of the server differs from the one that ships.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

struct counts {
    _Atomic uint64_t allocations;
    _Atomic uint64_t bytes;
    _Atomic uint64_t frees;
};

static struct counts *counts;

__attribute__((constructor)) static void start_counting(void) {
    const char *path = getenv("MALLOC_COUNT_FILE");
    if (!path) return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    if (ftruncate(fd, sizeof(struct counts)) == 0) {
        void *mapped = mmap(NULL, sizeof(struct counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mapped != MAP_FAILED) counts = mapped;
    }
    close(fd);
}

static inline void count(size_t size) {
    struct counts *c = counts;
    if (c) {
        atomic_fetch_add_explicit(&c->allocations, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->bytes, size, memory_order_relaxed);
    }
}

void *malloc(size_t size) {
    count(size);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
    count(n * size);
    return __libc_calloc(n, size);
}

void *realloc(void *pointer, size_t size) {
    count(size);
    return __libc_realloc(pointer, size);
}

void free(void *pointer) {
    struct counts *c = counts;
    if (c && pointer) atomic_fetch_add_explicit(&c->frees, 1, memory_order_relaxed);
    __libc_free(pointer);
}

void *memalign(size_t alignment, size_t size) {
    count(size);
    return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
    count(size);
    return __libc_memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    /* glibc's checks: a power of two, a multiple of a pointer's size. */
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return 22; /* EINVAL */
    count(size);
    void *pointer = __libc_memalign(alignment, size);
    if (!pointer) return 12; /* ENOMEM */
    *out = pointer;
    return 0;
}

void *valloc(size_t size) {
    count(size);
    return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size);
}
