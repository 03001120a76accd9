/*
 * nl_pool_life.c: creating a pool, shutting it down (drain or discard), and reading its figures.
 * The queue, the workers and submit are in nl_pool.c, whose head comment explains the design.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"
#include "netlib/nl_pool.h"
#include "nl_pool_int.h"

/* --- lifecycle -------------------------------------------------------------------------- */

static int pool_check_opts(const nl_pool_opts_t *o, nl_pool_opts_t *out)
{
    *out = o ? *o : (nl_pool_opts_t){0};
    out->core_threads = out->core_threads ? out->core_threads : 1;
    out->max_threads = out->max_threads ? out->max_threads : out->core_threads;
    out->keepalive_ms = out->keepalive_ms ? out->keepalive_ms : POOL_DEFAULT_KEEPALIVE_MS;
    out->queue_capacity = out->queue_capacity ? out->queue_capacity : POOL_DEFAULT_CAPACITY;
    out->name = out->name ? out->name : "nl-pool";
    if (out->max_threads < out->core_threads || out->max_threads > POOL_MAX_THREADS ||
        out->queue_capacity > POOL_MAX_CAPACITY)
        return -EINVAL;
    return 0;
}

/* Zero-filled memory on cache-line boundaries; bytes is a multiple of CACHE_LINE. */
static void *alloc_lines(size_t bytes)
{
    void *p = aligned_alloc(CACHE_LINE, bytes);
    return p ? memset(p, 0, bytes) : NULL;
}

/* Allocates and sets up the pool from checked options; starts no thread. */
static nl_pool_t *pool_alloc(const nl_pool_opts_t *o)
{
    nl_pool_t *pool = alloc_lines(sizeof(nl_pool_t));
    if (!pool)
        return NULL;
    pool->slots = alloc_lines((size_t)o->queue_capacity * sizeof(pool_slot_t));
    pool->workers = alloc_lines((size_t)o->max_threads * sizeof(pool_worker_t));
    if (!pool->slots || !pool->workers) {
        free(pool->slots);
        free(pool->workers);
        free(pool);
        return NULL;
    }
    for (uint32_t i = 0; i < o->queue_capacity; i++)
        atomic_init(&pool->slots[i].seq, 2 * (uint64_t)i);
    for (uint32_t i = 0; i < o->max_threads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i;
    }
    pool->capacity = o->queue_capacity;
    pool->mask = (o->queue_capacity & (o->queue_capacity - 1)) == 0 ? o->queue_capacity - 1 : 0;
    pool->core_threads = o->core_threads;
    pool->max_threads = o->max_threads;
    pool->keepalive_ns = (uint64_t)o->keepalive_ms * 1000000u;
    snprintf(pool->name, sizeof(pool->name), "%s", o->name);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->shut_cond, NULL);
    return pool;
}

int nl_pool_new(nl_pool_t **out, const nl_pool_opts_t *opts)
{
    nl_pool_opts_t o;
    int err = pool_check_opts(opts, &o);
    if (err < 0)
        return err;
    nl_pool_t *pool = pool_alloc(&o);
    if (!pool)
        return -ENOMEM;
    pthread_mutex_lock(&pool->lock);
    for (uint32_t i = 0; i < o.core_threads && err == 0; i++)
        err = nl__pool_spawn_locked(pool);
    pthread_mutex_unlock(&pool->lock);
    if (err < 0)
        goto fail;
    *out = pool;
    return 0;
fail:
    nl_pool_free(pool); /* nothing was submitted: draining joins the threads started */
    return err;
}

/* DISCARD: takes every accepted task off the ring and cancels it. A position may be claimed
 * but not yet published (its producer is between CAS and publish), so wait for it. */
static void pool_cancel_queued(nl_pool_t *pool, uint64_t final_pos)
{
    pool_job_t job;
    while (atomic_load_explicit(&pool->deq_pos, memory_order_acquire) < final_pos) {
        if (nl__pool_ring_pop(pool, &job)) {
            nl__pool_job_finish(&job, -ECANCELED);
            atomic_fetch_add_explicit(&pool->cancelled, 1, memory_order_relaxed);
        } else {
            sched_yield();
        }
    }
}

/* Joins every thread, running or retired. JOINING keeps a slot from being joined twice; no
 * thread is started once is_shutting is set, and a worker no longer retires then. */
