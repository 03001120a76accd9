/*
 * test_nl_timer: firing order (equal deadlines in start order), repeat, stop/close of a timer
 * due in the same iteration, restart and close inside the callback, zero timeouts firing on
 * the next iteration only, close with the timer pending, a repeat re-armed from the firing
 * time (no catch-up burst after a stall), and heap order after stops from the middle.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "netlib/nl_loop.h"
#include "netlib/nl_timer.h"

#define DEADLINE_MS 30000
#define MAX_TIMERS 8

typedef struct fixture_s {
    nl_loop_t *loop;
    nl_timer_t *deadline;
    nl_timer_t *t[MAX_TIMERS];
    int fired[MAX_TIMERS]; /* per timer */
    int order[64];         /* timer indexes in firing order */
    int order_len;
    uint64_t fired_iter[MAX_TIMERS]; /* loop iteration count at the last firing */
    int closed[MAX_TIMERS];
    int done;
} fixture_t;

static fixture_t *g_f;

static void on_deadline(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    NL_UNUSED(arg);
    fail_msg("deadline timer fired: the test did not finish in %d ms", DEADLINE_MS);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (!f || nl_loop_new(&f->loop, NULL) != 0)
        return -1;
    if (nl_timer_new(&f->deadline, f->loop, on_deadline, NULL) != 0)
        return -1;
    nl_timer_start(f->deadline, DEADLINE_MS, 0);
    g_f = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    nl_timer_close(f->deadline, NULL);
    for (int i = 0; i < MAX_TIMERS; i++) {
        if (f->t[i])
            nl_timer_close(f->t[i], NULL);
    }
    assert_int_equal(nl_loop_free(f->loop), 0);
    free(f);
    return 0;
}

static void run_until_done(fixture_t *f)
{
    while (!f->done)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
}

static int timer_index(const nl_timer_t *t)
{
    for (int i = 0; i < MAX_TIMERS; i++) {
        if (g_f->t[i] == t)
            return i;
    }
    fail_msg("unknown timer");
    return -1;
}

/* Records the firing; the timer whose arg is non-NULL ends the test. */
static void on_fire(nl_timer_t *t, void *arg)
{
    int i = timer_index(t);
    g_f->fired[i]++;
    g_f->order[g_f->order_len++] = i;
    nl_loop_stats_t st;
    nl_loop_get_stats(g_f->loop, &st);
    g_f->fired_iter[i] = st.iterations;
    if (arg)
        g_f->done = 1;
}

static void on_closed(nl_timer_t *t, void *arg)
{
    NL_UNUSED(arg);
    int i = timer_index(t);
    g_f->closed[i]++;
    g_f->t[i] = NULL;
}

static void new_timers(fixture_t *f, int n, nl_timer_fire_cb cb)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(nl_timer_new(&f->t[i], f->loop, cb, NULL), 0);
}

static void test_nl_timer_order(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 5, on_fire);
    static const uint64_t timeout_ms[5] = {30, 10, 20, 20, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(nl_timer_start(f->t[i], timeout_ms[i], 0), 0);
    assert_true(nl_timer_is_active(f->t[4]));
    while (f->order_len < 5)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    static const int want[5] = {4, 1, 2, 3, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(f->order[i], want[i]);
    for (int i = 0; i < 5; i++)
        assert_false(nl_timer_is_active(f->t[i]));
}

/* Started from one callback, the timers share the cached time, so the deadlines are truly
 * equal and only the start order separates them. */
static void on_start_equal(void *arg)
{
    fixture_t *f = arg;
    static const int start_order[6] = {3, 0, 5, 1, 4, 2};
    for (int i = 0; i < 6; i++)
        assert_int_equal(nl_timer_start(f->t[start_order[i]], 5, 0), 0);
    /* Restarting moves a timer to the back of its deadline's queue. */
    assert_int_equal(nl_timer_start(f->t[0], 5, 0), 0);
}

static void test_nl_timer_equal_deadlines_start_order(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 6, on_fire);
    assert_int_equal(nl_loop_post(f->loop, on_start_equal, f), 0);
    while (f->order_len < 6)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    static const int want[6] = {3, 5, 1, 4, 2, 0};
    for (int i = 0; i < 6; i++)
        assert_int_equal(f->order[i], want[i]);
    /* All due together: one pass fired them all. */
    assert_int_equal(f->fired_iter[3], f->fired_iter[0]);
}

