/*
 * test_nl_echo: nl_server, nl_client and nl_conn end to end on loopback: 1,000 concurrent echo
 * clients against a server with two IO loop threads, blocks and owned bytes interleaved in
 * order, a peer that never reads (high-water mark, hard output cap), half-close, close from
 * inside on_message, double close, and nl_conn_send_to for a closed id and from another thread.
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

#define DEADLINE_MS 60000
#define MAX_THREADS 2

/* --- environment: main loop, deadline, optional IO threads, one server ------------------- */

typedef struct env_s env_t;
typedef bool (*env_pred_t)(env_t *e);

struct env_s {
    nl_loop_t *loop;
    nl_timer_t *deadline;
    bool is_expired;
    nl_loop_thread_t *threads[MAX_THREADS];
    nl_loop_t *io_loops[MAX_THREADS];
    size_t io_count;
    nl_server_t *srv;
    uint64_t srv_closed; /* server-side on_close count, main thread */
    void *test;          /* the running test's state */
};

static void on_deadline(nl_timer_t *t, void *arg)
{
    (void)t;
    env_t *e = arg;
    e->is_expired = true;
}

static int setup(void **state)
{
    env_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    assert_int_equal(nl_loop_new(&e->loop, NULL), 0);
    assert_int_equal(nl_timer_new(&e->deadline, e->loop, on_deadline, e), 0);
    assert_int_equal(nl_timer_start(e->deadline, DEADLINE_MS, 0), 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    if (e->srv)
        nl_server_close(e->srv);
    nl_timer_close(e->deadline, NULL);
    assert_int_equal(nl_loop_run_once(e->loop, 0), 0);
    for (size_t i = 0; i < e->io_count; i++)
        assert_int_equal(nl_loop_thread_stop(e->threads[i]), 0);
    assert_int_equal(nl_loop_free(e->loop), 0);
    free(e);
    return 0;
}

static void env_run_until(env_t *e, env_pred_t done)
{
    while (!done(e) && !e->is_expired)
        assert_int_equal(nl_loop_run_once(e->loop, -1), 0);
    assert_false(e->is_expired);
}

static void env_serve_opts(env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes,
                           bool is_reuseport)
{
    for (size_t i = 0; i < threads; i++) {
        nl_loop_thread_opts_t o = {.loop = {.id = (int)i + 1}, .name = "test-io", .cpu = -1};
        assert_int_equal(nl_loop_thread_start(&e->threads[i], &o), 0);
        e->io_loops[i] = nl_loop_thread_loop(e->threads[i]);
        e->io_count++;
    }
    nl_server_opts_t so = {
        .host = "127.0.0.1",
        .accept_loop = e->loop,
        .io_loops = threads ? e->io_loops : NULL,
        .io_loop_count = threads,
        .cbs = cbs,
        .arg = e,
        .high_water_bytes = hw_bytes,
        .reuseport = is_reuseport,
    };
    assert_int_equal(nl_server_new(&e->srv, &so), 0);
    assert_int_not_equal(nl_server_port(e->srv), 0);
    assert_int_equal(nl_server_start(e->srv), 0);
}

static void env_serve(env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes)
{
    env_serve_opts(e, threads, cbs, hw_bytes, false);
}

static nl_client_t *env_client(env_t *e, const nl_conn_cbs_t *cbs, void *arg)
{
    nl_client_opts_t o = {
        .host = "127.0.0.1",
        .port = nl_server_port(e->srv),
        .max_attempts = 3,
        .cbs = cbs,
        .arg = arg,
    };
    nl_client_t *cl;
    assert_int_equal(nl_client_new(&cl, e->loop, &o), 0);
    assert_int_equal(nl_client_connect(cl), 0);
    return cl;
}

static void note_srv_closed(void *arg)
{
    env_t *e = arg;
    e->srv_closed++;
}

/* Server side, on whichever loop owns c: tell the main loop (by a post when foreign). */
static void srv_report_close(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    if (nl_conn_loop(c) == e->loop)
        e->srv_closed++;
    else if (nl_loop_post(e->loop, note_srv_closed, e) != 0)
        abort();
}

static void srv_echo_message(nl_conn_t *c, nl_buf_t *in)
{
    if (nl_conn_send(c, nl_buf_peek(in), nl_buf_readable(in)) != 0)
        abort();
    nl_buf_retrieve_all(in);
}

static void srv_echo_close(nl_conn_t *c, int reason)
{
    (void)reason;
    srv_report_close(c);
}

static const nl_conn_cbs_t srv_echo_cbs = {
    .on_message = srv_echo_message,
    .on_close = srv_echo_close,
};

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

static bool many_done(env_t *e)
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
static void many_run(env_t *e, size_t count, bool is_reuseport)
{
    raise_nofile();
    many_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->count = count;
    e->test = m;
    env_serve_opts(e, 2, &srv_echo_cbs, 0, is_reuseport);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        peer_t *p = &m->peers[i];
        p->m = m;
        peer_fill(p, i);
        total += p->len;
        p->cl = env_client(e, &peer_cbs, p);
    }
    env_run_until(e, many_done);
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
 * their loops (teardown then stops the threads, which requires it). */
static void test_nl_echo_reuseport(void **state)
{
    many_run(*state, 200, true);
}

/* --- blocks and owned bytes keep their order --------------------------------------------- */

#define N_PARTS 300

typedef struct order_s {
    uint8_t *expect;
    size_t len;
    size_t recvd;
    int close_reason;
    bool is_closed;
    bool is_mismatch;
    bool is_srv_closed;
} order_t;

static size_t part_len(size_t i)
{
    return 1 + (i * 7919) % 20000;
}

/* Every third part is a shared block, the rest owned bytes, so blocks sit between and behind
 * owned bytes in the queue; 3 MB overflow loopback's buffers, forcing partial writes. */
static void order_connected(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    order_t *o = e->test;
    size_t off = 0;
    for (size_t i = 0; i < N_PARTS; i++) {
        size_t n = part_len(i);
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
    env_t *e = nl_conn_ctx(c);
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

static bool order_done(env_t *e)
{
    order_t *o = e->test;
    return o->is_closed && o->is_srv_closed;
}

static void test_nl_echo_blocks_and_bytes_in_order(void **state)
{
    env_t *e = *state;
    order_t o = {0};
    for (size_t i = 0; i < N_PARTS; i++)
        o.len += part_len(i);
    o.expect = malloc(o.len);
    assert_non_null(o.expect);
    for (size_t k = 0; k < o.len; k++)
        o.expect[k] = (uint8_t)(k * 31 + (k >> 11));
    e->test = &o;
    env_serve(e, 0, &order_srv_cbs, 0);
    env_client(e, &order_cli_cbs, &o);
    env_run_until(e, order_done);
    assert_false(o.is_mismatch);
    assert_int_equal(o.recvd, o.len);
    assert_int_equal(o.close_reason, 0); /* all bytes, then the server's FIN */
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    assert_true(cs.writev_calls > 0);
    free(o.expect);
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
    env_t *e = nl_conn_ctx(c);
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
    env_t *e = nl_conn_ctx(c);
    hw_t *h = e->test;
    h->fired++;
    h->fired_queued = queued;
}

static void hw_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
    hw_t *h = e->test;
    assert_int_equal(reason, 0);
    h->is_closed = true;
}

static const nl_conn_cbs_t hw_cbs = {
    .on_connected = hw_connected,
    .on_high_water = hw_high_water,
    .on_close = hw_close,
};

static bool hw_flooded(env_t *e)
{
    return ((hw_t *)e->test)->is_flooded;
}

static bool hw_closed(env_t *e)
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
    env_t *e = *state;
    hw_t h = {0};
    e->test = &h;
    env_serve(e, 0, &hw_cbs, HW_BYTES);
    int fd = raw_connect(nl_server_port(e->srv), 4096);
    env_run_until(e, hw_flooded);
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
    env_run_until(e, hw_closed);
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
    env_t *e = nl_conn_ctx(c);
    half_t *h = e->test;
    h->srv_seen += nl_buf_readable(in);
    assert_int_equal(nl_conn_send(c, nl_buf_peek(in), nl_buf_readable(in)), 0);
    nl_buf_retrieve_all(in);
    if (h->srv_seen == HALF_BYTES)
        nl_conn_shutdown(c);
}

static void half_srv_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
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

static bool half_done(env_t *e)
{
    half_t *h = e->test;
    return h->is_cli_closed && h->is_srv_closed;
}

static void test_nl_echo_half_close(void **state)
{
    env_t *e = *state;
    half_t h = {0};
    h.data = malloc(HALF_BYTES);
    assert_non_null(h.data);
    for (size_t k = 0; k < HALF_BYTES; k++)
        h.data[k] = (uint8_t)(k * 7 + (k >> 9));
    e->test = &h;
    env_serve(e, 0, &half_srv_cbs, 0);
    env_client(e, &half_cli_cbs, &h);
    env_run_until(e, half_done);
    assert_false(h.is_mismatch);
    assert_int_equal(h.srv_seen, HALF_BYTES);
    assert_int_equal(h.recvd, HALF_BYTES);
    assert_int_equal(h.cli_reason, 0);
    assert_int_equal(h.srv_reason, 0);
    free(h.data);
}

/* --- close inside on_message, double close ----------------------------------------------- */

typedef struct cim_s {
    uint64_t id;
    int msgs;
    int closes;
    int reason;
    int send_rc;
    int state_after;
    bool is_lookup_gone;
    bool is_in_message;
    bool is_closed_inside;
    int cli_reason;
    bool is_cli_closed;
} cim_t;

static void cim_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    env_t *e = nl_conn_ctx(c);
    cim_t *t = e->test;
    t->is_in_message = true;
    t->msgs++;
    t->id = nl_conn_id(c);
    nl_conn_close(c, 0);
    nl_conn_close(c, -EIO); /* double close: no effect, the first reason stays */
    t->send_rc = nl_conn_send(c, "x", 1);
    t->state_after = (int)nl_conn_state(c);
    t->is_lookup_gone = nl_conn_lookup(nl_conn_loop(c), t->id) == NULL;
    /* The connection and its buffer stay valid until the callback returns. */
    nl_buf_retrieve_all(in);
    t->is_in_message = false;
}

