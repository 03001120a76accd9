/*
 * nl_loop: the event loop: one per thread, epoll underneath (muduo EventLoop, Redis ae).
 *
 * A loop watches fds (nl_io), runs timers (nl_timer.h), and runs closures that other threads
 * post to it. An iteration is: epoll_wait; dispatch ready fds; run expired timers; run posted
 * closures; run the before-sleep hooks (where connections flush their output, once per
 * iteration); free the handles closed during the iteration (their close callbacks run then).
 *
 * Thread: a loop belongs to the thread that first runs it (or that created it, until then).
 * Every function that takes an nl_loop_t or a handle of one is owner-thread only and checks it
 * with NL_ASSERT_OWNER, except nl_loop_post, nl_loop_stop and nl_loop_id, which any thread may
 * call. A second loop running on one thread is refused the same way.
 * Ownership: nl_loop_new/nl_loop_free; handles belong to the loop and are freed by it after
 * their close callback.
 * Usage: nl_loop_new(&loop, &opts); nl_io_new(&io, loop, fd, cb, arg); nl_io_set(io, NL_READ);
 *        nl_loop_run(loop) (returns after nl_loop_stop); nl_io_close(io); nl_loop_free(loop).
 */
#ifndef HERALD_NETLIB_NL_LOOP_H
#define HERALD_NETLIB_NL_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "netlib/nl_common.h"

typedef struct nl_loop_s nl_loop_t;
typedef struct nl_io_s nl_io_t;

typedef struct nl_loop_opts_s {
    int id;           /* shown as loop= in log lines and metrics; default 0 */
    int max_events;   /* epoll_wait batch; 0 means 1024 */
} nl_loop_opts_t;

/* Creates a loop owned by the calling thread until nl_loop_run moves it to the running thread.
 * opts may be NULL. Returns: 0; -ENOMEM; -EMFILE and other errno from epoll/eventfd/timerfd. */
int nl_loop_new(nl_loop_t **out, const nl_loop_opts_t *opts);

/* Frees a stopped loop. Runs posted closures still queued first. Returns: 0; -EBUSY while any
 * handle (io, timer, connection, server, client, signal) is open, and then frees nothing.
 * Thread: owner. */
int nl_loop_free(nl_loop_t *loop);

/* Runs until nl_loop_stop. The calling thread becomes the owner. Returns 0, or -EBUSY if this
 * thread already runs a loop. Callbacks: every handle callback runs inside it. */
int nl_loop_run(nl_loop_t *loop);

/* Runs a single iteration, waiting at most timeout_ms (-1: until an event). Used by tests and
 * by programs that drive several loops themselves. Thread: owner. */
int nl_loop_run_once(nl_loop_t *loop, int timeout_ms);

/* Asks the loop to return from nl_loop_run after the current iteration. Thread: any. */
void nl_loop_stop(nl_loop_t *loop);

/* The loop's id from its options. Thread: any. */
int nl_loop_id(const nl_loop_t *loop);

/* One user pointer per loop (e.g. the gateway's per-loop state). Thread: owner, or before the
 * loop runs. */
void nl_loop_set_data(nl_loop_t *loop, void *data);
void *nl_loop_data(const nl_loop_t *loop);

/* True when the calling thread owns the loop. Thread: any. */
bool nl_loop_is_owner(const nl_loop_t *loop);

/* The loop the calling thread is running, or NULL. Thread: any. */
nl_loop_t *nl_loop_current(void);

/* Aborts with a log line naming both threads unless the calling thread owns loop. */
void nl__loop_assert_owner(const nl_loop_t *loop, const char *func);
#define NL_ASSERT_OWNER(loop) nl__loop_assert_owner((loop), __func__)

/* Cached monotonic time in ms, refreshed once per iteration (after epoll_wait). Thread: owner. */
uint64_t nl_loop_now_ms(const nl_loop_t *loop);

typedef void (*nl_loop_post_cb)(void *arg);

