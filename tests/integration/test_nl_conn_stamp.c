/*
 * test_nl_conn_stamp: kernel receive timestamps on connections (nl_conn_set_rx_timestamps,
 * nl_conn_rx_time_ns), end to end on loopback with the shared environment of nl_test_env:
 * inside on_message the stamp of each read lies between the peer's send and the callback,
 * belongs to the connection whose callback runs (not to another stamped connection of the
 * loop), is 0 outside the callback and once turned off, and works on a client's connection
 * as on an accepted one.
 *
 * Nothing sleeps: each test runs the main loop until a predicate holds, with a deadline timer
 * that fails it instead of hanging.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"

#include "nl_test_env.h"
#include "test_stamp.h"

static void stamps_cool_down(const int fds[2])
{
    close(fds[0]);
    close(fds[1]);
}

/* --- server side: two stamped connections, three messages each ---------------------------- */

#define SS_CLIENTS 2
#define SS_MSGS 3

/* One server connection's view. Message j of client k is the byte '0' + k. */
typedef struct ss_srv_s {
    nl_conn_t *conn;
    int msgs;
    uint64_t stamp[SS_MSGS];
    uint64_t seen[SS_MSGS];  /* CLOCK_REALTIME inside on_message */
    uint64_t other[SS_MSGS]; /* the other server connection's stamp, asked meanwhile */
    int client[SS_MSGS];     /* which client sent it */
    int set_off_rc;
} ss_srv_t;

typedef struct ss_cli_s {
    int k;
    nl_client_t *cl;
    int replies;
    uint64_t sent[SS_MSGS];
    uint64_t own_stamp; /* nl_conn_rx_time_ns on the client's unstamped connection */
    bool is_closed;
} ss_cli_t;

typedef struct ss_s {
    ss_srv_t srv[SS_CLIENTS];
    int n_srv;
    int set_on_rc[SS_CLIENTS];
    ss_cli_t cli[SS_CLIENTS];
} ss_t;

static void ss_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    ss_t *t = e->test;
    int i = t->n_srv++;
    assert_true(i < SS_CLIENTS);
    t->srv[i].conn = c;
    t->set_on_rc[i] = nl_conn_set_rx_timestamps(c, true);
    nl_conn_set_data(c, &t->srv[i]);
}

static void ss_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    test_env_t *e = nl_conn_ctx(c);
    ss_t *t = e->test;
    ss_srv_t *s = nl_conn_data(c);
    /* One byte per message and one message in flight per connection: one read each. */
    assert_int_equal(nl_buf_readable(in), 1);
    assert_true(s->msgs < SS_MSGS);
    int j = s->msgs++;
    s->stamp[j] = nl_conn_rx_time_ns(c);
    s->seen[j] = test_realtime_ns();
    s->client[j] = nl_buf_peek(in)[0] - '0';
    ss_srv_t *o = &t->srv[s == &t->srv[0] ? 1 : 0];
    s->other[j] = o->conn ? nl_conn_rx_time_ns(o->conn) : 0;
    /* After the second message the stamps go off: the third must come without one. */
    if (j == 1)
        s->set_off_rc = nl_conn_set_rx_timestamps(c, false);
    nl_buf_retrieve_all(in);
    assert_int_equal(nl_conn_send(c, "k", 1), 0);
}

static const nl_conn_cbs_t ss_srv_cbs = {
    .on_connected = ss_srv_connected,
    .on_message = ss_srv_message,
    .on_close = test_env_echo_close,
};

static void ss_cli_send(nl_conn_t *c, ss_cli_t *k)
{
    char byte = (char)('0' + k->k);
    k->sent[k->replies] = test_realtime_ns();
    assert_int_equal(nl_conn_send(c, &byte, 1), 0);
}

static void ss_cli_connected(nl_conn_t *c)
{
    ss_cli_send(c, nl_conn_ctx(c));
}

static void ss_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    ss_cli_t *k = nl_conn_ctx(c);
    assert_int_equal(nl_buf_readable(in), 1);
    nl_buf_retrieve_all(in);
    k->own_stamp |= nl_conn_rx_time_ns(c);
    if (++k->replies < SS_MSGS)
        ss_cli_send(c, k);
}

static void ss_cli_close(nl_conn_t *c, int reason)
{
    ss_cli_t *k = nl_conn_ctx(c);
    assert_int_equal(reason, 0);
    k->is_closed = true;
}

static const nl_conn_cbs_t ss_cli_cbs = {
    .on_connected = ss_cli_connected,
    .on_message = ss_cli_message,
    .on_close = ss_cli_close,
};

static bool ss_exchanged(test_env_t *e)
{
    ss_t *t = e->test;
    for (int k = 0; k < SS_CLIENTS; k++) {
        if (t->cli[k].replies < SS_MSGS)
            return false;
    }
    return true;
}

