/*
 * test_gw_limits: every limit of a real herald, each set low by a flag, and what a client past
 * it sees:
 *   - max connections: Disconnect{SERVER_FULL} and the close; a slot freed is usable again;
 *   - max frame size: a length prefix over the limit, sent alone, is refused at once
 *     (FRAME_TOO_LARGE, then the close) without waiting for the body; a frame at the limit
 *     passes;
 *   - subscriptions per connection: Error{TOO_MANY_SUBSCRIPTIONS}, the session goes on;
 *   - publish rate: past the burst, Error{RATE_LIMITED} with a retry hint;
 *   - malformed input (undecodable body, overlong varint, a frame with no body): Error
 *     BAD_REQUEST and/or Disconnect PROTOCOL_ERROR, then the close; bad channel names;
 *   - descriptor exhaustion: herald under RLIMIT_NOFILE 64 answers or closes every one of
 *     100 connections (none hangs), its admin API still answers meanwhile, and it serves new
 *     clients once descriptors free up;
 *   - a full worker queue (1 worker, capacity 1): a burst of Connects, each with a Ping
 *     pipelined behind it, gets some Error{BUSY}; the Ping behind a BUSY Connect is answered
 *     BUSY too (not taken for a frame before Connect), none hangs, each succeeds on retry
 *     (ConnectOk, then Pong), and the server stays responsive; one left without a retry is
 *     closed at the handshake deadline with Disconnect{IDLE_TIMEOUT} and reconnect = true.
 * The memory bound for a client that never reads is in test_gw_slow.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

/* Expects the server to close c after at most Error/Disconnect frames; returns their codes. */
static void expect_closed(test_client_t *c, int *disc, int *err)
{
    GW_OK(test_client_expect_close(c, false, disc, err, GW_WAIT_MS), c);
}

static void test_gw_limits_max_connections(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--max-connections", "3", NULL);
    test_client_t cs[3];
    for (int i = 0; i < 3; i++)
        GW_OK(test_client_auth(&cs[i], h->port, "u", GW_WAIT_MS), &cs[i]);

    for (int k = 0; k < 3; k++) {
        test_client_t extra;
        GW_OK(test_client_open(&extra, h->port, GW_WAIT_MS), &extra);
        int disc = -1;
        int err = -1;
        expect_closed(&extra, &disc, &err);
        assert_int_equal(disc, HERALD__DISCONNECT__CODE__SERVER_FULL);
        test_client_close(&extra);
    }
    /* The three admitted clients were not disturbed. */
    for (int i = 0; i < 3; i++)
        GW_OK(test_client_ping(&cs[i], GW_WAIT_MS), &cs[i]);

    /* Once one leaves, a new client gets in (herald sees the close asynchronously: each try
     * is a real round trip, bounded in number). */
    test_client_close(&cs[2]);
    bool is_in = false;
    for (int tries = 0; tries < 200 && !is_in; tries++) {
        GW_OK(test_client_open(&cs[2], h->port, GW_WAIT_MS), &cs[2]);
        int rc = test_client_hello(&cs[2], "again", GW_WAIT_MS);
        is_in = rc == 0;
        if (!is_in)
            test_client_close(&cs[2]);
    }
    assert_true(is_in);
    for (int i = 0; i < 3; i++)
        test_client_close(&cs[i]);
    gw_stop(state);
}

/* Sends a varint length prefix claiming len bytes, and nothing else. */
static void send_prefix(test_client_t *c, uint32_t len)
{
    uint8_t v[5];
    size_t n = 0;
    while (len >= 0x80) {
        v[n++] = (uint8_t)(len | 0x80);
        len >>= 7;
    }
    v[n++] = (uint8_t)len;
    GW_OK(test_client_send_raw(c, v, n, GW_WAIT_MS), c);
}

static void expect_too_large(test_client_t *c)
{
    int disc = -1;
    int err = -1;
    expect_closed(c, &disc, &err);
    if (err != HERALD__ERROR__CODE__FRAME_TOO_LARGE &&
        disc != HERALD__DISCONNECT__CODE__FRAME_TOO_LARGE)
        fail_msg("oversized frame: expected FRAME_TOO_LARGE, got error %d disconnect %d", err,
                 disc);
}

