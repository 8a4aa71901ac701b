// How long the kernel takes to send a timed write on an idle host against a busy one, and
// whether warming its TCP path first evens the two out (README "Schemes", issue 12).
//
// Every 20 ms, at real-time priority, writes SIZE bytes to a loopback TCP socket whose far end
// a thread drains, and times the write() calls. WARM says what happens WARM_US before each
// instant: 0 nothing, 1 64 bytes written to another loopback TCP socket (what the proxy does,
// crates/cloak-proxy/src/warm_send.rs), 2 SIZE bytes to it, 3 64 bytes to a Unix socketpair,
// 4 64 bytes to /dev/null. Run it idle, then while e.g. `redis-benchmark -t set -P 16 -c 50`
// loads an unrelated Redis:
//
//   gcc -O2 -o timed-writer scripts/timed-writer.c -lpthread
//   ./timed-writer 45000 0 200 200 && ./timed-writer 45000 1 200 200
//
// Measured on the project's 2-core machine (p50 of write()): 84 µs idle against 32 µs loaded
// without a warm-up; with WARM 1, 20–23 µs idle and 21 µs loaded; WARM 3 or 4, 39–50 µs idle.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define INTERVAL_US 20000.0

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *drain(void *fd) {
    char sink[1 << 16];
    while (read((int)(long)fd, sink, sizeof sink) > 0) {
    }
    return NULL;
}

// The sending end of a loopback TCP connection whose far end a thread drains.
static int drained_tcp(void) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    pthread_t reader;
    if (bind(listener, (void *)&addr, sizeof addr) || listen(listener, 1) ||
        getsockname(listener, (void *)&addr, &len)) {
        perror("listen");
        exit(1);
    }
    int sender = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(sender, (void *)&addr, sizeof addr)) {
        perror("connect");
        exit(1);
    }
    setsockopt(sender, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_create(&reader, NULL, drain, (void *)(long)accept(listener, NULL, NULL));
    return sender;
}

// Sleeps, then spins, until `at`.
static void wait_until(double at) {
    while (now_us() < at) {
        if (at - now_us() > 2000) usleep(1000);
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SIZE WARM WARM_US ROUNDS\n", argv[0]);
        return 2;
    }
    int size = atoi(argv[1]), warm = atoi(argv[2]), rounds = atoi(argv[4]);
    double warm_us = atof(argv[3]);
    struct sched_param priority = {.sched_priority = 10};
    if (sched_setscheduler(0, SCHED_FIFO, &priority)) perror("SCHED_FIFO (timings will spread)");

    int timed = drained_tcp(), warm_tcp = drained_tcp(), unix_pair[2];
    int dev_null = open("/dev/null", O_WRONLY);
    pthread_t reader;
    socketpair(AF_UNIX, SOCK_STREAM, 0, unix_pair);
    pthread_create(&reader, NULL, drain, (void *)(long)unix_pair[1]);
    char *bytes = calloc(size, 1);
    double *took = calloc(rounds, sizeof *took);

    double start = now_us() + INTERVAL_US;
    for (int i = 0; i < rounds; i++) {
        double at = start + i * INTERVAL_US;
        if (warm) {
            wait_until(at - warm_us);
            int fd = warm == 3 ? unix_pair[0] : warm == 4 ? dev_null : warm_tcp;
            if (write(fd, bytes, warm == 2 ? size : 64) < 0) perror("warm-up");
        }
        wait_until(at);
        double began = now_us();
        for (int sent = 0; sent < size;) {
            ssize_t n = write(timed, bytes + sent, size - sent);
            if (n <= 0) break;
            sent += n;
        }
        took[i] = now_us() - began;
    }
    qsort(took, rounds, sizeof *took, by_value);
    printf("size %d warm %d (%g µs before): write() µs p10/p50/p90 %.1f / %.1f / %.1f\n", size,
           warm, warm_us, took[rounds / 10], took[rounds / 2], took[rounds * 9 / 10]);
    return 0;
}
