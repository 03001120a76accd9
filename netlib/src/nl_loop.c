/*
 * nl_loop: the event loop (see nl_loop.h). One iteration:
 *
 *   epoll_wait -> cache the time -> dispatch ready fds -> run due timers -> run posted closures
 *   -> before-sleep hooks -> modules' before-sleep (the connections' output flush)
 *   -> finish deferred handles (close callbacks, frees)
 *
 * Costs that matter for the pingpong benchmark: the clock is read once per iteration (after
 * epoll_wait), epoll_ctl runs only when an fd's interest really changes, the timerfd is
 * touched only when the earliest deadline moves earlier, and nothing is allocated per event.
 * Posting costs no allocation either once the two post arrays have grown to the burst size.
 */
#include "netlib/nl_loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netlib/nl_log.h"
#include "nl_loop_int.h"
#include "nl_poll.h"

#define LOOP_MAX_HOOKS 8
/* A post array that grew past this many entries during a burst is released after it drains,
 * so one burst does not pin megabytes for the loop's lifetime. */
#define LOOP_POST_KEEP_CAP 65536u
/* Nor does it pin less: past this many entries (16 KiB), an array is also released once a
 * batch fills less than a quarter of it, the burst that grew it being over. Under a steady
 * load the batches stay large and the arrays stay; after a burst of connection setups (a
 * worker's verdict and an engine answer posted per client) they would otherwise keep up to
 * 2 x 16 bytes per client of that burst for good: 13 bytes per idle connection in
 * bench_gw_idle at 10,000 connections. */
#define LOOP_POST_SMALL_CAP 1024u
/* last_lag_us is sampled every LOOP_LAG_SAMPLE iterations, so a busy loop reads the clock
 * about once per iteration rather than twice. */
#define LOOP_LAG_SAMPLE 16u
#define LOOP_STALL_WARN_US 500000u

typedef struct post_item_s {
    nl_loop_post_cb fn;
    void *arg;
} post_item_t;

typedef struct post_array_s {
    post_item_t *items;
    size_t count;
    size_t cap;
} post_array_t;

typedef struct hook_s {
    nl_loop_hook_cb fn;
    void *arg;
} hook_t;

struct nl_loop_s {
    int id;
    nl__poll_t *poll;
    int wake_fd;
    int timer_fd;
    nl_io_t wake_io;
    nl_io_t timer_io;

    /* Owner identity: the address of the owner's thread-local key (a unique per-thread
     * value) and its kernel tid for log lines. Atomic: nl_loop_is_owner reads it anywhere. */
    const void *owner_key;
    pid_t owner_tid;
    bool is_running;
    int stop_requested; /* atomic; set by nl_loop_stop from any thread */

    uint64_t now_ns;
    uint64_t now_ms;
    uint64_t timer_armed_ms; /* what the timerfd is armed for; UINT64_MAX: expired or never */
    nl__timer_heap_t timers;
    void *data;

    hook_t hooks[LOOP_MAX_HOOKS];
    int hook_count;
    nl__deferred_t *deferred_head;
    nl__deferred_t **deferred_tail;
    uint64_t handle_count;
    nl__loop_module_t modules[NL__MODULE_COUNT];

    /* post_lock guards posts (the array posters append to) and nothing else; no callback runs
     * while it is held. running is the owner's array being executed, swapped with posts. */
    pthread_mutex_t post_lock;
    post_array_t posts;
    post_array_t running;
    uint64_t queue_depth; /* atomic */

    uint64_t iterations;
    uint64_t posts_run;
    uint64_t wakeups; /* atomic: written by posting threads */
    uint64_t last_lag_us;
    uint64_t epoll_ctl_calls;
};

/* The address of tls_key identifies the thread; tls_loop is the loop it is running. */
static _Thread_local char tls_key;
static _Thread_local nl_loop_t *tls_loop;

static void loop_set_owner(nl_loop_t *loop)
{
    __atomic_store_n(&loop->owner_tid, gettid(), __ATOMIC_RELAXED);
    __atomic_store_n(&loop->owner_key, (const void *)&tls_key, __ATOMIC_RELEASE);
}

