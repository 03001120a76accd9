/*
 * test_nl_transport: the transport seam (nl_transport.h) end to end, with a transport written
 * here: "xt", a toy stream cipher with a handshake.
 *
 * xt's protocol: the client opens with an 8-byte hello "XTC1" + key byte + 3 zeros; the
 * server answers with "XTS1" + 4 zeros once it read the client's hello; every byte after the
 * hellos is XORed with the key, both ways. The server's handshake reads the client hello
 * into a 4 KiB buffer, so what the client sent right after it stays inside the transport (the
 * case of TLS records read ahead). A client is "strict" (its handshake waits for the server's
 * hello) or "eager" (done once its hello is written; its read op strips the server's hello).
 * Options make the transport hand input to netlib in small chunks (reads without readiness),
 * stall the first handshake step and the first shutdown with WANT_WRITE, and send "BYE!" at
 * shutdown. Counters (atomic: server connections run on IO threads) record every op.
 *
 * - echo over two IO loops with strict clients: handshakes, callbacks paired, ops counted,
 *   every state freed once, no batched send (writes go through the transport);
 * - partial writes: 2 MB echoed through small socket buffers, the transport's writes short,
 *   input handed over 64 bytes at a time, so most of it is read without fd readiness;
 * - a raw peer speaking xt by hand: the bytes on the wire are XORed, data sent with the hello
 *   reaches on_message (has_pending after the handshake), the stalled handshake and shutdown
 *   retry on writability, and "BYE!" precedes the FIN;
 * - a write error from the transport closes the connection with it (errno is not looked at);
 * - closes while handshaking: a server connection closed by a deadline, one whose peer left,
 *   a client closed mid-handshake (on_retry -ECANCELED once), a client given a bad hello
 *   (on_retry -EPROTO, no retry left): no on_connected, no on_close, free once each.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"
#include "netlib/nl_timer.h"
#include "netlib/nl_transport.h"

#include "nl_test_env.h"

/* --- xt: the test transport --------------------------------------------------------------- */

#define XT_HELLO 8
#define XT_KEY 0x5a

typedef struct xt_s {
    bool is_eager;          /* clients: done once the hello is written */
    bool is_stall_hs;       /* the first handshake step answers WANT_WRITE */
    bool is_stall_shutdown; /* the first shutdown answers WANT_WRITE */
    bool is_fail_writes;    /* writev fails with -EPIPE, leaving EAGAIN in errno */
    size_t read_chunk;      /* at most this many bytes per read op (0: all it has) */
    /* Counters, atomic. */
    uint64_t opens, frees, hs_steps, hs_want_read, hs_want_write, hs_done, hs_failed;
    uint64_t reads, pending_reads, writevs, short_writevs, own_writevs, shutdowns, surplus;
    nl_conn_t *last_server_conn; /* the newest server connection (single-loop tests use it) */
    nl_loop_t *notify;           /* woken by each free (server connections on IO threads) */
} xt_t;

typedef struct xs_s {
    xt_t *t;
    bool is_client;
    uint8_t key;
    uint8_t hello_out[XT_HELLO];
    size_t out_sent;
    uint8_t hello_in[XT_HELLO];
    size_t in_got;
    uint8_t pend[4096]; /* raw bytes read from the socket and not yet handed over */
    size_t pend_off;
    size_t pend_len;
    size_t bye_sent;
    bool is_stalled_hs;
    bool is_stalled_shutdown;
} xs_t;

