/* delay-proxy: a TCP relay for ssh's ProxyCommand that delays each direction by a fixed time,
 * keeping byte order, so benchmarks over loopback see a real login node's distance (this machine
 * has no netem).
 *
 *   delay-proxy DELAY_MS HOST PORT        (e.g. ProxyCommand delay-proxy 50 127.0.0.1 2223)
 *
 * Bytes read from stdin go to HOST:PORT, and bytes from HOST:PORT to stdout, each DELAY_MS after
 * they were read: a round trip through it costs 2 x DELAY_MS more. Bandwidth is not limited. An
 * end of input in one direction is passed on (shutdown) once the bytes before it are delivered;
 * the relay ends when both directions have ended.
 *
 * Built by the benchmarks that use it (cc -O2 -o delay-proxy delay-proxy.c). A TEST STAND-IN
 * for a network's latency; the cluster behind it is the real local one.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct chunk {
    struct chunk *next;
    double due;
    size_t len, off;
    char data[];
};

struct dir {
    int in, out;        /* read from in, write to out */
    int in_open;        /* in not at end yet */
    int ended;          /* end passed on */
    struct chunk *head, *tail;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "delay-proxy: %s: %s\n", what, strerror(errno));
    exit(255);
}

static void take(struct dir *d, double delay) {
    char buf[65536];
    ssize_t n = read(d->in, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) { d->in_open = 0; return; }
    struct chunk *c = malloc(sizeof *c + (size_t)n);
    if (!c) die("malloc");
    c->next = NULL;
    c->due = now() + delay;
    c->len = (size_t)n;
    c->off = 0;
    memcpy(c->data, buf, (size_t)n);
    if (d->tail) d->tail->next = c; else d->head = c;
    d->tail = c;
}

/* Write every chunk that is due; returns seconds until the next one (or -1: none queued). */
static double give(struct dir *d, int is_socket_out) {
    double t = now();
    while (d->head && d->head->due <= t) {
        struct chunk *c = d->head;
        ssize_t n = write(d->out, c->data + c->off, c->len - c->off);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("write");
        }
        c->off += (size_t)n;
        if (c->off < c->len) continue;
        d->head = c->next;
        if (!d->head) d->tail = NULL;
        free(c);
    }
    if (!d->head && !d->in_open && !d->ended) {
        if (is_socket_out) shutdown(d->out, SHUT_WR); else close(d->out);
        d->ended = 1;
    }
    return d->head ? d->head->due - t : -1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: delay-proxy DELAY_MS HOST PORT\n");
        return 2;
    }
    double delay = atof(argv[1]) / 1000.0;
    signal(SIGPIPE, SIG_IGN);
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(argv[2], argv[3], &hints, &res);
    if (rc) {
        fprintf(stderr, "delay-proxy: %s: %s\n", argv[2], gai_strerror(rc));
        return 255;
    }
    int s = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (s < 0) continue;
        if (connect(s, a->ai_addr, a->ai_addrlen) == 0) break;
        close(s);
        s = -1;
    }
    freeaddrinfo(res);
    if (s < 0) die("connect");
    struct dir up = {0, s, 1, 0, NULL, NULL}, down = {s, 1, 1, 0, NULL, NULL};
    while (!(up.ended && down.ended)) {
        struct pollfd p[2];
        int n = 0, iu = -1, id = -1;
        if (up.in_open) { p[n].fd = up.in; p[n].events = POLLIN; iu = n++; }
        if (down.in_open) { p[n].fd = down.in; p[n].events = POLLIN; id = n++; }
        double wu = give(&up, 1), wd = give(&down, 0);
        if (up.ended && down.ended) break;
        double w = wu < 0 ? wd : (wd < 0 ? wu : (wu < wd ? wu : wd));
        int timeout = w < 0 ? -1 : (int)(w * 1000.0) + 1;
        if (n == 0 && timeout < 0) break;
        if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR) die("poll");
        if (iu >= 0 && p[iu].revents) take(&up, delay);
        if (id >= 0 && p[id].revents) take(&down, delay);
    }
    return 0;
}
