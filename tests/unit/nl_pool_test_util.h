/*
 * nl_pool_test_util: what the pool's test files share: a fixture with a loop, a monitor
 * (counters other threads bump and a test awaits, bounded), the gate (a task that holds its
 * worker until the test opens it), and bounded waits on the loop.
 *
 * Nothing sleeps: every wait is for an event, under DEADLINE_MS, and fails the test at it.
 * Thread: mon_add, gate_work and gate_open from any thread; the rest on the test's thread.
 * Usage: gate_t g; mon_init(&g); nl_pool_submit(pool, NULL, gate_work, NULL, &g);
 *        gate_wait_entered(&g, 1); ... gate_open(&g); nl_pool_free(pool); mon_deinit(&g);
 */
#ifndef HERALD_TESTS_NL_POOL_TEST_UTIL_H
#define HERALD_TESTS_NL_POOL_TEST_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "netlib/nl_loop.h"
#include "netlib/nl_pool.h"

/* A broken test fails on this instead of hanging (the ctest TIMEOUT is the last resort). */
#define DEADLINE_MS 30000

typedef struct fixture_s {
    nl_loop_t *loop;
} fixture_t;

/* cmocka fixtures: a fresh loop per test. */
int pool_test_setup(void **state);
int pool_test_teardown(void **state);

typedef struct mon_s {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int count;
    int bad;
    int entered; /* gate: tasks held inside */
    int left;    /* gate: tasks that passed and will not touch the gate again */
    bool is_open;
} mon_t;

void mon_init(mon_t *m);
void mon_deinit(mon_t *m);
/* Adds 1 to *field (a field of m) and wakes the waiters. */
void mon_add(mon_t *m, int *field);
/* Waits until *field reaches n or timeout_ms passes; returns the value seen. */
int mon_wait(mon_t *m, const int *field, int n, int timeout_ms);

/* The gate: a task that holds its worker until the test opens the gate. */
typedef mon_t gate_t;

int gate_work(void *arg);
/* Waits (bounded) until n tasks are inside the gate, and asserts they are. */
void gate_wait_entered(gate_t *g, int n);
void gate_open(gate_t *g);

/* Runs loop iterations until *count reaches want; fails at DEADLINE_MS. */
void run_loop_until(nl_loop_t *loop, const int *count, int want);
/* Polls the pool's thread count every 2 ms from a loop timer until it is want (bounded). */
void wait_for_threads(nl_loop_t *loop, nl_pool_t *pool, uint32_t want);

#endif