static void bump(uint64_t *n)
{
    __atomic_add_fetch(n, 1, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *n)
{
    return __atomic_load_n(n, __ATOMIC_RELAXED);
}

static int xt_open(nl_conn_t *c, void *arg, bool is_client, void **state)
{
    xt_t *t = arg;
    xs_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->t = t;
    s->is_client = is_client;
    memcpy(s->hello_out, is_client ? "XTC1" : "XTS1", 4);
    if (is_client) {
        s->key = XT_KEY;
        s->hello_out[4] = XT_KEY;
    } else {
        __atomic_store_n(&t->last_server_conn, c, __ATOMIC_RELAXED);
    }
    bump(&t->opens);
    *state = s;
    return 0;
}

/* Sends what is left of this side's hello: 0 when all is out, WANT_WRITE, or -errno. */
static int xs_send_hello(nl_conn_t *c, xs_t *s)
{
    while (s->out_sent < XT_HELLO) {
        ssize_t n = send(nl_conn_fd(c), s->hello_out + s->out_sent, XT_HELLO - s->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN ? NL_TRANSPORT_WANT_WRITE : -errno;
        s->out_sent += (size_t)n;
    }
    return 0;
}

/* Takes the peer's hello from the socket (the server: with whatever follows it, kept in pend).
 * Returns 0 once complete, WANT_READ, or -errno (-EPROTO for a wrong hello). */
static int xs_recv_hello(nl_conn_t *c, xs_t *s)
{
    if (s->in_got == XT_HELLO)
        return 0;
    ssize_t n = recv(nl_conn_fd(c), s->pend, s->is_client ? XT_HELLO - s->in_got : sizeof(s->pend),
                     MSG_DONTWAIT);
    if (n == 0)
        return -ECONNRESET;
    if (n < 0)
        return errno == EAGAIN ? NL_TRANSPORT_WANT_READ : -errno;
    size_t take = (size_t)n < XT_HELLO - s->in_got ? (size_t)n : XT_HELLO - s->in_got;
    memcpy(s->hello_in + s->in_got, s->pend, take);
    s->in_got += take;
    s->pend_off = take;
    s->pend_len = (size_t)n;
    if (s->pend_len > s->pend_off)
        bump(&s->t->surplus);
    if (s->in_got < XT_HELLO)
        return NL_TRANSPORT_WANT_READ;
    if (memcmp(s->hello_in, s->is_client ? "XTS1" : "XTC1", 4) != 0)
        return -EPROTO;
    if (!s->is_client)
        s->key = s->hello_in[4];
    return 0;
}

static int xt_handshake(nl_conn_t *c, void *state)
{
    xs_t *s = state;
    xt_t *t = s->t;
    bump(&t->hs_steps);
    if (t->is_stall_hs && !s->is_stalled_hs) {
        s->is_stalled_hs = true;
        bump(&t->hs_want_write);
        return NL_TRANSPORT_WANT_WRITE;
    }
    /* The client speaks first; the server answers once it heard the client. */
    int rc = s->is_client ? xs_send_hello(c, s) : xs_recv_hello(c, s);
    if (rc == 0)
        rc = s->is_client ? (t->is_eager ? 0 : xs_recv_hello(c, s)) : xs_send_hello(c, s);
    if (rc == NL_TRANSPORT_WANT_READ)
        bump(&t->hs_want_read);
    else if (rc == NL_TRANSPORT_WANT_WRITE)
        bump(&t->hs_want_write);
    else if (rc == 0)
        bump(&t->hs_done);
    else
        bump(&t->hs_failed);
    return rc;
}

static ssize_t xt_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    xs_t *s = state;
    bump(&s->t->reads);
    if (s->pend_off == s->pend_len) {
        ssize_t n = recv(nl_conn_fd(c), s->pend, sizeof(s->pend), MSG_DONTWAIT);
        if (n <= 0)
            return n == 0 ? 0 : -errno;
        s->pend_off = 0;
        s->pend_len = (size_t)n;
        /* An eager client meets the server's hello at the front of the stream. */
        if (s->is_client && s->in_got < XT_HELLO) {
            while (s->in_got < XT_HELLO && s->pend_off < s->pend_len)
                s->hello_in[s->in_got++] = s->pend[s->pend_off++];
            if (s->in_got == XT_HELLO && memcmp(s->hello_in, "XTS1", 4) != 0)
                return -EPROTO;
        }
        if (s->pend_off == s->pend_len)
            return xt_read(c, state, in); /* only the hello: read on */
    } else {
        bump(&s->t->pending_reads);
    }
    size_t n = s->pend_len - s->pend_off;
    if (s->t->read_chunk && n > s->t->read_chunk)
        n = s->t->read_chunk;
    int err = nl_buf_ensure_writable(in, n);
    if (err < 0)
        return err;
    uint8_t *w = (uint8_t *)nl_buf_begin_write(in);
    for (size_t k = 0; k < n; k++)
        w[k] = s->pend[s->pend_off + k] ^ s->key;
    nl_buf_has_written(in, n);
    s->pend_off += n;
    return (ssize_t)n;
}

static ssize_t xt_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    xs_t *s = state;
    bump(&s->t->writevs);
    if (s->t->is_fail_writes) {
        errno = EAGAIN; /* what a transport's last system call may well have left there */
        return -EPIPE;
    }
    if (iovcnt == 0) {
        bump(&s->t->own_writevs);
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    uint8_t *buf = malloc(total);
    if (!buf)
        return -ENOMEM;
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        for (size_t k = 0; k < iov[i].iov_len; k++)
            buf[len++] = p[k] ^ s->key;
    }
    ssize_t n = send(nl_conn_fd(c), buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int err = -errno;
    free(buf);
    if (n < 0)
        return err;
    if ((size_t)n < len)
        bump(&s->t->short_writevs);
    return n;
}

static bool xt_has_pending(const nl_conn_t *c, void *state)
{
    (void)c;
    const xs_t *s = state;
    return s->pend_off < s->pend_len;
}

static int xt_shutdown(nl_conn_t *c, void *state)
{
    xs_t *s = state;
    bump(&s->t->shutdowns);
    if (s->t->is_stall_shutdown && !s->is_stalled_shutdown) {
        s->is_stalled_shutdown = true;
        return NL_TRANSPORT_WANT_WRITE;
    }
    uint8_t bye[4];
    for (size_t k = 0; k < 4; k++)
        bye[k] = (uint8_t)("BYE!"[k] ^ s->key);
    while (s->bye_sent < 4) {
        ssize_t n =
            send(nl_conn_fd(c), bye + s->bye_sent, 4 - s->bye_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN ? NL_TRANSPORT_WANT_WRITE : -errno;
        s->bye_sent += (size_t)n;
    }
    return NL_TRANSPORT_DONE;
}

static void xt_wake(void *arg)
{
    (void)arg;
}

static void xt_free(nl_conn_t *c, void *state)
{
    (void)c;
    xs_t *s = state;
    xt_t *t = s->t;
    /* Read first: once frees is counted the test may return and t go away. */
    nl_loop_t *notify = nl_conn_loop(c) != t->notify ? t->notify : NULL;
    free(s);
    bump(&t->frees);
    if (notify && nl_loop_post(notify, xt_wake, NULL) != 0)
        abort();
}

static const nl_transport_t xt_transport = {
    .name = "xt",
    .open = xt_open,
    .handshake = xt_handshake,
    .read = xt_read,
    .writev = xt_writev,
    .has_pending = xt_has_pending,
    .shutdown = xt_shutdown,
    .free = xt_free,
};

/* --- echo over IO loops ------------------------------------------------------------------- */

#define ECHO_CLIENTS 4

typedef struct echo_s {
    test_env_t *e;
    uint64_t srv_connected; /* atomic: server connections on IO threads */
    size_t cli_connected;
    size_t cli_closed;
    size_t done;
    bool is_plain; /* nl_transport_plain, not xt */
    struct echo_cli_s {
        struct echo_s *ec;
        nl_client_t *cl;
        size_t sent;
        size_t got;
        bool is_mismatch;
    } cli[ECHO_CLIENTS];
} echo_t;

#define ECHO_BYTES 50000

static uint8_t echo_byte(size_t cli, size_t k)
{
    return (uint8_t)(cli * 13 + k * 5 + 3);
}

static void echo_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    echo_t *ec = e->test;
    assert_int_equal(nl_conn_state(c), NL_CONN_CONNECTED);
    assert_non_null(nl_conn_transport_state(c));
    /* Reads go through the transport: no kernel receive timestamps. */
    assert_int_equal(nl_conn_set_rx_timestamps(c, true), -EOPNOTSUPP);
    bump(&ec->srv_connected);
}

static const nl_conn_cbs_t echo_srv_cbs = {.on_connected = echo_srv_connected,
                                           .on_message = test_env_echo_message,
                                           .on_close = test_env_echo_close};

static void echo_cli_connected(nl_conn_t *c)
{
    struct echo_cli_s *ec = nl_conn_ctx(c);
    size_t idx = (size_t)(ec - ec->ec->cli);
    ec->ec->cli_connected++;
    bool is_plain = ec->ec->is_plain;
    assert_int_equal(nl_conn_set_rx_timestamps(c, true), is_plain ? 0 : -EOPNOTSUPP);
    assert_int_equal(nl_conn_set_rx_timestamps(c, false), is_plain ? 0 : -EOPNOTSUPP);
    assert_int_equal(nl_conn_transport_state(c) == NULL, is_plain);
    /* Three sends of different sizes; the stream is what counts. */
    static uint8_t buf[ECHO_BYTES];
    for (size_t k = 0; k < ECHO_BYTES; k++)
        buf[k] = echo_byte(idx, k);
    assert_int_equal(nl_conn_send(c, buf, 100), 0);
    assert_int_equal(nl_conn_send(c, buf + 100, 9900), 0);
    assert_int_equal(nl_conn_send(c, buf + 10000, ECHO_BYTES - 10000), 0);
    ec->sent = ECHO_BYTES;
}

static void echo_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    struct echo_cli_s *ec = nl_conn_ctx(c);
    size_t idx = (size_t)(ec - ec->ec->cli);
    const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
    for (size_t k = 0; k < nl_buf_readable(in); k++)
        ec->is_mismatch |= p[k] != echo_byte(idx, ec->got + k);
    ec->got += nl_buf_readable(in);
    nl_buf_retrieve_all(in);
    if (ec->got == ECHO_BYTES)
        ec->ec->done++;
}

