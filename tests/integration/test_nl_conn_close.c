/*
 * test_nl_conn_close: closing a connection from inside its own callback (freed only after the
 * callback returns), double close, several closes finished in one iteration in order,
 * nl_conn_send_to for a closed id and from another thread, and who holds a shared block's
 * references through send, flush and close, end to end on loopback with the shared environment of
 * nl_test_env.
 *
 * Nothing sleeps: each test runs the main loop until a predicate holds, with a deadline timer
 * that fails it instead of hanging.
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
    test_env_t *e = nl_conn_ctx(c);
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
    test_env_t *e = nl_conn_ctx(c);
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

static bool cim_done(test_env_t *e)
{
    cim_t *t = e->test;
    return t->closes > 0 && t->is_cli_closed;
}

static void test_nl_conn_close_inside_on_message(void **state)
{
    test_env_t *e = *state;
    cim_t t = {0};
    e->test = &t;
    test_env_serve(e, 0, &cim_srv_cbs, 0);
    test_env_client(e, &cim_cli_cbs, &t);
    test_env_run_until(e, cim_done);
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
    test_env_t *e = nl_conn_ctx(c);
    sto_t *t = e->test;
    t->srv_conn = c;
    t->id = nl_conn_id(c);
    assert_ptr_equal(nl_conn_lookup(e->loop, t->id), c);
}

static void sto_srv_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
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

static bool sto_connected(test_env_t *e)
{
    return ((sto_t *)e->test)->srv_conn != NULL;
}

static bool sto_pinged(test_env_t *e)
{
    return ((sto_t *)e->test)->recvd == 4;
}

static bool sto_closed(test_env_t *e)
{
    sto_t *t = e->test;
    return t->is_srv_closed && t->is_cli_closed;
}

static void test_nl_conn_send_to_closed_id(void **state)
{
    test_env_t *e = *state;
    sto_t t = {0};
    e->test = &t;
    test_env_serve(e, 0, &sto_srv_cbs, 0);
    test_env_client(e, &sto_cli_cbs, &t);
    test_env_run_until(e, sto_connected);
    assert_int_equal(nl_conn_send_to(e->loop, t.id, "ping", 4), 0);
    test_env_run_until(e, sto_pinged);
    nl_conn_close(t.srv_conn, 0);
    test_env_run_until(e, sto_closed);
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
    test_env_t *e;
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
    test_env_t *e = nl_conn_ctx(c);
    xt_t *t = e->test;
    __atomic_store_n(&t->id, nl_conn_id(c), __ATOMIC_RELEASE);
    if (nl_loop_post(e->loop, xt_note_ready, t) != 0)
        abort();
}

static const nl_conn_cbs_t xt_srv_cbs = {
    .on_connected = xt_srv_connected,
    .on_close = test_env_echo_close,
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

static bool xt_ready(test_env_t *e)
{
    return ((xt_t *)e->test)->is_ready != 0;
}

static bool xt_done(test_env_t *e)
{
    xt_t *t = e->test;
    return t->is_cli_closed && e->srv_closed == 1;
}

static void test_nl_conn_send_to_from_other_thread(void **state)
{
    test_env_t *e = *state;
    xt_t t = {.e = e};
    t.expect = malloc((size_t)XT_MSGS * XT_MSG_LEN + 1);
    assert_non_null(t.expect);
    for (int i = 0; i < XT_MSGS; i++)
        snprintf(t.expect + (size_t)i * XT_MSG_LEN, XT_MSG_LEN + 1, "%07d;", i);
    e->test = &t;
    test_env_serve(e, 1, &xt_srv_cbs, 0);
    t.io_loop = e->io_loops[0];
    test_env_client(e, &xt_cli_cbs, &t);
    test_env_run_until(e, xt_ready);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, xt_sender, &t), 0);
    test_env_run_until(e, xt_done);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(__atomic_load_n(&t.send_errors, __ATOMIC_RELAXED), 0);
    assert_false(t.is_mismatch);
    assert_int_equal(t.recvd, (size_t)XT_MSGS * XT_MSG_LEN);
    free(t.expect);
}

/* --- block references through send, flush and close -------------------------------------- */

