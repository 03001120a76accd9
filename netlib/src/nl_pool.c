/*
 * nl_pool: bounded worker pool with write-back to loops (see nl_pool.h). Design, and why:
 *
 * - The queue is a bounded MPMC ring with a sequence number per slot (Dmitry Vyukov's design,
 *   written from its description) in half steps: a producer claims pos by CAS on enq_pos when
 *   slot.seq == 2 pos and publishes seq = 2 pos + 1; a worker claims it by CAS on deq_pos when
 *   seq == 2 pos + 1 and frees it with 2 (pos + capacity). (Whole steps confuse "published for
 *   pos" with "free for pos + capacity" at capacity 1: a test caught a task overwritten.) No
 *   lock, so a producer preempted mid-submit stalls nobody, which sinks a mutex queue when
 *   threads outnumber cores. A slot per cache line; index pos % capacity: capacity is exact.
 *
 * - Shutdown sets bit 63 of enq_pos (POS_CLOSED): every later CAS fails on it, and the value
 *   before the bit is the exact count of accepted tasks, which workers (drain) or the shutting
 *   thread (discard) consume up to.
 *
 * - One idle worker spins briefly; the others park on a futex eventcount: parked++, read
 *   epoch, re-check the ring, futex_wait(epoch). A producer wakes one only when some are
 *   parked, none spins and no wake-up is on its way: no system call per submit when busy.
 *   Lost wake-ups are ruled out Dekker-style: the producer publishes (seq_cst exchange) then
 *   loads parked; the worker increments parked, fences, re-checks the ring; one sees the other.
 *   NL_POOL_WAIT submitters wait the same way on full_waiters/full_epoch. The whole
 *   protocol is modelled step by step in tests/model/pool_model.py, which ctest runs: a change
 *   here needs the same change there.
 *
 * - Counters live where they are written: enq_pos is the submitted count; per-worker counts
 *   and histograms are written by their worker only (nl_hist_record_local) and summed by
 *   readers; rare events are relaxed atomics. Nothing on the submit/run path takes a lock.
 *
 * - A loop-bound completion needs (done, arg, status) behind nl_loop_post's one pointer: a
 *   32-byte record malloc'd by the submit and freed by comp_run, normally both on the same
 *   loop thread, where glibc's per-thread cache serves it without a shared cache line. A
 *   pool-wide free list was tried first and dropped: two contended atomics per completion, and
 *   a reference count to outlive nl_pool_free (completions may still sit in a loop's queue).
 *
 * - The mutex guards thread bookkeeping (start, retire, join) and the shutdown state only; no
 *   task or callback runs under it.
 */
#include "netlib/nl_pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "nl_pool_int.h"

/* How long the spinning worker polls before it parks. bench_pool on the shared 2-core VM:
 * 20 us hurt (CFS delays a busy spinner by whole slices: p50 3 us -> ms at 50k tasks/s); 0-2
 * us were alike, and 2 us still saves the futex round trip for tasks in quick succession. */
#define SPIN_NS 2000
/* How long a spinner's heartbeat, or a wake-up sent, stops producers waking another worker.
 * Past that the spinner or wakee is likely preempted (for ms on a busy machine) and the queue
 * would wait for it: before these expired, 100k tasks/s filled a 1024-slot queue there. */
#define SPIN_GRACE_NS 10000
#define WAKE_GRACE_NS 50000
#define WAIT_FOREVER UINT64_MAX

/* The pool the calling thread works for, so shutdown from a worker aborts instead of
 * deadlocking on its own join. */
static _Thread_local const nl_pool_t *tls_worker_of;

bool nl__pool_is_own_worker(const nl_pool_t *pool)
{
    return tls_worker_of == pool;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Sleeps while *word == expect, at most timeout_ns (WAIT_FOREVER: no limit). Returns 0 when
 * woken, when the word had already changed or on a signal; -ETIMEDOUT when the time ran out. */
static int futex_wait(_Atomic uint32_t *word, uint32_t expect, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    /* _Atomic uint32_t has uint32_t's size and representation on Linux, as futex needs. */
    long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expect,
                      timeout_ns == WAIT_FOREVER ? NULL : &ts, NULL, 0);
    return rc < 0 && errno == ETIMEDOUT ? -ETIMEDOUT : 0;
}