static void echo_cli_close(nl_conn_t *c, int reason)
{
    (void)reason;
    struct echo_cli_s *ec = nl_conn_ctx(c);
    ec->ec->cli_closed++;
}

static const nl_conn_cbs_t echo_cli_cbs = {
    .on_connected = echo_cli_connected, .on_message = echo_cli_message, .on_close = echo_cli_close};

static bool echo_done(test_env_t *e)
{
    const echo_t *ec = e->test;
    return ec->done == ECHO_CLIENTS;
}

static bool echo_all_closed(test_env_t *e)
{
    const echo_t *ec = e->test;
    return ec->cli_closed == ECHO_CLIENTS && e->srv_closed == ECHO_CLIENTS;
}

static void run_echo(test_env_t *e, xt_t *t, size_t threads)
{
    echo_t *ec = calloc(1, sizeof(*ec));
    assert_non_null(ec);
    ec->e = e;
    e->test = ec;
    e->transport = &xt_transport;
    e->transport_arg = t;
    test_env_serve(e, threads, &echo_srv_cbs, 0);
    for (size_t i = 0; i < ECHO_CLIENTS; i++) {
        ec->cli[i].ec = ec;
        ec->cli[i].cl = test_env_client(e, &echo_cli_cbs, &ec->cli[i]);
    }
    test_env_run_until(e, echo_done);
    for (size_t i = 0; i < ECHO_CLIENTS; i++) {
        assert_false(ec->cli[i].is_mismatch);
        assert_int_equal(ec->cli[i].got, ECHO_BYTES);
    }
    assert_int_equal(ec->cli_connected, ECHO_CLIENTS);
    assert_int_equal(get(&ec->srv_connected), ECHO_CLIENTS);
    for (size_t i = 0; i < ECHO_CLIENTS; i++)
        nl_client_close(ec->cli[i].cl);
    test_env_run_until(e, echo_all_closed);
    free(ec);
}

