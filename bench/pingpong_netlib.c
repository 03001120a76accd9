/*
 * pingpong_netlib: the classic pingpong throughput benchmark (muduo examples/pingpong, the
 * libevent and asio pingpong tests) on netlib, server and client in one program.
 *
 *   pingpong_netlib server --port P [--host H] [--threads T]
 *   pingpong_netlib client --port P [--host H] --conns N --block B --seconds S
 *
 * Each client connection sends one block of B bytes; the server echoes whatever it reads and
 * the client echoes it back, so B bytes per connection are always in flight. The client counts
 * the bytes it reads over S seconds, measured from the moment every connection is up, and
 * prints one line ending in "total_bytes=N mib_per_s=X" (N: bytes read over its whole run). The
 * same client drives the libevent server (pingpong_libevent.c), so the two servers are compared
 * under identical load.
 *
 * The server runs until SIGINT or SIGTERM, then prints its byte and writev counters on stderr.
 * Both sides set TCP_NODELAY, as muduo's pingpong does.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "netlib/nl_client.h"
#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_server.h"
#include "netlib/nl_signal.h"
#include "netlib/nl_timer.h"

#define MAX_THREADS 64
/* Every connection must be up within this, or the run fails instead of measuring less. */
#define CONNECT_DEADLINE_MS 15000

typedef struct {
    bool is_server;
    const char *host;
    uint16_t port;
    int threads;
    int conns;
    size_t block_bytes;
    double seconds;
} args_t;

static void usage(void)
{
    fprintf(stderr, "usage: pingpong_netlib server --port P [--host H] [--threads T]\n"
                    "       pingpong_netlib client --port P [--host H] --conns N --block B "
                    "--seconds S\n");
    exit(2);
}

static long parse_num(const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "pingpong_netlib: bad number '%s' (%ld..%ld)\n", s, lo, hi);
        exit(2);
    }
    return v;
}

static void parse_args(int argc, char **argv, args_t *a)
{
    *a = (args_t){
        .host = "127.0.0.1", .threads = 1, .conns = 1, .block_bytes = 16384, .seconds = 10};
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "server") == 0)
        a->is_server = true;
    else if (strcmp(argv[1], "client") != 0)
        usage();
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i];
        const char *v = argv[++i];
        if (strcmp(k, "--port") == 0)
            a->port = (uint16_t)parse_num(v, 1, 65535);
        else if (strcmp(k, "--host") == 0)
            a->host = v;
        else if (strcmp(k, "--threads") == 0)
            a->threads = (int)parse_num(v, 1, MAX_THREADS);
        else if (strcmp(k, "--conns") == 0)
            a->conns = (int)parse_num(v, 1, 100000);
        else if (strcmp(k, "--block") == 0)
            a->block_bytes = (size_t)parse_num(v, 1, 64L << 20);
        else if (strcmp(k, "--seconds") == 0)
            a->seconds = (double)parse_num(v, 1, 3600);
        else
            usage();
    }
    if (a->port == 0)
        usage();
}

/* Thousands of sockets need more than the usual 1024 descriptors. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Runs the loop until its closed handles are gone, bounded, so nl_loop_free can succeed. */
static int drain_and_free(nl_loop_t *loop)
{
    int rc = nl_loop_free(loop);
    for (int i = 0; rc == -EBUSY && i < 200; i++) {
        nl_loop_run_once(loop, 10);
        rc = nl_loop_free(loop);
    }
    return rc;
}

/* ---- server ------------------------------------------------------------------------------ */

/* The server's connections, one list per loop (indexed by loop id: 0 accept, 1.. IO), so a
 * signal can close them all and every loop is freed cleanly. Each list is touched only by its
 * loop's thread. */
typedef struct srv_conn_s {
    struct srv_conn_s *prev;
    struct srv_conn_s *next;
    nl_conn_t *conn;
} srv_conn_t;

static srv_conn_t srv_lists[MAX_THREADS + 1];
/* Summed by each IO loop's on_stop; the threads are stopped and joined one after another. */
static nl_conn_loop_stats_t srv_stats;

static void echo_on_connected(nl_conn_t *c)
{
    nl_conn_set_nodelay(c, true);
    srv_conn_t *n = malloc(sizeof *n);
    if (n == NULL) {
        nl_conn_close(c, -ENOMEM);
        return;
    }
    srv_conn_t *head = &srv_lists[nl_loop_id(nl_conn_loop(c))];
    n->conn = c;
    n->prev = head;
    n->next = head->next;
    head->next->prev = n;
    head->next = n;
    nl_conn_set_data(c, n);
}

/* Echo everything read. nl_conn_send writes straight to the socket when nothing is queued. */
static void echo_on_message(nl_conn_t *c, nl_buf_t *in)
{
    size_t n = nl_buf_readable(in);
    if (nl_conn_send(c, nl_buf_peek(in), n) < 0) {
        nl_conn_close(c, -ENOBUFS);
        return;
    }
    nl_buf_retrieve(in, n);
}

