/*
 * lean-load: a load generator lean enough that the server, not the client, is the bottleneck (issue 31).
 *
 * One thread on epoll, N connections over a Unix socket, D requests in flight on each, speaking either
 * keyholed's protocol (4-byte big-endian length, then one JSON object) or Redis's RESP, so that both
 * servers meet the same client. Requests are made once, before the run: a request costs this client a
 * copy into the connection's write buffer and its share of one write() per connection per event-loop
 * pass; an answer costs finding its end. No allocation per request.
 *
 *   lean-load --socket PATH [--redis] [--op OP] [--args FILE] [--connections N] [--depth D]
 *             [--seconds S] [--warmup S] [--server-pid PID] [--keys N] [--key-prefix P] [--value-bytes B]
 *             [--count-file FILE]
 *
 * keyholed: --op ping (default), session.get, token.verify or session.create; with --args FILE, one
 * request per line (a session token for session.get, an identity token for token.verify), cycled over
 * in order; session.create makes sessions for --keys subjects PREFIX-0 .. PREFIX-N-1 of issuer local.
 * Redis: --op GET (default), HGETALL or SET over keys PREFIX:0 .. PREFIX:N-1 (SET writes B bytes).
 *
 * Prints one JSON object: answered, failed, seconds, per_second, and, with --server-pid, the server's
 * CPU nanoseconds per answered request (every thread's run time from /proc/PID/task/x/schedstat) and
 * the share of a core it used; always this client's own CPU share, to show which side is the
 * bottleneck. With --count-file (the file malloc_count.so keeps for the server), the server's heap
 * allocations per answered request, counted over the same window (after the warm-up, so that no
 * connection's set-up is in it). Exits 1 when any answer is an error: a benchmark of failures
 * measures nothing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_CAPACITY (1 << 20)
/* An answer must fit the read buffer whole: a bigger one is reported, never taken for a close. */
#define MAX_ANSWER (READ_CAPACITY - 64)

struct request {
    char *bytes;
    size_t length;
};

struct connection {
    int fd;
    char *in;
    size_t in_used;
    char *out;
    size_t out_used, out_capacity, out_sent;
    long in_flight;
};

static int redis_mode;
static struct request *requests;
static size_t request_count, next_request;
static long answered, failed;
static int counting;
static int depth = 1;

static void die(const char *what) {
    fprintf(stderr, "lean-load: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void usage(void) {
    fprintf(stderr, "usage: lean-load --socket PATH [--redis] [--op OP] [--args FILE] [--connections N] "
                    "[--depth D] [--seconds S] [--warmup S] [--server-pid PID] [--keys N] "
                    "[--key-prefix P] [--value-bytes B] [--count-file FILE]\n");
    exit(2);
}

static double now_seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A process's threads and their run times (ns, schedstat's first field), to count the CPU a window
 * took: a thread's time is counted from the window's start (or its birth) to the window's end. A sum over
 * the threads alive at each end would subtract the whole life of a thread that exits inside the window
 * (libdispatch's workers come and go). What a thread that exits inside the window ran in it is lost. */
#define MAX_THREADS 1024
struct run_times {
    int count;
    int tid[MAX_THREADS];
    long long ns[MAX_THREADS];
};

static void read_run_times(int pid, struct run_times *times) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *tasks = opendir(path);
    if (!tasks) die("open the server's /proc task list");
    times->count = 0;
    struct dirent *entry;
    while ((entry = readdir(tasks)) && times->count < MAX_THREADS) {
        if (entry->d_name[0] == '.') continue;
        char stat_path[300];
        snprintf(stat_path, sizeof stat_path, "/proc/%d/task/%s/schedstat", pid, entry->d_name);
        FILE *file = fopen(stat_path, "r");
        if (!file) continue; /* a thread that ended meanwhile */
        long long run = 0;
        if (fscanf(file, "%lld", &run) == 1) {
            times->tid[times->count] = atoi(entry->d_name);
            times->ns[times->count] = run;
            times->count++;
        }
        fclose(file);
    }
    closedir(tasks);
}

static long long run_ns_between(const struct run_times *start, const struct run_times *end) {
    long long total = 0;
    for (int i = 0; i < end->count; i++) {
        long long before = 0;
        for (int j = 0; j < start->count; j++) {
            if (start->tid[j] == end->tid[i]) {
                before = start->ns[j];
                break;
            }
        }
        total += end->ns[i] - before;
    }
    return total;
}

/* malloc_count.so's counts (allocations, bytes, frees) in the file it maps, or zeros without one. */
static void read_counts(const char *path, unsigned long long counts[3]) {
    counts[0] = counts[1] = counts[2] = 0;
    if (!path) return;
    FILE *file = fopen(path, "rb");
    if (!file) die(path);
    if (fread(counts, sizeof counts[0], 3, file) != 3) {
        fprintf(stderr, "lean-load: %s holds no counts\n", path);
        exit(2);
    }
    fclose(file);
}