static void on_repeat(nl_timer_t *t, void *arg)
{
    NL_UNUSED(arg);
    if (++g_f->fired[0] == 5) {
        nl_timer_stop(t);
        nl_timer_stop(t); /* idempotent */
        g_f->done = 1;
    }
}

static void test_nl_timer_repeat(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 1, on_repeat);
    assert_int_equal(nl_timer_start(f->t[0], 1, 2), 0);
    run_until_done(f);
    assert_int_equal(f->fired[0], 5);
    assert_false(nl_timer_is_active(f->t[0]));
    /* Nothing fires later: a short timer marks the end. */
    assert_int_equal(nl_timer_new(&f->t[1], f->loop, on_fire, f), 0);
    f->done = 0;
    assert_int_equal(nl_timer_start(f->t[1], 10, 0), 0);
    run_until_done(f);
    assert_int_equal(f->fired[0], 5);
}

/* t0 and t1 are due in the same pass; t0 fires first and stops t1, closes t2. */
static void on_cancel_others(nl_timer_t *t, void *arg)
{
    on_fire(t, arg);
    nl_timer_stop(g_f->t[1]);
    nl_timer_close(g_f->t[2], on_closed);
    nl_timer_close(g_f->t[2], on_closed); /* idempotent */
    assert_int_equal(g_f->closed[2], 0);  /* the close callback waits for the iteration's end */
    g_f->done = 1;
}

static void on_start_same_pass(void *arg)
{
    fixture_t *f = arg;
    for (int i = 0; i < 3; i++)
        assert_int_equal(nl_timer_start(f->t[i], 3, 0), 0);
}

static void test_nl_timer_cancel_inside_callback(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(nl_timer_new(&f->t[0], f->loop, on_cancel_others, NULL), 0);
    assert_int_equal(nl_timer_new(&f->t[1], f->loop, on_fire, NULL), 0);
    assert_int_equal(nl_timer_new(&f->t[2], f->loop, on_fire, NULL), 0);
    assert_int_equal(nl_loop_post(f->loop, on_start_same_pass, f), 0);
    run_until_done(f);
    assert_int_equal(nl_loop_run_once(f->loop, 20), 0);
    assert_int_equal(f->fired[0], 1);
    assert_int_equal(f->fired[1], 0);
    assert_int_equal(f->fired[2], 0);
    assert_int_equal(f->closed[2], 1);
    assert_null(f->t[2]);
    assert_false(nl_timer_is_active(f->t[1]));
}

static void on_restart_once(nl_timer_t *t, void *arg)
{
    on_fire(t, arg);
    if (g_f->fired[0] == 1) {
        assert_int_equal(nl_timer_start(t, 5, 0), 0);
        assert_true(nl_timer_is_active(t));
    } else {
        g_f->done = 1;
    }
}

static void test_nl_timer_restart_inside_callback(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 1, on_restart_once);
    /* A repeating timer restarted in its callback takes the new settings. */
    assert_int_equal(nl_timer_start(f->t[0], 1, 1000), 0);
    run_until_done(f);
    assert_int_equal(f->fired[0], 2);
    assert_false(nl_timer_is_active(f->t[0]));
}

static void on_close_self(nl_timer_t *t, void *arg)
{
    on_fire(t, arg);
    nl_timer_close(t, on_closed);
    nl_timer_close(t, on_closed);
    assert_int_equal(nl_timer_start(t, 1, 0), -EINVAL);
    g_f->done = 1;
}

