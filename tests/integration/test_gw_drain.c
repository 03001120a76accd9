/*
 * test_gw_drain: herald's graceful drain on SIGTERM ([server] drain > 0), with real processes.
 *
 *   - spread: 1,000 subscribers on two IO loops, messages published through the admin API,
 *     then SIGTERM with a 3 s window. /readyz answers 503 and /healthz 200 during the drain,
 *     and publishing goes on. Every subscriber receives every message accepted before the
 *     signal and, while still connected, those published during the drain, in order and
 *     without a gap, then Disconnect{SHUTDOWN, reconnect} as its last frame, then EOF. The
 *     Disconnects arrive within the window (+ slack), the first and last at least half a
 *     window apart, and no tenth of the window holds more than a quarter of them. herald exits
 *     0 within the window plus its grace.
 *   - second signal: a second SIGTERM during a 60 s drain stops herald at once: every client
 *     gets Disconnect{SHUTDOWN} and EOF, and herald exits 0 within seconds.
 *   - refused: once the drain has begun a new client cannot connect (refused, or closed at
 *     once), while a connected one still gets answers until its turn.
 *
 * Time passes in poll() on the clients' sockets and in waits for herald's log lines or its
 * exit, never in a sleep. Figures (first and last Disconnect, their spread per tenth of the
 * window, the exit time) are printed for the record.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "proto_frame.h"

#define N_CLIENTS 1000
#define DRAIN_MS 3000
#define MSGS_BEFORE 20
#define PUBLISH_EVERY_MS 100
/* Allowance on every bound for scheduling on a shared 2-vCPU machine and sanitizer builds: a
 * Disconnect sent on time may reach the test's poll this much later. */
#define SLACK_MS 1500
/* GW_NODE_DRAIN_GRACE_MS in gateway/gw_node.h: herald's bound past the window. */
#define GRACE_MS 5000
#define SETUP_MS 120000
#define CHANNEL "drain"

static const char *const key_hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};

/* What one subscriber saw. */
typedef struct sub_state_s {
    uint64_t next;     /* the offset expected next */
    int64_t disc_ms;   /* when its Disconnect was read (0: none yet) */
    int disc_code;     /* -1: none */
    bool is_reconnect; /* the Disconnect's hint */
    bool is_closed;
} sub_state_t;

typedef struct drain_s {
    size_t n;
    sub_state_t *subs;
    uint64_t bad;
    char what[512];
} drain_t;

static void note_bad(drain_t *d, size_t i, const Herald__Frame *f, const char *why)
{
    if (d->bad++ == 0) {
        char fs[384];
        snprintf(d->what, sizeof(d->what), "connection %zu (next offset %llu): %s: %s", i,
                 (unsigned long long)d->subs[i].next, why,
                 f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
    }
}

static void on_frame(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    drain_t *d = arg;
    sub_state_t *s = &d->subs[i];
    (void)fl;
    if (!f) {
        s->is_closed = true;
        if (s->disc_code < 0)
            note_bad(d, i, f, "closed without a Disconnect");
        return;
    }
    if (s->disc_code >= 0) {
        note_bad(d, i, f, "a frame after the Disconnect");
        return;
    }
    if (f->body_case == HERALD__FRAME__BODY_DISCONNECT) {
        s->disc_ms = test_now_ms();
        s->disc_code = f->disconnect->code;
        s->is_reconnect = f->disconnect->reconnect && f->disconnect->reconnect_delay_ms > 0;
        return;
    }
    if (f->body_case != HERALD__FRAME__BODY_PUSH || strcmp(f->push->channel, CHANNEL) != 0) {
        note_bad(d, i, f, "not a push");
        return;
    }
    if (f->push->offset != s->next) {
        note_bad(d, i, f, "out of sequence");
        return;
    }
    s->next++;
}

static void drain_init(drain_t *d, size_t n)
{
    memset(d, 0, sizeof(*d));
    d->n = n;
    d->subs = calloc(n, sizeof(*d->subs));
    assert_non_null(d->subs);
    for (size_t i = 0; i < n; i++) {
        d->subs[i].next = 1;
        d->subs[i].disc_code = -1;
    }
}

/* n subscribers of CHANNEL on a fresh fleet; the channel has no message yet. */
static test_fleet_t *subscribers(const test_herald_t *h, drain_t *d)
{
    long nofile = test_raise_nofile((rlim_t)d->n + 64);
    if (nofile < (long)d->n + 64)
        fail_msg("RLIMIT_NOFILE %ld is too low for %zu connections", nofile, d->n);
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, d->n), 0);
    GW_FLEET_OK(test_fleet_open_hello(fl, &h->port, 1, 256, "sub", NULL, NULL, SETUP_MS), fl);
    uint64_t *offsets = calloc(d->n, sizeof(*offsets));
    assert_non_null(offsets);
    GW_FLEET_OK(test_fleet_subscribe_all(fl, CHANNEL, offsets, on_frame, d, SETUP_MS), fl);
    for (size_t i = 0; i < d->n; i++)
        assert_int_equal(offsets[i], 0);
    free(offsets);
    return fl;
}