static void add_request(const char *bytes, size_t length) {
    requests = realloc(requests, (request_count + 1) * sizeof *requests);
    if (!requests) die("realloc");
    requests[request_count].bytes = malloc(length);
    if (!requests[request_count].bytes) die("malloc");
    memcpy(requests[request_count].bytes, bytes, length);
    requests[request_count].length = length;
    request_count++;
}

/* One keyholed frame; the argument (a token) is JSON-safe: tokens are base64url and dots. */
static void add_keyhole_request(const char *op, const char *argument_name, const char *argument, size_t id) {
    char body[16384];
    int length;
    if (argument)
        length = snprintf(body, sizeof body, "{\"id\":%zu,\"op\":\"%s\",\"args\":{\"%s\":\"%s\"}}", id, op,
                          argument_name, argument);
    else
        length = snprintf(body, sizeof body, "{\"id\":%zu,\"op\":\"%s\"}", id, op);
    if (length < 0 || (size_t)length >= sizeof body) {
        fprintf(stderr, "lean-load: an argument is too long\n");
        exit(2);
    }
    for (const char *p = argument; p && *p; p++) {
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) {
            fprintf(stderr, "lean-load: an argument needs JSON escaping, which this client does not do\n");
            exit(2);
        }
    }
    char frame[16388];
    frame[0] = (char)((length >> 24) & 0xff);
    frame[1] = (char)((length >> 16) & 0xff);
    frame[2] = (char)((length >> 8) & 0xff);
    frame[3] = (char)(length & 0xff);
    memcpy(frame + 4, body, (size_t)length);
    add_request(frame, (size_t)length + 4);
}

static void add_redis_request(const char *command, const char *key, size_t value_bytes) {
    char buffer[8192];
    int length;
    size_t key_length = strlen(key);
    if (value_bytes) {
        length = snprintf(buffer, sizeof buffer, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(command),
                          command, key_length, key, value_bytes);
        memset(buffer + length, 'v', value_bytes);
        length += (int)value_bytes;
        memcpy(buffer + length, "\r\n", 2);
        length += 2;
    } else {
        length = snprintf(buffer, sizeof buffer, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(command), command,
                          key_length, key);
    }
    add_request(buffer, (size_t)length);
}

/* Where a RESP reply starting at `p` ends: its length, 0 when incomplete, -1 when it is an error
 * reply (its length is then in *error_length), -2 when it is malformed. */
static long resp_reply(const char *p, size_t available, long *error_length) {
    const char *end = memchr(p, '\n', available);
    if (!end) return 0;
    size_t line = (size_t)(end - p) + 1;
    long n;
    switch (p[0]) {
    case '+':
    case ':':
        return (long)line;
    case '-':
        *error_length = (long)line;
        return -1;
    case '$':
        n = strtol(p + 1, NULL, 10);
        if (n < 0) return (long)line;
        if (n > MAX_ANSWER) return -3;
        return available >= line + (size_t)n + 2 ? (long)(line + (size_t)n + 2) : 0;
    case '*': {
        n = strtol(p + 1, NULL, 10);
        size_t used = line;
        for (long i = 0; i < n; i++) {
            long element_error = 0;
            long element = resp_reply(p + used, available - used, &element_error);
            if (element == 0) return 0;
            if (element < 0) return element == -3 ? -3 : -2;
            used += (size_t)element;
            if (used >= available && i + 1 < n) return 0;
        }
        return (long)used;
    }
    default:
        return -2;
    }
}

static void queue_requests(struct connection *c, long count) {
    for (long i = 0; i < count; i++) {
        struct request *r = &requests[next_request];
        next_request = next_request + 1 == request_count ? 0 : next_request + 1;
        if (c->out_used + r->length > c->out_capacity) {
            c->out_capacity = (c->out_used + r->length) * 2;
            c->out = realloc(c->out, c->out_capacity);
            if (!c->out) die("realloc");
        }
        memcpy(c->out + c->out_used, r->bytes, r->length);
        c->out_used += r->length;
        c->in_flight++;
    }
}

static int flush_out(struct connection *c) {
    while (c->out_sent < c->out_used) {
        ssize_t n = write(c->fd, c->out + c->out_sent, c->out_used - c->out_sent);
        if (n < 0) {
            if (errno == EAGAIN) return 1;
            if (errno == EINTR) continue;
            die("write");
        }
        c->out_sent += (size_t)n;
    }
    c->out_used = c->out_sent = 0;
    return 0;
}

