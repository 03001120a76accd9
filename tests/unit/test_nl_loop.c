/*
 * test_nl_loop: the event loop: cross-thread posting (order, exactly-once, coalesced wake-ups),
 * fd readiness (level vs edge), interest changes without syscalls, closing handles inside
 * callbacks, nl_loop_free's -EBUSY, stopping from another thread, loop threads, signals, and
 * the owner-thread assertion (in a forked child).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../netlib/src/nl_loop_int.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_signal.h"
#include "netlib/nl_timer.h"

/* A broken test fails on this timer instead of hanging (the ctest TIMEOUT is the last resort). */
#define DEADLINE_MS 30000

typedef struct fixture_s {
    nl_loop_t *loop;
    nl_timer_t *deadline;
} fixture_t;

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
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    nl_timer_close(f->deadline, NULL);
    assert_int_equal(nl_loop_free(f->loop), 0);
    free(f);
    return 0;
}

/* Runs iterations until *flag is set; the deadline timer bounds it. */
static void run_until(nl_loop_t *loop, const int *flag)
{
    while (!*flag)
        assert_int_equal(nl_loop_run_once(loop, -1), 0);
}

/* --- posting ------------------------------------------------------------------------------ */

#define POST_THREADS 4
#define POSTS_PER_THREAD 100000

typedef struct post_test_s {
    nl_loop_t *loop;
    uint64_t next_seq[POST_THREADS]; /* loop thread only */
    uint64_t total;
    uint64_t out_of_order;
} post_test_t;

typedef struct poster_s {
    post_test_t *pt;
    int index;
} poster_t;

static post_test_t *g_post_test;

static void on_posted(void *arg)
{
    post_test_t *pt = g_post_test;
    uintptr_t v = (uintptr_t)arg;
    unsigned thread = (unsigned)(v >> 24);
    uint64_t seq = v & 0xffffffu;
    if (pt->next_seq[thread] != seq)
        pt->out_of_order++;
    pt->next_seq[thread] = seq + 1;
    if (++pt->total == (uint64_t)POST_THREADS * POSTS_PER_THREAD)
        nl_loop_stop(pt->loop);
}

static void *poster_main(void *arg)
{
    poster_t *p = arg;
    for (uintptr_t seq = 0; seq < POSTS_PER_THREAD; seq++) {
        uintptr_t v = ((uintptr_t)p->index << 24) | seq;
        if (nl_loop_post(p->pt->loop, on_posted, (void *)v) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_nl_loop_post_cross_thread_order(void **state)
{
    fixture_t *f = *state;
    post_test_t pt = {.loop = f->loop};
    g_post_test = &pt;
    pthread_t threads[POST_THREADS];
    poster_t posters[POST_THREADS];
    for (int i = 0; i < POST_THREADS; i++) {
        posters[i] = (poster_t){&pt, i};
        assert_int_equal(pthread_create(&threads[i], NULL, poster_main, &posters[i]), 0);
    }
    assert_int_equal(nl_loop_run(f->loop), 0);
    for (int i = 0; i < POST_THREADS; i++) {
        void *ret;
        pthread_join(threads[i], &ret);
        assert_null(ret);
    }
    assert_int_equal(pt.total, (uint64_t)POST_THREADS * POSTS_PER_THREAD);
    assert_int_equal(pt.out_of_order, 0);
    for (int i = 0; i < POST_THREADS; i++)
        assert_int_equal(pt.next_seq[i], POSTS_PER_THREAD);
    nl_loop_stats_t st;
    nl_loop_get_stats(f->loop, &st);
    assert_int_equal(st.posts_run, pt.total);
    assert_int_equal(nl_loop_queue_depth(f->loop), 0);
    /* Each wake-up is an empty-to-non-empty transition, and only the loop's post phase (once
     * per iteration) empties the queue; nl_loop_stop adds one. */
    assert_true(st.wakeups <= st.iterations + 1);
    assert_true(st.wakeups < st.posts_run);
    printf("posts=%llu wakeups=%llu iterations=%llu (%.1f posts per wake-up)\n",
           (unsigned long long)st.posts_run, (unsigned long long)st.wakeups,
           (unsigned long long)st.iterations, (double)st.posts_run / (double)st.wakeups);
}

static int g_count;

static void on_count(void *arg)
{
    NL_UNUSED(arg);
    g_count++;
}

static void *burst_main(void *arg)
{
    nl_loop_t *loop = arg;
    for (int i = 0; i < 1000; i++) {
        if (nl_loop_post(loop, on_count, NULL) != 0)
            return (void *)1;
    }
    return NULL;
}

/* A burst posted while the loop does not drain costs exactly one eventfd write. */
static void test_nl_loop_post_burst_one_wakeup(void **state)
{
    fixture_t *f = *state;
    g_count = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, burst_main, f->loop), 0);
    void *ret;
    pthread_join(th, &ret);
    assert_null(ret);
    assert_int_equal(nl_loop_queue_depth(f->loop), 1000);
    assert_int_equal(g_count, 0);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(g_count, 1000);
    nl_loop_stats_t st;
    nl_loop_get_stats(f->loop, &st);
    assert_int_equal(st.wakeups, 1);
    assert_int_equal(st.posts_run, 1000);
}

static void on_post_again(void *arg)
{
    nl_loop_t *loop = arg;
    g_count++;
    if (g_count < 3)
        assert_int_equal(nl_loop_post(loop, on_post_again, loop), 0);
}

/* A post never runs inline, even on the owner; one posted from a closure runs in the next
 * iteration, which does not block (a -1 timeout would hang here otherwise). */
static void test_nl_loop_post_owner_not_inline(void **state)
{
    fixture_t *f = *state;
    g_count = 0;
    assert_int_equal(nl_loop_post(f->loop, on_post_again, f->loop), 0);
    assert_int_equal(g_count, 0);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
        assert_int_equal(g_count, i);
    }
    nl_loop_stats_t st;
    nl_loop_get_stats(f->loop, &st);
    assert_int_equal(st.iterations, 3);
    /* Only the first post, made outside the loop, rang the eventfd: the loop's own posts from
     * its closures do not, as the loop looks at the queue before it blocks. */
    assert_int_equal(st.wakeups, 1);
}

