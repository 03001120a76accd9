/*
 * test_nl_conn_gauges: the loop's output gauges in nl_conn_loop_stats_t, end to end on
 * loopback. out_queued_bytes must equal the bytes queued on the loop's connections at every
 * moment (owned bytes and shared blocks, as they are queued, written and dropped at a close),
 * and over_high_water the connections whose queue is at or above their high-water mark,
 * following the mark when nl_conn_set_high_water moves it. The admin console and /metrics
 * (herald_output_queued_bytes, herald_slow_consumers) read them every second.
 *
 * in_held_bytes counts the input storage connections hold: some while a partial frame waits,
 * none once it is consumed; while reading is paused with bytes left behind, only storage of
 * their size (not a read buffer); consumed outside on_message, none after
 * nl_conn_input_settle, and without it the storage stays (why gateway's token check must
 * call it: herald_input_held_bytes, issue 25).
 *
 * Server and client share the main loop, so the loop's gauges count the server side only (the
 * client queues nothing). Nothing sleeps: each test runs the loop until a predicate holds.
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

#include "netlib/nl_block.h"
#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"

#include "nl_test_env.h"

#define GAUGE_DEADLINE_MS 20000
#define GAUGE_HW_BYTES (1024u * 1024)
#define GAUGE_SEND_BYTES (1536u * 1024) /* under the owned buffer's cap, 2 x the mark */
#define GAUGE_BLOCK_BYTES 4096u

typedef struct gauge_s {
    uint8_t *data;         /* GAUGE_SEND_BYTES */
    bool is_close_at_once; /* close the server side right after queuing */
    bool is_moving_mark;   /* move the high-water mark under a full queue */
    nl_conn_t *srv;        /* the server side while open */
    size_t prefilled;      /* bytes the test's own send(2) calls wrote first */
    size_t expect;         /* bytes the client must receive */
    size_t recvd;
    size_t checks;                /* client reads at which the invariant was checked */
    size_t seen_below_mark;       /* of those, reads with bytes still queued but under the mark */
    bool is_broken;               /* the gauges disagreed with the queue at some read */
    nl_conn_loop_stats_t queued;  /* right after the sends */
    nl_conn_loop_stats_t at_wc;   /* in on_write_complete: the queue drained */
    nl_conn_loop_stats_t closed;  /* right after nl_conn_close with output queued */
    nl_conn_loop_stats_t raised;  /* mark raised above the queue, then one more byte */
    nl_conn_loop_stats_t lowered; /* mark lowered under it again, then one more byte */
    bool is_srv_closed;
    bool is_cli_closed;
} gauge_t;

static nl_conn_loop_stats_t gauge_read(nl_loop_t *loop)
{
    nl_conn_loop_stats_t s;
    nl_conn_get_loop_stats(loop, &s);
    return s;
}

/* Fills the socket with send(2) until it refuses more, so everything netlib is given next
 * stays queued. */