/* Bumps the epoch, so a waiter that read the old value cannot fall asleep, and wakes n. */
void nl__pool_futex_signal(_Atomic uint32_t *word, int n)
{
    atomic_fetch_add_explicit(word, 1, memory_order_seq_cst);
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* --- ring ----------------------------------------------------------------------------- */

static inline pool_slot_t *ring_slot(const nl_pool_t *pool, uint64_t pos)
{
    uint64_t i = pool->mask ? (pos & pool->mask) : (pos % pool->capacity);
    return &pool->slots[i];
}

/* Claims the next position and publishes job there. Returns 0 with *pos_out set; -EAGAIN when
 * full; -ESHUTDOWN when closed. */
static int ring_push(nl_pool_t *pool, const pool_job_t *job, uint64_t *pos_out)
{
    uint64_t pos = atomic_load_explicit(&pool->enq_pos, memory_order_relaxed);
    pool_slot_t *slot;
    for (;;) {
        if (pos & POS_CLOSED)
            return -ESHUTDOWN;
        slot = ring_slot(pool, pos);
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - 2 * pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&pool->enq_pos, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed))
                break;
        } else if (dif < 0) {
            /* The slot still holds the task from one lap ago (or a worker is copying it). */
            return -EAGAIN;
        } else {
            pos = atomic_load_explicit(&pool->enq_pos, memory_order_relaxed);
        }
    }
    slot->job = *job;
    /* seq_cst exchange rather than a release store: it also orders this publish before the
     * caller's load of `parked` (see the file comment). */
    atomic_exchange_explicit(&slot->seq, 2 * pos + 1, memory_order_seq_cst);
    *pos_out = pos;
    return 0;
}

/* Takes the oldest published job. Returns false when there is none (or the oldest position is
 * claimed but not yet published by its producer). */
bool nl__pool_ring_pop(nl_pool_t *pool, pool_job_t *out)
{
    uint64_t pos = atomic_load_explicit(&pool->deq_pos, memory_order_relaxed);
    pool_slot_t *slot;
    for (;;) {
        slot = ring_slot(pool, pos);
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - (2 * pos + 1));
        if (dif == 0) {
            /* seq_cst, not relaxed: then a parking worker's ring_peek, after its seq_cst
             * fence, reads this claim or a later one (C11 7.17.3's fence rule). A relaxed
             * claim allows it an older deq_pos, a freed slot there, and sleep past a
             * published task. x86's locked CAS is a full barrier either way: same code. */
            if (atomic_compare_exchange_weak_explicit(&pool->deq_pos, &pos, pos + 1,
                                                      memory_order_seq_cst, memory_order_relaxed))
                break;
        } else if (dif < 0) {
            return false;
        } else {
            pos = atomic_load_explicit(&pool->deq_pos, memory_order_relaxed);
        }
    }
    *out = slot->job;
    /* Exchange for the same reason as in ring_push: ordered before the full_waiters load. */
    atomic_exchange_explicit(&slot->seq, 2 * (pos + pool->capacity), memory_order_seq_cst);
    if (atomic_load_explicit(&pool->full_waiters, memory_order_seq_cst) > 0)
        nl__pool_futex_signal(&pool->full_epoch, 1);
    return true;
}

/* True when a published job waits at the head of the ring. */
static bool ring_peek(const nl_pool_t *pool)
{
    uint64_t pos = atomic_load_explicit(&pool->deq_pos, memory_order_relaxed);
    const pool_slot_t *slot = ring_slot(pool, pos);
    return atomic_load_explicit(&slot->seq, memory_order_acquire) == 2 * pos + 1;
}

/* --- completions ---------------------------------------------------------------------- */

/* Runs on the loop's thread, from its post queue. */
static void comp_run(void *p)
{
    pool_comp_t c = *(pool_comp_t *)p;
    free(p);
    c.done(c.arg, c.status);
}

