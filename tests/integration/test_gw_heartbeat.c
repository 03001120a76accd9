/*
 * test_gw_heartbeat: herald's idle timeout and handshake deadline, with short values set by
 * flags. ConnectOk announces the ping interval and idle timeout; a silent client gets
 * Disconnect{IDLE_TIMEOUT} and the close, not before the timeout is near; a client that pings
 * (every Ping answered by a Pong with its id) outlives several timeouts; a connection that never
 * sends Connect is closed after the connect timeout; a client that trickles a frame it never
 * finishes is closed as idle (activity is a frame, not a byte). When herald stops, every client
 * gets the answers already made and then Disconnect{SHUTDOWN} before the close.
 *
 * Time passes in poll() on the clients' sockets (the silent client's socket, waiting for its
 * close), never in a sleep.
 */
#include <errno.h>
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
#include "proto_frame.h"

#define PING_MS 1000
#define IDLE_MS 2000
#define PING_EVERY_MS 300

static void test_gw_heartbeat_idle_timeout(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--ping-interval", "1s", "--idle-timeout",
                                "2s", "--io-threads", "2", NULL);
    test_client_t silent;
    test_client_t pinger;
    int64_t t0 = test_now_ms();
    GW_OK(test_client_auth(&silent, h->port, "silent", GW_WAIT_MS), &silent);
    GW_OK(test_client_auth(&pinger, h->port, "pinger", GW_WAIT_MS), &pinger);
    assert_int_equal(silent.ping_interval_ms, PING_MS);
    assert_int_equal(silent.idle_timeout_ms, IDLE_MS);
    GW_OK(test_client_subscribe(&pinger, "news", NULL, GW_WAIT_MS), &pinger);

    /* Wait for the silent client's close in short slices, pinging in between. */
    int64_t deadline = t0 + 5 * IDLE_MS + GW_WAIT_MS;
    int pongs = 0;
    while (!test_client_is_closed(&silent, PING_EVERY_MS)) {
        if (test_now_ms() > deadline)
            fail_msg("the silent client was not closed within %d ms", 5 * IDLE_MS + GW_WAIT_MS);
        GW_OK(test_client_ping(&pinger, GW_WAIT_MS), &pinger);
        pongs++;
    }
    int64_t closed_after = test_now_ms() - t0;
    /* The close came with Disconnect{IDLE_TIMEOUT}, and not long before the timeout. */
    int disc = -1;
    int err = -1;
    GW_OK(test_client_expect_close(&silent, false, &disc, &err, GW_WAIT_MS), &silent);
    assert_int_equal(disc, HERALD__DISCONNECT__CODE__IDLE_TIMEOUT);
    assert_int_equal(err, -1);
    if (closed_after < IDLE_MS / 2)
        fail_msg("the silent client was closed after %lld ms (idle timeout %d ms)",
                 (long long)closed_after, IDLE_MS);

    /* The pinging client lives on, well past two more timeouts. */
    int64_t until = test_now_ms() + 2 * IDLE_MS + 500;
    while (test_now_ms() < until) {
        if (test_client_is_closed(&pinger, PING_EVERY_MS))
            fail_msg("the pinging client was closed after %d pings", pongs);
        GW_OK(test_client_ping(&pinger, GW_WAIT_MS), &pinger);
        pongs++;
    }
    assert_true(pongs >= 10);
    /* Still fully working: it can publish and hear its message. */
    uint64_t off = 0;
    GW_OK(test_client_publish(&pinger, "news", "still here", 10, &off, GW_WAIT_MS), &pinger);
    GW_OK(test_client_expect_push(&pinger, "news", off, NULL, GW_WAIT_MS), &pinger);
    test_client_close(&silent);
    test_client_close(&pinger);
    gw_stop(state);
}

static void test_gw_heartbeat_other_frames_count(void **state)
{
    /* Any frame counts as activity: a client that only publishes is not idle. */
    test_herald_t *h = gw_start(state, "--insecure", "--ping-interval", "1s", "--idle-timeout",
                                "2s", "--publish-rate", "0", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "busy", GW_WAIT_MS), &c);
    int64_t until = test_now_ms() + 3 * IDLE_MS;
    while (test_now_ms() < until) {
        if (test_client_is_closed(&c, PING_EVERY_MS))
            fail_msg("a publishing client was closed as idle");
        GW_OK(test_client_publish(&c, "chan", "x", 1, NULL, GW_WAIT_MS), &c);
    }
    test_client_close(&c);
    gw_stop(state);
}

static void test_gw_heartbeat_connect_timeout(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--connect-timeout", "500ms", NULL);
    test_client_t c;
    int64_t t0 = test_now_ms();
    GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
    int disc = -1;
    int err = -1;
    GW_OK(test_client_expect_close(&c, false, &disc, &err, GW_WAIT_MS), &c);
    int64_t after = test_now_ms() - t0;
    if (after < 250)
        fail_msg("closed %lld ms after connecting (connect timeout 500 ms)", (long long)after);
    assert_true(disc == -1 || disc == HERALD__DISCONNECT__CODE__IDLE_TIMEOUT ||
                disc == HERALD__DISCONNECT__CODE__AUTH_FAILED);
    /* No Connect came: the client has something to fix, so no automatic reconnect. */
    if (disc != -1)
        assert_int_equal(c.last_reconnect, 0);
    /* A client that does send Connect in time is not affected. */
    test_client_t d;
    GW_OK(test_client_auth(&d, h->port, "quick", GW_WAIT_MS), &d);
    assert_false(test_client_is_closed(&d, 1000));
    GW_OK(test_client_ping(&d, GW_WAIT_MS), &d);
    test_client_close(&d);
    test_client_close(&c);
    gw_stop(state);
}