/* nl_loop_free runs closures still queued. */
static void test_nl_loop_free_runs_queued(void **state)
{
    fixture_t *f = *state;
    g_count = 0;
    assert_int_equal(nl_loop_post(f->loop, on_count, NULL), 0);
    assert_int_equal(nl_loop_post(f->loop, on_count, NULL), 0);
    nl_timer_close(f->deadline, NULL);
    assert_int_equal(nl_loop_free(f->loop), 0);
    assert_int_equal(g_count, 2);
    /* Teardown needs a loop: give it a fresh one. */
    assert_int_equal(nl_loop_new(&f->loop, NULL), 0);
    assert_int_equal(nl_timer_new(&f->deadline, f->loop, on_deadline, NULL), 0);
}

/* --- io ----------------------------------------------------------------------------------- */

typedef struct io_test_s {
    int fds[2];
    nl_io_t *io;
    int events;
    int closed;
    unsigned last;
} io_test_t;

static void on_io_count(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    io_test_t *t = arg;
    t->events++;
    t->last = events;
}

static void on_io_closed(nl_io_t *io, void *arg)
{
    io_test_t *t = arg;
    assert_ptr_equal(io, t->io);
    t->closed++;
}

static void io_test_open(io_test_t *t, nl_loop_t *loop, nl_io_event_cb cb)
{
    memset(t, 0, sizeof(*t));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, t->fds), 0);
    assert_int_equal(nl_io_new(&t->io, loop, t->fds[0], cb, t), 0);
}

static void io_test_close(io_test_t *t)
{
    close(t->fds[0]);
    close(t->fds[1]);
}

static void test_nl_loop_io_level_triggered(void **state)
{
    fixture_t *f = *state;
    io_test_t t;
    io_test_open(&t, f->loop, on_io_count);
    assert_int_equal(nl_io_set(t.io, NL_READ), 0);
    assert_int_equal(write(t.fds[1], "ab", 2), 2);
    /* Level-triggered: readable again each iteration while the data stays unread. */
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
        assert_int_equal(t.events, i);
        assert_int_equal(t.last, NL_READ);
    }
    char buf[2];
    assert_int_equal(read(t.fds[0], buf, 2), 2);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(t.events, 3);
    nl_io_close(t.io, on_io_closed);
    nl_io_close(t.io, on_io_closed); /* idempotent */
    assert_int_equal(t.closed, 0);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(t.closed, 1);
    io_test_close(&t);
}