bool nl_loop_is_owner(const nl_loop_t *loop)
{
    return __atomic_load_n(&loop->owner_key, __ATOMIC_ACQUIRE) == (const void *)&tls_key;
}

nl_loop_t *nl_loop_current(void)
{
    return tls_loop;
}

void nl__loop_assert_owner(const nl_loop_t *loop, const char *func)
{
    if (__builtin_expect(nl_loop_is_owner(loop), 1))
        return;
    nl_log_write(NL_ERROR, "netlib", "wrong_thread",
                 "func=%s loop_id=%d owner_tid=%d caller_tid=%d", func, loop->id,
                 (int)__atomic_load_n(&loop->owner_tid, __ATOMIC_RELAXED), (int)gettid());
    abort();
}

void nl__poison(void *p, size_t size)
{
#ifndef NDEBUG
    memset(p, 0xdd, size);
#else
    NL_UNUSED(p);
    NL_UNUSED(size);
#endif
}

/* --- nl_io ------------------------------------------------------------------------------- */

void nl__io_init(nl_io_t *io, nl_loop_t *loop, int fd, nl_io_event_cb cb, void *arg)
{
    memset(io, 0, sizeof(*io));
    io->loop = loop;
    io->fd = fd;
    io->u.cb = cb;
    io->arg = arg;
    io->is_embedded = 1;
}

static int io_update(nl_io_t *io, unsigned interest)
{
    nl_loop_t *loop = io->loop;
    unsigned rw = NL_READ | NL_WRITE;
    if (!(interest & rw) && !(io->interest & rw)) {
        /* Neither old nor new watches anything: only the edge bit moved, the kernel needn't know.
         */
        io->interest = (uint8_t)interest;
        return 0;
    }
    loop->epoll_ctl_calls++;
    int err = nl__poll_update(loop->poll, io->fd, io->interest, interest, io);
    /* Removing an fd that was already closed (EBADF) or whose file is gone (ENOENT) leaves the
     * set as wanted; anything else is reported and the interest left as it was. */
    if (err < 0 && !(!(interest & rw) && (err == -EBADF || err == -ENOENT)))
        return err;
    io->interest = (uint8_t)interest;
    io->is_added = (interest & rw) != 0;
    return 0;
}

int nl_io_set(nl_io_t *io, unsigned interest)
{
    NL_ASSERT_OWNER(io->loop);
    interest &= NL_READ | NL_WRITE | NL_EDGE;
    if (interest == io->interest)
        return 0;
    if (io->is_closing)
        return interest ? -EINVAL : 0;
    return io_update(io, interest);
}

int nl_io_rearm(nl_io_t *io)
{
    NL_ASSERT_OWNER(io->loop);
    if (io->is_closing || !(io->interest & (NL_READ | NL_WRITE)))
        return 0;
    io->loop->epoll_ctl_calls++;
    return nl__poll_update(io->loop->poll, io->fd, io->interest, io->interest, io);
}

void nl__io_deinit(nl_io_t *io)
{
    if (io->is_closing)
        return;
    if (io->interest)
        (void)io_update(io, 0);
    io->is_closing = 1;
}

unsigned nl_io_interest(const nl_io_t *io)
{
    return io->interest;
}

int nl_io_fd(const nl_io_t *io)
{
    return io->fd;
}

/* A heap io: the watcher and the slot that defers its finish. Embedded ios (connections,
 * listeners) are finished by their containers and do without the slot. */
typedef struct io_heap_s {
    nl_io_t io;
    nl__deferred_t deferred;
} io_heap_t;

int nl_io_new(nl_io_t **out, nl_loop_t *loop, int fd, nl_io_event_cb cb, void *arg)
{
    NL_ASSERT_OWNER(loop);
    io_heap_t *h = malloc(sizeof(*h));
    if (!h)
        return -ENOMEM;
    nl__io_init(&h->io, loop, fd, cb, arg);
    h->io.is_embedded = 0;
    nl__loop_handle_opened(loop);
    *out = &h->io;
    return 0;
}

static void io_finish(nl__deferred_t *d)
{
    io_heap_t *h = (io_heap_t *)((char *)d - offsetof(io_heap_t, deferred));
    nl_io_t *io = &h->io;
    nl_loop_t *loop = io->loop;
    if (io->u.close_cb)
        io->u.close_cb(io, io->arg);
    nl__loop_handle_closed(loop);
    nl__poison(h, sizeof(*h));
    free(h);
}

