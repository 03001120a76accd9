/*
 * bench_nl_fanout: netlib's block fan-out alone, no gateway: the CPU one loop spends per
 * delivery when it queues the same shared nl_block_t on N connections and flushes.
 *
 * One nl_loop (the main thread) runs a server on 127.0.0.1; a drain thread opens N plain
 * sockets to it and reads everything that arrives (epoll, discarding the bytes). Once all N
 * are accepted the loop runs R rounds, each from a posted closure: one block of B bytes, a
 * reference queued on every connection with nl_conn_send_block_ref (one nl_block_ref_n per
 * round, as herald's fan-out does), then nl_conn_flush_loop, then the next round is posted, so
 * the loop polls its sockets between rounds. The figure is the loop thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID) over the R rounds divided by N x R deliveries, and its user-mode
 * part alone (getrusage RUSAGE_THREAD): netlib's own share, which the kernel's share (the
 * sends, most of the total) would otherwise drown. The drain thread's CPU is not counted. Wall time
 * and the loop's write counters are printed beside it.
 *
 * Each round leaves every queue empty when its flush returns (the sockets are drained faster
 * than they fill at these sizes; short_writes says if not), so each delivery takes a queue
 * and gives it back: the path issue 22 item 6 pools.
 *
 * Usage: bench_nl_fanout [--conns N] [--rounds R] [--bytes B] [--blocks K] [--no-batch]
 *        (defaults: 2000 connections, 300 rounds, 150 bytes, 1 block per round)
 * Prints one line: key=value figures. A program only, never a ctest case (STYLE.md §9).
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netlib/nl_block.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"

typedef struct bench_s {
    nl_loop_t *loop;
    nl_server_t *srv;
    size_t conns;
    size_t rounds;
    size_t bytes;
    size_t blocks;
    bool is_batched;
    nl_conn_t **srv_conns;
    size_t n_srv;
    size_t round;
    uint64_t cpu_start_ns;
    uint64_t wall_start_ns;
    uint64_t user_start_ns;
    uint64_t cpu_ns;
    uint64_t user_ns;
    uint64_t wall_ns;
    bool is_done;
    /* The drain thread's. */
    uint16_t port;
    uint64_t expect_bytes;
    uint64_t got_bytes; /* atomic */
} bench_t;

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calling thread's user-mode CPU time: what netlib's own code costs, without the
 * kernel's sends (which vary more from run to run on a shared VM than netlib's part). */
static uint64_t user_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "bench_nl_fanout: %s: %s\n", what, strerror(err < 0 ? -err : err));
    exit(1);
}

/* The receiving side: N blocking connects, then epoll reads until every byte arrived. */
static void *drain_main(void *arg)
{
    bench_t *b = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1", errno);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(b->port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int *fds = calloc(b->conns, sizeof(*fds));
    if (!fds)
        die("calloc", ENOMEM);
    for (size_t i = 0; i < b->conns; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)) < 0)
            die("connect", errno);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0)
            die("epoll_ctl", errno);
    }
    static char sink[65536];
    struct epoll_event evs[256];
    while (__atomic_load_n(&b->got_bytes, __ATOMIC_RELAXED) < b->expect_bytes) {
        int n = epoll_wait(ep, evs, 256, 10000);
        if (n <= 0)
            die("drain stalled", n < 0 ? errno : ETIMEDOUT);
        for (int i = 0; i < n; i++) {
            ssize_t r = recv(evs[i].data.fd, sink, sizeof(sink), MSG_DONTWAIT);
            if (r > 0)
                __atomic_add_fetch(&b->got_bytes, (uint64_t)r, __ATOMIC_RELAXED);
        }
    }
    for (size_t i = 0; i < b->conns; i++)
        close(fds[i]);
    free(fds);
    close(ep);
    return NULL;
}

static void round_run(void *arg);

static void round_next(bench_t *b)
{
    if (b->round == b->rounds) {
        b->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - b->cpu_start_ns;
        b->user_ns = user_ns() - b->user_start_ns;
        b->wall_ns = clock_ns(CLOCK_MONOTONIC) - b->wall_start_ns;
        b->is_done = true;
        return;
    }
    if (nl_loop_post(b->loop, round_run, b) < 0)
        die("nl_loop_post", ENOMEM);
}

static void round_run(void *arg)
{
    bench_t *b = arg;
    for (size_t k = 0; k < b->blocks; k++) {
        nl_block_t *blk = nl_block_new(b->bytes);
        if (!blk)
            die("nl_block_new", ENOMEM);
        memset(nl_block_data(blk), (int)('a' + b->round % 26), b->bytes);
        nl_block_ref_n(blk, b->n_srv);
        for (size_t i = 0; i < b->n_srv; i++) {
            int err = nl_conn_send_block_ref(b->srv_conns[i], blk);
            if (err < 0)
                die("nl_conn_send_block_ref", err);
        }
        nl_block_unref(blk);
    }
    nl_conn_flush_loop(b->loop);
    b->round++;
    round_next(b);
}