static void echo_on_close(nl_conn_t *c, int reason)
{
    srv_conn_t *n = nl_conn_data(c);
    NL_UNUSED(reason);
    if (n == NULL)
        return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    free(n);
}

static const nl_conn_cbs_t echo_cbs = {
    .on_connected = echo_on_connected,
    .on_message = echo_on_message,
    .on_close = echo_on_close,
};

/* Closes every connection of this loop; on_close unlinks each at the end of the iteration. */
static void srv_close_all(nl_loop_t *loop)
{
    srv_conn_t *head = &srv_lists[nl_loop_id(loop)];
    for (srv_conn_t *n = head->next; n != head; n = n->next)
        nl_conn_close(n->conn, 0);
}

static void srv_add_stats(nl_loop_t *loop)
{
    nl_conn_loop_stats_t st;
    nl_conn_get_loop_stats(loop, &st);
    srv_stats.bytes_in += st.bytes_in;
    srv_stats.bytes_out += st.bytes_out;
    srv_stats.writev_calls += st.writev_calls;
}

static void io_on_stop(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(arg);
    srv_add_stats(loop);
    srv_close_all(loop);
}

static void server_on_signal(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(signum);
    NL_UNUSED(arg);
    nl_loop_stop(nl_loop_current());
    nl_signal_close(s);
}

typedef struct {
    nl_loop_thread_t *threads[MAX_THREADS];
    nl_loop_t *loops[MAX_THREADS];
    int count;
} server_io_t;

static int start_io_threads(server_io_t *io, int count)
{
    for (int i = 0; i < count; i++) {
        nl_loop_thread_opts_t o = {
            .loop = {.id = i + 1}, .name = "pingpong-io", .cpu = -1, .on_stop = io_on_stop};
        int rc = nl_loop_thread_start(&io->threads[i], &o);
        if (rc < 0)
            return rc;
        io->loops[i] = nl_loop_thread_loop(io->threads[i]);
        io->count++;
    }
    return 0;
}

/* Stops the IO threads (closing their connections), then closes the accept loop's own
 * connections and frees it. Returns the first error. */
static int server_shutdown(nl_loop_t *loop, server_io_t *io, nl_server_t *srv)
{
    int rc = 0;
    for (int i = 0; i < io->count; i++) {
        int trc = nl_loop_thread_stop(io->threads[i]);
        if (trc < 0 && rc == 0)
            rc = trc;
    }
    if (srv != NULL)
        nl_server_close(srv);
    srv_add_stats(loop);
    srv_close_all(loop);
    int frc = drain_and_free(loop);
    return rc < 0 ? rc : frc;
}

static int run_server(const args_t *a)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    nl_signal_block(sigs, 2);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    for (int i = 0; i <= MAX_THREADS; i++)
        srv_lists[i].prev = srv_lists[i].next = &srv_lists[i];
    nl_loop_t *loop;
    int rc = nl_loop_new(&loop, NULL);
    if (rc < 0)
        return rc;
    /* --threads 1: the accept loop is the IO loop (one thread); more: separate IO threads. */
    server_io_t io = {.count = 0};
    size_t io_count = a->threads > 1 ? (size_t)a->threads : 0;
    nl_server_t *srv = NULL;
    nl_signal_t *sig = NULL;
    if (io_count > 0 && (rc = start_io_threads(&io, a->threads)) < 0)
        goto out;
    if ((rc = nl_signal_new(&sig, loop, sigs, 2, server_on_signal, NULL)) < 0)
        goto out;
    nl_server_opts_t so = {.host = a->host,
                           .port = a->port,
                           .accept_loop = loop,
                           .io_loops = io_count ? io.loops : NULL,
                           .io_loop_count = io_count,
                           .cbs = &echo_cbs};
    if ((rc = nl_server_new(&srv, &so)) < 0 || (rc = nl_server_start(srv)) < 0)
        goto out;
    nl_loop_run(loop);
    sig = NULL; /* closed by its own callback */
out:
    if (sig != NULL)
        nl_signal_close(sig);
    int src = server_shutdown(loop, &io, srv);
    fprintf(stderr, "pingpong_netlib server: bytes_in=%llu bytes_out=%llu writev_calls=%llu\n",
            (unsigned long long)srv_stats.bytes_in, (unsigned long long)srv_stats.bytes_out,
            (unsigned long long)srv_stats.writev_calls);
    return rc < 0 ? rc : src;
}

/* ---- client ------------------------------------------------------------------------------ */

typedef struct {
    const args_t *args;
    nl_loop_t *loop;
    nl_client_t **clients;
    char *block;
    int connected;
    int failed;
    uint64_t bytes_read;
    uint64_t start_ns;
    uint64_t start_bytes;
    double mib_per_s;
    nl_timer_t *timer;
    bool is_measuring;
    bool is_done;
} bench_t;

static void client_stop(bench_t *b)
{
    if (b->is_done)
        return;
    b->is_done = true;
    for (int i = 0; i < b->args->conns; i++)
        if (b->clients[i] != NULL)
            nl_client_close(b->clients[i]);
    if (b->timer != NULL)
        nl_timer_close(b->timer, NULL);
    nl_loop_stop(b->loop);
}

