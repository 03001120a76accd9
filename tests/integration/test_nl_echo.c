/*
 * test_nl_echo: nl_server, nl_client and nl_conn end to end on loopback: 1,000 concurrent echo
 * clients against a server with two IO loop threads (and with SO_REUSEPORT), blocks and owned
 * bytes interleaved in order, a peer that never reads (high-water mark, hard output cap) and
 * half-close; accepted connections alternating over the IO loops, and one readiness accepting
 * every pending connection. Closing and nl_conn_send_to are in test_nl_conn_close.c; the shared
 * environment (main loop, deadline, IO threads, server) is nl_test_env.
 *
 * The main thread runs one loop that holds the accept side and every client; server
 * connections live on the IO loop threads where a test asks for them, and report back to the
 * main loop by posts. Nothing sleeps: each test runs its loop until a predicate holds, with a
 * deadline timer that fails it instead of hanging.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_block.h"
#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_server.h"
#include "netlib/nl_timer.h"

#include "nl_test_env.h"

/* --- 1,000 concurrent echo clients ------------------------------------------------------- */

#define N_CLIENTS 1000
#define WINDOW_BYTES 4096

typedef struct peer_s {
    struct many_s *m;
    nl_client_t *cl;
    uint8_t *pat;
    size_t len;
    size_t sent;
    size_t recvd;
    size_t pieces;
    int close_reason;
    bool is_closed;
    bool is_mismatch;
} peer_t;

typedef struct many_s {
    peer_t peers[N_CLIENTS];
    size_t count;
    size_t closed;
} many_t;

/* A distinct byte stream per client: xorshift seeded by the index. */
static void peer_fill(peer_t *p, size_t idx)
{
    p->len = 2048 + (idx * 3571) % 6144;
    p->pat = malloc(p->len);
    assert_non_null(p->pat);
    uint32_t x = (uint32_t)idx * 2654435761u + 1;
    for (size_t k = 0; k < p->len; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p->pat[k] = (uint8_t)x;
    }
}

/* Sends the next pieces (1..1400 bytes each) while less than a window is unanswered. */
static void peer_pump(nl_conn_t *c, peer_t *p)
{
    while (p->sent < p->len && p->sent - p->recvd < WINDOW_BYTES) {
        size_t n = 1 + (p->pieces * 977 + (size_t)(p - p->m->peers)) % 1400;
        if (n > p->len - p->sent)
            n = p->len - p->sent;
        assert_int_equal(nl_conn_send(c, p->pat + p->sent, n), 0);
        p->sent += n;
        p->pieces++;
    }
}

static void peer_connected(nl_conn_t *c)
{
    peer_pump(c, nl_conn_ctx(c));
}

static void peer_message(nl_conn_t *c, nl_buf_t *in)
{
    peer_t *p = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    if (p->recvd + n > p->sent || memcmp(nl_buf_peek(in), p->pat + p->recvd, n) != 0) {
        p->is_mismatch = true;
        nl_conn_close(c, -EPROTO);
        return;
    }
    p->recvd += n;
    nl_buf_retrieve_all(in);
    if (p->recvd == p->len)
        nl_client_close(p->cl); /* closes this connection; freed after on_close */
    else
        peer_pump(c, p);
}

static void peer_close(nl_conn_t *c, int reason)
{
    peer_t *p = nl_conn_ctx(c);
    p->close_reason = reason;
    p->is_closed = true;
    p->m->closed++;
}

static const nl_conn_cbs_t peer_cbs = {
    .on_connected = peer_connected,
    .on_message = peer_message,
    .on_close = peer_close,
};

static bool many_done(test_env_t *e)
{
    many_t *m = e->test;
    return m->closed == m->count && e->srv_closed == m->count;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_cur >= 2 * N_CLIENTS + 64);
}

/* count clients, each echoing its own stream through a server with two IO loop threads. */
static void many_run(test_env_t *e, size_t count, bool is_reuseport)
{
    raise_nofile();
    many_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->count = count;
    e->test = m;
    test_env_serve_opts(e, 2, &test_env_echo_cbs, 0, is_reuseport);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        peer_t *p = &m->peers[i];
        p->m = m;
        peer_fill(p, i);
        total += p->len;
        p->cl = test_env_client(e, &peer_cbs, p);
    }
    test_env_run_until(e, many_done);
    for (size_t i = 0; i < count; i++) {
        peer_t *p = &m->peers[i];
        assert_false(p->is_mismatch);
        assert_true(p->is_closed);
        assert_int_equal(p->close_reason, 0);
        assert_int_equal(p->recvd, p->len);
        assert_true(p->pieces > 1);
        free(p->pat);
    }
    nl_server_stats_t ss;
    nl_server_get_stats(e->srv, &ss);
    assert_int_equal(ss.accepted, count);
    assert_int_equal(ss.refused, 0);
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    assert_int_equal(cs.open, 0);
    assert_int_equal(cs.bytes_out, total);
    assert_int_equal(cs.bytes_in, total);
    free(m);
}