/* Hands the job's completion on: posted to its loop, or run here when it has none. */
void nl__pool_job_finish(const pool_job_t *job, int status)
{
    if (job->comp) {
        job->comp->status = status;
        int err = nl_loop_post(job->comp->loop, comp_run, job->comp);
        /* Only ENOMEM growing the loop's post array fails this; dropping the completion would
         * break exactly-once and leak the caller's request, so it is fatal. */
        NL_ASSERT(err == 0);
    } else if (job->done) {
        job->done(job->arg, status);
    }
}

/* --- threads ---------------------------------------------------------------------------- */

static void *worker_main(void *p);

/* Starts one worker in a free slot, joining a retired thread's slot first if need be.
 * Returns 0, -EAGAIN when every slot is in use, or -errno from pthread_create. Lock held. */
int nl__pool_spawn_locked(nl_pool_t *pool)
{
    pool_worker_t *w = NULL;
    for (uint32_t i = 0; i < pool->max_threads && !w; i++) {
        pool_worker_t *c = &pool->workers[i];
        if (c->state == WORKER_EXITED) {
            /* It set EXITED under this lock and needs it no more: the join is short. */
            pthread_join(c->thread, NULL);
            c->state = WORKER_EMPTY;
        }
        if (c->state == WORKER_EMPTY)
            w = c;
    }
    if (!w)
        return -EAGAIN;
    w->state = WORKER_RUNNING;
    atomic_fetch_add_explicit(&pool->nthreads, 1, memory_order_seq_cst);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        w->state = WORKER_EMPTY;
        atomic_fetch_sub_explicit(&pool->nthreads, 1, memory_order_seq_cst);
        return -rc;
    }
    atomic_fetch_add_explicit(&pool->started, 1, memory_order_relaxed);
    return 0;
}

/* Called after a submit. Starts a burst worker when there is room and the task just queued
 * has no idle worker to take it: every worker is inside a task. The submitting thread pays
 * for pthread_create (tens of us), once per burst thread. */
static void pool_maybe_grow(nl_pool_t *pool)
{
    uint32_t n = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
    if (n >= pool->max_threads || atomic_load_explicit(&pool->idle, memory_order_relaxed) > 0)
        return;
    pthread_mutex_lock(&pool->lock);
    if (!pool->is_shutting &&
        atomic_load_explicit(&pool->nthreads, memory_order_relaxed) < pool->max_threads) {
        int err = nl__pool_spawn_locked(pool);
        if (err < 0 && !pool->is_spawn_failing)
            NL_LOG(NL_WARN, "pool_spawn_failed", "pool=%s err=%s", pool->name, nl_strerror(err));
        pool->is_spawn_failing = err < 0;
    }
    pthread_mutex_unlock(&pool->lock);
}

/* A burst worker idle for keepalive_ns leaves, unless that would go below core_threads or a
 * task is waiting. parked was just decremented (seq_cst); the fence makes the ring check see
 * any task whose producer still counted this worker as parked (and so may have woken nobody). */
static bool worker_try_retire(nl_pool_t *pool, pool_worker_t *w)
{
    bool is_retired = false;
    pthread_mutex_lock(&pool->lock);
    atomic_thread_fence(memory_order_seq_cst);
    if (!pool->is_shutting && !ring_peek(pool) &&
        atomic_load_explicit(&pool->nthreads, memory_order_relaxed) > pool->core_threads) {
        atomic_fetch_sub_explicit(&pool->nthreads, 1, memory_order_seq_cst);
        atomic_fetch_add_explicit(&pool->retired, 1, memory_order_relaxed);
        w->state = WORKER_EXITED;
        is_retired = true;
    }
    pthread_mutex_unlock(&pool->lock);
    return is_retired;
}

/* True when then_ns (0: never) is less than grace_ns before now_ns. */
static bool is_recent(uint64_t then_ns, uint64_t now_ns, int64_t grace_ns)
{
    return then_ns != 0 && (int64_t)(now_ns - then_ns) < grace_ns;
}