/* Activity is a whole frame, not a byte. A client that trickles a frame it never finishes, a
 * byte well within every idle timeout, is closed as idle all the same: it must not hold its
 * connection and a frame's worth of input buffer for as long as it likes. Before Connect the
 * handshake deadline ends it the same way. */
static void test_gw_heartbeat_trickled_frame(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--ping-interval", "1s", "--idle-timeout",
                                "2s", "--connect-timeout", "2s", NULL);
    /* The prefix claims 1000 bytes; the test sends far fewer, so no frame ever completes. */
    static const uint8_t prefix[] = {0xe8, 0x07};
    static const uint8_t body_byte[] = {0x00};
    for (int is_auth = 0; is_auth <= 1; is_auth++) {
        test_client_t c;
        if (is_auth)
            GW_OK(test_client_auth(&c, h->port, "trickler", GW_WAIT_MS), &c);
        else
            GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
        int64_t t0 = test_now_ms();
        GW_OK(test_client_send_raw(&c, prefix, sizeof(prefix), GW_WAIT_MS), &c);
        int64_t deadline = t0 + 5 * IDLE_MS + GW_WAIT_MS;
        int trickled = 0;
        while (!test_client_is_closed(&c, PING_EVERY_MS)) {
            if (test_now_ms() > deadline)
                fail_msg("a client trickling one byte every %d ms (%d so far, authenticated: %d) "
                         "was not closed within %d ms (idle timeout %d ms)",
                         PING_EVERY_MS, trickled, is_auth, 5 * IDLE_MS + GW_WAIT_MS, IDLE_MS);
            if (test_client_send_raw(&c, body_byte, sizeof(body_byte), GW_WAIT_MS) != 0)
                break; /* herald closed meanwhile */
            trickled++;
        }
        int64_t closed_after = test_now_ms() - t0;
        int disc = -1;
        int err = -1;
        GW_OK(test_client_expect_close(&c, false, &disc, &err, GW_WAIT_MS), &c);
        assert_int_equal(disc, HERALD__DISCONNECT__CODE__IDLE_TIMEOUT);
        assert_int_equal(err, -1);
        if (closed_after < IDLE_MS / 2)
            fail_msg("closed after %lld ms (timeout %d ms)", (long long)closed_after, IDLE_MS);
        test_client_close(&c);
    }
    gw_stop(state);
}

#define STOP_CLIENTS 50
#define STOP_PINGS 1000

/* Reads until the close: Pongs with ids 1, 2, ... (as many as herald answered before the
 * stop), then Disconnect{SHUTDOWN}. Fails the test otherwise. */
static void expect_pongs_then_shutdown(test_client_t *c)
{
    uint64_t next_id = 1;
    int disc = -1;
    for (;;) {
        Herald__Frame *r = NULL;
        int rc = test_client_recv(c, &r, GW_WAIT_MS);
        if (rc == 0)
            break;
        if (rc != 1)
            fail_msg("reading after the stop: %d", rc);
        if (r->body_case == HERALD__FRAME__BODY_DISCONNECT && disc == -1)
            disc = r->disconnect->code;
        else if (r->body_case != HERALD__FRAME__BODY_PONG || r->id != next_id++ || disc != -1)
            fail_msg("unexpected frame %d (id %llu) after the stop", (int)r->body_case,
                     (unsigned long long)r->id);
        proto_frame_free(r);
    }
    if (disc != HERALD__DISCONNECT__CODE__SHUTDOWN)
        fail_msg("no Disconnect{SHUTDOWN} before the close (got %d after %llu Pongs)", disc,
                 (unsigned long long)(next_id - 1));
}

/* Node shutdown closes sessions by force, dropping what is queued: the answers herald made in
 * the same loop iteration must go out first, or they would hold the Disconnect behind them.
 * Twenty clients each send 400 Pings in one write and herald is stopped at once, so it is
 * answering them when the stop reaches its loop. */
static void test_gw_heartbeat_shutdown_disconnect(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", NULL);
    test_client_t *cs = calloc(STOP_CLIENTS, sizeof(*cs));
    assert_non_null(cs);
    nl_buf_t pings;
    nl_buf_init(&pings, 0);
    for (uint64_t id = 1; id <= STOP_PINGS; id++) {
        Herald__Ping ping = HERALD__PING__INIT;
        Herald__Frame f = HERALD__FRAME__INIT;
        f.id = id;
        f.body_case = HERALD__FRAME__BODY_PING;
        f.ping = &ping;
        assert_int_equal(proto_frame_append(&pings, &f), 0);
    }
    for (size_t i = 0; i < STOP_CLIENTS; i++)
        GW_OK(test_client_auth(&cs[i], h->port, "stopping", GW_WAIT_MS), &cs[i]);
    for (size_t i = 0; i < STOP_CLIENTS; i++)
        GW_OK(
            test_client_send_raw(&cs[i], nl_buf_peek(&pings), nl_buf_readable(&pings), GW_WAIT_MS),
            &cs[i]);
    gw_stop(state);
    /* The kernel keeps what herald wrote before it exited. */
    for (size_t i = 0; i < STOP_CLIENTS; i++) {
        expect_pongs_then_shutdown(&cs[i]);
        test_client_close(&cs[i]);
    }
    nl_buf_deinit(&pings);
    free(cs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_heartbeat_idle_timeout, gw_teardown),
        cmocka_unit_test_teardown(test_gw_heartbeat_other_frames_count, gw_teardown),
        cmocka_unit_test_teardown(test_gw_heartbeat_connect_timeout, gw_teardown),
        cmocka_unit_test_teardown(test_gw_heartbeat_trickled_frame, gw_teardown),
        cmocka_unit_test_teardown(test_gw_heartbeat_shutdown_disconnect, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
