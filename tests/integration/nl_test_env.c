/*
 * nl_test_env: see nl_test_env.h.
 */
#include "nl_test_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>

#include <cmocka.h>

static void on_deadline(nl_timer_t *t, void *arg)
{
    (void)t;
    test_env_t *e = arg;
    e->is_expired = true;
}

int test_env_setup(void **state)
{
    test_env_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    assert_int_equal(nl_loop_new(&e->loop, NULL), 0);
    assert_int_equal(nl_timer_new(&e->deadline, e->loop, on_deadline, e), 0);
    assert_int_equal(nl_timer_start(e->deadline, DEADLINE_MS, 0), 0);
    *state = e;
    return 0;
}

int test_env_teardown(void **state)
{
    test_env_t *e = *state;
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

void test_env_run_until(test_env_t *e, test_env_pred_t done)
{
    while (!done(e) && !e->is_expired)
        assert_int_equal(nl_loop_run_once(e->loop, -1), 0);
    assert_false(e->is_expired);
}

void test_env_serve_opts(test_env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes,
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
        .transport = e->transport,
        .transport_arg = e->transport_arg,
    };
    assert_int_equal(nl_server_new(&e->srv, &so), 0);
    assert_int_not_equal(nl_server_port(e->srv), 0);
    assert_int_equal(nl_server_start(e->srv), 0);
}

void test_env_serve(test_env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes)
{
    test_env_serve_opts(e, threads, cbs, hw_bytes, false);
}

nl_client_t *test_env_client(test_env_t *e, const nl_conn_cbs_t *cbs, void *arg)
{
    nl_client_opts_t o = {
        .host = "127.0.0.1",
        .port = nl_server_port(e->srv),
        .max_attempts = 3,
        .cbs = cbs,
        .arg = arg,
        .transport = e->transport,
        .transport_arg = e->transport_arg,
    };
    nl_client_t *cl;
    assert_int_equal(nl_client_new(&cl, e->loop, &o), 0);
    assert_int_equal(nl_client_connect(cl), 0);
    return cl;
}

static void note_srv_closed(void *arg)
{
    test_env_t *e = arg;
    e->srv_closed++;
}

/* Server side, on whichever loop owns c: tell the main loop (by a post when foreign). */
void test_env_report_close(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    if (nl_conn_loop(c) == e->loop)
        e->srv_closed++;
    else if (nl_loop_post(e->loop, note_srv_closed, e) != 0)
        abort();
}

void test_env_echo_message(nl_conn_t *c, nl_buf_t *in)
{
    if (nl_conn_send(c, nl_buf_peek(in), nl_buf_readable(in)) != 0)
        abort();
    nl_buf_retrieve_all(in);
}

void test_env_echo_close(nl_conn_t *c, int reason)
{
    (void)reason;
    test_env_report_close(c);
}

const nl_conn_cbs_t test_env_echo_cbs = {
    .on_message = test_env_echo_message,
    .on_close = test_env_echo_close,
};