static void test_nl_echo_thousand_clients(void **state)
{
    many_run(*state, N_CLIENTS, false);
}

/* Each IO loop accepts on its own SO_REUSEPORT socket; closing the server closes them on
 * their loops (test_env_teardown then stops the threads, which requires it). */
static void test_nl_echo_reuseport(void **state)
{
    many_run(*state, 200, true);
}

/* --- blocks and owned bytes keep their order --------------------------------------------- */

typedef struct order_s {
    size_t n_parts;
    size_t max_part;
    uint8_t *expect;
    size_t len;
    size_t recvd;
    int close_reason;
    bool is_closed;
    bool is_mismatch;
    bool is_srv_closed;
} order_t;

static size_t part_len(const order_t *o, size_t i)
{
    return 1 + (i * 7919) % o->max_part;
}

/* Every third part is a shared block, the rest owned bytes, so blocks sit between and behind
 * owned bytes in the queue; 3 MB overflow loopback's buffers, forcing partial writes. */
static void order_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    order_t *o = e->test;
    size_t off = 0;
    for (size_t i = 0; i < o->n_parts; i++) {
        size_t n = part_len(o, i);
        if (i % 3 == 1) {
            nl_block_t *b = nl_block_new(n);
            assert_non_null(b);
            memcpy(nl_block_data(b), o->expect + off, n);
            assert_int_equal(nl_conn_send_block(c, b), 0);
            nl_block_unref(b);
        } else {
            assert_int_equal(nl_conn_send(c, o->expect + off, n), 0);
        }
        off += n;
    }
    assert_int_equal(off, o->len);
    assert_true(nl_conn_output_bytes(c) > 0);
    nl_conn_shutdown(c);
    assert_int_equal(nl_conn_state(c), NL_CONN_DISCONNECTING);
    assert_int_equal(nl_conn_send(c, "x", 1), -ENOTCONN);
}

static void order_srv_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
    order_t *o = e->test;
    assert_int_equal(reason, 0);
    o->is_srv_closed = true;
}

static const nl_conn_cbs_t order_srv_cbs = {
    .on_connected = order_connected,
    .on_close = order_srv_close,
};

static void order_message(nl_conn_t *c, nl_buf_t *in)
{
    order_t *o = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    if (o->recvd + n > o->len || memcmp(nl_buf_peek(in), o->expect + o->recvd, n) != 0)
        o->is_mismatch = true;
    o->recvd += n;
    nl_buf_retrieve_all(in);
}

