/*
 * test_nl_conn_more: nl_conn_send's direct write and what follows it, end to end on loopback:
 * on_write_complete owed by a send the kernel took whole, and a send the kernel took only part
 * of, whose remainder must wait for the socket (NL_WRITE) and go out in order, with
 * on_write_complete only once the output drained. The other suites never saw a direct write
 * cut short by a peer that then reads, nor looked at when on_write_complete runs. Also: a
 * connection closed by another's callback while its own event waits later in the same batch.
 *
 * Server and client share the main loop (no IO threads), so the order in which callbacks run
 * is the loop's own. Nothing sleeps: each test runs the main loop until a predicate holds,
 * with a deadline timer that fails it instead of hanging.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"

#include "nl_test_env.h"

/* A test here that waits longer than this has lost its bytes: fail it sooner than the
 * environment's one-minute deadline. */
#define MORE_DEADLINE_MS 20000

typedef struct wc_s {
    const uint8_t *data;
    size_t len;
    int sndbuf;              /* 0: leave the socket's send buffer alone */
    bool is_prefilled;       /* fill the socket with send(2) first, until EAGAIN */
    bool is_later;           /* nl_conn_send_later instead of nl_conn_send */
    bool is_peer_half_close; /* the client half-closes at once and waits for the server's FIN */
    size_t prefilled;        /* bytes the test's own send(2) calls wrote */
    size_t queued_after;     /* the server's output bytes right after its send */
    size_t wc_calls;         /* on_write_complete calls */
    size_t wc_max_queued;    /* the most output bytes any on_write_complete saw */
    size_t wc_calls_at_recv; /* on_write_complete calls when the client had every byte */
    size_t recvd;
    int srv_reason;
    int cli_reason;
    bool is_mismatch;
    bool is_srv_closed;
    bool is_cli_closed;
} wc_t;

/* Writes the payload's first bytes with send(2) until the socket refuses more, so the next
 * write netlib makes gets EAGAIN. The client, on this same loop, reads nothing meanwhile. */
static void wc_prefill(nl_conn_t *c, wc_t *t)
{
    for (;;) {
        size_t n = t->len - t->prefilled < 65536 ? t->len - t->prefilled : 65536;
        ssize_t w = send(nl_conn_fd(c), t->data + t->prefilled, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            assert_int_equal(errno, EAGAIN);
            break;
        }
        t->prefilled += (size_t)w;
    }
    assert_true(t->prefilled > 0);
    assert_true(t->prefilled < t->len);
}

/* The whole payload in one nl_conn_send, from on_connected, with nothing queued before it. */
static void wc_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    wc_t *t = e->test;
    if (t->sndbuf > 0)
        assert_int_equal(
            setsockopt(nl_conn_fd(c), SOL_SOCKET, SO_SNDBUF, &t->sndbuf, sizeof(t->sndbuf)), 0);
    if (t->is_prefilled)
        wc_prefill(c, t);
    const uint8_t *rest = t->data + t->prefilled;
    size_t rest_len = t->len - t->prefilled;
    if (t->is_later)
        assert_int_equal(nl_conn_send_later(c, rest, rest_len), 0);
    else
        assert_int_equal(nl_conn_send(c, rest, rest_len), 0);
    t->queued_after = nl_conn_output_bytes(c);
}

static void wc_srv_write_complete(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    wc_t *t = e->test;
    t->wc_calls++;
    size_t queued = nl_conn_output_bytes(c);
    if (queued > t->wc_max_queued)
        t->wc_max_queued = queued;
}

static void wc_srv_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
    wc_t *t = e->test;
    t->srv_reason = reason;
    t->is_srv_closed = true;
}

static const nl_conn_cbs_t wc_srv_cbs = {
    .on_connected = wc_srv_connected,
    .on_write_complete = wc_srv_write_complete,
    .on_close = wc_srv_close,
};

static void wc_cli_connected(nl_conn_t *c)
{
    wc_t *t = nl_conn_ctx(c);
    if (t->is_peer_half_close)
        nl_conn_shutdown(c); /* nothing queued: the FIN leaves now */
}

/* Checks the stream; with every byte in (or a wrong one) the client closes, and the server
 * sees its EOF. A client that half-closed waits for the server's FIN instead. */
static void wc_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    wc_t *t = nl_conn_ctx(c);
    size_t n = nl_buf_readable(in);
    if (t->recvd + n > t->len || memcmp(nl_buf_peek(in), t->data + t->recvd, n) != 0)
        t->is_mismatch = true;
    t->recvd += n;
    nl_buf_retrieve_all(in);
    if (t->recvd == t->len)
        t->wc_calls_at_recv = t->wc_calls;
    if (t->is_mismatch || (t->recvd >= t->len && !t->is_peer_half_close))
        nl_client_close(nl_client_of(c));
}