static xt_t *echo_xt;

/* Server connections free their transport state on their IO loop after on_close. */
static bool echo_all_freed(test_env_t *e)
{
    (void)e;
    return get(&echo_xt->frees) == 2 * ECHO_CLIENTS;
}

static void test_nl_transport_echo(void **state)
{
    test_env_t *e = *state;
    xt_t t = {.notify = e->loop};
    echo_xt = &t;
    run_echo(e, &t, 2);
    test_env_run_until(e, echo_all_freed);
    /* Each side of each connection: opened, handshaken, freed, once. */
    assert_int_equal(get(&t.opens), 2 * ECHO_CLIENTS);
    assert_int_equal(get(&t.hs_done), 2 * ECHO_CLIENTS);
    assert_int_equal(get(&t.hs_failed), 0);
    assert_int_equal(get(&t.frees), 2 * ECHO_CLIENTS);
    assert_true(get(&t.hs_want_read) > 0); /* servers wait for the hello, strict clients too */
    assert_true(get(&t.writevs) >= 2 * 3 * ECHO_CLIENTS / 2);
    assert_true(get(&t.reads) > 0);
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    assert_int_equal(cs.batch_sends, 0); /* writes went through the transport */
    assert_int_equal(cs.bytes_out, ECHO_CLIENTS * ECHO_BYTES);
}