static void test_nl_timer_close_inside_callback(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 1, on_close_self);
    assert_int_equal(nl_timer_start(f->t[0], 1, 1), 0);
    run_until_done(f);
    assert_int_equal(f->fired[0], 1);
    assert_int_equal(f->closed[0], 1);
    assert_null(f->t[0]);
}

static void test_nl_timer_close_pending(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 2, on_fire);
    assert_int_equal(nl_timer_start(f->t[0], 0, 0), 0);
    nl_timer_close(f->t[0], on_closed);
    assert_int_equal(f->closed[0], 0);
    assert_int_equal(nl_timer_start(f->t[1], 5, 0), 0);
    while (f->fired[1] == 0)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(f->fired[0], 0);
    assert_int_equal(f->closed[0], 1);
}

/* t1 started with 0 from t0's callback fires in the next iteration, not in t0's pass. */
static void on_start_zero(nl_timer_t *t, void *arg)
{
    on_fire(t, arg);
    assert_int_equal(nl_timer_start(g_f->t[1], 0, 0), 0);
    assert_int_equal(g_f->fired[1], 0);
}

static void test_nl_timer_zero_timeout_next_iteration(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(nl_timer_new(&f->t[0], f->loop, on_start_zero, NULL), 0);
    assert_int_equal(nl_timer_new(&f->t[1], f->loop, on_fire, f), 0);
    assert_int_equal(nl_timer_start(f->t[0], 0, 0), 0);
    assert_int_equal(f->fired[0], 0); /* never before start returns */
    /* The next iteration does not block: a zero timeout is due at once. */
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(f->fired[0], 1);
    assert_int_equal(f->fired[1], 0);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(f->fired[1], 1);
    assert_int_equal(f->fired_iter[1], f->fired_iter[0] + 1);
}

/* A zero-interval timer restarting itself fires once per iteration and never spins a pass. */
static void on_zero_again(nl_timer_t *t, void *arg)
{
    on_fire(t, arg);
    if (g_f->fired[0] < 10)
        assert_int_equal(nl_timer_start(t, 0, 0), 0);
}

static void test_nl_timer_zero_restart_once_per_iteration(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 1, on_zero_again);
    assert_int_equal(nl_timer_start(f->t[0], 0, 0), 0);
    for (int i = 1; i <= 10; i++) {
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
        assert_int_equal(f->fired[0], i);
    }
    assert_false(nl_timer_is_active(f->t[0]));
}

/* An earlier deadline started after a later one still wakes the loop in time (the timerfd is
 * re-armed), and stopping the earliest leaves the later one to fire. */
static void test_nl_timer_earlier_deadline_rearms(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 3, on_fire);
    assert_int_equal(nl_timer_start(f->t[0], 60000, 0), 0);
    assert_int_equal(nl_timer_start(f->t[1], 5, 0), 0);
    assert_int_equal(nl_timer_start(f->t[2], 2, 0), 0);
    nl_timer_stop(f->t[2]);
    while (f->fired[1] == 0)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(f->fired[0], 0);
    assert_int_equal(f->fired[2], 0);
    assert_true(nl_timer_is_active(f->t[0]));
    assert_true(nl_loop_now_ms(f->loop) >= 5);
}

/* A repeating timer is re-armed from the time it fired, not from its old deadline: after a
 * callback that stalls the loop for many periods it does not fire a burst to catch up, so
 * consecutive firings are always at least a period apart in loop time. */
#define STALL_PERIOD_MS 10
#define STALL_MS 100
#define STALL_FIRINGS 4

static uint64_t g_stall_fired_ms[STALL_FIRINGS];

static void on_repeat_stall(nl_timer_t *t, void *arg)
{
    NL_UNUSED(arg);
    int n = g_f->fired[0]++;
    g_stall_fired_ms[n] = nl_loop_now_ms(g_f->loop);
    if (n == 0) {
        /* The stall under test (a slow callback), not a wait for an event. */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = STALL_MS * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            assert_int_equal(errno, EINTR);
    }
    if (n + 1 == STALL_FIRINGS) {
        nl_timer_stop(t);
        g_f->done = 1;
    }
}