static void test_gw_limits_max_frame(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--max-frame", "1k", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    assert_int_equal(c.max_frame_bytes, 1024);
    GW_OK(test_client_subscribe(&c, "big", NULL, GW_WAIT_MS), &c);

    /* A Publish whose frame is exactly 1024 bytes (2 more for the prefix) passes. */
    static char payload[1024];
    Herald__Frame f;
    Herald__Publish pub;
    size_t len = 900;
    for (; len < sizeof(payload); len++) {
        test_frame_publish(&f, &pub, "big", payload, len);
        f.id = c.next_id;
        if (proto_frame_encoded_size(&f) >= 1024 + 2)
            break;
    }
    assert_int_equal(proto_frame_encoded_size(&f), 1024 + 2);
    uint64_t off = 0;
    GW_OK(test_client_publish(&c, "big", payload, len, &off, GW_WAIT_MS), &c);
    GW_OK(test_client_expect_push(&c, "big", off, NULL, GW_WAIT_MS), &c);

    /* One byte more, announced by the prefix alone: refused without waiting for the body. */
    send_prefix(&c, 1025);
    expect_too_large(&c);
    test_client_close(&c);

    /* Before Connect as well, and with an absurd length. */
    GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
    send_prefix(&c, 0x7fffffff);
    expect_too_large(&c);
    test_client_close(&c);
    gw_stop(state);
}

static void test_gw_limits_max_subscriptions(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--max-subscriptions", "2", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "a", NULL, GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "b", NULL, GW_WAIT_MS), &c);
    int rc = test_client_subscribe(&c, "c", NULL, GW_WAIT_MS);
    if (rc != -EPROTO || c.last_err_code != HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS)
        fail_msg("third Subscribe: expected TOO_MANY_SUBSCRIPTIONS, got %d %s", rc,
                 test_client_what(&c));
    /* The session goes on; after an Unsubscribe there is room again. */
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    GW_OK(test_client_unsubscribe(&c, "a", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "c", NULL, GW_WAIT_MS), &c);
    uint64_t off = 0;
    GW_OK(test_client_publish(&c, "c", "x", 1, &off, GW_WAIT_MS), &c);
    GW_OK(test_client_expect_push(&c, "c", off, NULL, GW_WAIT_MS), &c);
    /* Another connection has its own budget. */
    test_client_t d;
    GW_OK(test_client_auth(&d, h->port, "u", GW_WAIT_MS), &d);
    GW_OK(test_client_subscribe(&d, "a", NULL, GW_WAIT_MS), &d);
    GW_OK(test_client_subscribe(&d, "b", NULL, GW_WAIT_MS), &d);
    test_client_close(&d);
    test_client_close(&c);
    gw_stop(state);
}

#define RATE_BURST 3
#define RATE_SENT 10