/* --- partial writes, input in chunks ------------------------------------------------------ */

typedef struct bulk_s {
    nl_conn_t *cli;
    size_t got;
    bool is_mismatch;
    bool is_sent;
} bulk_t;

#define BULK_BYTES (2u << 20)

static uint8_t bulk_byte(size_t k)
{
    return (uint8_t)(k * 7 + k / 251);
}

static void bulk_srv_connected(nl_conn_t *c)
{
    int sndbuf = 16384;
    assert_int_equal(setsockopt(nl_conn_fd(c), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
}

static const nl_conn_cbs_t bulk_srv_cbs = {.on_connected = bulk_srv_connected,
                                           .on_message = test_env_echo_message,
                                           .on_close = test_env_echo_close};

static void bulk_cli_connected(nl_conn_t *c)
{
    bulk_t *b = nl_conn_ctx(c);
    b->cli = c;
    /* Not reading until everything is queued: the server's echo fills its socket. */
    nl_conn_pause_read(c);
    uint8_t *buf = malloc(BULK_BYTES);
    assert_non_null(buf);
    for (size_t k = 0; k < BULK_BYTES; k++)
        buf[k] = bulk_byte(k);
    for (size_t at = 0; at < BULK_BYTES; at += 65536)
        assert_int_equal(nl_conn_send(c, buf + at, 65536), 0);
    free(buf);
    b->is_sent = true;
}

static void bulk_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    bulk_t *b = nl_conn_ctx(c);
    const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
    for (size_t k = 0; k < nl_buf_readable(in); k++)
        b->is_mismatch |= p[k] != bulk_byte(b->got + k);
    b->got += nl_buf_readable(in);
    nl_buf_retrieve_all(in);
}

static const nl_conn_cbs_t bulk_cli_cbs = {.on_connected = bulk_cli_connected,
                                           .on_message = bulk_cli_message};

static xt_t *bulk_xt;

/* Resumes the client once the server has echo queued: its socket is full. */
static bool bulk_server_full(test_env_t *e)
{
    const bulk_t *b = e->test;
    nl_conn_t *srv = __atomic_load_n(&bulk_xt->last_server_conn, __ATOMIC_RELAXED);
    return b->is_sent && srv && nl_conn_output_bytes(srv) > 0;
}

static bool bulk_done(test_env_t *e)
{
    const bulk_t *b = e->test;
    return b->got == BULK_BYTES;
}

static bool bulk_srv_closed(test_env_t *e)
{
    return e->srv_closed == 1;
}

static void test_nl_transport_partial_writes(void **state)
{
    test_env_t *e = *state;
    xt_t t = {.read_chunk = 64};
    bulk_xt = &t;
    bulk_t b = {0};
    e->test = &b;
    e->transport = &xt_transport;
    e->transport_arg = &t;
    test_env_serve(e, 0, &bulk_srv_cbs, 0);
    nl_client_t *cl = test_env_client(e, &bulk_cli_cbs, &b);
    test_env_run_until(e, bulk_server_full);
    nl_conn_resume_read(b.cli);
    test_env_run_until(e, bulk_done);
    assert_false(b.is_mismatch);
    assert_true(get(&t.short_writevs) > 0);
    /* 64 bytes per read op of 4 KiB socket reads: most reads came from inside the transport,
     * past the 4-per-readiness budget, so without fd readiness. */
    assert_true(get(&t.pending_reads) > get(&t.reads) / 2);
    nl_client_close(cl);
    test_env_run_until(e, bulk_srv_closed);
    assert_int_equal(get(&t.frees), 2);
}

/* --- a raw peer: the wire, data behind the hello, stalls, shutdown ------------------------ */

typedef struct raw_s {
    int fd;
    uint8_t got[256];
    size_t got_len;
    bool is_eof;
    size_t srv_messages;
} raw_t;

static void raw_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    test_env_t *e = nl_conn_ctx(c);
    raw_t *r = e->test;
    r->srv_messages++;
    if (nl_buf_readable(in) < 11)
        return;
    assert_memory_equal(nl_buf_peek(in), "hello world", 11);
    test_env_echo_message(c, in);
    nl_conn_shutdown(c); /* once the echo is out: BYE!, then the FIN */
}