void nl_io_close(nl_io_t *io, nl_io_close_cb close_cb)
{
    NL_ASSERT_OWNER(io->loop);
    NL_ASSERT(!io->is_embedded);
    if (io->is_closing)
        return;
    nl__io_deinit(io);
    io->u.close_cb = close_cb;
    io_heap_t *h = (io_heap_t *)io; /* io is h's first member */
    h->deferred.finish = io_finish;
    nl__loop_defer(io->loop, &h->deferred);
}

/* --- handles, modules, deferred finishes -------------------------------------------------- */

void nl__loop_handle_opened(nl_loop_t *loop)
{
    loop->handle_count++;
}

void nl__loop_handle_closed(nl_loop_t *loop)
{
    NL_ASSERT(loop->handle_count > 0);
    loop->handle_count--;
}

void nl__loop_defer(nl_loop_t *loop, nl__deferred_t *d)
{
    d->next = NULL;
    *loop->deferred_tail = d;
    loop->deferred_tail = &d->next;
}

nl__loop_module_t *nl__loop_module(nl_loop_t *loop, int m)
{
    NL_ASSERT(m >= 0 && m < NL__MODULE_COUNT);
    return &loop->modules[m];
}

nl__timer_heap_t *nl__loop_timers(nl_loop_t *loop)
{
    return &loop->timers;
}

uint64_t nl__loop_epoll_ctl_calls(const nl_loop_t *loop)
{
    return loop->epoll_ctl_calls;
}

uint64_t nl__loop_now_ns(const nl_loop_t *loop)
{
    return loop->now_ns;
}

void nl__loop_update_time(nl_loop_t *loop)
{
    loop->now_ns = nl_now_ns();
    loop->now_ms = loop->now_ns / 1000000u;
}

/* Finish functions may close more handles (a connection closing its timer): drain until the
 * list stays empty. Handles closed by a finish are finished in the same pass, in order. */
static void loop_run_deferred(nl_loop_t *loop)
{
    while (loop->deferred_head) {
        nl__deferred_t *d = loop->deferred_head;
        loop->deferred_head = NULL;
        loop->deferred_tail = &loop->deferred_head;
        while (d) {
            nl__deferred_t *next = d->next;
            d->finish(d);
            d = next;
        }
    }
}

/* --- construction ------------------------------------------------------------------------- */

/* The eventfd is only a doorbell: posted closures run every iteration whatever woke it. */
static void loop_on_wake(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(events);
    NL_UNUSED(arg);
    nl__poll_wakefd_drain(io->fd);
}

/* The timerfd is registered edge-triggered and never read: re-arming resets its expiry count,
 * and due timers run every iteration whatever woke the loop. This saves a read per expiry. */
static void loop_on_timer(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    NL_UNUSED(events);
    NL_UNUSED(arg);
}

static int loop_open_fds(nl_loop_t *loop, int max_events)
{
    int err = nl__poll_new(&loop->poll, max_events);
    if (err < 0)
        return err;
    loop->wake_fd = nl__poll_wakefd_open();
    if (loop->wake_fd < 0)
        return loop->wake_fd;
    loop->timer_fd = nl__poll_timerfd_open();
    if (loop->timer_fd < 0)
        return loop->timer_fd;
    nl__io_init(&loop->wake_io, loop, loop->wake_fd, loop_on_wake, NULL);
    nl__io_init(&loop->timer_io, loop, loop->timer_fd, loop_on_timer, NULL);
    err = nl_io_set(&loop->wake_io, NL_READ);
    if (err < 0)
        return err;
    return nl_io_set(&loop->timer_io, NL_READ | NL_EDGE);
}

static void loop_close_fds(nl_loop_t *loop)
{
    if (loop->timer_fd >= 0)
        close(loop->timer_fd);
    if (loop->wake_fd >= 0)
        close(loop->wake_fd);
    nl__poll_free(loop->poll);
}