static void gauge_prefill(nl_conn_t *c, gauge_t *t)
{
    int sndbuf = 65536;
    assert_int_equal(setsockopt(nl_conn_fd(c), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
    static const uint8_t junk[65536];
    for (;;) {
        ssize_t w = send(nl_conn_fd(c), junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            assert_int_equal(errno, EAGAIN);
            break;
        }
        t->prefilled += (size_t)w;
    }
    assert_true(t->prefilled > 0);
}

/* One byte more: the mark is looked at again whenever the queue changes. */
static void gauge_nudge(nl_conn_t *c, gauge_t *t)
{
    assert_int_equal(nl_conn_send(c, t->data, 1), 0);
    t->expect++;
}

static void gauge_srv_connected(nl_conn_t *c)
{
    gauge_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv = c;
    gauge_prefill(c, t);
    t->expect = t->prefilled;
    /* Owned bytes (nl_conn_send: EAGAIN, all queued), then a shared block behind them. */
    assert_int_equal(nl_conn_send(c, t->data, GAUGE_SEND_BYTES), 0);
    nl_block_t *b = nl_block_new(GAUGE_BLOCK_BYTES);
    assert_non_null(b);
    memset(nl_block_data(b), 0x5a, GAUGE_BLOCK_BYTES);
    assert_int_equal(nl_conn_send_block(c, b), 0);
    nl_block_unref(b);
    t->expect += GAUGE_SEND_BYTES + GAUGE_BLOCK_BYTES;
    t->queued = gauge_read(nl_conn_loop(c));
    assert_int_equal(t->queued.out_queued_bytes, nl_conn_output_bytes(c));
    if (t->is_moving_mark) {
        nl_conn_set_high_water(c, 4 * GAUGE_SEND_BYTES);
        gauge_nudge(c, t);
        t->raised = gauge_read(nl_conn_loop(c));
        nl_conn_set_high_water(c, GAUGE_HW_BYTES);
        gauge_nudge(c, t);
        t->lowered = gauge_read(nl_conn_loop(c));
    }
    if (t->is_close_at_once) {
        nl_conn_close(c, -ECONNABORTED);
        t->closed = gauge_read(nl_conn_loop(c));
    }
}

static void gauge_srv_write_complete(nl_conn_t *c)
{
    gauge_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->at_wc = gauge_read(nl_conn_loop(c));
}

static void gauge_srv_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    gauge_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv = NULL;
    t->is_srv_closed = true;
}

static const nl_conn_cbs_t gauge_srv_cbs = {
    .on_connected = gauge_srv_connected,
    .on_write_complete = gauge_srv_write_complete,
    .on_close = gauge_srv_close,
};

/* At every read the gauges must describe the server side's queue exactly. */
static void gauge_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    gauge_t *t = nl_conn_ctx(c);
    t->recvd += nl_buf_readable(in);
    nl_buf_retrieve_all(in);
    if (t->srv) {
        size_t q = nl_conn_output_bytes(t->srv);
        nl_conn_loop_stats_t s = gauge_read(nl_conn_loop(c));
        t->checks++;
        if (s.out_queued_bytes != q || s.over_high_water != (q >= GAUGE_HW_BYTES ? 1u : 0u))
            t->is_broken = true;
        if (q > 0 && q < GAUGE_HW_BYTES)
            t->seen_below_mark++;
    }
    if (t->recvd >= t->expect)
        nl_client_close(nl_client_of(c));
}

static void gauge_cli_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    gauge_t *t = nl_conn_ctx(c);
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t gauge_cli_cbs = {
    .on_message = gauge_cli_message,
    .on_close = gauge_cli_close,
};

static bool gauge_done(test_env_t *e)
{
    gauge_t *t = e->test;
    return t->is_srv_closed && t->is_cli_closed;
}

static void gauge_run(test_env_t *e, gauge_t *t)
{
    t->data = malloc(GAUGE_SEND_BYTES);
    assert_non_null(t->data);
    memset(t->data, 0xa5, GAUGE_SEND_BYTES);
    e->test = t;
    assert_int_equal(nl_timer_start(e->deadline, GAUGE_DEADLINE_MS, 0), 0);
    test_env_serve(e, 0, &gauge_srv_cbs, GAUGE_HW_BYTES);
    test_env_client(e, &gauge_cli_cbs, t);
    test_env_run_until(e, gauge_done);
    /* Whatever happened, nothing is left counted once the connections are gone. */
    nl_conn_loop_stats_t end = gauge_read(e->loop);
    assert_int_equal(end.out_queued_bytes, 0);
    assert_int_equal(end.over_high_water, 0);
    free(t->data);
}

/* Queued bytes and the slow connection are counted as the sends queue them, follow every
 * write down (under the mark before the queue is empty), and are zero once it drained. */
static void test_nl_conn_gauges_follow_the_queue(void **state)
{
    gauge_t t = {.is_close_at_once = false};
    gauge_run(*state, &t);
    assert_int_equal(t.queued.out_queued_bytes, GAUGE_SEND_BYTES + GAUGE_BLOCK_BYTES);
    assert_int_equal(t.queued.over_high_water, 1);
    assert_int_equal(t.recvd, t.expect);
    assert_true(t.checks > 1);
    assert_false(t.is_broken);
    assert_true(t.seen_below_mark > 0);
    assert_int_equal(t.at_wc.out_queued_bytes, 0);
    assert_int_equal(t.at_wc.over_high_water, 0);
}