static const nl_conn_cbs_t raw_srv_cbs = {.on_message = raw_srv_message,
                                          .on_close = test_env_echo_close};

static bool raw_eof(test_env_t *e)
{
    raw_t *r = e->test;
    for (;;) {
        ssize_t n = recv(r->fd, r->got + r->got_len, sizeof(r->got) - r->got_len, MSG_DONTWAIT);
        if (n > 0) {
            r->got_len += (size_t)n;
            continue;
        }
        if (n == 0)
            r->is_eof = true;
        return r->is_eof;
    }
}

static int raw_connect(test_env_t *e)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(nl_server_port(e->srv))};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    return fd;
}

static void test_nl_transport_raw_peer(void **state)
{
    test_env_t *e = *state;
    xt_t t = {.is_stall_hs = true, .is_stall_shutdown = true};
    raw_t r = {0};
    e->test = &r;
    e->transport = &xt_transport;
    e->transport_arg = &t;
    test_env_serve(e, 0, &raw_srv_cbs, 0);
    r.fd = raw_connect(e);
    /* The hello and the first data in one segment: the data lands inside the transport. */
    uint8_t out[XT_HELLO + 11] = {'X', 'T', 'C', '1', 0x33, 0, 0, 0};
    for (size_t k = 0; k < 11; k++)
        out[XT_HELLO + k] = (uint8_t)("hello world"[k] ^ 0x33);
    assert_int_equal(send(r.fd, out, sizeof(out), 0), (ssize_t)sizeof(out));
    test_env_run_until(e, raw_eof);
    /* On the wire: the server's hello, the echo XORed with the client's key, BYE! likewise. */
    assert_int_equal(r.got_len, XT_HELLO + 11 + 4);
    assert_memory_equal(r.got, "XTS1\0\0\0\0", XT_HELLO);
    for (size_t k = 0; k < 11; k++)
        assert_int_equal(r.got[XT_HELLO + k], (uint8_t)("hello world"[k] ^ 0x33));
    for (size_t k = 0; k < 4; k++)
        assert_int_equal(r.got[XT_HELLO + 11 + k], (uint8_t)("BYE!"[k] ^ 0x33));
    assert_true(get(&t.surplus) > 0);
    assert_int_equal(r.srv_messages, 1);
    assert_true(get(&t.hs_want_write) >= 1); /* the stall, retried on writability */
    assert_int_equal(get(&t.hs_done), 1);
    assert_int_equal(get(&t.shutdowns), 2); /* stalled once, then BYE! */
    close(r.fd);
    test_env_run_until(e, bulk_srv_closed);
    assert_int_equal(get(&t.frees), 1);
}

/* --- a transport's write error ----------------------------------------------------------- */

static int werr_reason;

static void werr_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    nl_buf_retrieve_all(in);
    /* Queued for the iteration's flush, which writes through the transport's writev. */
    assert_int_equal(nl_conn_send_later(c, "x", 1), 0);
}

static void werr_srv_close(nl_conn_t *c, int reason)
{
    werr_reason = reason;
    test_env_report_close(c);
}

static const nl_conn_cbs_t werr_srv_cbs = {.on_message = werr_srv_message,
                                           .on_close = werr_srv_close};

