/*
 * test_nl_pool: the bounded worker pool: exactly-once execution under 8 producers, round
 * trips through park and wake-up (capacities 1 and 3), a full queue rejecting exactly at
 * capacity (and the caller-runs and wait policies), completions
 * running on the submitting loop's thread with their task's result, shutdown in drain and
 * discard modes, burst threads retiring after the keep-alive, and the assertion that forbids
 * a loop thread from waiting (in a forked child).
 *
 * Workers are held with a gate (a mutex + condition the test opens), never with sleeps; waits
 * on pool figures poll them from a loop timer under a deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_pool.h"
#include "netlib/nl_timer.h"

#include "nl_pool_test_util.h"

/* --- simple work and done functions ---------------------------------------------------------- */

static int count_work(void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
    return 0;
}

/* --- exactly once ---------------------------------------------------------------------------- */

enum { EO_PRODUCERS = 8, EO_PER_PRODUCER = 100000 };
#define EO_DONE_UNIT 0x10000u

typedef struct eo_producer_s {
    nl_pool_t *pool;
    _Atomic uint32_t *counts; /* this producer's slice */
    _Atomic int failures;
} eo_producer_t;

/* Work adds 1 and done adds 0x10000 to the task's own counter: each must end at 0x10001. */
static int eo_work(void *arg)
{
    atomic_fetch_add_explicit((_Atomic uint32_t *)arg, 1, memory_order_relaxed);
    return 0;
}

static void eo_done(void *arg, int status)
{
    if (status == 0)
        atomic_fetch_add_explicit((_Atomic uint32_t *)arg, EO_DONE_UNIT, memory_order_relaxed);
}

static void *eo_produce(void *arg)
{
    eo_producer_t *p = arg;
    for (int i = 0; i < EO_PER_PRODUCER; i++) {
        nl_pool_task_t t = {.work = eo_work,
                            .done = eo_done,
                            .arg = &p->counts[i],
                            .policy = NL_POOL_WAIT,
                            .wait_timeout_ms = DEADLINE_MS};
        if (nl_pool_submit_ex(p->pool, &t) != 0)
            atomic_fetch_add(&p->failures, 1);
    }
    return NULL;
}

static void test_nl_pool_exactly_once_8_producers(void **state)
{
    NL_UNUSED(state);
    const size_t n = (size_t)EO_PRODUCERS * EO_PER_PRODUCER;
    _Atomic uint32_t *counts = calloc(n, sizeof(*counts));
    assert_non_null(counts);
    nl_pool_t *pool;
    nl_pool_opts_t o = {.core_threads = 4, .queue_capacity = 1024, .name = "t-eo"};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    pthread_t th[EO_PRODUCERS];
    eo_producer_t prod[EO_PRODUCERS];
    for (int i = 0; i < EO_PRODUCERS; i++) {
        prod[i].pool = pool;
        prod[i].counts = counts + (size_t)i * EO_PER_PRODUCER;
        atomic_init(&prod[i].failures, 0);
        assert_int_equal(pthread_create(&th[i], NULL, eo_produce, &prod[i]), 0);
    }
    for (int i = 0; i < EO_PRODUCERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(atomic_load(&prod[i].failures), 0);
    }
    assert_int_equal(nl_pool_shutdown(pool, NL_POOL_DRAIN), 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t c = atomic_load_explicit(&counts[i], memory_order_relaxed);
        if (c != EO_DONE_UNIT + 1)
            fail_msg("task %zu: count %#x, want %#x", i, c, EO_DONE_UNIT + 1);
    }
    nl_pool_stats_t s;
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.submitted, n);
    assert_int_equal(s.completed, n);
    assert_int_equal(s.rejected, 0);
    assert_int_equal(s.cancelled, 0);
    assert_int_equal(s.queue_depth, 0);
    assert_int_equal(s.threads_busy, 0);
    assert_int_equal(s.wait_ns.count, n);
    assert_int_equal(s.run_ns.count, n);
    assert_true(s.queue_hwm >= 1 && s.queue_hwm <= 1024);
    nl_pool_free(pool);
    free(counts);
}

/* --- park and wake ---------------------------------------------------------------------------- */

enum { PP_ROUNDS = 10000, PP_PRODUCERS = 2 };

/* One round trip at a time per producer: nearly every task finds the worker idle and goes
 * through the spin / park / wake-up path. A lost wake-up leaves a task with the worker asleep. */