int nl_loop_new(nl_loop_t **out, const nl_loop_opts_t *opts)
{
    nl_loop_t *loop = calloc(1, sizeof(*loop));
    if (!loop)
        return -ENOMEM;
    loop->id = opts ? opts->id : 0;
    loop->wake_fd = -1;
    loop->timer_fd = -1;
    loop->timer_armed_ms = UINT64_MAX;
    loop->deferred_tail = &loop->deferred_head;
    nl__loop_update_time(loop);
    loop_set_owner(loop);
    int err = pthread_mutex_init(&loop->post_lock, NULL);
    if (err != 0) {
        free(loop);
        return -err;
    }
    err = loop_open_fds(loop, opts ? opts->max_events : 0);
    if (err < 0)
        goto fail;
    *out = loop;
    return 0;
fail:
    loop_close_fds(loop);
    pthread_mutex_destroy(&loop->post_lock);
    free(loop);
    return err;
}

/* --- posting ------------------------------------------------------------------------------ */

static int post_array_grow(post_array_t *a)
{
    size_t cap = a->cap ? a->cap * 2 : 64;
    post_item_t *items = realloc(a->items, cap * sizeof(*items));
    if (!items)
        return -ENOMEM;
    a->items = items;
    a->cap = cap;
    return 0;
}

int nl_loop_post(nl_loop_t *loop, nl_loop_post_cb fn, void *arg)
{
    pthread_mutex_lock(&loop->post_lock);
    if (loop->posts.count == loop->posts.cap && post_array_grow(&loop->posts) < 0) {
        pthread_mutex_unlock(&loop->post_lock);
        return -ENOMEM;
    }
    bool was_empty = loop->posts.count == 0;
    loop->posts.items[loop->posts.count++] = (post_item_t){fn, arg};
    __atomic_add_fetch(&loop->queue_depth, 1, __ATOMIC_RELAXED);
    /* Only the post that makes the queue non-empty rings: later ones find it non-empty and know
     * a wake-up is on its way. The loop's own thread never rings, because the loop checks the
     * queue before it blocks. The ring happens under the lock: once a poster unlocks it never
     * touches the loop again, so a loop stopped by this very post (nl_loop_thread_stop) may be
     * freed the moment the lock drops. Ringing after unlocking raced with that free. */
    if (was_empty && tls_loop != loop) {
        __atomic_add_fetch(&loop->wakeups, 1, __ATOMIC_RELAXED);
        int err = nl__poll_wake(loop->wake_fd);
        NL_ASSERT(err == 0);
    }
    pthread_mutex_unlock(&loop->post_lock);
    return 0;
}

uint64_t nl_loop_queue_depth(const nl_loop_t *loop)
{
    return __atomic_load_n(&loop->queue_depth, __ATOMIC_RELAXED);
}

/* Whether closures wait to run. queue_depth is incremented under post_lock together with the
 * append, so a zero read here can only miss a post whose poster is about to ring the eventfd
 * (the post that made the queue non-empty rings; the loop's own posts are sequenced before
 * this read). That makes the lock unnecessary on this per-iteration path. */
static bool loop_has_posts(const nl_loop_t *loop)
{
    return __atomic_load_n(&loop->queue_depth, __ATOMIC_RELAXED) > 0;
}

/* Runs the closures queued so far, as one batch; closures they post wait for the next
 * iteration (which then does not block). Returns how many ran. */
static size_t loop_run_posts(nl_loop_t *loop)
{
    pthread_mutex_lock(&loop->post_lock);
    post_array_t batch = loop->posts;
    loop->posts = loop->running;
    pthread_mutex_unlock(&loop->post_lock);
    loop->running = batch;
    for (size_t i = 0; i < batch.count; i++)
        batch.items[i].fn(batch.items[i].arg);
    loop->running.count = 0;
    if (loop->running.cap > LOOP_POST_KEEP_CAP ||
        (loop->running.cap > LOOP_POST_SMALL_CAP && batch.count * 4 < loop->running.cap)) {
        free(loop->running.items);
        loop->running = (post_array_t){0};
    }
    loop->posts_run += batch.count;
    __atomic_sub_fetch(&loop->queue_depth, batch.count, __ATOMIC_RELAXED);
    return batch.count;
}