/* A close drops the queue: its bytes and its place among the slow leave the gauges at once. */
static void test_nl_conn_gauges_close_drops_the_queue(void **state)
{
    gauge_t t = {.is_close_at_once = true};
    gauge_run(*state, &t);
    assert_int_equal(t.queued.out_queued_bytes, GAUGE_SEND_BYTES + GAUGE_BLOCK_BYTES);
    assert_int_equal(t.queued.over_high_water, 1);
    assert_int_equal(t.closed.out_queued_bytes, 0);
    assert_int_equal(t.closed.over_high_water, 0);
}

/* nl_conn_set_high_water under a full queue: raised above it, the connection stops counting at
 * its next send; lowered under it again, it counts again. */
static void test_nl_conn_gauges_follow_a_moved_mark(void **state)
{
    gauge_t t = {.is_moving_mark = true};
    gauge_run(*state, &t);
    assert_int_equal(t.queued.over_high_water, 1);
    assert_int_equal(t.raised.over_high_water, 0);
    assert_int_equal(t.raised.out_queued_bytes, GAUGE_SEND_BYTES + GAUGE_BLOCK_BYTES + 1);
    assert_int_equal(t.lowered.over_high_water, 1);
    assert_int_equal(t.recvd, t.expect);
    assert_false(t.is_broken);
}

/* --- input storage ----------------------------------------------------------------------- */

/* A line protocol: the server consumes whole '\n'-terminated lines and answers one 'k' per
 * read; at each 'k' the client reads the gauge and sends the next part. Both sides share the
 * loop, so the gauge is read in a closure the client posts: by then the server's read is over,
 * recycling included, and so is the client's own (its on_message holds the 'k' it reads). */
typedef struct input_s {
    bool is_pausing;  /* the third part: pause after its first line, finish in a posted closure */
    bool is_settling; /* that closure calls nl_conn_input_settle */
    nl_conn_t *srv;
    nl_buf_t *srv_in; /* the server side's input buffer, for the posted closure */
    nl_conn_t *cli;
    size_t lines;      /* consumed by the server */
    size_t acks;       /* 'k' seen by the client */
    uint64_t held[3];  /* the gauge at each ack */
    uint64_t paused;   /* the gauge while paused, before the closure consumed anything */
    uint64_t consumed; /* the gauge after the closure consumed, before it resumed */
    bool is_srv_closed;
    bool is_cli_closed;
} input_t;

static uint64_t input_held(nl_loop_t *loop)
{
    return gauge_read(loop).in_held_bytes;
}

/* Consumes the whole lines in; returns how many. */
static size_t input_take_lines(nl_buf_t *in, size_t max)
{
    size_t n = 0;
    const char *eol;
    while (n < max && (eol = nl_buf_find_byte(in, '\n')) != NULL) {
        nl_buf_retrieve(in, (size_t)(eol - nl_buf_peek(in)) + 1);
        n++;
    }
    return n;
}

/* The rest of a paused read, one loop iteration later (as a worker's answer would come). */
static void input_finish(void *arg)
{
    input_t *t = arg;
    t->paused = input_held(nl_conn_loop(t->srv));
    t->lines += input_take_lines(t->srv_in, SIZE_MAX);
    if (t->is_settling)
        nl_conn_input_settle(t->srv);
    t->consumed = input_held(nl_conn_loop(t->srv));
    nl_conn_resume_read(t->srv);
    assert_int_equal(nl_conn_send(t->srv, "k", 1), 0);
}

static void input_srv_connected(nl_conn_t *c)
{
    input_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv = c;
}

static void input_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    input_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    if (t->is_pausing && t->lines == 1) { /* the third part */
        t->lines += input_take_lines(in, 1);
        nl_conn_pause_read(c);
        t->srv_in = in;
        assert_int_equal(nl_loop_post(nl_conn_loop(c), input_finish, t), 0);
        return;
    }
    t->lines += input_take_lines(in, SIZE_MAX);
    assert_int_equal(nl_conn_send(c, "k", 1), 0);
}