static void test_nl_timer_repeat_after_stall_no_burst(void **state)
{
    fixture_t *f = *state;
    new_timers(f, 1, on_repeat_stall);
    assert_int_equal(nl_timer_start(f->t[0], 1, STALL_PERIOD_MS), 0);
    run_until_done(f);
    assert_int_equal(f->fired[0], STALL_FIRINGS);
    assert_true(g_stall_fired_ms[1] - g_stall_fired_ms[0] >= STALL_MS);
    for (int i = 1; i < STALL_FIRINGS; i++)
        assert_true(g_stall_fired_ms[i] - g_stall_fired_ms[i - 1] >= STALL_PERIOD_MS);
}

/* Stopping timers from the middle of the heap keeps it ordered: the last timer moved into
 * the hole may have to go up, not only down. Each round starts HEAP_TIMERS timers with the
 * distinct timeouts (i * mul) % HEAP_TIMERS + 1 and stops every step-th from first; a heap
 * that only sifts down on removal fires the rest out of order in each of these rounds. */
#define HEAP_TIMERS 32

typedef struct heap_round_s {
    int mul;
    int step;
    int first;
} heap_round_t;

static const heap_round_t g_heap_rounds[] = {{7, 2, 0}, {31, 2, 0}, {3, 3, 0}, {31, 3, 0}};
static nl_timer_t *g_heap_t[HEAP_TIMERS];
static uint64_t g_heap_order[HEAP_TIMERS]; /* timeouts in firing order */
static int g_heap_fired;
static const heap_round_t *g_heap_round;

static uint64_t heap_timeout_ms(int i)
{
    return (uint64_t)(i * g_heap_round->mul) % HEAP_TIMERS + 1;
}

static void on_heap_fire(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    g_heap_order[g_heap_fired++] = heap_timeout_ms((int)(intptr_t)arg);
}

/* From one callback, so every deadline is the same cached time plus the timeout. */
static void on_start_then_stop(void *arg)
{
    NL_UNUSED(arg);
    for (int i = 0; i < HEAP_TIMERS; i++)
        assert_int_equal(nl_timer_start(g_heap_t[i], heap_timeout_ms(i), 0), 0);
    for (int i = g_heap_round->first; i < HEAP_TIMERS; i += g_heap_round->step)
        nl_timer_stop(g_heap_t[i]);
}

static void test_nl_timer_stop_keeps_heap_order(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < HEAP_TIMERS; i++)
        assert_int_equal(nl_timer_new(&g_heap_t[i], f->loop, on_heap_fire, (void *)(intptr_t)i), 0);
    for (size_t r = 0; r < sizeof(g_heap_rounds) / sizeof(g_heap_rounds[0]); r++) {
        g_heap_round = &g_heap_rounds[r];
        g_heap_fired = 0;
        int stopped =
            (HEAP_TIMERS - g_heap_round->first + g_heap_round->step - 1) / g_heap_round->step;
        assert_int_equal(nl_loop_post(f->loop, on_start_then_stop, NULL), 0);
        while (g_heap_fired < HEAP_TIMERS - stopped)
            assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
        for (int i = 1; i < g_heap_fired; i++)
            assert_true(g_heap_order[i - 1] < g_heap_order[i]);
    }
    for (int i = 0; i < HEAP_TIMERS; i++) {
        assert_false(nl_timer_is_active(g_heap_t[i]));
        nl_timer_close(g_heap_t[i], NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_timer_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_equal_deadlines_start_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_repeat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_cancel_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_restart_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_close_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_close_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_zero_timeout_next_iteration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_zero_restart_once_per_iteration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_earlier_deadline_rearms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_repeat_after_stall_no_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_timer_stop_keeps_heap_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