static void cim_srv_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
    cim_t *t = e->test;
    t->closes++;
    t->reason = reason;
    t->is_closed_inside = t->is_in_message;
    nl_conn_close(c, -EIO); /* closing again from on_close is harmless too */
}

static const nl_conn_cbs_t cim_srv_cbs = {
    .on_message = cim_srv_message,
    .on_close = cim_srv_close,
};

static void cim_cli_connected(nl_conn_t *c)
{
    assert_int_equal(nl_conn_send(c, "hello", 5), 0);
}

static void cim_cli_close(nl_conn_t *c, int reason)
{
    cim_t *t = nl_conn_ctx(c);
    t->cli_reason = reason;
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t cim_cli_cbs = {
    .on_connected = cim_cli_connected,
    .on_close = cim_cli_close,
};

static bool cim_done(env_t *e)
{
    cim_t *t = e->test;
    return t->closes > 0 && t->is_cli_closed;
}

static void test_nl_echo_close_inside_on_message(void **state)
{
    env_t *e = *state;
    cim_t t = {0};
    e->test = &t;
    env_serve(e, 0, &cim_srv_cbs, 0);
    env_client(e, &cim_cli_cbs, &t);
    env_run_until(e, cim_done);
    assert_int_equal(t.msgs, 1);
    assert_int_equal(t.closes, 1);
    assert_int_equal(t.reason, 0);
    assert_false(t.is_closed_inside);
    assert_int_equal(t.send_rc, -ENOTCONN);
    assert_int_equal(t.state_after, NL_CONN_DISCONNECTED);
    assert_true(t.is_lookup_gone);
    assert_int_equal(t.cli_reason, 0); /* the peer saw an orderly close */
}

/* --- nl_conn_send_to for a closed id ------------------------------------------------------- */

typedef struct sto_s {
    nl_conn_t *srv_conn;
    uint64_t id;
    size_t recvd;
    bool is_srv_closed;
    bool is_cli_closed;
} sto_t;

static void sto_srv_connected(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    sto_t *t = e->test;
    t->srv_conn = c;
    t->id = nl_conn_id(c);
    assert_ptr_equal(nl_conn_lookup(e->loop, t->id), c);
}

static void sto_srv_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
    sto_t *t = e->test;
    assert_int_equal(reason, 0);
    t->is_srv_closed = true;
}