static void test_nl_loop_io_edge_triggered(void **state)
{
    fixture_t *f = *state;
    io_test_t t;
    io_test_open(&t, f->loop, on_io_count);
    assert_int_equal(nl_io_set(t.io, NL_READ | NL_EDGE), 0);
    assert_int_equal(nl_io_interest(t.io), NL_READ | NL_EDGE);
    assert_int_equal(nl_io_fd(t.io), t.fds[0]);
    assert_int_equal(write(t.fds[1], "a", 1), 1);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 1);
    /* The data is still there, but no new arrival: no event. */
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(t.events, 1);
    assert_int_equal(write(t.fds[1], "b", 1), 1);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 2);
    /* A reader that stopped before draining asks again: reported once, with one epoll_ctl. */
    uint64_t base = nl__loop_epoll_ctl_calls(f->loop);
    assert_int_equal(nl_io_rearm(t.io), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 1);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 3);
    assert_int_equal(t.last, NL_READ);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(t.events, 3);
    /* The peer's shutdown comes as NL_RDHUP with the read, and stays reported on re-arm even
     * with the data drained, so a short read does not hide the end of the stream. */
    assert_int_equal(shutdown(t.fds[1], SHUT_WR), 0);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 4);
    assert_int_equal(t.last, NL_READ | NL_RDHUP);
    char buf[4];
    assert_int_equal(read(t.fds[0], buf, sizeof buf), 2);
    assert_int_equal(nl_io_rearm(t.io), 0);
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 5);
    assert_int_equal(t.last, NL_READ | NL_RDHUP);
    nl_io_close(t.io, NULL);
    /* An io watching nothing has nothing to re-arm. */
    io_test_t u;
    io_test_open(&u, f->loop, on_io_count);
    base = nl__loop_epoll_ctl_calls(f->loop);
    assert_int_equal(nl_io_rearm(u.io), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base);
    nl_io_close(u.io, NULL);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    io_test_close(&u);
    io_test_close(&t);
}

static void test_nl_loop_io_set_unchanged_no_syscall(void **state)
{
    fixture_t *f = *state;
    io_test_t t;
    io_test_open(&t, f->loop, on_io_count);
    uint64_t base = nl__loop_epoll_ctl_calls(f->loop);
    assert_int_equal(nl_io_set(t.io, 0), 0); /* nothing registered, nothing asked */
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base);
    assert_int_equal(nl_io_set(t.io, NL_READ), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(nl_io_set(t.io, NL_READ), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 1);
    assert_int_equal(nl_io_set(t.io, NL_READ | NL_WRITE), 0);
    assert_int_equal(nl_io_set(t.io, NL_READ | NL_WRITE), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 2);
    /* Writable right away on a fresh socket. */
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(t.events, 1);
    assert_int_equal(t.last, NL_WRITE);
    assert_int_equal(nl_io_set(t.io, 0), 0);
    assert_int_equal(nl_io_set(t.io, 0), 0);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 3);
    /* Closing an io with no interest costs no syscall either. */
    nl_io_close(t.io, NULL);
    assert_int_equal(nl__loop_epoll_ctl_calls(f->loop), base + 3);
    io_test_close(&t);
}

static io_test_t g_pair[2];

/* Whichever of the two fires first closes itself and the other: the other's event, already
 * returned by the same epoll_wait, must not be delivered. */
static void on_io_close_both(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    NL_UNUSED(events);
    io_test_t *t = arg;
    t->events++;
    nl_io_close(g_pair[0].io, on_io_closed);
    nl_io_close(g_pair[1].io, on_io_closed);
}

static void test_nl_loop_io_close_inside_callbacks(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < 2; i++) {
        io_test_open(&g_pair[i], f->loop, on_io_close_both);
        assert_int_equal(write(g_pair[i].fds[1], "x", 1), 1);
        assert_int_equal(nl_io_set(g_pair[i].io, NL_READ), 0);
    }
    /* Both are readable before the wait, so one epoll_wait returns both. */
    assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(g_pair[0].events + g_pair[1].events, 1);
    assert_int_equal(g_pair[0].closed, 1);
    assert_int_equal(g_pair[1].closed, 1);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(g_pair[0].events + g_pair[1].events, 1);
    io_test_close(&g_pair[0]);
    io_test_close(&g_pair[1]);
}

static void test_nl_loop_free_busy_with_open_io(void **state)
{
    fixture_t *f = *state;
    nl_timer_close(f->deadline, NULL);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    io_test_t t;
    io_test_open(&t, f->loop, on_io_count);
    assert_int_equal(nl_loop_free(f->loop), -EBUSY);
    nl_io_close(t.io, on_io_closed);
    /* The close finishes inside nl_loop_free, which then succeeds. */
    assert_int_equal(nl_loop_free(f->loop), 0);
    assert_int_equal(t.closed, 1);
    io_test_close(&t);
    assert_int_equal(nl_loop_new(&f->loop, NULL), 0);
    assert_int_equal(nl_timer_new(&f->deadline, f->loop, on_deadline, NULL), 0);
}

