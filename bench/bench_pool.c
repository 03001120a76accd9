/*
 * bench_pool: nl_pool against the pool most C and C++ servers start with: one mutex, one
 * condition variable for "not empty", a bounded deque (ring) of tasks, pthread_cond_signal on
 * every submit, workers popping one task at a time.
 *
 * 1. Saturation: empty tasks, 1/2/4 workers x 1/2/4 producers, each producer submitting as
 *    fast as it can for --seconds (on a full queue it yields and retries). Reports tasks/s
 *    (accepted tasks / time until all of them ran) and enqueue-to-start p50/p99.
 * 2. Paced: one producer at 50 % of the single-producer maximum, for each worker count: an
 *    open-loop schedule (a late submit does not delay the next ones), so the wait times include
 *    queueing honestly. Both pools are paced at nl_pool's rate and the baseline also at 50 % of
 *    its own maximum. Both maxima are measured again right before each worker count's paced
 *    rounds (1-producer saturated runs, median of --repeat), so the pace follows the machine's
 *    state of the moment rather than step 1's. Each worker count also gets a "floor" row,
 *    measured in the same rounds: the paced producer runs with no pool while one thread
 *    busy-reads the clock, which gives the wait an always-ready consumer would see on this
 *    machine (see "the machine floor" in bench/RESULTS-pool.md).
 *
 * Both pools take the enqueue timestamp just before they queue and the start timestamp just
 * before the work runs, and record into per-worker nl_hist histograms.
 *
 * Each cell is run --repeat times, the pools taking turns run by run, and the median run of
 * each pool is reported: the machine is a shared 2-core VM and single runs vary 2-3x. Every
 * row also shows the range of a cache-line round trip between CPU 0 and 1 probed at the start
 * of each round (c2c.h): it moved between about 100 and 500 ns there as the host moved the
 * vCPUs, and throughput with it (nl_pool 1 worker x 4 producers: 14-18M tasks/s at 100-200 ns,
 * 4-5M at 500 ns), so a row whose range spans both is a mix of two machines.
 *
 * Usage: bench_pool [--seconds S] [--capacity N] [--repeat R]
 *        (defaults: 1 s per run, 1024 slots, 3 runs per cell)
 *        bench_pool --impl nl_pool|mutex|floor --workers W --producers P [--rate R]   (one cell)
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c2c.h"
#include "netlib/nl_common.h"
#include "netlib/nl_hist.h"
#include "netlib/nl_pool.h"

#define MAX_THREADS 8
#define MAX_REPEAT 16
#define C2C_ROUND_TRIPS 5000 /* per round: 0.5-2.5 ms */

static int empty_work(void *arg)
{
    NL_UNUSED(arg);
    return 0;
}

/* --- the baseline: mutex + condvar + bounded deque ---------------------------------------- */

typedef struct base_task_s {
    nl_pool_work_cb work;
    void *arg;
    uint64_t enqueue_ns;
} base_task_t;

typedef struct base_pool_s base_pool_t;

typedef struct base_worker_s {
    base_pool_t *pool;
    pthread_t thread;
    nl_hist_t wait_ns;
} base_worker_t;

struct base_pool_s {
    pthread_mutex_t mu; /* guards ring, head, count, is_stopping */
    pthread_cond_t not_empty;
    base_task_t *ring;
    uint32_t capacity;
    uint32_t head;
    uint32_t count;
    bool is_stopping;
    int nworkers;
    base_worker_t workers[MAX_THREADS];
};

static void *base_worker_main(void *arg)
{
    base_worker_t *w = arg;
    base_pool_t *p = w->pool;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->count == 0 && !p->is_stopping)
            pthread_cond_wait(&p->not_empty, &p->mu);
        if (p->count == 0) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        base_task_t t = p->ring[p->head];
        p->head = (p->head + 1) % p->capacity;
        p->count--;
        pthread_mutex_unlock(&p->mu);
        uint64_t start_ns = nl_now_ns();
        nl_hist_record_local(&w->wait_ns, start_ns - t.enqueue_ns);
        t.work(t.arg);
    }
}

