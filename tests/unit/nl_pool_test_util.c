/*
 * nl_pool_test_util: see nl_pool_test_util.h.
 */
#include "nl_pool_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "netlib/nl_timer.h"

int pool_test_setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (!f || nl_loop_new(&f->loop, NULL) != 0)
        return -1;
    *state = f;
    return 0;
}

int pool_test_teardown(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(nl_loop_free(f->loop), 0);
    free(f);
    return 0;
}

/* --- monitor: counters other threads bump and the test awaits, bounded ------------------- */

void mon_init(mon_t *m)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    *m = (mon_t){.count = 0};
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, &a);
    pthread_condattr_destroy(&a);
}

void mon_deinit(mon_t *m)
{
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
}

void mon_add(mon_t *m, int *field)
{
    pthread_mutex_lock(&m->mu);
    (*field)++;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Waits until *field reaches n or timeout_ms passes; returns the value seen (any thread). */
int mon_wait(mon_t *m, const int *field, int n, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    while (*field < n && rc == 0)
        rc = pthread_cond_timedwait(&m->cv, &m->mu, &deadline);
    int seen = *field;
    pthread_mutex_unlock(&m->mu);
    return seen;
}

int gate_work(void *arg)
{
    gate_t *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (!g->is_open)
        pthread_cond_wait(&g->cv, &g->mu);
    g->left++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void gate_wait_entered(gate_t *g, int n)
{
    assert_int_equal(mon_wait(g, &g->entered, n, DEADLINE_MS), n);
}

void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->is_open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* --- waiting on the loop: for completions, or for a pool figure ------------------------------ */

/* Runs loop iterations until *count reaches want or the deadline passes. */
void run_loop_until(nl_loop_t *loop, const int *count, int want)
{
    uint64_t deadline_ms = nl_now_ms() + DEADLINE_MS;
    while (*count < want && nl_now_ms() < deadline_ms)
        assert_int_equal(nl_loop_run_once(loop, 100), 0);
    assert_int_equal(*count, want);
}

typedef struct stats_poll_s {
    nl_pool_t *pool;
    uint32_t want_threads;
    int is_met;
} stats_poll_t;

static void on_stats_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    stats_poll_t *p = arg;
    nl_pool_stats_t s;
    nl_pool_get_stats(p->pool, &s);
    p->is_met = s.threads == p->want_threads;
}

/* Polls the pool's thread count every 2 ms from a loop timer until it is want (bounded). */
void wait_for_threads(nl_loop_t *loop, nl_pool_t *pool, uint32_t want)
{
    stats_poll_t p = {pool, want, 0};
    nl_timer_t *t;
    assert_int_equal(nl_timer_new(&t, loop, on_stats_tick, &p), 0);
    assert_int_equal(nl_timer_start(t, 2, 2), 0);
    run_loop_until(loop, &p.is_met, 1);
    nl_timer_close(t, NULL);
    assert_int_equal(nl_loop_run_once(loop, 0), 0);
}