typedef struct pp_s {
    nl_pool_t *pool;
    mon_t mon; /* count: this producer's finished tasks; bad: failed rounds */
} pp_t;

static int pp_work(void *arg)
{
    mon_t *m = arg;
    mon_add(m, &m->count);
    return 0;
}

static void *pp_produce(void *arg)
{
    pp_t *pp = arg;
    for (int i = 1; i <= PP_ROUNDS; i++) {
        int rc;
        uint64_t give_up_ms = nl_now_ms() + 10000;
        while ((rc = nl_pool_submit(pp->pool, NULL, pp_work, NULL, &pp->mon)) == -EAGAIN &&
               nl_now_ms() < give_up_ms)
            sched_yield(); /* the other producer's task may fill a 1-slot queue */
        if (rc != 0 || mon_wait(&pp->mon, &pp->mon.count, i, 10000) != i) {
            mon_add(&pp->mon, &pp->mon.bad);
            break;
        }
    }
    return NULL;
}

/* Capacity 1 also guards the ring's sequence numbering (whole steps overwrote a task there). */
static void round_trips(uint32_t capacity)
{
    nl_pool_t *pool;
    nl_pool_opts_t o = {.core_threads = 1, .queue_capacity = capacity};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    pp_t pp[PP_PRODUCERS];
    pthread_t th[PP_PRODUCERS];
    for (int i = 0; i < PP_PRODUCERS; i++) {
        pp[i].pool = pool;
        mon_init(&pp[i].mon);
        assert_int_equal(pthread_create(&th[i], NULL, pp_produce, &pp[i]), 0);
    }
    for (int i = 0; i < PP_PRODUCERS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    nl_pool_free(pool);
    for (int i = 0; i < PP_PRODUCERS; i++) {
        assert_int_equal(pp[i].mon.bad, 0);
        assert_int_equal(pp[i].mon.count, PP_ROUNDS);
        mon_deinit(&pp[i].mon);
    }
}

static void test_nl_pool_no_lost_wakeup_round_trips(void **state)
{
    NL_UNUSED(state);
    round_trips(1);
    round_trips(3); /* not a power of two: modulo indexing, over thousands of laps */
}

/* --- full queue and its policies ------------------------------------------------------------ */

enum { FULL_WORKERS = 2, FULL_CAPACITY = 8 };

typedef struct caller_probe_s {
    pthread_t ran_on;
    _Atomic int runs;
} caller_probe_t;

static int caller_probe_work(void *arg)
{
    caller_probe_t *p = arg;
    p->ran_on = pthread_self();
    atomic_fetch_add(&p->runs, 1);
    return 0;
}

/* Holds the workers in the gate and fills the queue to capacity. */
static nl_pool_t *full_pool(gate_t *gate, _Atomic int *ran)
{
    nl_pool_t *pool;
    nl_pool_opts_t o = {.core_threads = FULL_WORKERS, .queue_capacity = FULL_CAPACITY};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    for (int i = 0; i < FULL_WORKERS; i++)
        assert_int_equal(nl_pool_submit(pool, NULL, gate_work, NULL, gate), 0);
    gate_wait_entered(gate, FULL_WORKERS);
    for (int i = 0; i < FULL_CAPACITY; i++)
        assert_int_equal(nl_pool_submit(pool, NULL, count_work, NULL, ran), 0);
    return pool;
}

static void test_nl_pool_full_queue_rejects_exactly_at_capacity(void **state)
{
    NL_UNUSED(state);
    gate_t gate;
    mon_init(&gate);
    _Atomic int ran = 0;
    nl_pool_t *pool = full_pool(&gate, &ran);
    assert_int_equal(nl_pool_submit(pool, NULL, count_work, NULL, &ran), -EAGAIN);
    nl_pool_stats_t s;
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.submitted, FULL_WORKERS + FULL_CAPACITY);
    assert_int_equal(s.rejected, 1);
    assert_int_equal(s.queue_depth, FULL_CAPACITY);
    assert_int_equal(s.queue_hwm, FULL_CAPACITY);
    assert_int_equal(s.threads_busy, FULL_WORKERS);
    assert_int_equal(atomic_load(&ran), 0);

    /* Opening the gate lets the workers drain; once one queued task ran, its slot is free. */
    gate_open(&gate);
    uint64_t deadline_ms = nl_now_ms() + DEADLINE_MS;
    while (atomic_load(&ran) == 0 && nl_now_ms() < deadline_ms)
        sched_yield();
    assert_true(atomic_load(&ran) > 0);
    assert_int_equal(nl_pool_submit(pool, NULL, count_work, NULL, &ran), 0);
    assert_int_equal(nl_pool_shutdown(pool, NL_POOL_DRAIN), 0);
    assert_int_equal(atomic_load(&ran), FULL_CAPACITY + 1);
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.rejected, 1);
    assert_int_equal(s.completed, FULL_WORKERS + FULL_CAPACITY + 1);
    nl_pool_free(pool);
    mon_deinit(&gate);
}