/* --- running ------------------------------------------------------------------------------ */

int nl_loop_add_before_sleep(nl_loop_t *loop, nl_loop_hook_cb fn, void *arg)
{
    NL_ASSERT_OWNER(loop);
    if (loop->hook_count == LOOP_MAX_HOOKS)
        return -ENOSPC;
    loop->hooks[loop->hook_count++] = (hook_t){fn, arg};
    return 0;
}

/* Decides how long epoll_wait may block, and arms the timerfd if the earliest deadline moved
 * earlier than what it is armed for. A later deadline leaves the timerfd alone: it fires early
 * once, for nothing, instead of costing a syscall on every stop or restart. */
static int loop_prepare_wait(nl_loop_t *loop, int timeout_ms)
{
    /* Handles closed between two nl_loop_run_once calls wait in the deferred list: finish
     * them now rather than after the next event. */
    if (__atomic_load_n(&loop->stop_requested, __ATOMIC_ACQUIRE) || loop_has_posts(loop) ||
        loop->deferred_head != NULL)
        return 0;
    uint64_t next_ms = nl__timer_next_deadline(loop);
    if (next_ms == UINT64_MAX)
        return timeout_ms;
    if (next_ms <= loop->now_ms)
        return 0;
    if (next_ms < loop->timer_armed_ms) {
        int err = nl__poll_timerfd_arm(loop->timer_fd, next_ms);
        NL_ASSERT(err == 0);
        loop->timer_armed_ms = next_ms;
    }
    return timeout_ms;
}

static void loop_dispatch(nl_loop_t *loop, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned events;
        nl_io_t *io = nl__poll_event(loop->poll, i, &events);
        /* An io closed earlier in this iteration is still allocated (freed in the deferred
         * phase), so reading its flag is safe; its event is dropped. */
        if (io->is_closing)
            continue;
        unsigned want = io->interest & (NL_READ | NL_WRITE);
        /* Hang-up and error come with what the io waits for, so its read or write sees them. */
        if (events & (NL_HUP | NL_ERR))
            events |= want;
        events &= want | NL_HUP | NL_ERR | ((want & NL_READ) ? NL_RDHUP | NL_PRI : 0u);
        /* An earlier callback may have dropped the interest this event was for. */
        if (!want || !events)
            continue;
        io->u.cb(io, events, io->arg);
    }
}

static void loop_sample_lag(nl_loop_t *loop)
{
    if (loop->iterations % LOOP_LAG_SAMPLE != 0)
        return;
    uint64_t lag_us = (nl_now_ns() - loop->now_ns) / 1000u;
    loop->last_lag_us = lag_us;
    if (lag_us >= LOOP_STALL_WARN_US)
        NL_LOG(NL_WARN, "loop_stall", "lag_ms=%llu", (unsigned long long)(lag_us / 1000u));
}

static int loop_iterate(nl_loop_t *loop, int timeout_ms)
{
    timeout_ms = loop_prepare_wait(loop, timeout_ms);
    int n = nl__poll_wait(loop->poll, timeout_ms);
    nl__loop_update_time(loop);
    if (loop->now_ms >= loop->timer_armed_ms)
        loop->timer_armed_ms = UINT64_MAX;
    if (n > 0)
        loop_dispatch(loop, n);
    nl__timer_run_due(loop);
    loop_run_posts(loop);
    for (int i = 0; i < loop->hook_count; i++)
        loop->hooks[i].fn(loop, loop->hooks[i].arg);
    for (int m = 0; m < NL__MODULE_COUNT; m++) {
        nl__loop_module_t *mod = nl__loop_module(loop, m);
        if (mod->state && mod->before_sleep)
            mod->before_sleep(loop, mod->state);
    }
    loop_run_deferred(loop);
    loop->iterations++;
    loop_sample_lag(loop);
    return n < 0 ? n : 0;
}