static bool werr_closed(test_env_t *e)
{
    return e->srv_closed == 1;
}

/* The flush took errno for the transport's error: EAGAIN read as a full socket, and the
 * connection waited for a writability edge that never came instead of closing. */
static void test_nl_transport_write_error(void **state)
{
    test_env_t *e = *state;
    xt_t t = {.is_fail_writes = true};
    e->transport = &xt_transport;
    e->transport_arg = &t;
    werr_reason = 0;
    test_env_serve(e, 0, &werr_srv_cbs, 0);
    int fd = raw_connect(e);
    uint8_t out[XT_HELLO + 1] = {'X', 'T', 'C', '1', 0x33, 0, 0, 0, 'a' ^ 0x33};
    assert_int_equal(send(fd, out, sizeof(out), 0), (ssize_t)sizeof(out));
    test_env_run_until(e, werr_closed);
    assert_int_equal(werr_reason, -EPIPE);
    assert_true(get(&t.writevs) >= 1);
    close(fd);
    assert_int_equal(get(&t.frees), 1);
}

/* --- closes while handshaking ------------------------------------------------------------- */

typedef struct hs_close_s {
    size_t connected;
    size_t closed;
    size_t retries;
    int retry_status;
    bool is_retry_last; /* on_retry said no retry follows */
    bool is_due;
} hs_close_t;

static void hsc_connected(nl_conn_t *c)
{
    (void)c;
    fail_msg("on_connected for a connection whose handshake never finished");
}

static void hsc_close(nl_conn_t *c, int reason)
{
    (void)c;
    (void)reason;
    fail_msg("on_close for a connection whose handshake never finished");
}

static const nl_conn_cbs_t hsc_cbs = {.on_connected = hsc_connected, .on_close = hsc_close};

static xt_t *hsc_xt;
static uint64_t hsc_want_frees;

static bool hsc_freed(test_env_t *e)
{
    (void)e;
    return get(&hsc_xt->frees) == hsc_want_frees;
}

static bool hsc_handshaking(test_env_t *e)
{
    (void)e;
    return get(&hsc_xt->hs_want_read) > 0;
}

static void hsc_deadline(nl_timer_t *tm, void *arg)
{
    (void)tm;
    xt_t *t = arg;
    nl_conn_t *c = __atomic_load_n(&t->last_server_conn, __ATOMIC_RELAXED);
    assert_int_equal(nl_conn_state(c), NL_CONN_CONNECTING);
    assert_int_equal(nl_conn_send(c, "x", 1), -ENOTCONN);
    nl_conn_close(c, -ETIMEDOUT);
}

static void hsc_retry(nl_client_t *cl, int status, bool will_retry, uint64_t delay_ms)
{
    (void)delay_ms;
    hs_close_t *h = nl_client_arg(cl);
    h->retries++;
    h->retry_status = status;
    h->is_retry_last = !will_retry;
}

static bool hsc_retried(test_env_t *e)
{
    const hs_close_t *h = e->test;
    return h->retries > 0;
}

/* A listening socket that never accepts: the kernel completes connects from its backlog. */
static int listen_raw(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sin);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    *port = ntohs(sin.sin_port);
    return fd;
}

static nl_client_t *hsc_client(test_env_t *e, xt_t *t, hs_close_t *h, uint16_t port)
{
    nl_client_opts_t o = {.host = "127.0.0.1",
                          .port = port,
                          .max_attempts = 1,
                          .cbs = &hsc_cbs,
                          .on_retry = hsc_retry,
                          .arg = h,
                          .transport = &xt_transport,
                          .transport_arg = t};
    nl_client_t *cl;
    assert_int_equal(nl_client_new(&cl, e->loop, &o), 0);
    assert_int_equal(nl_client_connect(cl), 0);
    return cl;
}

static int accept_one(int lfd, test_env_t *e)
{
    int fd = -1;
    for (int k = 0; k < 1000 && fd < 0; k++) {
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            assert_int_equal(nl_loop_run_once(e->loop, 10), 0);
    }
    assert_true(fd >= 0);
    return fd;
}