typedef struct waiter_s {
    nl_pool_t *pool;
    _Atomic int *ran;
    int rc;
} waiter_t;

static void *wait_submitter(void *arg)
{
    waiter_t *w = arg;
    nl_pool_task_t t = {
        .work = count_work, .arg = w->ran, .policy = NL_POOL_WAIT, .wait_timeout_ms = DEADLINE_MS};
    w->rc = nl_pool_submit_ex(w->pool, &t);
    return NULL;
}

static void test_nl_pool_full_queue_caller_runs_and_wait(void **state)
{
    NL_UNUSED(state);
    gate_t gate;
    mon_init(&gate);
    _Atomic int ran = 0;
    nl_pool_t *pool = full_pool(&gate, &ran);
    caller_probe_t probe = {.runs = 0};
    nl_pool_task_t t = {.work = caller_probe_work, .arg = &probe, .policy = NL_POOL_CALLER_RUNS};
    assert_int_equal(nl_pool_submit_ex(pool, &t), 0);
    assert_int_equal(atomic_load(&probe.runs), 1);
    assert_true(pthread_equal(probe.ran_on, pthread_self()));

    t.policy = NL_POOL_WAIT;
    t.wait_timeout_ms = 0;
    assert_int_equal(nl_pool_submit_ex(pool, &t), -ETIMEDOUT);
    t.wait_timeout_ms = 20; /* the pool itself waits; nothing frees a slot meanwhile */
    uint64_t t0 = nl_now_ns();
    assert_int_equal(nl_pool_submit_ex(pool, &t), -ETIMEDOUT);
    assert_true(nl_now_ns() - t0 >= 20u * 1000000u);
    assert_int_equal(atomic_load(&probe.runs), 1);

    nl_pool_stats_t s;
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.ran_in_caller, 1);
    assert_int_equal(s.rejected, 2);

    /* A submitter waiting without a deadline gets the slot a worker frees. */
    waiter_t w = {pool, &ran, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_submitter, &w), 0);
    gate_open(&gate);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    assert_int_equal(nl_pool_shutdown(pool, NL_POOL_DRAIN), 0);
    assert_int_equal(atomic_load(&ran), FULL_CAPACITY + 1);
    nl_pool_free(pool);
    mon_deinit(&gate);
}

/* --- completions on the loop ---------------------------------------------------------------- */

enum { WB_TASKS = 5000 };

typedef struct wb_task_s {
    nl_loop_t *loop;
    int id;
    int is_submitted; /* set by the submitter after submit returned (loop thread) */
    _Atomic int work_runs;
    pthread_t worker;
    int result;    /* written by work, read by done */
    int done_runs; /* loop thread only */
    int *done_total;
} wb_task_t;

static int wb_work(void *arg)
{
    wb_task_t *t = arg;
    t->worker = pthread_self();
    t->result = t->id * 3;
    atomic_fetch_add(&t->work_runs, 1);
    return t->id % 2 ? -EACCES : 0;
}

static void wb_done(void *arg, int status)
{
    wb_task_t *t = arg;
    assert_true(nl_loop_is_owner(t->loop));
    assert_true(t->is_submitted);
    assert_int_equal(atomic_load(&t->work_runs), 1); /* after its task */
    assert_false(pthread_equal(t->worker, pthread_self()));
    assert_int_equal(t->result, t->id * 3);
    assert_int_equal(status, t->id % 2 ? -EACCES : 0);
    t->done_runs++;
    (*t->done_total)++;
}

/* Completions run on the submitting loop's thread, after their task, with its result. The
 * loop does not run while most tasks are submitted, so completions pile up in its post queue
 * and the pool's preallocated records run out: the malloc overflow is exercised too. */