static void test_gw_limits_publish_rate(void **state)
{
    test_herald_t *h =
        gw_start(state, "--insecure", "--publish-rate", "1", "--publish-burst", "3", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    /* Ten publishes in one write, so herald handles them together. */
    nl_buf_t out;
    nl_buf_init(&out, 0);
    for (uint64_t i = 1; i <= RATE_SENT; i++) {
        Herald__Frame f;
        Herald__Publish pub;
        test_frame_publish(&f, &pub, "rated", "x", 1);
        f.id = i;
        assert_int_equal(proto_frame_append(&out, &f), 0);
    }
    GW_OK(test_client_send_raw(&c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), &c);
    nl_buf_deinit(&out);
    /* Answers come by id, not necessarily in order (a PublishOk waits for the engine, an
     * Error does not). */
    int ok = 0;
    int limited = 0;
    bool is_ok[RATE_SENT + 1] = {false};
    bool is_seen[RATE_SENT + 1] = {false};
    for (int k = 0; k < RATE_SENT; k++) {
        Herald__Frame *r = NULL;
        assert_int_equal(test_client_recv(&c, &r, GW_WAIT_MS), 1);
        char fs[384];
        if (r->id < 1 || r->id > RATE_SENT || is_seen[r->id])
            fail_msg("unexpected answer %s", test_frame_str(r, fs, sizeof(fs)));
        is_seen[r->id] = true;
        if (r->body_case == HERALD__FRAME__BODY_PUBLISH_OK) {
            is_ok[r->id] = true;
            ok++;
        } else if (r->body_case == HERALD__FRAME__BODY_ERROR &&
                   r->error->code == HERALD__ERROR__CODE__RATE_LIMITED) {
            assert_true(r->error->retry_after_ms > 0);
            limited++;
        } else {
            fail_msg("publish answer: %s", test_frame_str(r, fs, sizeof(fs)));
        }
        proto_frame_free(r);
    }
    /* The first RATE_BURST were the ones accepted. */
    for (int i = 1; i <= RATE_BURST; i++)
        assert_true(is_ok[i]);
    /* The burst passes; the rest is refused (one more may pass if a second went by). */
    if (ok < RATE_BURST || ok > RATE_BURST + 1 || ok + limited != RATE_SENT)
        fail_msg("publish rate: %d accepted, %d limited (burst %d)", ok, limited, RATE_BURST);
    /* Rate limiting is not fatal. */
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    test_client_close(&c);
    gw_stop(state);
}

/* Opens a connection (authenticated when is_auth), sends bytes, expects the close with
 * Error BAD_REQUEST and/or Disconnect PROTOCOL_ERROR. */
static void expect_malformed(const test_herald_t *h, bool is_auth, const void *bytes, size_t len,
                             const char *what)
{
    test_client_t c;
    if (is_auth)
        GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    else
        GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
    GW_OK(test_client_send_raw(&c, bytes, len, GW_WAIT_MS), &c);
    int disc = -1;
    int err = -1;
    expect_closed(&c, &disc, &err);
    bool is_ok = (err == HERALD__ERROR__CODE__BAD_REQUEST || err == -1) &&
                 (disc == HERALD__DISCONNECT__CODE__PROTOCOL_ERROR || disc == -1) &&
                 (err != -1 || disc != -1);
    if (!is_ok)
        fail_msg("%s: expected BAD_REQUEST/PROTOCOL_ERROR, got error %d disconnect %d", what, err,
                 disc);
    test_client_close(&c);
}

static void test_gw_limits_malformed(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", NULL);
    static const uint8_t garbage[] = {5, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t overlong[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                       0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    static const uint8_t no_body[] = {2, 0x08, 0x01};  /* Frame{id: 1}, no body */
    static const uint8_t bad_wire[] = {2, 0x0d, 0x01}; /* id as fixed32: wrong wire type */
    for (int is_auth = 0; is_auth <= 1; is_auth++) {
        expect_malformed(h, is_auth, garbage, sizeof(garbage), "garbage");
        expect_malformed(h, is_auth, overlong, sizeof(overlong), "overlong varint");
        expect_malformed(h, is_auth, no_body, sizeof(no_body), "frame without a body");
        expect_malformed(h, is_auth, bad_wire, sizeof(bad_wire), "wrong wire type");
    }
    /* Bad channel names are refused per request. */
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    char longname[300];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const char *bad[] = {"", "has space", longname};
    for (size_t i = 0; i < 3; i++) {
        int rc = test_client_subscribe(&c, bad[i], NULL, GW_WAIT_MS);
        if (rc != -EPROTO || c.last_err_code != HERALD__ERROR__CODE__BAD_CHANNEL)
            fail_msg("Subscribe \"%.20s\": expected BAD_CHANNEL, got %d %s", bad[i], rc,
                     test_client_what(&c));
    }
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    test_client_close(&c);
    /* Through all of it herald kept serving. */
    GW_OK(test_client_auth(&c, h->port, "u", GW_WAIT_MS), &c);
    test_client_close(&c);
    gw_stop(state);
}

#define EMFILE_LIMIT 64
#define EMFILE_CLIENTS 100
/* Polls of herald's descriptor count, 10 ms apart, that must agree before it counts as settled:
 * 300 ms, three times the accept back-off after descriptor exhaustion. */
#define FD_SETTLED_POLLS 30

/* Descriptors pid holds (entries of /proc/<pid>/fd), or -1. */
static int proc_fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Connects the fleet's slots to port and authenticates them EMFILE_WAVE at a time, each wave
 * answered (ConnectOk) or closed by herald before the next starts: clients that each send
 * their Connect at once, at a pace the node verifies them. (All at once, most of them would
 * find herald's pre-authentication budget full, a quarter of its 48 client descriptors here,
 * and give way to the newer ones.) Returns -ETIMEDOUT when a connection was left hanging. */
#define EMFILE_WAVE 8

typedef struct waves_s {
    bool *is_answered;
} waves_t;

static void waves_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    waves_t *w = arg;
    if (!f || f->body_case == HERALD__FRAME__BODY_CONNECT_OK)
        w->is_answered[i] = true;
}

static int hello_in_waves(test_fleet_t *fl, uint16_t port, const char *token)
{
    size_t n = test_fleet_size(fl);
    waves_t w = {.is_answered = calloc(n, sizeof(bool))};
    assert_non_null(w.is_answered);
    int rc = 0;
    for (size_t start = 0; start < n && rc == 0; start += EMFILE_WAVE) {
        size_t end = start + EMFILE_WAVE < n ? start + EMFILE_WAVE : n;
        for (size_t i = start; i < end; i++) {
            Herald__Frame f;
            Herald__Connect body;
            test_frame_connect(&f, &body, token);
            f.id = 1;
            assert_int_equal(test_fleet_connect(fl, i, port), 0);
            assert_int_equal(test_fleet_send(fl, i, &f), 0);
        }
        for (int64_t until = test_now_ms() + 3 * GW_WAIT_MS;;) {
            size_t done = 0;
            for (size_t i = start; i < end; i++)
                done += w.is_answered[i] || test_fleet_close_reason(fl, i) != 0;
            if (done == end - start)
                break;
            if (test_now_ms() >= until) {
                rc = -ETIMEDOUT;
                break;
            }
            assert_true(test_fleet_poll(fl, 20, waves_cb, &w) >= 0);
        }
    }
    free(w.is_answered);
    return rc;
}

/* Waits until herald's descriptor count stops moving. Under exhaustion its listener gives up a
 * spare descriptor to close what is pending and takes it back 100 ms later; a request that
 * lands in that window finds a descriptor free and proves nothing. There is no event to await
 * for the end of the back-off, so the test watches the count (as gw_metric_await watches a
 * metric), and fails if it never settles within GW_WAIT_MS. */
static void await_fds_settled(pid_t pid)
{
    int last = -2;
    int same = 0;
    for (int64_t until = test_now_ms() + GW_WAIT_MS; same < FD_SETTLED_POLLS; poll(NULL, 0, 10)) {
        int n = proc_fd_count(pid);
        same = n == last ? same + 1 : 0;
        last = n;
        if (test_now_ms() >= until)
            fail_msg("herald's descriptor count did not settle within %d ms (%d)", GW_WAIT_MS, n);
    }
}

static void test_gw_limits_fd_exhaustion(void **state)
{
    const char *args[] = {"--insecure", "--io-threads", "1", "--worker-threads", "1", NULL};
    test_herald_opts_t opts = {.args = args, .nofile = EMFILE_LIMIT, .cpu = -1};
    test_herald_t *h = gw_start_opts(state, &opts);
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, EMFILE_CLIENTS), 0);
    /* Every connection is either admitted (ConnectOk) or closed by herald; none hangs. */
    int rc = hello_in_waves(fl, h->port, "u");
    if (rc == -ETIMEDOUT)
        fail_msg("connections left hanging under descriptor exhaustion: %s", test_fleet_what(fl));
    size_t admitted = test_fleet_open_count(fl);
    if (admitted == 0 || admitted >= EMFILE_CLIENTS)
        fail_msg("%zu of %d admitted under RLIMIT_NOFILE %d", admitted, EMFILE_CLIENTS,
                 EMFILE_LIMIT);
    print_message("RLIMIT_NOFILE %d: %zu of %d connections admitted, the rest closed\n",
                  EMFILE_LIMIT, admitted, EMFILE_CLIENTS);
    /* The admitted ones work. */
    GW_FLEET_OK(test_fleet_ping_all(fl, NULL, NULL, GW_WAIT_MS), fl);
    assert_false(test_herald_has_exited(h));
    /* The admin API still answers while the clients hold every descriptor they can get: some
     * are kept from them (without those, libmicrohttpd busy-waited for one, a core's worth of
     * CPU and a log line per try, and /healthz went unanswered until clients left). */
    await_fds_settled(h->pid);
    for (int k = 0; k < 3; k++) {
        test_http_resp_t r;
        int hrc =
            test_http_request(h->admin_port, "GET", "/healthz", NULL, NULL, 0, GW_WAIT_MS, &r);
        if (hrc != 0 || r.status != 200)
            fail_msg("GET /healthz under descriptor exhaustion: rc %d status %d", hrc,
                     hrc == 0 ? r.status : 0);
        test_http_resp_free(&r);
    }
    /* A client refused for want of descriptors is told so (SERVER_FULL, with a reconnect
     * hint), as one over max_connections is, rather than seeing a bare close. */
    test_client_t full;
    GW_OK(test_client_open(&full, h->port, GW_WAIT_MS), &full);
    int code = -1;
    GW_OK(test_client_expect_close(&full, false, &code, NULL, GW_WAIT_MS), &full);
    assert_int_equal(code, HERALD__DISCONNECT__CODE__SERVER_FULL);
    assert_int_equal(full.last_reconnect, 1);
    test_client_close(&full);

    /* Free every descriptor; herald serves new clients again (it sees the closes
     * asynchronously, so a few tries may still land in the exhausted state). */
    test_fleet_free(fl);
    test_client_t c;
    bool is_in = false;
    for (int tries = 0; tries < 200 && !is_in; tries++) {
        GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
        is_in = test_client_hello(&c, "after", GW_WAIT_MS) == 0;
        if (!is_in)
            test_client_close(&c);
    }
    assert_true(is_in);
    GW_OK(test_client_subscribe(&c, "x", NULL, GW_WAIT_MS), &c);
    test_client_close(&c);
    /* And as many as before fit again, once herald has seen every close above: it sees them
     * asynchronously, so one try may still find a descriptor held (1 run in ~6 did). A leak
     * would fail every try. */
    int rc_again = -1;
    for (int tries = 0; tries < 20 && rc_again != 0; tries++) {
        assert_int_equal(test_fleet_new(&fl, admitted), 0);
        rc_again = hello_in_waves(fl, h->port, "again");
        if (rc_again == 0 && test_fleet_open_count(fl) != admitted)
            rc_again = -EAGAIN;
        test_fleet_free(fl);
    }
    assert_int_equal(rc_again, 0);
    gw_stop(state);
}