static void on_connected(nl_conn_t *c)
{
    bench_t *b = nl_conn_ctx(c);
    nl_conn_set_data(c, &b->srv_conns[b->n_srv]);
    b->srv_conns[b->n_srv++] = c;
    if (b->n_srv < b->conns)
        return;
    nl_conn_set_batch_sends(b->loop, b->is_batched);
    b->cpu_start_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    b->user_start_ns = user_ns();
    b->wall_start_ns = clock_ns(CLOCK_MONOTONIC);
    round_next(b);
}

/* The drain thread's closes end the connections; the slot forgets them. */
static void on_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    nl_conn_t **slot = nl_conn_data(c);
    *slot = NULL;
}

static const nl_conn_cbs_t bench_cbs = {.on_connected = on_connected, .on_close = on_close};

static size_t arg_size(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "bench_nl_fanout: %s needs a value\n", argv[*i]);
        exit(2);
    }
    return (size_t)strtoull(argv[++*i], NULL, 10);
}

int main(int argc, char **argv)
{
    bench_t b = {.conns = 2000, .rounds = 300, .bytes = 150, .blocks = 1, .is_batched = true};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--conns") == 0)
            b.conns = arg_size(argc, argv, &i);
        else if (strcmp(argv[i], "--rounds") == 0)
            b.rounds = arg_size(argc, argv, &i);
        else if (strcmp(argv[i], "--bytes") == 0)
            b.bytes = arg_size(argc, argv, &i);
        else if (strcmp(argv[i], "--blocks") == 0)
            b.blocks = arg_size(argc, argv, &i);
        else if (strcmp(argv[i], "--no-batch") == 0)
            b.is_batched = false;
        else {
            fprintf(stderr, "usage: bench_nl_fanout [--conns N] [--rounds R] [--bytes B] "
                            "[--blocks K] [--no-batch]\n");
            return 2;
        }
    }
    if (b.conns == 0 || b.bytes == 0 || b.blocks == 0)
        die("arguments", EINVAL);
    b.srv_conns = calloc(b.conns, sizeof(*b.srv_conns));
    if (!b.srv_conns)
        die("calloc", ENOMEM);
    int err = nl_loop_new(&b.loop, NULL);
    if (err < 0)
        die("nl_loop_new", err);
    nl_server_opts_t so = {
        .host = "127.0.0.1", .accept_loop = b.loop, .cbs = &bench_cbs, .arg = &b};
    if ((err = nl_server_new(&b.srv, &so)) < 0 || (err = nl_server_start(b.srv)) < 0)
        die("nl_server_new", err);
    b.port = nl_server_port(b.srv);
    b.expect_bytes = (uint64_t)b.conns * b.rounds * b.blocks * b.bytes;
    pthread_t drain;
    if ((err = pthread_create(&drain, NULL, drain_main, &b)) != 0)
        die("pthread_create", err);
    while (!b.is_done && (err = nl_loop_run_once(b.loop, -1)) == 0) {
    }
    if (err < 0)
        die("nl_loop_run_once", err);
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(b.loop, &cs);
    /* Keep writing until the drain thread has everything (queues that waited for a socket). */
    while (__atomic_load_n(&b.got_bytes, __ATOMIC_RELAXED) < b.expect_bytes)
        (void)nl_loop_run_once(b.loop, 10);
    pthread_join(drain, NULL);
    uint64_t deliveries = (uint64_t)b.conns * b.rounds * b.blocks;
    printf("conns=%zu rounds=%zu blocks=%zu bytes=%zu batched=%d deliveries=%llu "
           "cpu_ms=%.1f wall_ms=%.1f cpu_ns_per_delivery=%.1f user_ns_per_delivery=%.1f "
           "writev_calls=%llu batch_submits=%llu batch_sends=%llu short_writes=%llu\n",
           b.conns, b.rounds, b.blocks, b.bytes, b.is_batched ? 1 : 0,
           (unsigned long long)deliveries, b.cpu_ns / 1e6, b.wall_ns / 1e6,
           (double)b.cpu_ns / (double)deliveries, (double)b.user_ns / (double)deliveries,
           (unsigned long long)cs.writev_calls, (unsigned long long)cs.batch_submits,
           (unsigned long long)cs.batch_sends, (unsigned long long)cs.short_writes);
    for (size_t i = 0; i < b.n_srv; i++) {
        if (b.srv_conns[i])
            nl_conn_close(b.srv_conns[i], 0);
    }
    nl_server_close(b.srv);
    (void)nl_loop_run_once(b.loop, 0);
    err = nl_loop_free(b.loop);
    free(b.srv_conns);
    return err == 0 ? 0 : 1;
}
