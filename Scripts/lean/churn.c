/*
 * churn: a client that opens connections as fast as keyholed lets it and misbehaves on each, for the
 * hostile benchmark (Scripts/bench.py --hostile-only, issue 32 item 1). Lean on purpose, as lean-load
 * is: blocking calls, nothing allocated per connection, so that what it measures is keyholed's cost
 * and not its own.
 *
 *   churn --socket PATH [--threads N] [--seconds S] [--mode bad-frame|ping] [--close-early]
 *
 * Each of N threads loops: connect, send (bad-frame: a frame header announcing 4 GiB, a frame error;
 * ping: one ping), read until keyholed closes (bad-frame, unless --close-early) or the first answer
 * came, close. Prints one JSON object: connections made, those keyholed refused on connect
 * (`overloaded` before any request), frame errors answered, pings answered, connects that failed,
 * the rate, and churn's own CPU time per connection (µs, user and system).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *socket_path;
static int ping_mode, close_early;
static double stop_at;
static atomic_long made, refused, frame_errors, pings, connect_failures;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Reads the first answer (up to 4 KiB of it) and, for a bad frame, on until end of file. */
/* Whether to go on: not once the socket is gone (nothing to churn against). */
static int one_connection(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        atomic_fetch_add(&connect_failures, 1);
        return 1;
    }
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, socket_path, strlen(socket_path) + 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int error = errno;
        atomic_fetch_add(&connect_failures, 1);
        close(fd);
        return error != ENOENT && error != ECONNREFUSED;
    }
    atomic_fetch_add(&made, 1);
    static const char bad[4] = {(char)0xff, (char)0xff, (char)0xff, (char)0xff};
    static const char body[] = "{\"op\":\"ping\",\"id\":1}";
    if (ping_mode) {
        char ping[4 + sizeof(body)];
        size_t length = sizeof(body) - 1;
        ping[0] = 0, ping[1] = 0, ping[2] = 0, ping[3] = (char)length;
        memcpy(ping + 4, body, length);
        if (send(fd, ping, 4 + length, MSG_NOSIGNAL) < 0) {
            close(fd);
            return 1;
        }
    } else if (send(fd, bad, sizeof(bad), MSG_NOSIGNAL) < 0) {
        close(fd);
        return 1;
    }
    char answer[4096];
    size_t have = 0;
    for (;;) {
        ssize_t count = read(fd, answer + have, sizeof(answer) - 1 - have);
        if (count <= 0) break;
        have += (size_t)count;
        if ((ping_mode || close_early) && have >= 4) {
            size_t length = ((size_t)(unsigned char)answer[0] << 24) | ((size_t)(unsigned char)answer[1] << 16) |
                            ((size_t)(unsigned char)answer[2] << 8) | (size_t)(unsigned char)answer[3];
            if (have >= 4 + length) break;
        }
        if (have == sizeof(answer) - 1) break;
    }
    answer[have] = 0;
    if (have > 4 && strstr(answer + 4, "\"overloaded\"")) atomic_fetch_add(&refused, 1);
    else if (have > 4 && strstr(answer + 4, "\"frame_too_large\"")) atomic_fetch_add(&frame_errors, 1);
    else if (have > 4 && strstr(answer + 4, "\"ok\":true")) atomic_fetch_add(&pings, 1);
    close(fd);
    return 1;
}

static void *loop(void *unused) {
    (void)unused;
    while (now() < stop_at && one_connection()) {
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2;
    double seconds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--close-early")) {
            close_early = 1;
            continue;
        }
        const char *value = i + 1 < argc ? argv[++i] : NULL;
        if (!value) socket_path = NULL, threads = 0;
        else if (!strcmp(argv[i - 1], "--socket")) socket_path = value;
        else if (!strcmp(argv[i - 1], "--threads")) threads = atoi(value);
        else if (!strcmp(argv[i - 1], "--seconds")) seconds = atof(value);
        else if (!strcmp(argv[i - 1], "--mode") && (!strcmp(value, "ping") || !strcmp(value, "bad-frame")))
            ping_mode = !strcmp(value, "ping");
        else threads = 0;
    }
    if (!socket_path || strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path) || threads < 1 ||
        threads > 256 || seconds <= 0) {
        fprintf(stderr, "usage: churn --socket PATH [--threads N] [--seconds S] [--mode bad-frame|ping] [--close-early]\n");
        return 2;
    }
    double started = now();
    stop_at = started + seconds;
    pthread_t workers[256];
    int started_threads = 0;
    while (started_threads < threads && pthread_create(&workers[started_threads], NULL, loop, NULL) == 0) started_threads++;
    if (started_threads < threads) fprintf(stderr, "churn: only %d of %d threads started\n", started_threads, threads);
    for (int i = 0; i < started_threads; i++) pthread_join(workers[i], NULL);
    if (started_threads == 0) return 1;
    double elapsed = now() - started;
    long total = atomic_load(&made);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
                 (double)usage.ru_stime.tv_usec / 1e6;
    printf("{\"connections\": %ld, \"refused\": %ld, \"frame_errors\": %ld, \"pings\": %ld, \"connect_failures\": %ld, "
           "\"seconds\": %.3f, \"per_second\": %.0f, \"cpu_us_per_connection\": %.1f}\n",
           total, atomic_load(&refused), atomic_load(&frame_errors), atomic_load(&pings), atomic_load(&connect_failures),
           elapsed, (double)total / elapsed, total ? cpu * 1e6 / (double)total : 0.0);
    return total > 0 ? 0 : 1; /* no connection at all: keyholed was not there */
}