/*
 * Wakes one parked worker unless none is parked, one spins, or a wake-up is on its way. Without
 * waking_ns, each submit made while the woken worker is still being scheduled would make its
 * own futex call: measured, that storm cost 10x in throughput. A parker clears it after
 * reading epoch (and on leaving), so a mark it did not clear comes with an epoch bump it has
 * not read: its futex_wait cannot sleep through it. Both suppressions expire (see GRACE).
 */
static void pool_wake_one(nl_pool_t *pool, uint64_t now_ns)
{
    if (atomic_load_explicit(&pool->parked, memory_order_seq_cst) == 0 ||
        is_recent(atomic_load_explicit(&pool->spin_beat_ns, memory_order_seq_cst), now_ns,
                  SPIN_GRACE_NS))
        return;
    uint64_t sent_ns = atomic_load_explicit(&pool->waking_ns, memory_order_seq_cst);
    if (is_recent(sent_ns, now_ns, WAKE_GRACE_NS) ||
        !atomic_compare_exchange_strong_explicit(&pool->waking_ns, &sent_ns, now_ns | 1,
                                                 memory_order_seq_cst, memory_order_seq_cst))
        return;
    nl__pool_futex_signal(&pool->epoch, 1);
}

/* Polls the ring for up to SPIN_NS, with a heartbeat in spin_beat_ns. Only one idle worker
 * spins at a time (the others park at once), so idle workers never take more than one CPU from
 * the producers on a small machine; while it spins, producers skip the wake-up. It clears the
 * heartbeat (seq_cst) before it counts itself parked and re-checks the ring, so a producer
 * that saw it spinning cannot leave a task behind. Returns true when a task showed up. */
static bool worker_spin(nl_pool_t *pool)
{
    uint64_t now_ns = nl_now_ns();
    uint64_t beat_ns = atomic_load_explicit(&pool->spin_beat_ns, memory_order_relaxed);
    if (is_recent(beat_ns, now_ns, SPIN_GRACE_NS) ||
        !atomic_compare_exchange_strong_explicit(&pool->spin_beat_ns, &beat_ns, now_ns | 1,
                                                 memory_order_seq_cst, memory_order_relaxed))
        return false;
    bool is_found = false;
    uint64_t deadline_ns = now_ns + SPIN_NS;
    for (unsigned i = 1; !is_found; i++) {
        cpu_relax();
        is_found = ring_peek(pool);
        if (is_found || (i & 31) != 0)
            continue;
        now_ns = nl_now_ns();
        if (now_ns >= deadline_ns)
            break;
        atomic_store_explicit(&pool->spin_beat_ns, now_ns | 1, memory_order_relaxed);
    }
    atomic_store_explicit(&pool->spin_beat_ns, 0, memory_order_seq_cst);
    return is_found;
}

/* Parks until a task is submitted, shutdown begins, or (for a burst worker) keepalive passes.
 * Returns true when the worker must exit. */