/* Reads what is there, counts each whole answer, and queues one new request per answer. */
static void on_readable(struct connection *c) {
    for (;;) {
        size_t asked = READ_CAPACITY - c->in_used;
        ssize_t n = read(c->fd, c->in + c->in_used, asked);
        if (n < 0) {
            if (errno == EAGAIN) break;
            if (errno == EINTR) continue;
            die("read");
        }
        if (n == 0) {
            fprintf(stderr, "lean-load: the server closed a connection\n");
            exit(1);
        }
        c->in_used += (size_t)n;
        size_t at = 0;
        long done = 0;
        for (;;) {
            size_t available = c->in_used - at;
            const char *p = c->in + at;
            if (redis_mode) {
                long error_length = 0;
                long length = resp_reply(p, available, &error_length);
                if (length == 0) break;
                if (length == -3) {
                    fprintf(stderr, "lean-load: a reply is past this client's limit of %d bytes\n", MAX_ANSWER);
                    exit(1);
                }
                if (length == -2) {
                    fprintf(stderr, "lean-load: malformed RESP reply\n");
                    exit(1);
                }
                if (length == -1) {
                    if (counting) failed++;
                    length = error_length;
                }
                at += (size_t)length;
            } else {
                if (available < 4) break;
                uint32_t length = ((uint32_t)(unsigned char)p[0] << 24) | ((uint32_t)(unsigned char)p[1] << 16) |
                                  ((uint32_t)(unsigned char)p[2] << 8) | (uint32_t)(unsigned char)p[3];
                if (length > MAX_ANSWER) {
                    fprintf(stderr, "lean-load: an answer of %u bytes is past this client's limit\n", length);
                    exit(1);
                }
                if (available < 4 + (size_t)length) break;
                /* An answer's "ok" comes right after its id; an error answer has "ok":false. */
                size_t look = length < 48 ? length : 48;
                if (!memmem(p + 4, look, "\"ok\":true", 9) && counting) failed++;
                at += 4 + (size_t)length;
            }
            done++;
        }
        if (at) {
            memmove(c->in, c->in + at, c->in_used - at);
            c->in_used -= at;
        }
        c->in_flight -= done;
        if (counting) answered += done;
        queue_requests(c, done);
        if ((size_t)n < asked) break; /* the socket is drained */
    }
}