#define BUSY_CLIENTS 200
#define BUSY_ROUNDS 5

/* Connection states in the busy test: Connect (id 1) and Ping (id 2) sent, then either
 * ConnectOk and Pong, or Error{BUSY} for both and a retry. */
enum {
    BUSY_TO_SEND = 0,
    BUSY_OK = 1,
    BUSY_RETRY = 2,
    BUSY_SENT = 3,
    BUSY_AWAIT_PONG = 4,  /* ConnectOk came */
    BUSY_AWAIT_BUSY2 = 5, /* Error{BUSY} for the Connect came */
};

/* Per connection: answers seen in the busy test. */
typedef struct busy_s {
    uint8_t *is_ok; /* a BUSY_* state per connection */
    size_t ok;
    size_t busy;
    size_t other;
    char what[256];
} busy_t;

static void busy_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    busy_t *b = arg;
    (void)fl;
    bool is_busy = f && f->body_case == HERALD__FRAME__BODY_ERROR &&
                   f->error->code == HERALD__ERROR__CODE__BUSY;
    uint8_t st = b->is_ok[i];
    if (f && f->body_case == HERALD__FRAME__BODY_CONNECT_OK && f->id == 1 && st == BUSY_SENT) {
        b->is_ok[i] = BUSY_AWAIT_PONG;
    } else if (f && f->body_case == HERALD__FRAME__BODY_PONG && f->id == 2 &&
               st == BUSY_AWAIT_PONG) {
        b->is_ok[i] = BUSY_OK;
        b->ok++;
    } else if (is_busy && f->id == 1 && st == BUSY_SENT) {
        b->is_ok[i] = BUSY_AWAIT_BUSY2;
    } else if (is_busy && f->id == 2 && st == BUSY_AWAIT_BUSY2) {
        b->busy++;
        b->is_ok[i] = BUSY_RETRY;
    } else {
        char fs[200];
        if (!b->other)
            snprintf(b->what, sizeof(b->what), "connection %zu: %s", i,
                     f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
        b->other++;
    }
}

