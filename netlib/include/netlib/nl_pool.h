/*
 * nl_pool: a bounded worker pool for slow or blocking work (token verification, anything an IO
 * loop must not wait for), with write-back: the task's completion runs on the loop that asked,
 * through that loop's post queue and eventfd (DESIGN.md, "Threads and ownership").
 *
 * The queue is a fixed ring of queue_capacity tasks. Submitting never blocks an IO loop: when
 * the ring is full the task's policy applies: NL_POOL_REJECT returns -EAGAIN (answer "busy"),
 * NL_POOL_CALLER_RUNS runs the work on the calling thread, NL_POOL_WAIT waits up to
 * wait_timeout_ms for a free slot (only off loop threads: a loop thread asking to wait aborts).
 * core_threads workers start with the pool and stay; when the queue backs up and no worker is
 * idle, up to max_threads - core_threads burst workers start, and each retires after
 * keepalive_ms without work.
 *
 * Completion: work(arg) runs on a worker and returns a status (0 or a negative errno of the
 * caller's choosing, but never -ECANCELED). Then done(arg, status), if not NULL, runs exactly
 * once: on `loop`'s thread, via nl_loop_post, when loop is not NULL (the only way a result
 * reaches state that loop owns); otherwise on the worker, right after work. A task discarded by
 * nl_pool_shutdown(NL_POOL_DISCARD) never runs its work, and its done gets -ECANCELED.
 *
 * Thread: nl_pool_submit, nl_pool_submit_ex and nl_pool_get_stats are safe from any thread,
 * workers included; none of them takes a lock unless it has to start a thread. Shutdown and
 * free may be called from any thread except the pool's own workers; they block until every
 * worker has exited.
 * Ownership: the caller owns the pool (nl_pool_new/nl_pool_free) and the task's arg; the pool
 * copies the task descriptor. arg must stay valid until done has run (or until work has
 * returned, when there is no done). A loop named in a task must outlive the task's completion:
 * keep loops running until the pool is shut down, or at least until their completions arrived
 * (nl_loop_free runs posted completions before it frees the loop).
 * Usage: nl_pool_new(&pool, &(nl_pool_opts_t){.core_threads = 2, .queue_capacity = 1024});
 *        on a loop: rc = nl_pool_submit(pool, loop, verify_work, verify_done, req);
 *                   if (rc == -EAGAIN) answer busy;
 *        at exit:   nl_pool_shutdown(pool, NL_POOL_DRAIN); nl_pool_free(pool);
 */
#ifndef HERALD_NETLIB_NL_POOL_H
#define HERALD_NETLIB_NL_POOL_H

#include <stdint.h>

#include "netlib/nl_hist.h"
#include "netlib/nl_loop.h"

typedef struct nl_pool_s nl_pool_t;

/* Runs on a worker (or on the caller, for NL_POOL_CALLER_RUNS). Returns the status handed to
 * done: 0 or a negative errno, never -ECANCELED. */
typedef int (*nl_pool_work_cb)(void *arg);
/* status: what work returned, or -ECANCELED when the task was discarded without running. */
typedef void (*nl_pool_done_cb)(void *arg, int status);

typedef struct nl_pool_opts_s {
    const char *name;        /* thread name prefix, e.g. "herald-auth" (NULL: "nl-pool") */
    uint32_t core_threads;   /* started by nl_pool_new, never retired; 0 means 1 */
    uint32_t max_threads;    /* burst ceiling, >= core_threads; 0 means core_threads */
    uint32_t keepalive_ms;   /* idle time before a burst worker retires; 0 means 10,000 */
    uint32_t queue_capacity; /* tasks queued at most (running ones excluded); 0 means 1024 */
} nl_pool_opts_t;

/* What nl_pool_submit_ex does when the queue is full. */
typedef enum nl_pool_policy_e {
    NL_POOL_REJECT = 0,      /* return -EAGAIN */
    NL_POOL_CALLER_RUNS = 1, /* run work now on the calling thread; done still as usual */
    NL_POOL_WAIT = 2,        /* wait for a slot up to wait_timeout_ms; never on a loop thread */
} nl_pool_policy_t;

typedef struct nl_pool_task_s {
    nl_pool_work_cb work; /* required */
    nl_pool_done_cb done; /* may be NULL */
    void *arg;
    nl_loop_t *loop;          /* where done runs; NULL: on the worker */
    nl_pool_policy_t policy;  /* when the queue is full */
    uint32_t wait_timeout_ms; /* NL_POOL_WAIT only; 0 fails at once with -ETIMEDOUT */
} nl_pool_task_t;

