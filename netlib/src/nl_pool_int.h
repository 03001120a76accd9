/*
 * nl_pool_int.h: the pool's layout and the few core functions its lifecycle needs, shared by
 * nl_pool.c (queue, workers, submit) and nl_pool_life.c (create, shut down, figures). Private to
 * netlib; the public API stays nl_pool.h.
 */
#ifndef HERALD_NETLIB_NL_POOL_INT_H
#define HERALD_NETLIB_NL_POOL_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "netlib/nl_hist.h"
#include "netlib/nl_pool.h"

#define POOL_MAX_THREADS 1024u
#define POOL_MAX_CAPACITY (1u << 30)
#define POOL_DEFAULT_CAPACITY 1024u
#define POOL_DEFAULT_KEEPALIVE_MS 10000u
#define POS_CLOSED (UINT64_C(1) << 63)
#define CACHE_LINE 64

enum { WORKER_EMPTY = 0, WORKER_RUNNING, WORKER_EXITED, WORKER_JOINING };

/* What a loop-bound completion needs once the worker is done with the job. */
typedef struct pool_comp_s {
    nl_pool_done_cb done;
    void *arg;
    nl_loop_t *loop;
    int status;
} pool_comp_t;

/* A task as the ring stores it. comp is set when done runs on a loop (done/arg are in it). */
typedef struct pool_job_s {
    nl_pool_work_cb work;
    void *arg;
    nl_pool_done_cb done;
    pool_comp_t *comp;
    uint64_t enqueue_ns;
} pool_job_t;

typedef struct pool_slot_s {
    alignas(CACHE_LINE) _Atomic uint64_t seq;
    pool_job_t job;
} pool_slot_t;

/* One per possible thread. The histograms and counters are written by the thread occupying
 * the slot only; a later thread reusing the slot is ordered after it by the lock and join. */
typedef struct pool_worker_s {
    alignas(CACHE_LINE) nl_hist_t wait_ns;
    nl_hist_t run_ns;
    _Atomic uint64_t completed;
    _Atomic uint32_t is_busy;
    int state; /* WORKER_*, guarded by pool->lock */
    unsigned index;
    pthread_t thread;
    nl_pool_t *pool;
} pool_worker_t;

struct nl_pool_s {
    /* Read-only after nl_pool_new. */
    alignas(CACHE_LINE) pool_slot_t *slots;
    uint64_t capacity;
    uint64_t mask; /* capacity - 1 when capacity is a power of two, else 0 */
    uint32_t core_threads;
    uint32_t max_threads;
    uint64_t keepalive_ns;
    pool_worker_t *workers;
    char name[16];

    alignas(CACHE_LINE) _Atomic uint64_t enq_pos; /* | POS_CLOSED once shutdown began */
    _Atomic uint64_t deq_hint; /* a past value of deq_pos, for the high-water mark */
    alignas(CACHE_LINE) _Atomic uint64_t deq_pos;

    /* Read by every submit and job: written only when workers park or wake, or threads come
     * and go. The flags written on every idle spell live on the next line: sharing this one
     * made each submit miss in cache while a worker went idle between tasks. */
    alignas(CACHE_LINE) _Atomic uint32_t parked;
    _Atomic uint32_t epoch;     /* futex word for parked workers */
    _Atomic uint64_t waking_ns; /* when a wake-up was sent and not yet taken up; 0: none */
    _Atomic uint32_t nthreads;
    _Atomic uint32_t is_discarding;
    alignas(CACHE_LINE) _Atomic uint64_t spin_beat_ns; /* spinner's last heartbeat; 0: none */
    _Atomic uint32_t idle; /* workers spinning or parked (only kept when bursts are possible) */
    /* Read by every worker after each job. */
    alignas(CACHE_LINE) _Atomic uint32_t full_waiters;
    _Atomic uint32_t full_epoch; /* futex word for NL_POOL_WAIT submitters */

    /* Rare events. */
    alignas(CACHE_LINE) _Atomic uint64_t hwm;
    _Atomic uint64_t rejected;
    _Atomic uint64_t ran_in_caller;
    _Atomic uint64_t cancelled;
    _Atomic uint64_t started;
    _Atomic uint64_t retired;

    pthread_mutex_t lock; /* guards: workers[].state, is_shutting, is_shut, is_spawn_failing */
    pthread_cond_t shut_cond;
    bool is_shutting;
    bool is_shut;
    bool is_spawn_failing; /* log a failing pthread_create once per episode */
};

/* Starts one worker in a free slot. Returns 0, -EAGAIN when every slot is in use, or -errno
 * from pthread_create. pool->lock held. */
int nl__pool_spawn_locked(nl_pool_t *pool);
/* Takes the oldest published job; false when there is none. */
bool nl__pool_ring_pop(nl_pool_t *pool, pool_job_t *out);
/* Hands a job's completion on: posted to its loop, or run here when it has none. */
void nl__pool_job_finish(const pool_job_t *job, int status);
/* Bumps the futex word's epoch and wakes n of its waiters. */
void nl__pool_futex_signal(_Atomic uint32_t *word, int n);
/* True when the calling thread is one of pool's workers. */
bool nl__pool_is_own_worker(const nl_pool_t *pool);

#endif