/* Frees old (may be NULL) and opens a fresh fleet of BUSY_CLIENTS connections to port. */
static test_fleet_t *busy_fleet(test_fleet_t *old, uint16_t port)
{
    test_fleet_free(old);
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, BUSY_CLIENTS), 0);
    GW_FLEET_OK(test_fleet_open(fl, port, BUSY_CLIENTS, GW_WAIT_MS), fl);
    return fl;
}

/* Queues Connect (id 1) with tok on connection i. */
static void busy_send_connect(test_fleet_t *fl, size_t i, const char *tok)
{
    Herald__Frame f;
    Herald__Connect body;
    test_frame_connect(&f, &body, tok);
    f.id = 1;
    assert_int_equal(test_fleet_send(fl, i, &f), 0);
}

/* Sends Connect, and a Ping right behind it, on every connection whose state is want, with a
 * real token. */
static size_t busy_send(test_fleet_t *fl, busy_t *b, const char *tok, uint8_t want)
{
    size_t sent = 0;
    for (size_t i = 0; i < test_fleet_size(fl); i++) {
        if (b->is_ok[i] != want)
            continue;
        busy_send_connect(fl, i, tok);
        Herald__Frame f;
        Herald__Ping ping;
        test_frame_ping(&f, &ping);
        f.id = 2;
        assert_int_equal(test_fleet_send(fl, i, &f), 0);
        b->is_ok[i] = BUSY_SENT;
        sent++;
    }
    return sent;
}