static bool worker_park(nl_pool_t *pool, pool_worker_t *w)
{
    /* Exit once shutdown began and every accepted task has been taken. */
    uint64_t enq = atomic_load_explicit(&pool->enq_pos, memory_order_seq_cst);
    if ((enq & POS_CLOSED) &&
        atomic_load_explicit(&pool->deq_pos, memory_order_seq_cst) >= (enq & ~POS_CLOSED))
        return true;
    uint32_t n = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
    uint64_t timeout_ns = n > pool->core_threads ? pool->keepalive_ns : WAIT_FOREVER;
    atomic_fetch_add_explicit(&pool->parked, 1, memory_order_seq_cst);
    uint32_t e = atomic_load_explicit(&pool->epoch, memory_order_seq_cst);
    /* Cleared after reading epoch, never before: a producer preempted between its push and
     * its wake-up could otherwise mark after the clear, bump an epoch already read here (for
     * a task this worker took before parking) and leave the mark with this worker asleep:
     * later wake-ups suppressed. bench_pool hung on that once. */
    atomic_store_explicit(&pool->waking_ns, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    /* A closed pool with tasks still unpublished: do not sleep, their producers are mid-way. */
    bool is_closed = atomic_load_explicit(&pool->enq_pos, memory_order_seq_cst) & POS_CLOSED;
    bool has_work = ring_peek(pool);
    int rc = has_work || is_closed ? 0 : futex_wait(&pool->epoch, e, timeout_ns);
    atomic_fetch_sub_explicit(&pool->parked, 1, memory_order_seq_cst);
    atomic_store_explicit(&pool->waking_ns, 0, memory_order_seq_cst);
    if (is_closed && !has_work)
        sched_yield(); /* lets a descheduled producer publish what it claimed */
    if (rc == -ETIMEDOUT)
        return worker_try_retire(pool, w);
    return false;
}

/* Runs one job taken off the ring at start_ns. */
static void worker_run(pool_worker_t *w, const pool_job_t *job, uint64_t start_ns)
{
    atomic_store_explicit(&w->is_busy, 1, memory_order_relaxed);
    /* CLOCK_MONOTONIC is system-wide, but guard rather than ever record 2^64. */
    nl_hist_record_local(&w->wait_ns, start_ns > job->enqueue_ns ? start_ns - job->enqueue_ns : 0);
    nl__pool_job_finish(job, job->work(job->arg));
    uint64_t done = atomic_load_explicit(&w->completed, memory_order_relaxed);
    atomic_store_explicit(&w->completed, done + 1, memory_order_relaxed);
    atomic_store_explicit(&w->is_busy, 0, memory_order_relaxed);
}

/* Records the run of the job started at since_ns (0: none pending) as ending at now_ns. */
static void worker_close_run(pool_worker_t *w, uint64_t since_ns, uint64_t now_ns)
{
    if (since_ns)
        nl_hist_record_local(&w->run_ns, now_ns - since_ns);
}

static void *worker_main(void *p)
{
    pool_worker_t *w = p;
    nl_pool_t *pool = w->pool;
    tls_worker_of = pool;
    char name[16];
    snprintf(name, sizeof(name), "%.10s-%u", pool->name, w->index);
    pthread_setname_np(pthread_self(), name);
    pool_job_t job;
    /* One clock read per job (~70 ns in this VM, as much as the rest of the hand-off): a
     * job's start ends the run before it; an idle spell or exit closes the last one. */
    uint64_t since_ns = 0;
    for (;;) {
        if (atomic_load_explicit(&pool->is_discarding, memory_order_relaxed))
            break;
        if (nl__pool_ring_pop(pool, &job)) {
            uint64_t now_ns = nl_now_ns();
            worker_close_run(w, since_ns, now_ns);
            since_ns = now_ns;
            /* More work behind this job: hand the wake-up on, so a burst fans out over the
             * parked workers without costing the producers a system call each. */
            if (atomic_load_explicit(&pool->parked, memory_order_relaxed) && ring_peek(pool))
                pool_wake_one(pool, now_ns);
            worker_run(w, &job, now_ns);
            continue;
        }
        worker_close_run(w, since_ns, nl_now_ns());
        since_ns = 0;
        /* Counted idle while spinning and parked, for pool_maybe_grow (so only when burst
         * threads are possible). Only busy-to-idle transitions pay for this increment. */
        bool can_grow = pool->max_threads > pool->core_threads;
        if (can_grow)
            atomic_fetch_add_explicit(&pool->idle, 1, memory_order_relaxed);
        bool is_exit = !worker_spin(pool) && worker_park(pool, w);
        if (can_grow)
            atomic_fetch_sub_explicit(&pool->idle, 1, memory_order_relaxed);
        if (is_exit)
            break;
    }
    worker_close_run(w, since_ns, nl_now_ns());
    return NULL;
}

/* --- submit ----------------------------------------------------------------------------- */

/* Raises the high-water mark to the depth after the push at pos. Reading deq_pos, the workers'
 * busiest line, on every submit cost two thirds of a submit; deq_hint, an older deq_pos, bounds
 * the depth from above, so deq_pos is read only when that bound beats the mark. */
static void pool_note_depth(nl_pool_t *pool, uint64_t pos)
{
    uint64_t hwm = atomic_load_explicit(&pool->hwm, memory_order_relaxed);
    if (pos + 1 - atomic_load_explicit(&pool->deq_hint, memory_order_relaxed) <= hwm)
        return;
    uint64_t deq = atomic_load_explicit(&pool->deq_pos, memory_order_relaxed);
    atomic_store_explicit(&pool->deq_hint, deq, memory_order_relaxed);
    /* Workers may already have taken tasks queued after this one, hence the guard. */
    uint64_t depth = pos + 1 > deq ? pos + 1 - deq : 0;
    while (depth > hwm &&
           !atomic_compare_exchange_weak_explicit(&pool->hwm, &hwm, depth, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

/* Puts job in the ring and wakes a parked worker if there is one. Returns 0, -EAGAIN, or
 * -ESHUTDOWN. */
static int pool_enqueue(nl_pool_t *pool, pool_job_t *job)
{
    job->enqueue_ns = nl_now_ns();
    uint64_t pos;
    int err = ring_push(pool, job, &pos);
    if (err < 0)
        return err;
    pool_wake_one(pool, job->enqueue_ns);
    pool_note_depth(pool, pos);
    if (pool->max_threads > pool->core_threads)
        pool_maybe_grow(pool);
    return 0;
}

/* NL_POOL_WAIT: retries until a worker frees a slot, shutdown begins, or the time is up. */
static int pool_wait_enqueue(nl_pool_t *pool, pool_job_t *job, uint32_t timeout_ms)
{
    uint64_t deadline_ns = nl_now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        atomic_fetch_add_explicit(&pool->full_waiters, 1, memory_order_seq_cst);
        uint32_t e = atomic_load_explicit(&pool->full_epoch, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        int err = pool_enqueue(pool, job);
        uint64_t now_ns = nl_now_ns();
        if (err != -EAGAIN || now_ns >= deadline_ns) {
            atomic_fetch_sub_explicit(&pool->full_waiters, 1, memory_order_seq_cst);
            return err == -EAGAIN ? -ETIMEDOUT : err;
        }
        futex_wait(&pool->full_epoch, e, deadline_ns - now_ns);
        atomic_fetch_sub_explicit(&pool->full_waiters, 1, memory_order_seq_cst);
    }
}

/* The queue was full: apply the task's policy. */
static int pool_when_full(nl_pool_t *pool, const nl_pool_task_t *task, pool_job_t *job)
{
    int err = -EAGAIN;
    if (task->policy == NL_POOL_CALLER_RUNS) {
        nl__pool_job_finish(job, task->work(task->arg));
        atomic_fetch_add_explicit(&pool->ran_in_caller, 1, memory_order_relaxed);
        return 0;
    }
    if (task->policy == NL_POOL_WAIT)
        err = pool_wait_enqueue(pool, job, task->wait_timeout_ms);
    if (err == -EAGAIN || err == -ETIMEDOUT)
        atomic_fetch_add_explicit(&pool->rejected, 1, memory_order_relaxed);
    return err;
}

int nl_pool_submit_ex(nl_pool_t *pool, const nl_pool_task_t *task)
{
    NL_ASSERT(task->work != NULL);
    /* An IO loop must never block on the pool (DESIGN.md): asking to is a bug, caught even
     * when the queue happens to have room. */
    NL_ASSERT(task->policy != NL_POOL_WAIT || nl_loop_current() == NULL);
    pool_job_t job = {.work = task->work, .arg = task->arg, .done = task->done};
    if (task->done && task->loop) {
        job.comp = malloc(sizeof(*job.comp));
        if (!job.comp)
            return -ENOMEM;
        *job.comp = (pool_comp_t){.done = task->done, .arg = task->arg, .loop = task->loop};
    }
    int err = pool_enqueue(pool, &job);
    if (err == -EAGAIN)
        err = pool_when_full(pool, task, &job);
    if (err < 0)
        free(job.comp);
    return err;
}

int nl_pool_submit(nl_pool_t *pool, nl_loop_t *loop, nl_pool_work_cb work, nl_pool_done_cb done,
                   void *arg)
{
    nl_pool_task_t task = {.work = work, .done = done, .arg = arg, .loop = loop};
    return nl_pool_submit_ex(pool, &task);
}