/* POST /api/publish; returns the HTTP status (0 when herald did not answer: it has gone). */
static int admin_publish(const test_herald_t *h, uint64_t seq)
{
    char body[32];
    int len = snprintf(body, sizeof(body), "m%llu", (unsigned long long)seq);
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "POST", "/api/publish?channel=" CHANNEL, key_hdrs,
                               body, (size_t)len, GW_WAIT_MS, &r);
    if (rc != 0)
        return 0;
    int status = r.status;
    test_http_resp_free(&r);
    return status;
}

static int admin_get(const test_herald_t *h, const char *path)
{
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "GET", path, key_hdrs, NULL, 0, GW_WAIT_MS, &r);
    if (rc != 0)
        fail_msg("GET %s: %s", path, strerror(-rc));
    int status = r.status;
    test_http_resp_free(&r);
    return status;
}

static void await_log(test_herald_t *h, const char *needle, size_t *pos)
{
    int rc = test_herald_wait_log(h, needle, pos, GW_WAIT_MS);
    if (rc != 0)
        fail_msg("herald never logged %s: %s", needle, strerror(-rc));
}

static void test_gw_drain_spread(void **state)
{
    drain_t d;
    drain_init(&d, N_CLIENTS);
    test_herald_t *h = gw_start(state, "--insecure", "--drain", "3s", "--io-threads", "2",
                                "--api-key", GW_API_KEY, "--connect-timeout", "5m", NULL);
    test_fleet_t *fl = subscribers(h, &d);
    uint64_t accepted = 0;
    for (uint64_t k = 1; k <= MSGS_BEFORE; k++) {
        assert_int_equal(admin_publish(h, k), 200);
        accepted = k;
        assert_true(test_fleet_poll(fl, 0, on_frame, &d) >= 0);
    }
    const uint64_t accepted_before = accepted;

    int64_t t0 = test_now_ms();
    assert_int_equal(kill(h->pid, SIGTERM), 0);
    size_t pos = 0;
    await_log(h, "ev=drain_begin", &pos);
    assert_int_equal(admin_get(h, "/readyz"), 503);
    assert_int_equal(admin_get(h, "/healthz"), 200);
    assert_true(gw_metric(h, "herald_draining", NULL) == 1.0);
    assert_true(gw_metric(h, "herald_ready", NULL) == 0.0);

    /* Publish on through the drain (while the admin API answers) and read every client. */
    int64_t next_publish = t0 + PUBLISH_EVERY_MS;
    bool is_midway_checked = false;
    int64_t deadline = t0 + DRAIN_MS + GRACE_MS + SLACK_MS;
    while (test_fleet_open_count(fl) > 0 && test_now_ms() < deadline) {
        int64_t now = test_now_ms();
        if (now >= next_publish && now < t0 + DRAIN_MS - PUBLISH_EVERY_MS) {
            int status = admin_publish(h, accepted + 1);
            if (status != 200)
                fail_msg("publish during the drain answered %d", status);
            accepted++;
            next_publish += PUBLISH_EVERY_MS;
        }
        if (!is_midway_checked && now >= t0 + DRAIN_MS / 2) {
            is_midway_checked = true;
            assert_int_equal(admin_get(h, "/readyz"), 503);
            assert_int_equal(admin_get(h, "/healthz"), 200);
        }
        assert_true(test_fleet_poll(fl, 20, on_frame, &d) >= 0);
    }
    if (d.bad)
        fail_msg("%llu bad frames; first: %s", (unsigned long long)d.bad, d.what);
    if (test_fleet_open_count(fl) > 0)
        fail_msg("%zu connections still open %d ms after SIGTERM", test_fleet_open_count(fl),
                 DRAIN_MS + GRACE_MS + SLACK_MS);

    /* Every client: all messages accepted before the signal, then Disconnect{SHUTDOWN,
     * reconnect}, within the window. */
    int64_t first = INT64_MAX;
    int64_t last = 0;
    size_t tenths[10] = {0};
    uint64_t min_received = UINT64_MAX;
    for (size_t i = 0; i < d.n; i++) {
        const sub_state_t *s = &d.subs[i];
        if (s->disc_code != HERALD__DISCONNECT__CODE__SHUTDOWN || !s->is_reconnect)
            fail_msg("connection %zu: Disconnect code %d, reconnect hint %d", i, s->disc_code,
                     s->is_reconnect);
        if (s->next - 1 < accepted_before)
            fail_msg("connection %zu received %llu of the %llu messages published before the "
                     "signal",
                     i, (unsigned long long)(s->next - 1), (unsigned long long)accepted_before);
        min_received = s->next - 1 < min_received ? s->next - 1 : min_received;
        int64_t at = s->disc_ms - t0;
        if (at > DRAIN_MS + SLACK_MS)
            fail_msg("connection %zu: Disconnect %lld ms after SIGTERM (window %d ms)", i,
                     (long long)at, DRAIN_MS);
        first = at < first ? at : first;
        last = at > last ? at : last;
        size_t k = at < 0 ? 0 : (size_t)(at * 10 / DRAIN_MS);
        tenths[k > 9 ? 9 : k]++;
    }
    size_t busiest = 0;
    for (size_t k = 0; k < 10; k++)
        busiest = tenths[k] > busiest ? tenths[k] : busiest;
    print_message("drain of %zu clients over %d ms: Disconnects from %lld to %lld ms; per tenth "
                  "%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu; messages: %llu before the signal, "
                  "%llu in all, each client got at least %llu\n",
                  d.n, DRAIN_MS, (long long)first, (long long)last, tenths[0], tenths[1], tenths[2],
                  tenths[3], tenths[4], tenths[5], tenths[6], tenths[7], tenths[8], tenths[9],
                  (unsigned long long)accepted_before, (unsigned long long)accepted,
                  (unsigned long long)min_received);
    if (last - first < DRAIN_MS / 2)
        fail_msg("Disconnects only %lld ms apart (window %d ms)", (long long)(last - first),
                 DRAIN_MS);
    if (busiest > d.n / 4)
        fail_msg("%zu of %zu Disconnects in one tenth of the window", busiest, d.n);
    /* Messages published during the drain reached the clients still there. */
    if (accepted > accepted_before && d.subs[0].next == 1)
        fail_msg("no message at all reached connection 0");

    /* herald exits by itself, with 0, within the window and its grace. */
    *state = NULL;
    int rc = test_herald_wait(h, (int)(t0 + DRAIN_MS + GRACE_MS + SLACK_MS - test_now_ms()));
    int64_t exited = test_now_ms() - t0;
    print_message("herald exited %lld ms after SIGTERM (status %d)\n", (long long)exited, rc);
    assert_int_equal(rc, 0);
    assert_true(exited <= DRAIN_MS + GRACE_MS + SLACK_MS);
    test_fleet_free(fl);
    free(d.subs);
}