static void pool_join_all(nl_pool_t *pool)
{
    for (uint32_t i = 0; i < pool->max_threads; i++) {
        pool_worker_t *w = &pool->workers[i];
        pthread_mutex_lock(&pool->lock);
        bool was_running = w->state == WORKER_RUNNING;
        bool has_thread = was_running || w->state == WORKER_EXITED;
        if (has_thread)
            w->state = WORKER_JOINING;
        pthread_mutex_unlock(&pool->lock);
        if (!has_thread)
            continue;
        pthread_join(w->thread, NULL);
        pthread_mutex_lock(&pool->lock);
        w->state = WORKER_EMPTY;
        if (was_running) /* a retired thread was uncounted when it retired */
            atomic_fetch_sub_explicit(&pool->nthreads, 1, memory_order_relaxed);
        pthread_mutex_unlock(&pool->lock);
    }
}

int nl_pool_shutdown(nl_pool_t *pool, nl_pool_shutdown_mode_t mode)
{
    NL_ASSERT(!nl__pool_is_own_worker(pool));
    pthread_mutex_lock(&pool->lock);
    if (pool->is_shutting) {
        while (!pool->is_shut)
            pthread_cond_wait(&pool->shut_cond, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
        return 0;
    }
    pool->is_shutting = true;
    pthread_mutex_unlock(&pool->lock);

    if (mode == NL_POOL_DISCARD)
        atomic_store_explicit(&pool->is_discarding, 1, memory_order_seq_cst);
    uint64_t final_pos = atomic_fetch_or_explicit(&pool->enq_pos, POS_CLOSED, memory_order_seq_cst);
    nl__pool_futex_signal(&pool->epoch, INT_MAX);
    nl__pool_futex_signal(&pool->full_epoch, INT_MAX);
    if (mode == NL_POOL_DISCARD)
        pool_cancel_queued(pool, final_pos);
    pool_join_all(pool);
    /* Drain: the workers exit only once every accepted task was taken. */
    NL_ASSERT(atomic_load_explicit(&pool->deq_pos, memory_order_acquire) == final_pos);

    pthread_mutex_lock(&pool->lock);
    pool->is_shut = true;
    pthread_cond_broadcast(&pool->shut_cond);
    pthread_mutex_unlock(&pool->lock);
    return 0;
}

void nl_pool_free(nl_pool_t *pool)
{
    if (!pool)
        return;
    nl_pool_shutdown(pool, NL_POOL_DRAIN);
    pthread_cond_destroy(&pool->shut_cond);
    pthread_mutex_destroy(&pool->lock);
    free(pool->workers);
    free(pool->slots);
    free(pool);
}

/* --- figures ---------------------------------------------------------------------------- */

void nl_pool_merge_hists(const nl_pool_t *pool, nl_hist_t *wait_ns, nl_hist_t *run_ns)
{
    for (uint32_t i = 0; i < pool->max_threads; i++) {
        if (wait_ns)
            nl_hist_merge(wait_ns, &pool->workers[i].wait_ns);
        if (run_ns)
            nl_hist_merge(run_ns, &pool->workers[i].run_ns);
    }
}

void nl_pool_get_stats(const nl_pool_t *pool, nl_pool_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    /* deq first: enq only grows, so depth cannot come out negative. */
    uint64_t deq = atomic_load_explicit(&pool->deq_pos, memory_order_relaxed);
    uint64_t enq = atomic_load_explicit(&pool->enq_pos, memory_order_relaxed) & ~POS_CLOSED;
    out->queue_depth = enq - deq;
    out->queue_hwm = atomic_load_explicit(&pool->hwm, memory_order_relaxed);
    out->submitted = enq;
    out->rejected = atomic_load_explicit(&pool->rejected, memory_order_relaxed);
    out->ran_in_caller = atomic_load_explicit(&pool->ran_in_caller, memory_order_relaxed);
    out->cancelled = atomic_load_explicit(&pool->cancelled, memory_order_relaxed);
    out->threads = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
    out->threads_started = atomic_load_explicit(&pool->started, memory_order_relaxed);
    out->threads_retired = atomic_load_explicit(&pool->retired, memory_order_relaxed);
    for (uint32_t i = 0; i < pool->max_threads; i++) {
        const pool_worker_t *w = &pool->workers[i];
        out->completed += atomic_load_explicit(&w->completed, memory_order_relaxed);
        out->threads_busy += atomic_load_explicit(&w->is_busy, memory_order_relaxed);
    }
    nl_hist_t wait_ns;
    nl_hist_t run_ns;
    nl_hist_init(&wait_ns);
    nl_hist_init(&run_ns);
    nl_pool_merge_hists(pool, &wait_ns, &run_ns);
    nl_hist_summarize(&wait_ns, &out->wait_ns);
    nl_hist_summarize(&run_ns, &out->run_ns);
}