static void test_nl_transport_close_while_handshaking(void **state)
{
    test_env_t *e = *state;
    xt_t t = {0};
    hsc_xt = &t;
    hs_close_t h = {0};
    e->test = &h;
    e->transport = &xt_transport;
    e->transport_arg = &t;
    test_env_serve(e, 0, &hsc_cbs, 0);

    /* 1. Server side, a deadline: the peer connects and says nothing. */
    int fd = raw_connect(e);
    test_env_run_until(e, hsc_handshaking);
    nl_timer_t *tm;
    assert_int_equal(nl_timer_new(&tm, e->loop, hsc_deadline, &t), 0);
    assert_int_equal(nl_timer_start(tm, 10, 0), 0);
    hsc_want_frees = 1;
    test_env_run_until(e, hsc_freed);
    nl_timer_close(tm, NULL);
    char byte;
    assert_int_equal(recv(fd, &byte, 1, 0), 0); /* closed: EOF, nothing sent */
    close(fd);

    /* 2. Server side, the peer leaves during the handshake: the handshake's error closes. */
    fd = raw_connect(e);
    assert_int_equal(send(fd, "XTC", 3, 0), 3); /* part of a hello */
    close(fd);
    hsc_want_frees = 2;
    test_env_run_until(e, hsc_freed);
    assert_int_equal(get(&t.hs_failed), 1);

    /* 3. Client side, closed mid-handshake: its attempt completes once, cancelled. */
    uint16_t port;
    int lfd = listen_raw(&port);
    t.hs_want_read = 0;
    nl_client_t *cl = hsc_client(e, &t, &h, port);
    test_env_run_until(e, hsc_handshaking); /* hello sent, waiting for the server's */
    nl_client_close(cl);
    hsc_want_frees = 3;
    test_env_run_until(e, hsc_freed);
    assert_int_equal(h.retries, 1);
    assert_int_equal(h.retry_status, -ECANCELED);
    close(accept_one(lfd, e));

    /* 4. Client side, a wrong hello from the server: a failed attempt, none left. */
    h = (hs_close_t){0};
    cl = hsc_client(e, &t, &h, port);
    int sfd = accept_one(lfd, e);
    assert_int_equal(send(sfd, "BADHELLO", XT_HELLO, 0), XT_HELLO);
    test_env_run_until(e, hsc_retried);
    assert_int_equal(h.retry_status, -EPROTO);
    assert_true(h.is_retry_last);
    hsc_want_frees = 4;
    test_env_run_until(e, hsc_freed);
    assert_int_equal(get(&t.hs_failed), 2);
    assert_int_equal(get(&t.opens), 4);
    nl_client_close(cl);
    assert_int_equal(nl_loop_run_once(e->loop, 0), 0);
    close(sfd);
    close(lfd);
}

/* --- the plain table ---------------------------------------------------------------------- */

/* nl_transport_plain given explicitly is plain TCP, NULL's path: reads with receive
 * timestamps (the transport's read could not), no transport state. */
static void test_nl_transport_plain_table(void **state)
{
    test_env_t *e = *state;
    e->transport = &nl_transport_plain;
    echo_t *ec = calloc(1, sizeof(*ec));
    assert_non_null(ec);
    ec->e = e;
    ec->is_plain = true;
    e->test = ec;
    test_env_serve(e, 0, &test_env_echo_cbs, 0);
    for (size_t i = 0; i < ECHO_CLIENTS; i++) {
        ec->cli[i].ec = ec;
        ec->cli[i].cl = test_env_client(e, &echo_cli_cbs, &ec->cli[i]);
    }
    test_env_run_until(e, echo_done);
    for (size_t i = 0; i < ECHO_CLIENTS; i++)
        assert_false(ec->cli[i].is_mismatch);
    for (size_t i = 0; i < ECHO_CLIENTS; i++)
        nl_client_close(ec->cli[i].cl);
    test_env_run_until(e, echo_all_closed);
    free(ec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_transport_echo, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_transport_write_error, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_transport_partial_writes, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_transport_raw_peer, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_transport_close_while_handshaking, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_transport_plain_table, test_env_setup,
                                        test_env_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