static void test_nl_pool_completion_runs_on_submitting_loop(void **state)
{
    fixture_t *f = *state;
    nl_pool_t *pool;
    nl_pool_opts_t o = {.core_threads = 2, .queue_capacity = 64};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    wb_task_t *tasks = calloc(WB_TASKS, sizeof(*tasks));
    assert_non_null(tasks);
    int done_total = 0;
    for (int i = 0; i < WB_TASKS; i++) {
        wb_task_t *t = &tasks[i];
        *t = (wb_task_t){.loop = f->loop, .id = i, .done_total = &done_total};
        int rc;
        while ((rc = nl_pool_submit(pool, f->loop, wb_work, wb_done, t)) == -EAGAIN)
            sched_yield();
        assert_int_equal(rc, 0);
        t->is_submitted = 1;
    }
    run_loop_until(f->loop, &done_total, WB_TASKS);
    for (int i = 0; i < WB_TASKS; i++)
        assert_int_equal(tasks[i].done_runs, 1);
    assert_int_equal(nl_pool_shutdown(pool, NL_POOL_DRAIN), 0);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(done_total, WB_TASKS);
    nl_pool_free(pool);
    free(tasks);
}

enum { LT_TASKS = 1000 };

typedef struct lt_state_s {
    nl_pool_t *pool;
    nl_loop_t *loop;
    int submitted; /* loop thread only, read after the thread stopped */
    mon_t mon;     /* count: completions on the loop thread with the right status; bad: others */
} lt_state_t;

static int lt_work(void *arg)
{
    NL_UNUSED(arg);
    return -ENOENT;
}

static void lt_done(void *arg, int status)
{
    lt_state_t *st = arg;
    bool is_ok = nl_loop_is_owner(st->loop) && nl_loop_current() == st->loop && status == -ENOENT;
    mon_add(&st->mon, is_ok ? &st->mon.count : &st->mon.bad);
}

/* Runs on the loop thread: submits from the loop, as the gateway does. */
static void lt_submit_all(void *arg)
{
    lt_state_t *st = arg;
    for (int i = 0; i < LT_TASKS; i++)
        st->submitted += nl_pool_submit(st->pool, st->loop, lt_work, lt_done, st) == 0;
}

/* A loop on its own thread, asleep in epoll_wait between completions: each batch of
 * completions wakes it through its eventfd, and every done runs on that thread. */
static void test_nl_pool_completion_wakes_loop_thread(void **state)
{
    NL_UNUSED(state);
    lt_state_t st = {.submitted = 0};
    mon_init(&st.mon);
    nl_pool_opts_t o = {.core_threads = 2, .queue_capacity = 2 * LT_TASKS};
    assert_int_equal(nl_pool_new(&st.pool, &o), 0);
    nl_loop_thread_t *lt;
    nl_loop_thread_opts_t lo = {.name = "t-pool-loop", .cpu = -1};
    assert_int_equal(nl_loop_thread_start(&lt, &lo), 0);
    st.loop = nl_loop_thread_loop(lt);
    assert_int_equal(nl_loop_post(st.loop, lt_submit_all, &st), 0);
    mon_wait(&st.mon, &st.mon.count, LT_TASKS, DEADLINE_MS);
    assert_int_equal(nl_pool_shutdown(st.pool, NL_POOL_DRAIN), 0);
    assert_int_equal(nl_loop_thread_stop(lt), 0);
    assert_int_equal(st.submitted, LT_TASKS);
    assert_int_equal(st.mon.count, LT_TASKS);
    assert_int_equal(st.mon.bad, 0);
    nl_pool_free(st.pool);
    mon_deinit(&st.mon);
}

/* --- shutdown -------------------------------------------------------------------------------- */

enum { SD_WORKERS = 2, SD_QUEUED = 40 };

typedef struct sd_task_s {
    _Atomic int work_runs;
    _Atomic int done_runs;
    _Atomic int last_status;
    int *loop_done_total; /* NULL for tasks whose done runs off the loop */
} sd_task_t;

static int sd_work(void *arg)
{
    atomic_fetch_add(&((sd_task_t *)arg)->work_runs, 1);
    return 0;
}

static void sd_done(void *arg, int status)
{
    sd_task_t *t = arg;
    atomic_store(&t->last_status, status);
    atomic_fetch_add(&t->done_runs, 1);
    if (t->loop_done_total)
        (*t->loop_done_total)++;
}

typedef struct opener_s {
    nl_pool_t *pool;
    gate_t *gate;
    int saw_shutdown;
} opener_t;

/* Opens the gate once shutdown has begun, seen as -ESHUTDOWN from a probe submit (the queue
 * is full until then, so the probe is rejected with -EAGAIN and never queued). */