/* --- stop, threads, ownership ------------------------------------------------------------- */

static void *stopper_main(void *arg)
{
    nl_loop_stop(arg);
    return NULL;
}

static pthread_t g_stopper;

static void on_start_stopper(void *arg)
{
    assert_int_equal(pthread_create(&g_stopper, NULL, stopper_main, arg), 0);
}

static void test_nl_loop_stop_from_other_thread(void **state)
{
    fixture_t *f = *state;
    /* The stopper starts from inside the running loop, so the stop lands while it runs. */
    assert_int_equal(nl_loop_post(f->loop, on_start_stopper, f->loop), 0);
    assert_int_equal(nl_loop_run(f->loop), 0);
    pthread_join(g_stopper, NULL);
    assert_null(nl_loop_current());
    /* The stop request is consumed: a second run needs a second stop. */
    assert_int_equal(nl_loop_post(f->loop, on_start_stopper, f->loop), 0);
    assert_int_equal(nl_loop_run(f->loop), 0);
    pthread_join(g_stopper, NULL);
}

typedef struct lt_test_s {
    pthread_mutex_t lock; /* guards every field below */
    pthread_cond_t cond;
    pthread_t loop_thread;
    nl_timer_t *timer;
    int started;
    int stopped;
    int closed;
    int pinged;
    int on_stop_same_thread;
} lt_test_t;

static void lt_on_start(nl_loop_t *loop, void *arg)
{
    lt_test_t *t = arg;
    pthread_mutex_lock(&t->lock);
    t->loop_thread = pthread_self();
    t->started++;
    /* A handle on_stop must close, or nl_loop_free would report -EBUSY. */
    assert_int_equal(nl_timer_new(&t->timer, loop, NULL, t), 0);
    pthread_mutex_unlock(&t->lock);
}

static void lt_on_timer_closed(nl_timer_t *timer, void *arg)
{
    NL_UNUSED(timer);
    lt_test_t *t = arg;
    pthread_mutex_lock(&t->lock);
    t->closed++;
    pthread_mutex_unlock(&t->lock);
}

static void lt_on_stop(nl_loop_t *loop, void *arg)
{
    lt_test_t *t = arg;
    assert_ptr_equal(nl_loop_current(), loop);
    pthread_mutex_lock(&t->lock);
    t->stopped++;
    t->on_stop_same_thread = pthread_equal(t->loop_thread, pthread_self());
    nl_timer_t *timer = t->timer;
    pthread_mutex_unlock(&t->lock);
    nl_timer_close(timer, lt_on_timer_closed);
}