static void test_gw_limits_worker_queue_full(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--io-threads", "1",
                                "--worker-threads", "1", "--worker-queue", "1", NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "burst", "news", 3600, 0, GW_SECRET);
    busy_t b = {.is_ok = calloc(BUSY_CLIENTS, 1)};
    test_fleet_t *fl = NULL;
    for (int round = 0; round < BUSY_ROUNDS && b.busy == 0; round++) {
        fl = busy_fleet(fl, h->port);
        memset(b.is_ok, 0, BUSY_CLIENTS);
        b.ok = 0;
        busy_send(fl, &b, tok, BUSY_TO_SEND);
        /* Every Connect is answered: ConnectOk, or BUSY and then ConnectOk on a retry. */
        int64_t deadline = test_now_ms() + 3 * GW_WAIT_MS;
        while (b.ok < BUSY_CLIENTS && b.other == 0 && test_now_ms() < deadline) {
            assert_true(test_fleet_poll(fl, 100, busy_cb, &b) >= 0);
            busy_send(fl, &b, tok, BUSY_RETRY);
        }
        if (b.other)
            fail_msg("unexpected answer in the Connect burst: %s", b.what);
        if (b.ok < BUSY_CLIENTS)
            fail_msg("%zu of %d Connects unanswered", BUSY_CLIENTS - b.ok, BUSY_CLIENTS);
    }
    if (b.busy == 0)
        fail_msg("no Error{BUSY} in %d bursts of %d Connects with 1 worker and queue 1",
                 BUSY_ROUNDS, BUSY_CLIENTS);
    /* The server stays responsive: every session works. */
    GW_FLEET_OK(test_fleet_ping_all(fl, NULL, NULL, GW_WAIT_MS), fl);
    test_fleet_free(fl);
    free(b.is_ok);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    test_client_close(&c);
    gw_stop(state);
}