static void order_close(nl_conn_t *c, int reason)
{
    order_t *o = nl_conn_ctx(c);
    o->close_reason = reason;
    o->is_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t order_cli_cbs = {
    .on_message = order_message,
    .on_close = order_close,
};

static bool order_done(test_env_t *e)
{
    order_t *o = e->test;
    return o->is_closed && o->is_srv_closed;
}

/* Sends n_parts parts of 1..max_part bytes through one connection and checks the client got
 * every byte in order; returns the server loop's connection figures. */
static nl_conn_loop_stats_t order_run(void **state, size_t n_parts, size_t max_part)
{
    test_env_t *e = *state;
    order_t o = {.n_parts = n_parts, .max_part = max_part};
    for (size_t i = 0; i < n_parts; i++)
        o.len += part_len(&o, i);
    o.expect = malloc(o.len);
    assert_non_null(o.expect);
    for (size_t k = 0; k < o.len; k++)
        o.expect[k] = (uint8_t)(k * 31 + (k >> 11));
    e->test = &o;
    test_env_serve(e, 0, &order_srv_cbs, 0);
    test_env_client(e, &order_cli_cbs, &o);
    test_env_run_until(e, order_done);
    assert_false(o.is_mismatch);
    assert_int_equal(o.recvd, o.len);
    assert_int_equal(o.close_reason, 0); /* all bytes, then the server's FIN */
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    assert_true(cs.writev_calls > 0);
    free(o.expect);
    return cs;
}

/* Large parts (up to 20 KB): written with one iovec per part. */
static void test_nl_echo_blocks_and_bytes_in_order(void **state)
{
    (void)order_run(state, 300, 20000);
}

/* 40,000 parts of up to 150 bytes (3 MB): the flush copies many small pieces into one buffer
 * per write, and the socket still refuses part of most writes; the order must survive both. */
static void test_nl_echo_small_parts_in_order(void **state)
{
    nl_conn_loop_stats_t cs = order_run(state, 40000, 150);
    assert_true(cs.coalesced_writes > 0);
}

/* --- a peer that never reads --------------------------------------------------------------- */

#define HW_BYTES (256u * 1024)
#define HW_CAP (2u * HW_BYTES + 8) /* nl_conn_out.c: twice the mark plus the prepend reserve */
#define HW_MSG (64u * 1024)

typedef struct hw_s {
    nl_conn_t *c;
    size_t fired;
    size_t fired_queued;
    size_t max_out;
    size_t sends;
    int last_rc;
    bool is_flooded;
    bool is_closed;
} hw_t;

static void hw_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    hw_t *h = e->test;
    static uint8_t msg[HW_MSG];
    h->c = c;
    /* Bounded: the kernel buffers take a few MB at most, then the queue hits its cap. */
    for (int i = 0; i < 100000; i++) {
        h->last_rc = nl_conn_send(c, msg, sizeof(msg));
        size_t out = nl_conn_output_bytes(c);
        if (out > h->max_out)
            h->max_out = out;
        if (h->last_rc != 0)
            break;
        h->sends++;
    }
    h->is_flooded = true;
}

static void hw_high_water(nl_conn_t *c, size_t queued)
{
    test_env_t *e = nl_conn_ctx(c);
    hw_t *h = e->test;
    h->fired++;
    h->fired_queued = queued;
}

static void hw_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
    hw_t *h = e->test;
    assert_int_equal(reason, 0);
    h->is_closed = true;
}

static const nl_conn_cbs_t hw_cbs = {
    .on_connected = hw_connected,
    .on_high_water = hw_high_water,
    .on_close = hw_close,
};

static bool hw_flooded(test_env_t *e)
{
    return ((hw_t *)e->test)->is_flooded;
}

static bool hw_closed(test_env_t *e)
{
    return ((hw_t *)e->test)->is_closed;
}

static int raw_connect(uint16_t port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (rcvbuf > 0)
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

static void test_nl_echo_high_water_never_reading_peer(void **state)
{
    test_env_t *e = *state;
    hw_t h = {0};
    e->test = &h;
    test_env_serve(e, 0, &hw_cbs, HW_BYTES);
    int fd = raw_connect(nl_server_port(e->srv), 4096);
    test_env_run_until(e, hw_flooded);
    assert_true(h.sends > 0);
    assert_int_equal(h.last_rc, -ENOBUFS);
    assert_int_equal(h.fired, 1);
    assert_true(h.fired_queued >= HW_BYTES);
    assert_true(h.max_out <= HW_CAP + HW_MSG);
    assert_true(nl_conn_output_bytes(h.c) >= HW_BYTES);
    /* Still at the cap: refused again, nothing queued. */
    size_t before = nl_conn_output_bytes(h.c);
    uint8_t msg[HW_MSG] = {0};
    assert_int_equal(nl_conn_send(h.c, msg, sizeof(msg)), -ENOBUFS);
    assert_int_equal(nl_conn_output_bytes(h.c), before);
    nl_conn_close(h.c, 0);
    assert_int_equal(nl_conn_output_bytes(h.c), 0);
    test_env_run_until(e, hw_closed);
    close(fd);
}

/* --- half-close -------------------------------------------------------------------------- */

#define HALF_BYTES (300u * 1024)

typedef struct half_s {
    uint8_t *data;
    size_t srv_seen;
    size_t recvd;
    int cli_reason;
    int srv_reason;
    bool is_mismatch;
    bool is_cli_closed;
    bool is_srv_closed;
} half_t;

static void half_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    test_env_t *e = nl_conn_ctx(c);
    half_t *h = e->test;
    h->srv_seen += nl_buf_readable(in);
    assert_int_equal(nl_conn_send(c, nl_buf_peek(in), nl_buf_readable(in)), 0);
    nl_buf_retrieve_all(in);
    if (h->srv_seen == HALF_BYTES)
        nl_conn_shutdown(c);
}