static void *open_after_shutdown(void *arg)
{
    opener_t *o = arg;
    uint64_t deadline_ms = nl_now_ms() + DEADLINE_MS;
    int rc;
    while ((rc = nl_pool_submit(o->pool, NULL, count_work, NULL, NULL)) == -EAGAIN &&
           nl_now_ms() < deadline_ms)
        sched_yield();
    o->saw_shutdown = rc == -ESHUTDOWN;
    gate_open(o->gate);
    return NULL;
}

/* Blocks the workers, queues SD_QUEUED tasks (every other one completing on the loop), then
 * shuts down in mode while a helper opens the gate once shutdown has begun. */
static void shutdown_with_queue(fixture_t *f, nl_pool_shutdown_mode_t mode, sd_task_t *tasks,
                                int *loop_done_total)
{
    memset(tasks, 0, SD_QUEUED * sizeof(*tasks));
    gate_t gate;
    mon_init(&gate);
    nl_pool_t *pool;
    nl_pool_opts_t o = {.core_threads = SD_WORKERS, .queue_capacity = SD_QUEUED};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    for (int i = 0; i < SD_WORKERS; i++)
        assert_int_equal(nl_pool_submit(pool, NULL, gate_work, NULL, &gate), 0);
    gate_wait_entered(&gate, SD_WORKERS);
    for (int i = 0; i < SD_QUEUED; i++) {
        nl_loop_t *loop = i % 2 ? f->loop : NULL;
        tasks[i].loop_done_total = loop ? loop_done_total : NULL;
        assert_int_equal(nl_pool_submit(pool, loop, sd_work, sd_done, &tasks[i]), 0);
    }
    opener_t op = {pool, &gate, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, open_after_shutdown, &op), 0);
    assert_int_equal(nl_pool_shutdown(pool, mode), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(op.saw_shutdown);
    /* Nothing runs after shutdown returned: the counts are final (checked again below). */
    int runs = 0;
    for (int i = 0; i < SD_QUEUED; i++)
        runs += atomic_load(&tasks[i].work_runs);
    assert_int_equal(nl_pool_submit(pool, NULL, sd_work, NULL, &tasks[0]), -ESHUTDOWN);
    assert_int_equal(nl_pool_shutdown(pool, mode), 0); /* second call: no-op */
    run_loop_until(f->loop, loop_done_total, SD_QUEUED / 2);
    nl_pool_stats_t s;
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.cancelled, mode == NL_POOL_DISCARD ? SD_QUEUED : 0);
    assert_int_equal(s.threads, 0);
    nl_pool_free(pool);
    mon_deinit(&gate);
    int runs_after = 0;
    for (int i = 0; i < SD_QUEUED; i++) {
        runs_after += atomic_load(&tasks[i].work_runs);
        /* Drain: every task ran once, done saw 0. Discard: none ran, done saw -ECANCELED. */
        assert_int_equal(atomic_load(&tasks[i].work_runs), mode == NL_POOL_DRAIN);
        assert_int_equal(atomic_load(&tasks[i].done_runs), 1);
        assert_int_equal(atomic_load(&tasks[i].last_status),
                         mode == NL_POOL_DRAIN ? 0 : -ECANCELED);
    }
    assert_int_equal(runs, runs_after);
}

static void test_nl_pool_shutdown_drain_runs_queued(void **state)
{
    sd_task_t tasks[SD_QUEUED];
    int loop_done_total = 0;
    shutdown_with_queue(*state, NL_POOL_DRAIN, tasks, &loop_done_total);
}

static void test_nl_pool_shutdown_discard_cancels_queued(void **state)
{
    sd_task_t tasks[SD_QUEUED];
    int loop_done_total = 0;
    shutdown_with_queue(*state, NL_POOL_DISCARD, tasks, &loop_done_total);
}

/* --- burst threads -------------------------------------------------------------------------- */

/* With one core thread held in the gate, each further gated task finds every worker busy and
 * starts a burst thread, up to max_threads; idle for keepalive_ms, the burst threads retire,
 * and a later backlog starts them again (reusing the retired threads' slots). */