static void test_gw_drain_second_signal(void **state)
{
    drain_t d;
    drain_init(&d, 200);
    test_herald_t *h = gw_start(state, "--insecure", "--drain", "60s", "--io-threads", "2",
                                "--api-key", GW_API_KEY, NULL);
    test_fleet_t *fl = subscribers(h, &d);
    for (uint64_t k = 1; k <= 5; k++)
        assert_int_equal(admin_publish(h, k), 200);
    assert_int_equal(kill(h->pid, SIGTERM), 0);
    size_t pos = 0;
    await_log(h, "ev=drain_begin", &pos);
    int64_t t1 = test_now_ms();
    assert_int_equal(kill(h->pid, SIGTERM), 0);
    await_log(h, "ev=shutdown_begin", &pos);
    int64_t deadline = t1 + GW_WAIT_MS;
    while (test_fleet_open_count(fl) > 0 && test_now_ms() < deadline)
        assert_true(test_fleet_poll(fl, 50, on_frame, &d) >= 0);
    if (d.bad)
        fail_msg("%llu bad frames; first: %s", (unsigned long long)d.bad, d.what);
    assert_int_equal(test_fleet_open_count(fl), 0);
    for (size_t i = 0; i < d.n; i++) {
        if (d.subs[i].disc_code != HERALD__DISCONNECT__CODE__SHUTDOWN)
            fail_msg("connection %zu: Disconnect code %d", i, d.subs[i].disc_code);
        if (d.subs[i].next - 1 != 5)
            fail_msg("connection %zu received %llu of 5 messages", i,
                     (unsigned long long)(d.subs[i].next - 1));
    }
    *state = NULL;
    int rc = test_herald_wait(h, GW_WAIT_MS);
    int64_t exited = test_now_ms() - t1;
    print_message("herald exited %lld ms after the second SIGTERM (window 60 s)\n",
                  (long long)exited);
    assert_int_equal(rc, 0);
    assert_true(exited < GW_WAIT_MS);
    test_fleet_free(fl);
    free(d.subs);
}