#define BRF_LEN 100

typedef struct brf_s {
    int rc[4];      /* nl_conn_send_block_ref results, in order */
    size_t refs[6]; /* nl_block_refs at each step, in order */
    size_t recvd;
    bool is_wrong_byte;
    bool is_cli_closed;
} brf_t;

/* Every step on the server's loop, in its on_connected; the test checks the record. With
 * AddressSanitizer a reference too many is a leak report, one too few a use after free. */
static void brf_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    brf_t *t = e->test;
    nl_block_t *b = nl_block_new(BRF_LEN);
    nl_block_t *z = nl_block_new(0);
    assert_non_null(b);
    assert_non_null(z);
    memset(nl_block_data(b), 'b', BRF_LEN);
    nl_block_ref_n(b, 3);                    /* four, all ours */
    t->rc[0] = nl_conn_send_block_ref(c, b); /* one moves to the queue */
    t->refs[0] = nl_block_refs(b);           /* 4 */
    nl_conn_flush_loop(nl_conn_loop(c));     /* written: the queue lets go of it */
    t->refs[1] = nl_block_refs(b);           /* 3 */
    nl_block_ref(z);
    t->rc[1] = nl_conn_send_block_ref(c, z); /* nothing to send: the reference is used up */
    t->refs[2] = nl_block_refs(z);           /* 1 */
    nl_block_unref(z);
    t->rc[2] = nl_conn_send_block_ref(c, b); /* queued again, not written yet */
    t->refs[3] = nl_block_refs(b);           /* 3 */
    nl_conn_close(c, 0);                     /* the queue and its reference are dropped */
    t->refs[4] = nl_block_refs(b);           /* 2 */
    t->rc[3] = nl_conn_send_block_ref(c, b); /* refused: the reference stays ours */
    t->refs[5] = nl_block_refs(b);           /* 2 */
    nl_block_unref_n(b, 2);
}

static const nl_conn_cbs_t brf_srv_cbs = {
    .on_connected = brf_srv_connected,
    .on_close = test_env_echo_close,
};

static void brf_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    brf_t *t = nl_conn_ctx(c);
    const char *p = nl_buf_peek(in);
    for (size_t i = 0; i < nl_buf_readable(in); i++)
        t->is_wrong_byte = t->is_wrong_byte || p[i] != 'b';
    t->recvd += nl_buf_readable(in);
    nl_buf_retrieve_all(in);
}