static void *base_create(int workers, uint32_t capacity)
{
    base_pool_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->ring = calloc(capacity, sizeof(*p->ring));
    if (!p->ring)
        abort();
    p->capacity = capacity;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->not_empty, NULL);
    p->nworkers = workers;
    for (int i = 0; i < workers; i++) {
        p->workers[i].pool = p;
        if (pthread_create(&p->workers[i].thread, NULL, base_worker_main, &p->workers[i]))
            abort();
    }
    return p;
}

static int base_submit(void *pool, nl_pool_work_cb work, void *arg)
{
    base_pool_t *p = pool;
    uint64_t now_ns = nl_now_ns();
    pthread_mutex_lock(&p->mu);
    if (p->count == p->capacity) {
        pthread_mutex_unlock(&p->mu);
        return -EAGAIN;
    }
    p->ring[(p->head + p->count) % p->capacity] = (base_task_t){work, arg, now_ns};
    p->count++;
    pthread_cond_signal(&p->not_empty);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static nl_hist_t *hist_new(void)
{
    nl_hist_t *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    return h;
}

/* Runs what is queued, joins the workers, summarizes their merged histograms into wait, frees. */
static void base_finish(void *pool, nl_hist_summary_t *wait)
{
    base_pool_t *p = pool;
    pthread_mutex_lock(&p->mu);
    p->is_stopping = true;
    pthread_cond_broadcast(&p->not_empty);
    pthread_mutex_unlock(&p->mu);
    nl_hist_t *wait_ns = hist_new();
    for (int i = 0; i < p->nworkers; i++) {
        pthread_join(p->workers[i].thread, NULL);
        nl_hist_merge(wait_ns, &p->workers[i].wait_ns);
    }
    nl_hist_summarize(wait_ns, wait);
    free(wait_ns);
    pthread_cond_destroy(&p->not_empty);
    pthread_mutex_destroy(&p->mu);
    free(p->ring);
    free(p);
}

/* --- nl_pool behind the same three calls --------------------------------------------------- */

static void *herald_create(int workers, uint32_t capacity)
{
    nl_pool_t *pool;
    nl_pool_opts_t o = {
        .core_threads = (uint32_t)workers, .queue_capacity = capacity, .name = "bench"};
    if (nl_pool_new(&pool, &o) != 0)
        abort();
    return pool;
}

static int herald_submit(void *pool, nl_pool_work_cb work, void *arg)
{
    return nl_pool_submit(pool, NULL, work, NULL, arg);
}

static void herald_finish(void *pool, nl_hist_summary_t *wait)
{
    nl_pool_shutdown(pool, NL_POOL_DRAIN);
    nl_hist_t *wait_ns = hist_new();
    nl_pool_merge_hists(pool, wait_ns, NULL);
    nl_pool_free(pool);
    nl_hist_summarize(wait_ns, wait);
    free(wait_ns);
}

typedef struct impl_s {
    const char *name;
    void *(*create)(int workers, uint32_t capacity);
    int (*submit)(void *pool, nl_pool_work_cb work, void *arg);
    void (*finish)(void *pool, nl_hist_summary_t *wait); /* once every accepted task ran */
} impl_t;

static const impl_t impl_herald = {"nl_pool", herald_create, herald_submit, herald_finish};
static const impl_t impl_base = {"mutex+cond", base_create, base_submit, base_finish};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* --- the machine floor: no pool, a consumer that is always ready ---------------------------- */

/* The floor is the wait a consumer would see on this machine with zero hand-off cost, always
 * ready except while the machine takes its CPU away (hypervisor, interrupts, other processes):
 * a lower bound for any pool. (Queueing makes a real pool worse: a consumer busy a fraction rho
 * of the time turns a stall into waits for up to 1/(1-rho) times as long.) A thread busy-reading
 * CLOCK_MONOTONIC plays that consumer: the gap g_i between two of its reads is a spell during which
 * it could not have looked at a queue. A task arriving at a uniformly random instant lands in gap i
 * with probability g_i / T (T: the sum of the gaps) and then waits uniformly in [0, g_i) for the
 * next read, so P(wait > w) = sum_i max(0, g_i - w) / T. The percentiles are exact solutions of
 * that formula, to the nanosecond: gaps shorter than FLOOR_EXACT_NS are counted per nanosecond and
 * longer ones kept one by one. The paced producer runs as in a pool run, with a submit that only
 * marks the start, so it takes a CPU just as it does there. The polling thread is unpinned, like
 * the pool's workers. */
#define FLOOR_EXACT_NS 4096u

typedef struct floor_s {
    _Atomic bool is_started; /* set by the first submit: gaps count from then on */
    _Atomic bool is_stopping;
    pthread_t thread;
    uint64_t nsmall[FLOOR_EXACT_NS]; /* nsmall[g]: gaps of exactly g ns */
    uint64_t *big_ns;                /* the gaps of FLOOR_EXACT_NS or more */
    size_t nbig;
    size_t big_cap;
} floor_t;

static void floor_keep(floor_t *f, uint64_t gap_ns)
{
    if (f->nbig == f->big_cap) {
        f->big_cap *= 2;
        f->big_ns = realloc(f->big_ns, f->big_cap * sizeof(*f->big_ns));
        if (!f->big_ns)
            abort();
    }
    f->big_ns[f->nbig++] = gap_ns;
}

static void *floor_main(void *arg)
{
    floor_t *f = arg;
    while (!atomic_load_explicit(&f->is_started, memory_order_relaxed))
        cpu_relax();
    /* The stop flag is read on every pass, as a worker would read its queue. */
    uint64_t prev_ns = nl_now_ns();
    while (!atomic_load_explicit(&f->is_stopping, memory_order_relaxed)) {
        uint64_t now_ns = nl_now_ns();
        uint64_t gap_ns = now_ns - prev_ns;
        prev_ns = now_ns;
        if (gap_ns < FLOOR_EXACT_NS)
            f->nsmall[gap_ns]++;
        else
            floor_keep(f, gap_ns);
    }
    return NULL;
}

static void *floor_create(int workers, uint32_t capacity)
{
    NL_UNUSED(workers);
    NL_UNUSED(capacity);
    floor_t *f = calloc(1, sizeof(*f));
    if (!f)
        abort();
    f->big_cap = 1u << 16;
    f->big_ns = malloc(f->big_cap * sizeof(*f->big_ns));
    if (!f->big_ns || pthread_create(&f->thread, NULL, floor_main, f))
        abort();
    return f;
}

static int floor_submit(void *pool, nl_pool_work_cb work, void *arg)
{
    floor_t *f = pool;
    NL_UNUSED(work);
    NL_UNUSED(arg);
    if (!atomic_load_explicit(&f->is_started, memory_order_relaxed))
        atomic_store_explicit(&f->is_started, true, memory_order_relaxed);
    return 0;
}

/* T * P(wait > w) = sum over the gaps of max(0, g - w), in ns. */
static double floor_tail_ns(const floor_t *f, uint64_t w_ns)
{
    double tail_ns = 0;
    for (uint64_t g = w_ns + 1; g < FLOOR_EXACT_NS; g++)
        tail_ns += (double)f->nsmall[g] * (double)(g - w_ns);
    for (size_t i = 0; i < f->nbig; i++)
        if (f->big_ns[i] > w_ns)
            tail_ns += (double)(f->big_ns[i] - w_ns);
    return tail_ns;
}

/* The smallest w with P(wait > w) <= 1 - pct / 100: the tail only falls as w grows. */
static uint64_t floor_percentile(const floor_t *f, double total_ns, uint64_t max_ns, double pct)
{
    double limit_ns = total_ns * (1.0 - pct / 100.0);
    uint64_t lo = 0;
    uint64_t hi = max_ns;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (floor_tail_ns(f, mid) <= limit_ns)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static void floor_finish(void *pool, nl_hist_summary_t *wait)
{
    floor_t *f = pool;
    atomic_store_explicit(&f->is_started, true, memory_order_relaxed); /* if nothing was paced */
    atomic_store_explicit(&f->is_stopping, true, memory_order_relaxed);
    pthread_join(f->thread, NULL);
    uint64_t count = 0;
    uint64_t total_ns = 0;
    uint64_t max_ns = 0;
    double square_sum = 0; /* of the gaps, in ns^2: the mean wait is its half over T */
    for (uint64_t g = 0; g < FLOOR_EXACT_NS; g++) {
        count += f->nsmall[g];
        total_ns += f->nsmall[g] * g;
        square_sum += (double)f->nsmall[g] * (double)g * (double)g;
        if (f->nsmall[g])
            max_ns = g;
    }
    for (size_t i = 0; i < f->nbig; i++) {
        total_ns += f->big_ns[i];
        square_sum += (double)f->big_ns[i] * (double)f->big_ns[i];
        max_ns = f->big_ns[i] > max_ns ? f->big_ns[i] : max_ns;
    }
    count += f->nbig;
    double t_ns = total_ns ? (double)total_ns : 1.0;
    *wait = (nl_hist_summary_t){.count = count,
                                .sum = total_ns,
                                .max = max_ns,
                                .mean = (uint64_t)(square_sum / 2 / t_ns),
                                .p50 = floor_percentile(f, t_ns, max_ns, 50),
                                .p90 = floor_percentile(f, t_ns, max_ns, 90),
                                .p99 = floor_percentile(f, t_ns, max_ns, 99),
                                .p999 = floor_percentile(f, t_ns, max_ns, 99.9)};
    free(f->big_ns);
    free(f);
}

static const impl_t impl_floor = {"floor (busy-polling thread, no pool)", floor_create,
                                  floor_submit, floor_finish};

/* --- producers ------------------------------------------------------------------------------ */

typedef struct producer_s {
    const impl_t *impl;
    void *pool;
    pthread_barrier_t *start;
    uint64_t duration_ns;
    double rate_per_s; /* 0: as fast as possible */
    uint64_t submitted;
    uint64_t full; /* submits refused because the queue was full */
    pthread_t thread;
} producer_t;

static void submit_one(producer_t *p)
{
    while (p->impl->submit(p->pool, empty_work, NULL) == -EAGAIN) {
        p->full++;
        sched_yield();
    }
    p->submitted++;
}

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    pthread_barrier_wait(p->start);
    uint64_t start_ns = nl_now_ns();
    uint64_t end_ns = start_ns + p->duration_ns;
    if (p->rate_per_s <= 0) {
        while (nl_now_ns() < end_ns)
            for (int i = 0; i < 64; i++)
                submit_one(p);
        return NULL;
    }
    /* Open loop: the i-th submit is due at start + i * interval, whenever the previous one
     * finished, so a stall shows up as waiting time instead of silently lowering the rate. */
    double interval_ns = 1e9 / p->rate_per_s;
    for (uint64_t i = 0;; i++) {
        uint64_t due_ns = start_ns + (uint64_t)((double)i * interval_ns);
        if (due_ns >= end_ns)
            break;
        while (nl_now_ns() < due_ns)
            cpu_relax();
        submit_one(p);
    }
    return NULL;
}

typedef struct result_s {
    double tasks_per_s;
    nl_hist_summary_t wait_ns;
    uint64_t full;
} result_t;

static result_t run_cell(const impl_t *impl, int workers, int producers, double rate_per_s,
                         double seconds, uint32_t capacity)
{
    void *pool = impl->create(workers, capacity);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)producers + 1);
    producer_t prod[MAX_THREADS];
    for (int i = 0; i < producers; i++) {
        prod[i] = (producer_t){.impl = impl,
                               .pool = pool,
                               .start = &start,
                               .duration_ns = (uint64_t)(seconds * 1e9),
                               .rate_per_s = rate_per_s};
        if (pthread_create(&prod[i].thread, NULL, producer_main, &prod[i]))
            abort();
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = nl_now_ns();
    result_t r = {0};
    uint64_t total = 0;
    for (int i = 0; i < producers; i++) {
        pthread_join(prod[i].thread, NULL);
        total += prod[i].submitted;
        r.full += prod[i].full;
    }
    impl->finish(pool, &r.wait_ns); /* returns once every accepted task ran */
    uint64_t elapsed_ns = nl_now_ns() - t0;
    r.tasks_per_s = (double)total * 1e9 / (double)elapsed_ns;
    pthread_barrier_destroy(&start);
    return r;
}