static void wc_cli_close(nl_conn_t *c, int reason)
{
    wc_t *t = nl_conn_ctx(c);
    t->cli_reason = reason;
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t wc_cli_cbs = {
    .on_connected = wc_cli_connected,
    .on_message = wc_cli_message,
    .on_close = wc_cli_close,
};

static bool wc_done(test_env_t *e)
{
    wc_t *t = e->test;
    return t->is_srv_closed && t->is_cli_closed;
}

/* Serves t's payload to one client and runs until the server's connection closed. */
static void wc_run(test_env_t *e, wc_t *t)
{
    e->test = t;
    assert_int_equal(nl_timer_start(e->deadline, MORE_DEADLINE_MS, 0), 0);
    test_env_serve(e, 0, &wc_srv_cbs, 0);
    test_env_client(e, &wc_cli_cbs, t);
    test_env_run_until(e, wc_done);
    assert_false(t->is_mismatch);
    assert_int_equal(t->recvd, t->len);
    assert_int_equal(t->srv_reason, 0);
    assert_int_equal(t->cli_reason, 0);
}

/* A small send the kernel takes whole leaves nothing queued, and the on_write_complete it owes
 * runs in the same iteration's flush: before the client, on the same loop, can read it. */
static void test_nl_conn_write_complete_after_direct_send(void **state)
{
    static const uint8_t hello[] = "hello";
    wc_t t = {.data = hello, .len = 5};
    wc_run(*state, &t);
    assert_int_equal(t.queued_after, 0);
    assert_int_equal(t.wc_calls_at_recv, 1);
    assert_int_equal(t.wc_calls, 1);
    assert_int_equal(t.wc_max_queued, 0);
}

#define BIG_BYTES (4u * 1024 * 1024)

static uint8_t *big_payload(void)
{
    uint8_t *big = malloc(BIG_BYTES);
    assert_non_null(big);
    for (size_t k = 0; k < BIG_BYTES; k++)
        big[k] = (uint8_t)(k * 13 + (k >> 12));
    return big;
}

/* A send larger than the socket's buffer: the kernel takes part, the rest is queued and must
 * wait for the socket (NL_WRITE), then go out in order as the client reads. on_write_complete
 * runs once, when nothing is left queued, before the client (same loop) has the last byte. */
static void test_nl_conn_partial_direct_send_drains(void **state)
{
    uint8_t *big = big_payload();
    wc_t t = {.data = big, .len = BIG_BYTES, .sndbuf = 65536};
    wc_run(*state, &t);
    assert_true(t.queued_after > 0); /* the kernel refused part of the send */
    assert_true(t.queued_after < BIG_BYTES);
    assert_int_equal(t.wc_calls, 1);
    assert_int_equal(t.wc_max_queued, 0);
    assert_int_equal(t.wc_calls_at_recv, 1);
    free(big);
}

/* The socket is full when nl_conn_send writes: EAGAIN means "wait for the socket", not an
 * error. Everything is queued, and goes out once the client reads. */
static void test_nl_conn_send_into_full_socket(void **state)
{
    uint8_t *big = big_payload();
    wc_t t = {.data = big, .len = BIG_BYTES, .sndbuf = 65536, .is_prefilled = true};
    wc_run(*state, &t);
    assert_int_equal(t.queued_after, t.len - t.prefilled); /* the kernel took none of it */
    assert_int_equal(t.wc_calls, 1);
    assert_int_equal(t.wc_max_queued, 0);
    free(big);
}

/* The same through the iteration's flush: nl_conn_send_later's write gets EAGAIN. */
static void test_nl_conn_flush_into_full_socket(void **state)
{
    uint8_t *big = big_payload();
    wc_t t = {
        .data = big, .len = BIG_BYTES, .sndbuf = 65536, .is_prefilled = true, .is_later = true};
    wc_run(*state, &t);
    assert_int_equal(t.queued_after, t.len - t.prefilled);
    assert_int_equal(t.wc_calls, 1);
    assert_int_equal(t.wc_max_queued, 0);
    free(big);
}

/* The client half-closes while the server still has megabytes queued for it: the server
 * writes every byte first, then closes with 0, and the client sees all of it, then the FIN. */
static void test_nl_conn_peer_eof_drains_output(void **state)
{
    uint8_t *big = big_payload();
    wc_t t = {.data = big, .len = BIG_BYTES, .sndbuf = 65536, .is_peer_half_close = true};
    wc_run(*state, &t);
    assert_true(t.queued_after > 0);
    free(big);
}

/* --- a connection closed by another's callback, its event in the same batch ------------------ */

/* Reason the first message gives the connection it closes. */
#define XC_REASON (-ECONNABORTED)

typedef struct xc_s xc_t;

typedef struct xc_cli_s {
    xc_t *t;
    nl_conn_t *c; /* while connected */
} xc_cli_t;

struct xc_s {
    xc_cli_t cli[2];
    int clients_up;
    int clients_closed;
    nl_conn_t *srv[2]; /* the server sides, in accept order */
    nl_conn_t *victim; /* the server side the first message closed */
    int srv_msgs;      /* on_message calls on server sides */
    int victim_msgs;   /* of which on the victim, after it was closed: must stay 0 */
    int srv_closes;
    int victim_closes;
    int victim_reason;
};

static void xc_srv_connected(nl_conn_t *c)
{
    xc_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv[t->srv[0] ? 1 : 0] = c;
}

/* The first message on either server side closes the other, whose bytes came in the same
 * epoll_wait: its event is later in this iteration's batch and must be dropped, not handed to
 * on_message on a closed connection. */
static void xc_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    xc_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    nl_buf_retrieve_all(in);
    t->srv_msgs++;
    if (c == t->victim) {
        t->victim_msgs++;
    } else if (!t->victim) {
        t->victim = c == t->srv[0] ? t->srv[1] : t->srv[0];
        nl_conn_close(t->victim, XC_REASON);
    }
}