static void brf_cli_close(nl_conn_t *c, int reason)
{
    brf_t *t = nl_conn_ctx(c);
    (void)reason;
    t->is_cli_closed = true;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t brf_cli_cbs = {
    .on_message = brf_cli_message,
    .on_close = brf_cli_close,
};

static bool brf_done(test_env_t *e)
{
    brf_t *t = e->test;
    return t->is_cli_closed && e->srv_closed == 1;
}

static void test_nl_conn_block_refs(void **state)
{
    test_env_t *e = *state;
    brf_t t = {0};
    e->test = &t;
    test_env_serve(e, 0, &brf_srv_cbs, 0);
    test_env_client(e, &brf_cli_cbs, &t);
    test_env_run_until(e, brf_done);
    assert_int_equal(t.rc[0], 0);
    assert_int_equal(t.rc[1], 0);
    assert_int_equal(t.rc[2], 0);
    assert_int_equal(t.rc[3], -ENOTCONN);
    const size_t want[6] = {4, 3, 1, 3, 2, 2};
    for (int i = 0; i < 6; i++)
        if (t.refs[i] != want[i])
            fail_msg("step %d: %zu references, want %zu", i, t.refs[i], want[i]);
    /* The flushed copy arrived whole; the one queued at the close never left. */
    assert_int_equal(t.recvd, BRF_LEN);
    assert_false(t.is_wrong_byte);
}

/* --- several closes in one iteration -------------------------------------------------------- */

/* Three server connections closed in one iteration, the third from the first's on_close: each
 * on_close runs once, in the order the connections closed, all at the end of that same
 * iteration (the loop's before-sleep hooks had run once more, no more). */
#define MCL_CONNS 3

typedef struct mcl_s {
    nl_conn_t *srv[MCL_CONNS];
    int srv_count;
    uint64_t sleeps;          /* before-sleep hook runs on the main loop */
    uint64_t sleeps_at_close; /* when the first two were closed */
    uint64_t ids[MCL_CONNS];  /* server connection ids, in accept order */
    uint64_t closed_ids[MCL_CONNS];
    uint64_t closed_sleeps[MCL_CONNS];
    int closes;
    int cli_closes;
} mcl_t;

static void mcl_hook(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    test_env_t *e = arg;
    if (e->test)
        ((mcl_t *)e->test)->sleeps++;
}

static void mcl_srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    mcl_t *t = e->test;
    t->ids[t->srv_count] = nl_conn_id(c);
    t->srv[t->srv_count++] = c;
    if (t->srv_count < MCL_CONNS)
        return;
    t->sleeps_at_close = t->sleeps;
    nl_conn_close(t->srv[0], 0);
    nl_conn_close(t->srv[1], 0);
    /* Both stay valid, out of the table, until the iteration ends. */
    assert_int_equal(nl_conn_state(t->srv[0]), NL_CONN_DISCONNECTED);
    assert_null(nl_conn_lookup(e->loop, t->ids[1]));
}

static void mcl_srv_close(nl_conn_t *c, int reason)
{
    test_env_t *e = nl_conn_ctx(c);
    mcl_t *t = e->test;
    assert_int_equal(reason, 0);
    assert_true(t->closes < MCL_CONNS);
    t->closed_ids[t->closes] = nl_conn_id(c);
    t->closed_sleeps[t->closes] = t->sleeps;
    t->closes++;
    if (c == t->srv[0])
        nl_conn_close(t->srv[2], 0);
}

static const nl_conn_cbs_t mcl_srv_cbs = {
    .on_connected = mcl_srv_connected,
    .on_close = mcl_srv_close,
};

static void mcl_cli_close(nl_conn_t *c, int reason)
{
    mcl_t *t = nl_conn_ctx(c);
    NL_UNUSED(reason);
    t->cli_closes++;
    nl_client_close(nl_client_of(c));
}

static const nl_conn_cbs_t mcl_cli_cbs = {
    .on_close = mcl_cli_close,
};

static bool mcl_done(test_env_t *e)
{
    mcl_t *t = e->test;
    return t->closes == MCL_CONNS && t->cli_closes == MCL_CONNS;
}

static void test_nl_conn_close_several_in_one_iteration(void **state)
{
    test_env_t *e = *state;
    mcl_t t = {0};
    e->test = &t;
    assert_int_equal(nl_loop_add_before_sleep(e->loop, mcl_hook, e), 0);
    test_env_serve(e, 0, &mcl_srv_cbs, 0);
    for (int i = 0; i < MCL_CONNS; i++)
        test_env_client(e, &mcl_cli_cbs, &t);
    test_env_run_until(e, mcl_done);
    assert_int_equal(t.closes, MCL_CONNS);
    for (int i = 0; i < MCL_CONNS; i++) {
        assert_int_equal(t.closed_ids[i], t.ids[i]);
        assert_int_equal(t.closed_sleeps[i], t.sleeps_at_close + 1);
    }
    e->test = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_conn_close_inside_on_message, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_send_to_closed_id, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_send_to_from_other_thread, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_block_refs, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_conn_close_several_in_one_iteration, test_env_setup,
                                        test_env_teardown),
    };
    /* TEST_FILTER=<glob> runs only the matching tests (debugging). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