typedef struct args_s {
    double seconds;
    uint32_t capacity;
    int repeat;
    const impl_t *only; /* one cell only, with the three fields below */
    int workers;
    int producers;
    double rate;
} args_t;

static int cmp_tasks(const void *a, const void *b)
{
    double x = ((const result_t *)a)->tasks_per_s;
    double y = ((const result_t *)b)->tasks_per_s;
    return x < y ? -1 : x > y;
}

static int cmp_p99(const void *a, const void *b)
{
    uint64_t x = ((const result_t *)a)->wait_ns.p99;
    uint64_t y = ((const result_t *)b)->wait_ns.p99;
    return x < y ? -1 : x > y;
}

/* The shared 2-core VM is noisy: each cell runs `repeat` rounds in which the n pools (or
 * rates) take turns, so that all see the same background load, and keeps the median run of
 * each: by tasks/s when saturated, by p99 wait when paced (rates[k] tasks/s; 0: saturated). Each
 * round starts with a short cache-line round-trip probe (c2c.h); *c2c gets the range, which shows a
 * cell whose rounds straddled a change of the host's vCPU placement (about 100-200 against 500 ns
 * here). */
static void run_rounds(const args_t *a, int n, const impl_t *const *impls, const double *rates,
                       int workers, int producers, result_t *out, c2c_range_t *c2c)
{
    result_t runs[4][MAX_REPEAT];
    int repeat = a->repeat;
    *c2c = (c2c_range_t){0, 0};
    for (int r = 0; r < repeat; r++) {
        c2c_probe_into(c2c, 0, 1, C2C_ROUND_TRIPS);
        for (int k = 0; k < n; k++)
            runs[k][r] = run_cell(impls[k], workers, producers, rates[k], a->seconds, a->capacity);
    }
    for (int k = 0; k < n; k++) {
        qsort(runs[k], (size_t)repeat, sizeof(result_t), rates[k] > 0 ? cmp_p99 : cmp_tasks);
        out[k] = runs[k][repeat / 2];
    }
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

static const char usage[] =
    "usage: bench_pool [--seconds S] [--capacity N] [--repeat R]\n"
    "       bench_pool --impl nl_pool|mutex|floor --workers W --producers P [--rate R]\n";

static int parse_args(int argc, char **argv, args_t *a)
{
    *a = (args_t){.seconds = 1.0, .capacity = 1024, .repeat = 3, .workers = 1, .producers = 1};
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (!v) {
            fprintf(stderr, "bench_pool: %s needs a value\n%s", k, usage);
            return -EINVAL;
        }
        if (strcmp(k, "--seconds") == 0)
            a->seconds = atof(v);
        else if (strcmp(k, "--capacity") == 0)
            a->capacity = (uint32_t)atoi(v);
        else if (strcmp(k, "--repeat") == 0)
            a->repeat = atoi(v);
        else if (strcmp(k, "--impl") == 0) {
            a->only = strcmp(v, "nl_pool") == 0 ? &impl_herald
                      : strcmp(v, "floor") == 0 ? &impl_floor
                      : strcmp(v, "mutex") == 0 ? &impl_base
                                                : NULL;
            if (!a->only) {
                fprintf(stderr, "bench_pool: --impl is nl_pool, mutex or floor, not %s\n", v);
                return -EINVAL;
            }
        } else if (strcmp(k, "--workers") == 0)
            a->workers = atoi(v);
        else if (strcmp(k, "--producers") == 0)
            a->producers = atoi(v);
        else if (strcmp(k, "--rate") == 0)
            a->rate = atof(v);
        else {
            fprintf(stderr, "bench_pool: unknown option %s\n%s", k, usage);
            return -EINVAL;
        }
    }
    if (a->workers < 1 || a->workers > MAX_THREADS || a->producers < 1 ||
        a->producers > MAX_THREADS || a->capacity < 1 || a->repeat < 1 || a->repeat > MAX_REPEAT ||
        !(a->seconds > 0)) {
        fprintf(stderr, "workers and producers: 1..%d; capacity >= 1; repeat 1..%d; seconds > 0\n",
                MAX_THREADS, MAX_REPEAT);
        return -EINVAL;
    }
    return 0;
}