static void half_srv_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
    half_t *h = e->test;
    h->srv_reason = reason;
    h->is_srv_closed = true;
}

static const nl_conn_cbs_t half_srv_cbs = {
    .on_message = half_srv_message,
    .on_close = half_srv_close,
};

/* Sends everything at once (most of it queues), then half-closes behind it. */
static void half_cli_connected(nl_conn_t *c)
{
    half_t *h = nl_conn_ctx(c);
    for (size_t off = 0; off < HALF_BYTES; off += 10000) {
        size_t n = HALF_BYTES - off < 10000 ? HALF_BYTES - off : 10000;
        assert_int_equal(nl_conn_send(c, h->data + off, n), 0);
    }
    nl_conn_shutdown(c);
}

static void half_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    half_t *h = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    if (h->recvd + n > HALF_BYTES || memcmp(nl_buf_peek(in), h->data + h->recvd, n) != 0)
        h->is_mismatch = true;
    h->recvd += n;
    nl_buf_retrieve_all(in);
}

static void half_cli_close(nl_conn_t *c, int reason)
{
    half_t *h = nl_conn_ctx(c);
    h->cli_reason = reason;
    h->is_cli_closed = true;
    /* on_close comes after every byte. */
    assert_int_equal(h->recvd, HALF_BYTES);
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t half_cli_cbs = {
    .on_connected = half_cli_connected,
    .on_message = half_cli_message,
    .on_close = half_cli_close,
};

static bool half_done(test_env_t *e)
{
    half_t *h = e->test;
    return h->is_cli_closed && h->is_srv_closed;
}

static void test_nl_echo_half_close(void **state)
{
    test_env_t *e = *state;
    half_t h = {0};
    h.data = malloc(HALF_BYTES);
    assert_non_null(h.data);
    for (size_t k = 0; k < HALF_BYTES; k++)
        h.data[k] = (uint8_t)(k * 7 + (k >> 9));
    e->test = &h;
    test_env_serve(e, 0, &half_srv_cbs, 0);
    test_env_client(e, &half_cli_cbs, &h);
    test_env_run_until(e, half_done);
    assert_false(h.is_mismatch);
    assert_int_equal(h.srv_seen, HALF_BYTES);
    assert_int_equal(h.recvd, HALF_BYTES);
    assert_int_equal(h.cli_reason, 0);
    assert_int_equal(h.srv_reason, 0);
    free(h.data);
}

/* --- urgent data ------------------------------------------------------------------------- */

/* Server side of the urgent-data test: keeps what arrives. */
typedef struct urg_s {
    bool is_connected;
    char got[32];
    size_t len;
} urg_t;

static void urg_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    urg_t *u = e->test;
    u->is_connected = true;
}

static void urg_message(nl_conn_t *c, nl_buf_t *in)
{
    test_env_t *e = nl_conn_ctx(c);
    urg_t *u = e->test;
    size_t n = nl_buf_readable(in);
    assert_true(u->len + n < sizeof u->got);
    memcpy(u->got + u->len, nl_buf_peek(in), n);
    u->len += n;
    nl_buf_retrieve_all(in);
}

static const nl_conn_cbs_t urg_cbs = {
    .on_connected = urg_connected,
    .on_message = urg_message,
    .on_close = test_env_echo_close,
};

static bool urg_connected_done(test_env_t *e)
{
    return ((urg_t *)e->test)->is_connected;
}

static bool urg_all_done(test_env_t *e)
{
    return ((urg_t *)e->test)->len >= 9;
}

static bool urg_closed(test_env_t *e)
{
    return e->srv_closed == 1;
}

/* "hello" with MSG_OOB then "world", both in the socket before the server reads: the kernel
 * stops the read at the urgent mark ("hell"), and with edge-triggered epoll nothing new would
 * report "world". The urgent byte ('o') itself stays out of band. */