static bool ss_closed(test_env_t *e)
{
    ss_t *t = e->test;
    for (int k = 0; k < SS_CLIENTS; k++) {
        if (!t->cli[k].is_closed)
            return false;
    }
    return e->srv_closed == SS_CLIENTS;
}

static void test_nl_conn_rx_time_server_side(void **state)
{
    test_env_t *e = *state;
    int warm[2];
    test_tcp_pair(warm, true);
    test_stamps_warm_up(warm);
    ss_t t = {0};
    e->test = &t;
    test_env_serve(e, 0, &ss_srv_cbs, 0);
    for (int k = 0; k < SS_CLIENTS; k++) {
        t.cli[k].k = k;
        t.cli[k].cl = test_env_client(e, &ss_cli_cbs, &t.cli[k]);
    }
    test_env_run_until(e, ss_exchanged);
    assert_int_equal(t.n_srv, SS_CLIENTS);
    for (int i = 0; i < SS_CLIENTS; i++) {
        ss_srv_t *s = &t.srv[i];
        assert_int_equal(t.set_on_rc[i], 0);
        assert_int_equal(s->set_off_rc, 0);
        assert_int_equal(s->msgs, SS_MSGS);
        for (int j = 0; j < SS_MSGS; j++) {
            assert_int_equal(s->client[j], s->client[0]);
            /* Another stamped connection's stamp is never visible in this callback. */
            assert_int_equal(s->other[j], 0);
        }
        ss_cli_t *k = &t.cli[s->client[0]];
        /* Stamped reads: after the send, before the callback saw them, and each its own. */
        for (int j = 0; j < 2; j++) {
            assert_true(s->stamp[j] != 0);
            assert_true(k->sent[j] <= s->stamp[j] && s->stamp[j] <= s->seen[j]);
        }
        assert_true(s->stamp[1] > s->seen[0]);
        /* Turned off inside the second callback: the third read has none. */
        assert_int_equal(s->stamp[2], 0);
        /* Outside any callback the connection reports no stamp. */
        assert_int_equal(nl_conn_rx_time_ns(s->conn), 0);
    }
    assert_int_equal(t.srv[0].client[0] + t.srv[1].client[0], 1);
    for (int k = 0; k < SS_CLIENTS; k++) {
        assert_int_equal(t.cli[k].own_stamp, 0); /* never turned on for the clients */
        nl_client_close(t.cli[k].cl);
    }
    test_env_run_until(e, ss_closed);
    stamps_cool_down(warm);
}

/* --- client side: a stamped nl_client connection, echo server on an IO thread ------------- */

typedef struct cs_s {
    int set_rc;
    uint64_t sent;
    uint64_t stamp;
    uint64_t seen;
    size_t recvd;
    bool is_closed;
} cs_t;

static void cs_connected(nl_conn_t *c)
{
    cs_t *t = nl_conn_ctx(c);
    t->set_rc = nl_conn_set_rx_timestamps(c, true);
    t->sent = test_realtime_ns();
    assert_int_equal(nl_conn_send(c, "hello", 5), 0);
}

static void cs_message(nl_conn_t *c, nl_buf_t *in)
{
    cs_t *t = nl_conn_ctx(c);
    /* The echo may come back in pieces; the last read's stamp is the one kept. */
    t->stamp = nl_conn_rx_time_ns(c);
    t->seen = test_realtime_ns();
    t->recvd += nl_buf_readable(in);
    nl_buf_retrieve_all(in);
    if (t->recvd == 5)
        nl_client_close(nl_client_of(c));
}

static void cs_close(nl_conn_t *c, int reason)
{
    cs_t *t = nl_conn_ctx(c);
    assert_int_equal(reason, 0);
    t->is_closed = true;
}

static const nl_conn_cbs_t cs_cbs = {
    .on_connected = cs_connected,
    .on_message = cs_message,
    .on_close = cs_close,
};

static bool cs_done(test_env_t *e)
{
    cs_t *t = e->test;
    return t->is_closed && e->srv_closed == 1;
}

static void test_nl_conn_rx_time_client_side(void **state)
{
    test_env_t *e = *state;
    int warm[2];
    test_tcp_pair(warm, true);
    test_stamps_warm_up(warm);
    cs_t t = {0};
    e->test = &t;
    test_env_serve(e, 1, &test_env_echo_cbs, 0);
    test_env_client(e, &cs_cbs, &t);
    test_env_run_until(e, cs_done);
    stamps_cool_down(warm);
    assert_int_equal(t.set_rc, 0);
    assert_int_equal(t.recvd, 5);
    assert_true(t.stamp != 0);
    assert_true(t.sent <= t.stamp && t.stamp <= t.seen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_conn_rx_time_server_side, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_rx_time_client_side, test_env_setup,
                                        test_env_teardown),
    };
    /* TEST_FILTER=<glob> runs only the matching tests (debugging). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