static void lt_on_ping(void *arg)
{
    lt_test_t *t = arg;
    pthread_mutex_lock(&t->lock);
    t->pinged = nl_loop_current() != NULL && pthread_equal(t->loop_thread, pthread_self());
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static void test_nl_loop_thread_start_stop(void **state)
{
    NL_UNUSED(state);
    lt_test_t t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    nl_loop_thread_opts_t opts = {
        .loop = {.id = 7},
        .name = "test-loop-thread-name-too-long",
        .cpu = 0,
        .on_start = lt_on_start,
        .on_stop = lt_on_stop,
        .arg = &t,
    };
    nl_loop_thread_t *lt;
    assert_int_equal(nl_loop_thread_start(&lt, &opts), 0);
    pthread_mutex_lock(&t.lock);
    assert_int_equal(t.started, 1);
    pthread_mutex_unlock(&t.lock);
    nl_loop_t *loop = nl_loop_thread_loop(lt);
    assert_non_null(loop);
    assert_int_equal(nl_loop_id(loop), 7);
    assert_false(nl_loop_is_owner(loop));
    assert_int_equal(nl_loop_post(loop, lt_on_ping, &t), 0);
    pthread_mutex_lock(&t.lock);
    while (!t.pinged)
        pthread_cond_wait(&t.cond, &t.lock);
    pthread_mutex_unlock(&t.lock);
    assert_int_equal(nl_loop_thread_stop(lt), 0);
    assert_int_equal(t.stopped, 1);
    assert_int_equal(t.on_stop_same_thread, 1);
    assert_int_equal(t.closed, 1);
}

static int g_signum;
static int g_signal_calls;

static void on_signal(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(arg);
    g_signum = signum;
    g_signal_calls++;
    nl_signal_close(s);
    nl_signal_close(s); /* idempotent */
}

static void test_nl_loop_signal_delivery(void **state)
{
    fixture_t *f = *state;
    int sigs[] = {SIGUSR1};
    assert_int_equal(nl_signal_block(sigs, 1), 0);
    nl_signal_t *s;
    assert_int_equal(nl_signal_new(&s, f->loop, sigs, 1, on_signal, NULL), 0);
    g_signum = 0;
    g_signal_calls = 0;
    assert_int_equal(raise(SIGUSR1), 0);
    while (g_signum == 0)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(g_signum, SIGUSR1);
    assert_int_equal(g_signal_calls, 1);
}

static int g_signal_seen[2]; /* SIGUSR1, SIGUSR2 */

static void on_signal_count(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(s);
    NL_UNUSED(arg);
    assert_true(signum == SIGUSR1 || signum == SIGUSR2);
    g_signal_seen[signum == SIGUSR2]++;
}

/* Two signals pending before the loop looks: one drain delivers each, once. */
static void test_nl_loop_signal_each_once(void **state)
{
    fixture_t *f = *state;
    int sigs[] = {SIGUSR1, SIGUSR2};
    assert_int_equal(nl_signal_block(sigs, 2), 0);
    nl_signal_t *s;
    assert_int_equal(nl_signal_new(&s, f->loop, sigs, 2, on_signal_count, NULL), 0);
    memset(g_signal_seen, 0, sizeof(g_signal_seen));
    assert_int_equal(raise(SIGUSR1), 0);
    assert_int_equal(raise(SIGUSR2), 0);
    while (g_signal_seen[0] + g_signal_seen[1] < 2)
        assert_int_equal(nl_loop_run_once(f->loop, -1), 0);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
    assert_int_equal(g_signal_seen[0], 1);
    assert_int_equal(g_signal_seen[1], 1);
    nl_signal_close(s);
    assert_int_equal(nl_loop_run_once(f->loop, 0), 0);
}

static nl_loop_t *g_second;
static int g_second_rc;

static void on_try_second(void *arg)
{
    NL_UNUSED(arg);
    g_second_rc = nl_loop_run(g_second);
    g_count = 1;
}

/* A thread running one loop may not run another, nor the same one again. */
static void test_nl_loop_second_loop_refused(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(nl_loop_new(&g_second, NULL), 0);
    g_count = 0;
    assert_int_equal(nl_loop_post(f->loop, on_try_second, NULL), 0);
    run_until(f->loop, &g_count);
    assert_int_equal(g_second_rc, -EBUSY);
    assert_int_equal(nl_loop_free(g_second), 0);
}

/* A loop owned by another thread, which waits on a pipe until the test is done with it. */
typedef struct owner_test_s {
    int ready[2];
    int done[2];
    nl_loop_t *loop;
} owner_test_t;

static void *loop_owner_main(void *arg)
{
    owner_test_t *o = arg;
    nl_loop_t *loop;
    if (nl_loop_new(&loop, NULL) != 0)
        return (void *)1;
    o->loop = loop;
    char c = 0;
    if (write(o->ready[1], &c, 1) != 1 || read(o->done[0], &c, 1) != 1)
        return (void *)1;
    return nl_loop_free(loop) == 0 ? NULL : (void *)1;
}

/* The child process calls an owner-only function on a loop its thread does not own (no thread
 * is started in the child: the forked child is single-threaded) and must die of SIGABRT. */
static void test_nl_loop_owner_assert_aborts(void **state)
{
    fixture_t *f = *state;
    assert_true(nl_loop_is_owner(f->loop));
    owner_test_t o = {0};
    assert_int_equal(pipe(o.ready), 0);
    assert_int_equal(pipe(o.done), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, loop_owner_main, &o), 0);
    char c;
    assert_int_equal(read(o.ready[0], &c, 1), 1);
    assert_false(nl_loop_is_owner(o.loop));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        nl_loop_set_data(o.loop, NULL); /* owner-only: aborts */
        _exit(0);                       /* reached only if the assertion did not fire */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_int_equal(write(o.done[1], "x", 1), 1);
    void *ret;
    pthread_join(th, &ret);
    assert_null(ret);
    for (int i = 0; i < 2; i++) {
        close(o.ready[i]);
        close(o.done[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_loop_post_cross_thread_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_post_burst_one_wakeup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_post_owner_not_inline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_free_runs_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_io_level_triggered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_io_edge_triggered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_io_set_unchanged_no_syscall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_io_close_inside_callbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_free_busy_with_open_io, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_stop_from_other_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_thread_start_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_signal_delivery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_signal_each_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_second_loop_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_loop_owner_assert_aborts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