typedef enum nl_pool_shutdown_mode_e {
    NL_POOL_DRAIN = 0,   /* run every queued task (and its completion) before returning */
    NL_POOL_DISCARD = 1, /* run none: each queued task's done gets -ECANCELED, exactly once */
} nl_pool_shutdown_mode_t;

/* Creates the pool and starts its core threads. Returns: 0; -EINVAL (max_threads <
 * core_threads, more than 1024 threads, capacity above 2^30); -ENOMEM; -errno from
 * pthread_create. Thread: any. Ownership: free with nl_pool_free. */
int nl_pool_new(nl_pool_t **out, const nl_pool_opts_t *opts);

/* Queues work(arg) with policy NL_POOL_REJECT; done(arg, status) then runs on loop (or on the
 * worker when loop is NULL). Never blocks.
 * Returns: 0; -EAGAIN when the queue is full (nothing will run); -ESHUTDOWN after
 * nl_pool_shutdown began; -ENOMEM (only when loop and done are set: the completion takes a
 * 32-byte record, freed on the loop after done). Thread: any. Ownership: arg stays the
 * caller's and must stay valid until done has run (until work returned, without done).
 * Callbacks: work may start on a worker before this returns; done never runs before it
 * returns when loop is set (nl_loop_post defers it to the loop's next post phase). */
int nl_pool_submit(nl_pool_t *pool, nl_loop_t *loop, nl_pool_work_cb work, nl_pool_done_cb done,
                   void *arg);

/* Queues a task with its own policy for a full queue. The descriptor is copied.
 * Returns: as nl_pool_submit; with NL_POOL_CALLER_RUNS a full queue makes the work run on the
 * calling thread before this returns 0 (its done is still posted to task->loop, or runs inline
 * when loop is NULL); with NL_POOL_WAIT, -ETIMEDOUT when no slot freed in time and
 * -ESHUTDOWN when shutdown began meanwhile. Thread: any; NL_POOL_WAIT aborts on a loop thread
 * (nl_loop_current() != NULL). */
int nl_pool_submit_ex(nl_pool_t *pool, const nl_pool_task_t *task);

/* Stops accepting tasks (-ESHUTDOWN from then on), runs or discards the queued ones per mode,
 * and joins every worker. Tasks a worker already took still run to their end. Once this
 * returns no work runs any more; completions bound for loops may still be queued on those
 * loops. A second call waits for the first to finish and returns 0.
 * Returns: 0. Thread: any but the pool's workers (aborts there: it would join itself).
 * Callbacks: in DISCARD mode, done callbacks without a loop run on the calling thread. */
int nl_pool_shutdown(nl_pool_t *pool, nl_pool_shutdown_mode_t mode);

/* Shuts the pool down (NL_POOL_DRAIN) unless that was done, and frees it. NULL is a no-op.
 * Completions still queued on loops do not refer to the pool and run normally.
 * Thread: any but the pool's workers. */
void nl_pool_free(nl_pool_t *pool);

/* Figures read with relaxed atomic loads, without a lock; each is exact for the moment it was
 * read, but they are not one consistent snapshot. */
typedef struct nl_pool_stats_s {
    uint64_t queue_depth;      /* tasks queued now (not yet taken by a worker) */
    uint64_t queue_hwm;        /* highest queue_depth seen at a submit */
    uint64_t submitted;        /* tasks accepted into the queue */
    uint64_t rejected;         /* submits refused: -EAGAIN or -ETIMEDOUT */
    uint64_t ran_in_caller;    /* NL_POOL_CALLER_RUNS tasks run on the submitting thread */
    uint64_t completed;        /* tasks whose work ran on a worker and whose done was handed on */
    uint64_t cancelled;        /* tasks discarded by shutdown */
    uint32_t threads;          /* workers alive now */
    uint32_t threads_busy;     /* workers inside a task now */
    uint64_t threads_started;  /* including the core threads */
    uint64_t threads_retired;  /* burst workers that retired after keepalive_ms */
    nl_hist_summary_t wait_ns; /* enqueue to start of work */
    nl_hist_summary_t run_ns;  /* start of work until the worker is free (inline done too) */
} nl_pool_stats_t;

/* Fills out, merging the per-worker histograms on the stack (about 24 KiB). Thread: any. */
void nl_pool_get_stats(const nl_pool_t *pool, nl_pool_stats_t *out);

/* Adds the pool's wait-time and run-time histograms (ns) into wait_ns and run_ns (either may be
 * NULL), e.g. to export Prometheus buckets. Thread: any. */
void nl_pool_merge_hists(const nl_pool_t *pool, nl_hist_t *wait_ns, nl_hist_t *run_ns);

#endif