static void xc_srv_close(nl_conn_t *c, int reason)
{
    xc_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv_closes++;
    if (c == t->victim) {
        t->victim_closes++;
        t->victim_reason = reason;
    }
}

static const nl_conn_cbs_t xc_srv_cbs = {
    .on_connected = xc_srv_connected,
    .on_message = xc_srv_message,
    .on_close = xc_srv_close,
};

static void xc_cli_connected(nl_conn_t *c)
{
    xc_cli_t *k = nl_conn_ctx(c);
    k->c = c;
    k->t->clients_up++;
}

static void xc_cli_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    xc_cli_t *k = nl_conn_ctx(c);
    k->c = NULL;
    k->t->clients_closed++;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t xc_cli_cbs = {
    .on_connected = xc_cli_connected,
    .on_close = xc_cli_close,
};

static bool xc_all_up(test_env_t *e)
{
    xc_t *t = e->test;
    return t->clients_up == 2 && t->srv[1] != NULL;
}

static bool xc_victim_gone(test_env_t *e)
{
    xc_t *t = e->test;
    return t->victim_closes == 1;
}

static bool xc_all_closed(test_env_t *e)
{
    xc_t *t = e->test;
    return t->clients_closed == 2 && t->srv_closes == 2;
}

/* Both clients write before the loop runs again, so the server's next epoll_wait reports both
 * of its connections readable at once; whichever message is handled first closes the other. */
static void test_nl_conn_closed_by_another_in_same_batch(void **state)
{
    test_env_t *e = *state;
    xc_t t = {.srv_closes = 0};
    for (int i = 0; i < 2; i++)
        t.cli[i].t = &t;
    e->test = &t;
    assert_int_equal(nl_timer_start(e->deadline, MORE_DEADLINE_MS, 0), 0);
    test_env_serve(e, 0, &xc_srv_cbs, 0);
    for (int i = 0; i < 2; i++)
        test_env_client(e, &xc_cli_cbs, &t.cli[i]);
    test_env_run_until(e, xc_all_up);
    for (int i = 0; i < 2; i++)
        assert_int_equal(send(nl_conn_fd(t.cli[i].c), "x", 1, MSG_NOSIGNAL), 1);
    test_env_run_until(e, xc_victim_gone);
    assert_int_equal(t.victim_msgs, 0);
    assert_int_equal(t.srv_msgs, 1);
    assert_int_equal(t.victim_reason, XC_REASON);

    /* The other pair ends with a FIN from its client. */
    for (int i = 0; i < 2; i++)
        if (t.cli[i].c)
            nl_conn_shutdown(t.cli[i].c);
    test_env_run_until(e, xc_all_closed);
    assert_int_equal(t.victim_closes, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_conn_write_complete_after_direct_send,
                                        test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_partial_direct_send_drains, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_send_into_full_socket, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_flush_into_full_socket, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_peer_eof_drains_output, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_closed_by_another_in_same_batch,
                                        test_env_setup, test_env_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