/* Connections that got Error{BUSY} and never send Connect again: states per connection. */
enum { PARK_SENT = 0, PARK_OK, PARK_BUSY, PARK_DISCONNECT, PARK_CLOSED };

typedef struct park_s {
    uint8_t *st;
    size_t answered; /* ConnectOk or BUSY */
    size_t busy;
    size_t closed;
    size_t other;
    char what[256];
} park_t;

static void park_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    park_t *p = arg;
    (void)fl;
    uint8_t st = p->st[i];
    if (f && f->body_case == HERALD__FRAME__BODY_CONNECT_OK && st == PARK_SENT) {
        p->st[i] = PARK_OK;
        p->answered++;
    } else if (f && f->body_case == HERALD__FRAME__BODY_ERROR &&
               f->error->code == HERALD__ERROR__CODE__BUSY && st == PARK_SENT) {
        p->st[i] = PARK_BUSY;
        p->answered++;
        p->busy++;
    } else if (f && f->body_case == HERALD__FRAME__BODY_DISCONNECT && st == PARK_BUSY &&
               f->disconnect->code == HERALD__DISCONNECT__CODE__IDLE_TIMEOUT &&
               f->disconnect->reconnect) {
        p->st[i] = PARK_DISCONNECT;
    } else if (!f && st == PARK_DISCONNECT) {
        p->st[i] = PARK_CLOSED;
        p->closed++;
    } else {
        char fs[200];
        if (!p->other)
            snprintf(p->what, sizeof(p->what), "connection %zu in state %u: %s", i, st,
                     f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
        p->other++;
    }
}

/* A Connect the server refused with BUSY and the client never retried ends at the handshake
 * deadline like a missing one, but with Disconnect{IDLE_TIMEOUT, reconnect = true}: the
 * server, not the client, failed it. */
static void test_gw_limits_busy_then_handshake_timeout(void **state)
{
    test_herald_t *h =
        gw_start(state, "--secret", GW_SECRET, "--io-threads", "1", "--worker-threads", "1",
                 "--worker-queue", "1", "--connect-timeout", "2s", NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "parked", "news", 3600, 0, GW_SECRET);
    park_t p = {.st = calloc(BUSY_CLIENTS, 1)};
    assert_non_null(p.st);
    test_fleet_t *fl = NULL;
    for (int round = 0; round < BUSY_ROUNDS && p.busy == 0; round++) {
        fl = busy_fleet(fl, h->port);
        memset(p.st, 0, BUSY_CLIENTS);
        p.answered = 0;
        for (size_t i = 0; i < BUSY_CLIENTS; i++)
            busy_send_connect(fl, i, tok);
        int64_t deadline = test_now_ms() + GW_WAIT_MS;
        while (p.answered < BUSY_CLIENTS && p.other == 0 && test_now_ms() < deadline)
            assert_true(test_fleet_poll(fl, 100, park_cb, &p) >= 0);
        if (p.other)
            fail_msg("unexpected answer in the Connect burst: %s", p.what);
    }
    if (p.busy == 0)
        fail_msg("no Error{BUSY} in %d bursts of %d Connects with 1 worker and queue 1",
                 BUSY_ROUNDS, BUSY_CLIENTS);
    int64_t deadline = test_now_ms() + 2 * GW_WAIT_MS;
    while (p.closed < p.busy && p.other == 0 && test_now_ms() < deadline)
        assert_true(test_fleet_poll(fl, 100, park_cb, &p) >= 0);
    if (p.other)
        fail_msg("a parked connection: %s", p.what);
    if (p.closed < p.busy)
        fail_msg("%zu of %zu BUSY connections not closed with Disconnect{IDLE_TIMEOUT, reconnect}",
                 p.busy - p.closed, p.busy);
    test_fleet_free(fl);
    free(p.st);
    gw_stop(state);
}

int main(void)
{
    test_raise_nofile(4096);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_limits_max_connections, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_max_frame, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_max_subscriptions, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_publish_rate, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_malformed, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_fd_exhaustion, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_worker_queue_full, gw_teardown),
        cmocka_unit_test_teardown(test_gw_limits_busy_then_handshake_timeout, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