int main(int argc, char **argv) {
    const char *socket_path = NULL, *op = NULL, *args_file = NULL, *key_prefix = "kh", *count_file = NULL;
    int connections = 16, server_pid = 0;
    double seconds = 5, warmup = 0.5;
    long keys = 100000;
    size_t value_bytes = 256;
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i];
        if (!strcmp(name, "--redis")) {
            redis_mode = 1;
            continue;
        }
        if (i + 1 >= argc) usage();
        const char *value = argv[++i];
        if (!strcmp(name, "--socket")) socket_path = value;
        else if (!strcmp(name, "--op")) op = value;
        else if (!strcmp(name, "--args")) args_file = value;
        else if (!strcmp(name, "--connections")) connections = atoi(value);
        else if (!strcmp(name, "--depth")) depth = atoi(value);
        else if (!strcmp(name, "--seconds")) seconds = atof(value);
        else if (!strcmp(name, "--warmup")) warmup = atof(value);
        else if (!strcmp(name, "--server-pid")) server_pid = atoi(value);
        else if (!strcmp(name, "--keys")) keys = atol(value);
        else if (!strcmp(name, "--key-prefix")) key_prefix = value;
        else if (!strcmp(name, "--value-bytes")) value_bytes = (size_t)atol(value);
        else if (!strcmp(name, "--count-file")) count_file = value;
        else usage();
    }
    if (!socket_path || connections < 1 || depth < 1 || seconds <= 0 || keys < 1 || value_bytes > 4096) usage();
    /* A server that closes must end the run with its message, not kill this process with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (!op) op = redis_mode ? "GET" : "ping";

    if (redis_mode) {
        int set = !strcmp(op, "SET");
        if (!set && strcmp(op, "GET") && strcmp(op, "HGETALL")) usage();
        char key[256];
        for (long k = 0; k < keys; k++) {
            snprintf(key, sizeof key, "%s:%ld", key_prefix, k);
            add_redis_request(op, key, set ? value_bytes : 0);
        }
    } else if (!strcmp(op, "session.create")) {
        char subject[256];
        for (long k = 0; k < keys; k++) {
            snprintf(subject, sizeof subject, "%s-%ld", key_prefix, k);
            char body[512];
            int length = snprintf(body, sizeof body,
                                  "{\"id\":%ld,\"op\":\"session.create\",\"args\":{\"sub\":\"%s\",\"issuer\":\"local\"}}",
                                  k + 1, subject);
            char frame[516] = {(char)((length >> 24) & 0xff), (char)((length >> 16) & 0xff),
                               (char)((length >> 8) & 0xff), (char)(length & 0xff)};
            memcpy(frame + 4, body, (size_t)length);
            add_request(frame, (size_t)length + 4);
        }
    } else if (args_file) {
        const char *argument_name;
        if (!strcmp(op, "session.get")) argument_name = "session";
        else if (!strcmp(op, "token.verify")) argument_name = "token";
        else usage();
        FILE *file = fopen(args_file, "r");
        if (!file) die(args_file);
        char *line = NULL;
        size_t capacity = 0;
        ssize_t length;
        while ((length = getline(&line, &capacity, file)) > 0) {
            while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) line[--length] = 0;
            if (length) add_keyhole_request(op, argument_name, line, request_count + 1);
        }
        free(line);
        fclose(file);
    } else {
        if (strcmp(op, "ping")) usage();
        for (size_t id = 1; id <= 64; id++) add_keyhole_request(op, NULL, NULL, id);
    }
    if (!request_count) {
        fprintf(stderr, "lean-load: no requests\n");
        return 2;
    }

    int poll = epoll_create1(0);
    if (poll < 0) die("epoll_create1");
    struct connection *all = calloc((size_t)connections, sizeof *all);
    if (!all) die("calloc");
    for (int i = 0; i < connections; i++) {
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        if (strlen(socket_path) >= sizeof address.sun_path) usage();
        strcpy(address.sun_path, socket_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) die("connect");
        if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) die("fcntl");
        all[i].fd = fd;
        all[i].in = malloc(READ_CAPACITY);
        if (!all[i].in) die("malloc");
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = &all[i]};
        if (epoll_ctl(poll, EPOLL_CTL_ADD, fd, &event) < 0) die("epoll_ctl");
        queue_requests(&all[i], depth);
        if (flush_out(&all[i])) {
            event.events = EPOLLIN | EPOLLOUT;
            epoll_ctl(poll, EPOLL_CTL_MOD, fd, &event);
        }
    }

    struct epoll_event events[256];
    double start = now_seconds(CLOCK_MONOTONIC);
    double measure_from = start + warmup, measure_until = measure_from + seconds;
    double began = 0, client_cpu_began = 0;
    static struct run_times server_began, server_ended;
    unsigned long long counts_began[3], counts_ended[3];
    for (;;) {
        double now = now_seconds(CLOCK_MONOTONIC);
        if (!counting && now >= measure_from) {
            counting = 1;
            began = now;
            client_cpu_began = now_seconds(CLOCK_PROCESS_CPUTIME_ID);
            if (server_pid) read_run_times(server_pid, &server_began);
            read_counts(count_file, counts_began);
        }
        if (counting && now >= measure_until) break;
        int ready = epoll_wait(poll, events, 256, 100);
        if (ready < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < ready; i++) {
            struct connection *c = events[i].data.ptr;
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
            int pending = flush_out(c);
            struct epoll_event event = {.events = EPOLLIN | (pending ? EPOLLOUT : 0), .data.ptr = c};
            if (pending || (events[i].events & EPOLLOUT)) epoll_ctl(poll, EPOLL_CTL_MOD, c->fd, &event);
        }
    }
    double ended = now_seconds(CLOCK_MONOTONIC);
    double client_cpu = now_seconds(CLOCK_PROCESS_CPUTIME_ID) - client_cpu_began;
    long long server_ns = 0;
    if (server_pid) {
        read_run_times(server_pid, &server_ended);
        server_ns = run_ns_between(&server_began, &server_ended);
    }
    read_counts(count_file, counts_ended);
    double elapsed = ended - began;

    printf("{\"client\": \"lean-load\", \"protocol\": \"%s\", \"op\": \"%s\", \"connections\": %d, \"depth\": %d, "
           "\"answered\": %ld, \"failed\": %ld, \"seconds\": %.3f, \"per_second\": %.0f, "
           "\"client_cpu_share\": %.3f",
           redis_mode ? "redis" : "keyhole", op, connections, depth, answered, failed, elapsed,
           (double)answered / elapsed, client_cpu / elapsed);
    if (server_pid && answered)
        printf(", \"server_cpu_ns_per_request\": %.0f, \"server_cpu_share\": %.3f", (double)server_ns / (double)answered,
               (double)server_ns / 1e9 / elapsed);
    if (count_file && answered)
        printf(", \"allocations_per_request\": %.3f, \"allocated_bytes_per_request\": %.0f",
               (double)(counts_ended[0] - counts_began[0]) / (double)answered,
               (double)(counts_ended[1] - counts_began[1]) / (double)answered);
    printf("}\n");
    return failed ? 1 : 0;
}