static const int counts[] = {1, 2, 4};

static void print_saturation(const args_t *a)
{
    printf("Saturation: empty tasks, median of %d interleaved runs of %.1f s, queue capacity "
           "%u\n\n",
           a->repeat, a->seconds, a->capacity);
    printf("| workers | producers | nl_pool tasks/s | mutex+cond tasks/s | ratio | nl_pool wait "
           "p50 / p99 (us) | mutex+cond wait p50 / p99 (us) | c2c (ns) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int w = 0; w < 3; w++) {
        for (int p = 0; p < 3; p++) {
            const impl_t *impls[2] = {&impl_herald, &impl_base};
            const double rates[2] = {0, 0};
            result_t r[2];
            c2c_range_t c2c;
            run_rounds(a, 2, impls, rates, counts[w], counts[p], r, &c2c);
            result_t x = r[0];
            result_t y = r[1];
            char c2c_buf[32];
            printf("| %d | %d | %.2fM | %.2fM | %.2fx | %.1f / %.1f | %.1f / %.1f | %s |\n",
                   counts[w], counts[p], x.tasks_per_s / 1e6, y.tasks_per_s / 1e6,
                   x.tasks_per_s / y.tasks_per_s, us(x.wait_ns.p50), us(x.wait_ns.p99),
                   us(y.wait_ns.p50), us(y.wait_ns.p99),
                   c2c_range_str(&c2c, c2c_buf, sizeof(c2c_buf)));
            fflush(stdout);
        }
    }
}