/* Queues fn(arg) to run on the loop's thread, in posting order per posting thread. The eventfd
 * is written only when the queue goes from empty to non-empty, so a burst costs one wake-up.
 * Returns: 0; -ENOMEM (fn will not run). Thread: any. Callbacks: fn never runs before this
 * returns, even on the owner thread (it runs in the loop's next post phase). */
int nl_loop_post(nl_loop_t *loop, nl_loop_post_cb fn, void *arg);

/* Closures posted and not yet run (approximate when read off the owner). Thread: any. */
uint64_t nl_loop_queue_depth(const nl_loop_t *loop);

typedef void (*nl_loop_hook_cb)(nl_loop_t *loop, void *arg);

/* Adds a hook run once per iteration, after timers and posts and before the loop sleeps
 * (Redis beforeSleep). The connections' output flush runs after every hook, so output a hook
 * queues leaves in the same iteration. At most 8 per loop. Returns: 0; -ENOSPC.
 * Thread: owner. */
int nl_loop_add_before_sleep(nl_loop_t *loop, nl_loop_hook_cb fn, void *arg);

/* Per-loop figures, plain counters read by the owner or summed by a posted closure. */
typedef struct nl_loop_stats_s {
    uint64_t iterations;
    uint64_t posts_run;
    uint64_t wakeups;          /* eventfd writes by posters */
    uint64_t last_lag_us;      /* time the last iteration spent outside epoll_wait */
} nl_loop_stats_t;
void nl_loop_get_stats(const nl_loop_t *loop, nl_loop_stats_t *out);

/* --- nl_io: watch one fd (the loop's "channel"). ------------------------------------------ */

#define NL_READ 0x1u
#define NL_WRITE 0x2u
#define NL_EDGE 0x4u /* edge-triggered for this fd; level-triggered otherwise */
/* Extra bits passed to callbacks only. */
#define NL_HUP 0x10u
#define NL_ERR 0x20u
/* With NL_READ | NL_EDGE: the peer shut down its side (EPOLLRDHUP). A read shorter than asked
 * for drained the data, but the end of stream that came with it reports no new edge: read on
 * until 0. */
#define NL_RDHUP 0x40u
/* With NL_READ | NL_EDGE: TCP urgent data is pending (EPOLLPRI). A read stops at the urgent
 * mark, so here too a short read is not the last. */
#define NL_PRI 0x80u

/* Called with the ready bits (NL_READ, NL_WRITE, NL_HUP, NL_ERR, NL_RDHUP, NL_PRI). The io may be
 * closed inside. */
typedef void (*nl_io_event_cb)(nl_io_t *io, unsigned events, void *arg);
typedef void (*nl_io_close_cb)(nl_io_t *io, void *arg);

/* Registers fd with no interest yet. netlib does not own fd: nl_io_close does not close it.
 * Returns: 0; -ENOMEM. Thread: owner. */
int nl_io_new(nl_io_t **out, nl_loop_t *loop, int fd, nl_io_event_cb cb, void *arg);

/* Sets the interest (NL_READ | NL_WRITE | NL_EDGE); 0 stops watching. No epoll_ctl call when
 * the interest is unchanged. Returns: 0; -errno from epoll_ctl for an fd the kernel refuses.
 * Thread: owner. */
int nl_io_set(nl_io_t *io, unsigned interest);
/* For an edge-triggered io whose owner stopped short of EAGAIN (a read budget ran out with
 * bytes left in the socket): one epoll_ctl that makes the kernel check the fd again, so what
 * is ready now is reported by the next wait instead of waiting for a new edge. No-op (0) when
 * the io watches nothing. Returns: 0; -errno from epoll_ctl. Thread: owner. */
int nl_io_rearm(nl_io_t *io);
unsigned nl_io_interest(const nl_io_t *io);
int nl_io_fd(const nl_io_t *io);

/* Stops watching and frees the io at the end of this iteration, after close_cb (may be NULL).
 * Events already returned by this epoll_wait are not delivered. Idempotent. Thread: owner. */
void nl_io_close(nl_io_t *io, nl_io_close_cb close_cb);

#endif
