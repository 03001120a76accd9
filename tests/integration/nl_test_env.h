/*
 * nl_test_env: the environment netlib's end-to-end tests share: a main loop with a deadline
 * timer that fails a test instead of hanging it, optional IO loop threads, one server, clients
 * on the main loop, and an echo server's callbacks. Nothing sleeps: a test runs the main loop
 * until its predicate holds (test_env_run_until).
 *
 * Thread: the main thread runs the main loop and every client; server connections live on the
 * IO loop threads when a test asks for them and report to the main loop by posts.
 * Usage: cmocka_unit_test_setup_teardown(test, test_env_setup, test_env_teardown); in the
 *        test, test_env_t *e = *state; test_env_serve(e, 2, &cbs, 0); test_env_client(...);
 *        test_env_run_until(e, done);
 */
#ifndef HERALD_TESTS_NL_TEST_ENV_H
#define HERALD_TESTS_NL_TEST_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_server.h"
#include "netlib/nl_timer.h"

/* A test fails if its loop has not reached the predicate by then. */
#define DEADLINE_MS 60000
#define MAX_THREADS 2

/* --- environment: main loop, deadline, optional IO threads, one server ------------------- */

typedef struct test_env_s test_env_t;
typedef bool (*test_env_pred_t)(test_env_t *e);

struct test_env_s {
    nl_loop_t *loop;
    nl_timer_t *deadline;
    bool is_expired;
    nl_loop_thread_t *threads[MAX_THREADS];
    nl_loop_t *io_loops[MAX_THREADS];
    size_t io_count;
    nl_server_t *srv;
    uint64_t srv_closed; /* server-side on_close count, main thread */
    void *test;          /* the running test's state */
    /* The transport the server and clients made from now on use (NULL: plain TCP). */
    const nl_transport_t *transport;
    void *transport_arg;
};

/* cmocka fixtures: a fresh main loop and deadline per test; stops the server and threads. */
int test_env_setup(void **state);
int test_env_teardown(void **state);

/* Runs the main loop until done(e) holds; fails the test at the deadline. */
void test_env_run_until(test_env_t *e, test_env_pred_t done);

/* Starts threads IO loop threads (0: the main loop serves) and a server on 127.0.0.1 with cbs,
 * hw_bytes as each connection's high-water mark, optionally SO_REUSEPORT. */
void test_env_serve_opts(test_env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes,
                         bool is_reuseport);
void test_env_serve(test_env_t *e, size_t threads, const nl_conn_cbs_t *cbs, size_t hw_bytes);

/* A client on the main loop connecting to the server (3 attempts). */
nl_client_t *test_env_client(test_env_t *e, const nl_conn_cbs_t *cbs, void *arg);

/* Server side, on the loop that owns c: counts the close in e->srv_closed on the main loop. */
void test_env_report_close(nl_conn_t *c);

/* An echo server: every byte back, each close reported. */
void test_env_echo_message(nl_conn_t *c, nl_buf_t *in);
void test_env_echo_close(nl_conn_t *c, int reason);
extern const nl_conn_cbs_t test_env_echo_cbs;

#endif