static void test_nl_echo_urgent_data(void **state)
{
    test_env_t *e = *state;
    urg_t u = {0};
    e->test = &u;
    test_env_serve(e, 0, &urg_cbs, 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(nl_server_port(e->srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    test_env_run_until(e, urg_connected_done);
    assert_int_equal(send(fd, "hello", 5, MSG_OOB), 5);
    assert_int_equal(send(fd, "world", 5, 0), 5);
    test_env_run_until(e, urg_all_done);
    assert_int_equal(u.len, 9);
    assert_memory_equal(u.got, "hellworld", 9);
    close(fd);
    test_env_run_until(e, urg_closed);
}

/* --- accepted connections alternate over the IO loops ------------------------------------ */

#define RR_CLIENTS 6

typedef struct rr_s {
    uint64_t per_loop[MAX_THREADS]; /* server connections per IO loop, bumped on that loop */
    size_t accepted;                /* main thread: server connections reported */
    size_t cli_connected;
    size_t cli_closed;
    nl_client_t *cl[RR_CLIENTS];
} rr_t;

static void rr_note_accepted(void *arg)
{
    test_env_t *e = arg;
    ((rr_t *)e->test)->accepted++;
}

/* On the IO loop that got the connection. The post orders the count before the main thread's
 * read of it. */
static void rr_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    rr_t *rr = e->test;
    for (size_t i = 0; i < e->io_count; i++) {
        if (nl_conn_loop(c) == e->io_loops[i])
            __atomic_add_fetch(&rr->per_loop[i], 1, __ATOMIC_RELAXED);
    }
    if (nl_loop_post(e->loop, rr_note_accepted, e) != 0)
        abort();
}

static const nl_conn_cbs_t rr_srv_cbs = {
    .on_connected = rr_srv_connected,
    .on_close = test_env_echo_close,
};

static void rr_cli_connected(nl_conn_t *c)
{
    rr_t *rr = nl_conn_ctx(c);
    rr->cli_connected++;
}

static void rr_cli_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    rr_t *rr = nl_conn_ctx(c);
    rr->cli_closed++;
}

static const nl_conn_cbs_t rr_cli_cbs = {
    .on_connected = rr_cli_connected,
    .on_close = rr_cli_close,
};

/* Both ends: a client closed before its connect completed would see no on_close. */
static bool rr_all_connected(test_env_t *e)
{
    const rr_t *rr = e->test;
    return rr->accepted == RR_CLIENTS && rr->cli_connected == RR_CLIENTS;
}

static bool rr_all_closed(test_env_t *e)
{
    return ((rr_t *)e->test)->cli_closed == RR_CLIENTS && e->srv_closed == RR_CLIENTS;
}

/* One listener on the main loop hands connections to two IO loops in strict turn. */
static void test_nl_echo_round_robin_over_io_loops(void **state)
{
    test_env_t *e = *state;
    rr_t rr = {0};
    e->test = &rr;
    test_env_serve(e, 2, &rr_srv_cbs, 0);
    for (size_t i = 0; i < RR_CLIENTS; i++)
        rr.cl[i] = test_env_client(e, &rr_cli_cbs, &rr);
    test_env_run_until(e, rr_all_connected);
    for (size_t i = 0; i < e->io_count; i++)
        assert_int_equal(__atomic_load_n(&rr.per_loop[i], __ATOMIC_RELAXED), RR_CLIENTS / 2);
    for (size_t i = 0; i < RR_CLIENTS; i++)
        nl_client_close(rr.cl[i]);
    test_env_run_until(e, rr_all_closed);
}

/* --- one readiness accepts every pending connection -------------------------------------- */

#define BURST_CONNS 8

static bool burst_closed(test_env_t *e)
{
    return e->srv_closed == BURST_CONNS;
}

/* Blocking connects complete in the kernel's accept queue before the loop runs, so a single
 * iteration sees the listener readable once and must accept them all (until EAGAIN), not one
 * per readiness. */
static void test_nl_echo_accepts_burst_in_one_iteration(void **state)
{
    test_env_t *e = *state;
    test_env_serve(e, 0, &test_env_echo_cbs, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(nl_server_port(e->srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fds[BURST_CONNS];
    for (int i = 0; i < BURST_CONNS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    assert_int_equal(nl_loop_run_once(e->loop, -1), 0);
    nl_server_stats_t ss;
    nl_server_get_stats(e->srv, &ss);
    assert_int_equal(ss.accepted, BURST_CONNS);
    for (int i = 0; i < BURST_CONNS; i++)
        close(fds[i]);
    test_env_run_until(e, burst_closed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_echo_thousand_clients, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_reuseport, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_blocks_and_bytes_in_order, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_small_parts_in_order, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_high_water_never_reading_peer, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_half_close, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_urgent_data, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_round_robin_over_io_loops, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_accepts_burst_in_one_iteration, test_env_setup,
                                        test_env_teardown),
    };
    /* TEST_FILTER=<glob> runs only the matching tests (debugging). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