static void print_paced(const args_t *a)
{
    printf("\nPaced: one producer, open loop, median (by p99) of %d interleaved runs of %.1f "
           "s\n\n",
           a->repeat, a->seconds);
    printf("| workers | pool | rate (tasks/s) | wait p50 (us) | p99 (us) | p999 (us) | max (us) "
           "| c2c (ns) |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (int w = 0; w < 3; w++) {
        /* Both maxima are measured again right before, so the pace follows the machine's
         * state of the moment rather than that of the saturation table, minutes earlier. */
        static const impl_t *const pools[2] = {&impl_herald, &impl_base};
        static const double saturated[2] = {0, 0};
        result_t max[2];
        c2c_range_t c2c_max;
        run_rounds(a, 2, pools, saturated, counts[w], 1, max, &c2c_max);
        /* The floor runs first in each round, at nl_pool's rate, so it sees the same load. */
        double nl_rate = max[0].tasks_per_s / 2;
        double rates[4] = {nl_rate, nl_rate, nl_rate, max[1].tasks_per_s / 2};
        static const impl_t *const impls[4] = {&impl_floor, &impl_herald, &impl_base, &impl_base};
        static const char *const whose[4] = {"nl_pool", "nl_pool", "nl_pool", "its own"};
        result_t rs[4];
        c2c_range_t c2c;
        run_rounds(a, 4, impls, rates, counts[w], 1, rs, &c2c);
        c2c_range_merge(&c2c, &c2c_max);
        for (int k = 0; k < 4; k++) {
            result_t r = rs[k];
            char c2c_buf[32];
            printf("| %d | %s | %.2fM (50%% of %s max) | %.1f | %.1f | %.1f | %.1f | %s |\n",
                   counts[w], impls[k]->name, rates[k] / 1e6, whose[k], us(r.wait_ns.p50),
                   us(r.wait_ns.p99), us(r.wait_ns.p999), us(r.wait_ns.max),
                   c2c_range_str(&c2c, c2c_buf, sizeof(c2c_buf)));
            fflush(stdout);
        }
    }
}