static void test_gw_drain_refuses_new_clients(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--drain", "4s", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "early", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "news", NULL, GW_WAIT_MS), &c);
    int64_t t0 = test_now_ms();
    assert_int_equal(kill(h->pid, SIGTERM), 0);
    size_t pos = 0;
    await_log(h, "ev=drain_begin", &pos);

    /* The listener is closed before the line is logged. */
    test_client_t late;
    int rc = test_client_open(&late, h->port, GW_WAIT_MS);
    if (rc == 0) {
        /* Accepted by the kernel before the close: herald must hang up at once. */
        int disc = -1;
        GW_OK(test_client_expect_close(&late, false, &disc, NULL, GW_WAIT_MS), &late);
        assert_true(disc == -1 || disc == HERALD__DISCONNECT__CODE__SHUTDOWN);
    } else if (rc != -ECONNREFUSED) {
        fail_msg("connecting during the drain: %s (want refused or closed)", strerror(-rc));
    }
    test_client_close(&late);

    /* The one connected client is served until its turn, half-way through the window. */
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    int disc = -1;
    GW_OK(test_client_expect_close(&c, false, &disc, NULL, 4000 + SLACK_MS + GW_WAIT_MS), &c);
    int64_t at = test_now_ms() - t0;
    assert_int_equal(disc, HERALD__DISCONNECT__CODE__SHUTDOWN);
    assert_int_equal(c.last_reconnect, 1);
    print_message("the only client was told to go %lld ms into a 4000 ms drain\n", (long long)at);
    if (at > 4000 + SLACK_MS)
        fail_msg("Disconnect %lld ms after SIGTERM", (long long)at);
    test_client_close(&c);
    *state = NULL;
    assert_int_equal(test_herald_wait(h, 4000 + GRACE_MS + SLACK_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_drain_spread, gw_teardown),
        cmocka_unit_test_teardown(test_gw_drain_second_signal, gw_teardown),
        cmocka_unit_test_teardown(test_gw_drain_refuses_new_clients, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