static void input_srv_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    input_t *t = ((test_env_t *)nl_conn_ctx(c))->test;
    t->srv = NULL;
    t->is_srv_closed = true;
}

static const nl_conn_cbs_t input_srv_cbs = {
    .on_connected = input_srv_connected,
    .on_message = input_srv_message,
    .on_close = input_srv_close,
};

/* The client's parts: a partial line, its end, then three lines in one send. */
static const char *const input_parts[] = {"hel", "lo\n", "first\nsecond\nthird\n"};

static void input_cli_connected(nl_conn_t *c)
{
    input_t *t = nl_conn_ctx(c);
    t->cli = c;
    assert_int_equal(nl_conn_send(c, input_parts[0], strlen(input_parts[0])), 0);
}

static void input_cli_ack(void *arg)
{
    input_t *t = arg;
    t->held[t->acks++] = input_held(nl_conn_loop(t->cli));
    if (t->acks < 3) {
        const char *part = input_parts[t->acks];
        assert_int_equal(nl_conn_send(t->cli, part, strlen(part)), 0);
    } else {
        nl_client_close(nl_client_of(t->cli));
    }
}

/* One 'k' per server read, and the next part only after it: one byte at a time. */
static void input_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    input_t *t = nl_conn_ctx(c);
    assert_int_equal(nl_buf_readable(in), 1);
    nl_buf_retrieve_all(in);
    assert_int_equal(nl_loop_post(nl_conn_loop(c), input_cli_ack, t), 0);
}

static void input_cli_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    input_t *t = nl_conn_ctx(c);
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t input_cli_cbs = {
    .on_connected = input_cli_connected,
    .on_message = input_cli_message,
    .on_close = input_cli_close,
};

static bool input_done(test_env_t *e)
{
    input_t *t = e->test;
    return t->is_srv_closed && t->is_cli_closed;
}

static void input_run(test_env_t *e, input_t *t)
{
    e->test = t;
    assert_int_equal(nl_timer_start(e->deadline, GAUGE_DEADLINE_MS, 0), 0);
    test_env_serve(e, 0, &input_srv_cbs, 0);
    /* The first part goes out at on_connected, so the server's side is made first. */
    test_env_client(e, &input_cli_cbs, t);
    test_env_run_until(e, input_done);
    assert_int_equal(t->acks, 3);
    assert_int_equal(t->lines, 4);
    /* A partial line holds a read buffer; once consumed, nothing is held. */
    assert_true(t->held[0] >= 1024);
    assert_int_equal(t->held[1], 0);
    assert_int_equal(input_held(e->loop), 0); /* nor after the close */
}

/* Read and consumed in on_message: storage only while a partial frame waits. */
static void test_nl_conn_gauges_input_held_while_partial(void **state)
{
    input_t t = {.is_pausing = false};
    input_run(*state, &t);
    assert_int_equal(t.held[2], 0);
}

/* Paused in on_message with two lines left, consumed in a posted closure that settles: while
 * paused the lines sit in storage of their own size, not the read buffer, and afterwards the
 * connection holds nothing. */
static void test_nl_conn_gauges_input_settled_after_pause(void **state)
{
    input_t t = {.is_pausing = true, .is_settling = true};
    input_run(*state, &t);
    size_t left = strlen("second\nthird\n");
    assert_true(t.paused >= left && t.paused < 64);
    assert_int_equal(t.consumed, 0);
    assert_int_equal(t.held[2], 0);
}

/* The same without nl_conn_input_settle: the emptied storage stays with the connection (what
 * the call is for), until the connection's next read recycles it. */
static void test_nl_conn_gauges_input_kept_without_settle(void **state)
{
    input_t t = {.is_pausing = true, .is_settling = false};
    input_run(*state, &t);
    assert_true(t.paused > 0);
    assert_int_equal(t.consumed, t.paused);
    assert_int_equal(t.held[2], t.paused);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_follow_the_queue, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_close_drops_the_queue, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_follow_a_moved_mark, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_input_held_while_partial,
                                        test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_input_settled_after_pause,
                                        test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_gauges_input_kept_without_settle,
                                        test_env_setup, test_env_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