static void client_on_connected(nl_conn_t *c)
{
    bench_t *b = nl_conn_ctx(c);
    nl_conn_set_nodelay(c, true);
    b->connected++;
    if (nl_conn_send(c, b->block, b->args->block_bytes) < 0)
        nl_conn_close(c, -ENOBUFS);
    if (b->connected == b->args->conns) {
        /* Every connection is up: the measured interval starts now. */
        b->start_ns = nl_now_ns();
        b->start_bytes = b->bytes_read;
        b->is_measuring = true;
        nl_timer_start(b->timer, (uint64_t)(b->args->seconds * 1000), 0);
    }
}

static void client_on_message(nl_conn_t *c, nl_buf_t *in)
{
    bench_t *b = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    b->bytes_read += n;
    if (nl_conn_send(c, nl_buf_peek(in), n) < 0) {
        nl_conn_close(c, -ENOBUFS);
        return;
    }
    nl_buf_retrieve(in, n);
}

static void client_on_close(nl_conn_t *c, int reason)
{
    bench_t *b = nl_conn_ctx(c);
    if (b->is_done)
        return;
    fprintf(stderr, "pingpong_netlib client: connection closed early: %s\n",
            reason ? nl_strerror(reason) : "peer closed");
    b->failed++;
    client_stop(b);
}

static void client_on_retry(nl_client_t *cl, int status, bool will_retry, uint64_t delay_ms)
{
    bench_t *b = nl_client_arg(cl);
    NL_UNUSED(delay_ms);
    if (will_retry || b->is_done)
        return;
    fprintf(stderr, "pingpong_netlib client: connect failed: %s\n", nl_strerror(status));
    b->failed++;
    client_stop(b);
}

static const nl_conn_cbs_t client_cbs = {
    .on_connected = client_on_connected,
    .on_message = client_on_message,
    .on_close = client_on_close,
};

/* Fires twice: first as the connect deadline, then (restarted) at the end of the run. */
static void client_on_timer(nl_timer_t *t, void *arg)
{
    bench_t *b = arg;
    NL_UNUSED(t);
    if (!b->is_measuring) {
        fprintf(stderr, "pingpong_netlib client: only %d of %d connected in %d ms\n", b->connected,
                b->args->conns, CONNECT_DEADLINE_MS);
        b->failed++;
    } else {
        double secs = (double)(nl_now_ns() - b->start_ns) / 1e9;
        double mib = (double)(b->bytes_read - b->start_bytes) / (1024.0 * 1024.0);
        b->mib_per_s = mib / secs;
    }
    client_stop(b);
}

static int client_setup(bench_t *b)
{
    const args_t *a = b->args;
    int rc = nl_timer_new(&b->timer, b->loop, client_on_timer, b);
    if (rc < 0)
        return rc;
    nl_timer_start(b->timer, CONNECT_DEADLINE_MS, 0);
    nl_client_opts_t co = {.host = a->host,
                           .port = a->port,
                           .max_attempts = 3,
                           .cbs = &client_cbs,
                           .on_retry = client_on_retry,
                           .arg = b};
    for (int i = 0; i < a->conns; i++) {
        if ((rc = nl_client_new(&b->clients[i], b->loop, &co)) < 0)
            return rc;
        if ((rc = nl_client_connect(b->clients[i])) < 0)
            return rc;
    }
    return 0;
}

static int run_client(const args_t *a)
{
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    bench_t b = {.args = a};
    b.block = malloc(a->block_bytes);
    b.clients = calloc((size_t)a->conns, sizeof *b.clients);
    int rc = b.block != NULL && b.clients != NULL ? nl_loop_new(&b.loop, NULL) : -ENOMEM;
    if (rc < 0) {
        free(b.clients);
        free(b.block);
        return rc;
    }
    for (size_t i = 0; i < a->block_bytes; i++)
        b.block[i] = (char)(i % 251);
    if ((rc = client_setup(&b)) < 0) {
        fprintf(stderr, "pingpong_netlib client: setup: %s\n", nl_strerror(rc));
        b.failed++;
        client_stop(&b);
    } else {
        nl_loop_run(b.loop);
    }
    int frc = drain_and_free(b.loop);
    free(b.clients);
    free(b.block);
    if (b.failed > 0 || !b.is_measuring)
        return -EIO;
    /* total_bytes counts the whole run, connect phase included, for per-byte server CPU. */
    printf("pingpong_netlib client: conns=%d block=%zu seconds=%.0f total_bytes=%llu "
           "mib_per_s=%.1f\n",
           a->conns, a->block_bytes, a->seconds, (unsigned long long)b.bytes_read, b.mib_per_s);
    return frc;
}

int main(int argc, char **argv)
{
    args_t a;
    parse_args(argc, argv, &a);
    int rc = a.is_server ? run_server(&a) : run_client(&a);
    if (rc < 0) {
        fprintf(stderr, "pingpong_netlib: %s\n", nl_strerror(rc));
        return 1;
    }
    return 0;
}