static void print_c2c(const char *when)
{
    c2c_range_t c2c = {0, 0};
    char buf[32];
    c2c_probe_into(&c2c, 0, 1, 100000);
    printf("cache-line round trip CPU 0 <-> CPU 1 at the %s: %s ns\n", when,
           c2c_range_str(&c2c, buf, sizeof(buf)));
}

int main(int argc, char **argv)
{
    args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 2 : 0;
    if (a.only) {
        result_t r;
        c2c_range_t c2c;
        run_rounds(&a, 1, &a.only, &a.rate, a.workers, a.producers, &r, &c2c);
        char c2c_buf[32];
        printf("%s workers=%d producers=%d rate=%.0f: %.3fM tasks/s, wait p50=%.1fus "
               "p99=%.1fus p999=%.1fus max=%.1fus, full=%llu, c2c=%s ns\n",
               a.only->name, a.workers, a.producers, a.rate, r.tasks_per_s / 1e6, us(r.wait_ns.p50),
               us(r.wait_ns.p99), us(r.wait_ns.p999), us(r.wait_ns.max), (unsigned long long)r.full,
               c2c_range_str(&c2c, c2c_buf, sizeof(c2c_buf)));
        return 0;
    }
    /* The figure that moves this VM's results most between runs: printed at both ends. */
    print_c2c("start");
    printf("\n");
    print_saturation(&a);
    print_paced(&a);
    printf("\n");
    print_c2c("end");
    return 0;
}