static const nl_conn_cbs_t sto_srv_cbs = {
    .on_connected = sto_srv_connected,
    .on_close = sto_srv_close,
};

static void sto_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    sto_t *t = nl_conn_ctx(c);
    assert_int_equal(nl_buf_readable(in), 4);
    assert_memory_equal(nl_buf_peek(in), "ping", 4);
    t->recvd += 4;
    nl_buf_retrieve_all(in);
}

static void sto_cli_close(nl_conn_t *c, int reason)
{
    sto_t *t = nl_conn_ctx(c);
    assert_int_equal(reason, 0);
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t sto_cli_cbs = {
    .on_message = sto_cli_message,
    .on_close = sto_cli_close,
};

static bool sto_connected(env_t *e)
{
    return ((sto_t *)e->test)->srv_conn != NULL;
}

static bool sto_pinged(env_t *e)
{
    return ((sto_t *)e->test)->recvd == 4;
}

static bool sto_closed(env_t *e)
{
    sto_t *t = e->test;
    return t->is_srv_closed && t->is_cli_closed;
}

static void test_nl_echo_send_to_closed_id(void **state)
{
    env_t *e = *state;
    sto_t t = {0};
    e->test = &t;
    env_serve(e, 0, &sto_srv_cbs, 0);
    env_client(e, &sto_cli_cbs, &t);
    env_run_until(e, sto_connected);
    assert_int_equal(nl_conn_send_to(e->loop, t.id, "ping", 4), 0);
    env_run_until(e, sto_pinged);
    nl_conn_close(t.srv_conn, 0);
    env_run_until(e, sto_closed);
    assert_null(nl_conn_lookup(e->loop, t.id));
    nl_conn_loop_stats_t before;
    nl_conn_get_loop_stats(e->loop, &before);
    assert_int_equal(nl_conn_send_to(e->loop, t.id, "x", 1), 0);
    assert_int_equal(nl_conn_send_to(e->loop, UINT64_MAX, "y", 1), 0);
    assert_int_equal(nl_loop_run_once(e->loop, 0), 0);
    nl_conn_loop_stats_t after;
    nl_conn_get_loop_stats(e->loop, &after);
    assert_int_equal(after.send_to_dropped, before.send_to_dropped + 2);
    assert_int_equal(after.open, 0);
}

/* --- nl_conn_send_to from another thread ---------------------------------------------------- */

#define XT_MSGS 2000
#define XT_MSG_LEN 8

typedef struct xt_s {
    env_t *e;
    nl_loop_t *io_loop;
    uint64_t id;     /* atomic: written on the IO thread */
    int is_ready;    /* main thread, set by a post */
    int send_errors; /* atomic: written by the sender thread */
    char *expect;
    size_t recvd;
    bool is_mismatch;
    bool is_cli_closed;
} xt_t;

static void xt_note_ready(void *arg)
{
    xt_t *t = arg;
    t->is_ready = 1;
}

/* IO thread. */
static void xt_srv_connected(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    xt_t *t = e->test;
    __atomic_store_n(&t->id, nl_conn_id(c), __ATOMIC_RELEASE);
    if (nl_loop_post(e->loop, xt_note_ready, t) != 0)
        abort();
}

static const nl_conn_cbs_t xt_srv_cbs = {
    .on_connected = xt_srv_connected,
    .on_close = srv_echo_close,
};

static void *xt_sender(void *arg)
{
    xt_t *t = arg;
    uint64_t id = __atomic_load_n(&t->id, __ATOMIC_ACQUIRE);
    for (int i = 0; i < XT_MSGS; i++) {
        if (nl_conn_send_to(t->io_loop, id, t->expect + (size_t)i * XT_MSG_LEN, XT_MSG_LEN) != 0)
            __atomic_add_fetch(&t->send_errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void xt_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    xt_t *t = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    size_t total = (size_t)XT_MSGS * XT_MSG_LEN;
    if (t->recvd + n > total || memcmp(nl_buf_peek(in), t->expect + t->recvd, n) != 0)
        t->is_mismatch = true;
    t->recvd += n;
    nl_buf_retrieve_all(in);
    if (t->recvd >= total)
        nl_client_close(nl_client_of(c));
}

static void xt_cli_close(nl_conn_t *c, int reason)
{
    xt_t *t = nl_conn_ctx(c);
    assert_int_equal(reason, 0);
    t->is_cli_closed = true;
}

static const nl_conn_cbs_t xt_cli_cbs = {
    .on_message = xt_cli_message,
    .on_close = xt_cli_close,
};

static bool xt_ready(env_t *e)
{
    return ((xt_t *)e->test)->is_ready != 0;
}

static bool xt_done(env_t *e)
{
    xt_t *t = e->test;
    return t->is_cli_closed && e->srv_closed == 1;
}

static void test_nl_echo_send_to_from_other_thread(void **state)
{
    env_t *e = *state;
    xt_t t = {.e = e};
    t.expect = malloc((size_t)XT_MSGS * XT_MSG_LEN + 1);
    assert_non_null(t.expect);
    for (int i = 0; i < XT_MSGS; i++)
        snprintf(t.expect + (size_t)i * XT_MSG_LEN, XT_MSG_LEN + 1, "%07d;", i);
    e->test = &t;
    env_serve(e, 1, &xt_srv_cbs, 0);
    t.io_loop = e->io_loops[0];
    env_client(e, &xt_cli_cbs, &t);
    env_run_until(e, xt_ready);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, xt_sender, &t), 0);
    env_run_until(e, xt_done);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(__atomic_load_n(&t.send_errors, __ATOMIC_RELAXED), 0);
    assert_false(t.is_mismatch);
    assert_int_equal(t.recvd, (size_t)XT_MSGS * XT_MSG_LEN);
    free(t.expect);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_echo_thousand_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_reuseport, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_blocks_and_bytes_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_high_water_never_reading_peer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_half_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_close_inside_on_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_send_to_closed_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_echo_send_to_from_other_thread, setup, teardown),
    };
    /* TEST_FILTER=<glob> runs only the matching tests (debugging). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