static void test_nl_pool_burst_threads_retire_after_keepalive(void **state)
{
    fixture_t *f = *state;
    nl_pool_t *pool;
    nl_pool_opts_t o = {
        .core_threads = 1, .max_threads = 3, .keepalive_ms = 30, .queue_capacity = 16};
    assert_int_equal(nl_pool_new(&pool, &o), 0);
    for (int round = 0; round < 2; round++) {
        gate_t gate;
        mon_init(&gate);
        for (int i = 1; i <= 3; i++) {
            assert_int_equal(nl_pool_submit(pool, NULL, gate_work, NULL, &gate), 0);
            gate_wait_entered(&gate, i);
        }
        nl_pool_stats_t s;
        nl_pool_get_stats(pool, &s);
        assert_int_equal(s.threads, 3);
        assert_int_equal(s.threads_busy, 3);
        assert_int_equal(s.threads_started, 3 + 2 * round);
        /* At the ceiling: a fourth task waits in the queue. */
        assert_int_equal(nl_pool_submit(pool, NULL, gate_work, NULL, &gate), 0);
        nl_pool_get_stats(pool, &s);
        assert_int_equal(s.threads, 3);
        gate_open(&gate);
        assert_int_equal(mon_wait(&gate, &gate.left, 4, DEADLINE_MS), 4);
        wait_for_threads(f->loop, pool, 1);
        nl_pool_get_stats(pool, &s);
        assert_int_equal(s.threads_retired, 2 + 2 * round);
        assert_int_equal(s.completed, 4 + 4 * round);
        mon_deinit(&gate);
    }
    nl_pool_free(pool);
}

/* --- misc ------------------------------------------------------------------------------------ */

static void test_nl_pool_invalid_options(void **state)
{
    NL_UNUSED(state);
    nl_pool_t *pool = NULL;
    nl_pool_opts_t o = {.core_threads = 4, .max_threads = 2};
    assert_int_equal(nl_pool_new(&pool, &o), -EINVAL);
    o = (nl_pool_opts_t){.core_threads = 2000};
    assert_int_equal(nl_pool_new(&pool, &o), -EINVAL);
    o = (nl_pool_opts_t){.queue_capacity = (1u << 30) + 1};
    assert_int_equal(nl_pool_new(&pool, &o), -EINVAL);
    assert_null(pool);
    /* Defaults: one thread, a queue of 1024 that need not be a power of two elsewhere. */
    assert_int_equal(nl_pool_new(&pool, NULL), 0);
    nl_pool_stats_t s;
    nl_pool_get_stats(pool, &s);
    assert_int_equal(s.threads, 1);
    nl_pool_free(pool);
    nl_pool_free(NULL);
}

static void wait_on_loop(void *arg)
{
    nl_pool_task_t t = {
        .work = count_work, .arg = arg, .policy = NL_POOL_WAIT, .wait_timeout_ms = 10};
    nl_pool_t *pool;
    if (nl_pool_new(&pool, NULL) == 0)
        nl_pool_submit_ex(pool, &t); /* must abort: a loop thread asked to wait */
    _exit(0);
}

/* NL_POOL_WAIT from a loop thread is a bug and aborts (in a forked child). */
static void test_nl_pool_wait_on_loop_thread_aborts(void **state)
{
    NL_UNUSED(state);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO);
        nl_loop_t *loop;
        _Atomic int ran = 0;
        if (nl_loop_new(&loop, NULL) != 0 || nl_loop_post(loop, wait_on_loop, &ran) != 0)
            _exit(2);
        nl_loop_run_once(loop, 1000);
        _exit(3);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_pool_exactly_once_8_producers),
        cmocka_unit_test(test_nl_pool_no_lost_wakeup_round_trips),
        cmocka_unit_test(test_nl_pool_full_queue_rejects_exactly_at_capacity),
        cmocka_unit_test(test_nl_pool_full_queue_caller_runs_and_wait),
        cmocka_unit_test_setup_teardown(test_nl_pool_completion_runs_on_submitting_loop,
                                        pool_test_setup, pool_test_teardown),
        cmocka_unit_test(test_nl_pool_completion_wakes_loop_thread),
        cmocka_unit_test_setup_teardown(test_nl_pool_shutdown_drain_runs_queued, pool_test_setup,
                                        pool_test_teardown),
        cmocka_unit_test_setup_teardown(test_nl_pool_shutdown_discard_cancels_queued,
                                        pool_test_setup, pool_test_teardown),
        cmocka_unit_test_setup_teardown(test_nl_pool_burst_threads_retire_after_keepalive,
                                        pool_test_setup, pool_test_teardown),
        cmocka_unit_test(test_nl_pool_invalid_options),
        cmocka_unit_test(test_nl_pool_wait_on_loop_thread_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