int nl_loop_run(nl_loop_t *loop)
{
    if (tls_loop)
        return -EBUSY;
    if (__atomic_load_n(&loop->is_running, __ATOMIC_ACQUIRE))
        NL_ASSERT_OWNER(loop); /* run on two threads at once: aborts naming both */
    loop_set_owner(loop);
    __atomic_store_n(&loop->is_running, true, __ATOMIC_RELEASE);
    tls_loop = loop;
    nl_log_set_thread_loop(loop->id);
    int err = 0;
    while (!__atomic_load_n(&loop->stop_requested, __ATOMIC_ACQUIRE)) {
        err = loop_iterate(loop, -1);
        if (err < 0) {
            NL_LOG(NL_ERROR, "loop_wait_failed", "err=%s", nl_strerror(err));
            break;
        }
    }
    __atomic_store_n(&loop->stop_requested, 0, __ATOMIC_RELEASE);
    tls_loop = NULL;
    nl_log_set_thread_loop(-1);
    __atomic_store_n(&loop->is_running, false, __ATOMIC_RELEASE);
    return err;
}

int nl_loop_run_once(nl_loop_t *loop, int timeout_ms)
{
    NL_ASSERT_OWNER(loop);
    if (tls_loop)
        return -EBUSY;
    tls_loop = loop;
    nl_log_set_thread_loop(loop->id);
    int err = loop_iterate(loop, timeout_ms);
    tls_loop = NULL;
    nl_log_set_thread_loop(-1);
    return err;
}

void nl_loop_stop(nl_loop_t *loop)
{
    /* From inside the loop the flag is seen at the end of this iteration. */
    if (tls_loop == loop) {
        __atomic_store_n(&loop->stop_requested, 1, __ATOMIC_RELEASE);
        return;
    }
    /* Otherwise set it and ring under post_lock, as nl_loop_post rings: a loop that sees the
     * flag may return from its run and be freed at once, and nl_loop_free takes this lock
     * before it closes the wake descriptor, so it waits until this stopper is done with it.
     * Setting the flag first and reading wake_fd outside the lock raced with that free
     * (nl_loop_thread_stop's fallback when its post fails). */
    pthread_mutex_lock(&loop->post_lock);
    __atomic_store_n(&loop->stop_requested, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&loop->wakeups, 1, __ATOMIC_RELAXED);
    int err = nl__poll_wake(loop->wake_fd);
    NL_ASSERT(err == 0);
    pthread_mutex_unlock(&loop->post_lock);
}

int nl_loop_id(const nl_loop_t *loop)
{
    return loop->id;
}

void nl_loop_set_data(nl_loop_t *loop, void *data)
{
    NL_ASSERT_OWNER(loop);
    loop->data = data;
}

void *nl_loop_data(const nl_loop_t *loop)
{
    return loop->data;
}

uint64_t nl_loop_now_ms(const nl_loop_t *loop)
{
    return loop->now_ms;
}

void nl_loop_get_stats(const nl_loop_t *loop, nl_loop_stats_t *out)
{
    out->iterations = loop->iterations;
    out->posts_run = loop->posts_run;
    out->wakeups = __atomic_load_n(&loop->wakeups, __ATOMIC_RELAXED);
    out->last_lag_us = loop->last_lag_us;
}

int nl_loop_free(nl_loop_t *loop)
{
    if (!loop)
        return 0;
    NL_ASSERT_OWNER(loop);
    NL_ASSERT(!__atomic_load_n(&loop->is_running, __ATOMIC_ACQUIRE));
    /* Queued closures run, then handles closed so far finish; either may produce more of the
     * other, so repeat until both are quiet (bounded, in case a closure re-posts itself). */
    for (int round = 0; round < 1000; round++) {
        size_t ran = loop_run_posts(loop);
        bool had_deferred = loop->deferred_head != NULL;
        loop_run_deferred(loop);
        if (ran == 0 && !had_deferred)
            break;
    }
    if (loop->handle_count > 0)
        return -EBUSY;
    for (int m = 0; m < NL__MODULE_COUNT; m++) {
        if (loop->modules[m].free_state)
            loop->modules[m].free_state(loop->modules[m].state);
    }
    nl__io_deinit(&loop->wake_io);
    nl__io_deinit(&loop->timer_io);
    loop_close_fds(loop);
    pthread_mutex_destroy(&loop->post_lock);
    free(loop->posts.items);
    free(loop->running.items);
    free(loop->timers.items);
    nl__poison(loop, sizeof(*loop));
    free(loop);
    return 0;
}
