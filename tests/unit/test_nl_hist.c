/*
 * test_nl_hist: the log-linear histogram: exact small values, bucket boundaries, percentile
 * accuracy against a sorted reference on random data of several shapes, merge, the
 * single-writer variant, reset, percentiles clamped to [min, max], and exact totals with several
 * threads recording at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netlib/nl_hist.h"

static int setup_hist(void **state)
{
    nl_hist_t *h = malloc(sizeof *h);
    if (h == NULL)
        return -1;
    nl_hist_init(h);
    *state = h;
    return 0;
}

static int teardown_hist(void **state)
{
    free(*state);
    return 0;
}

/* xorshift64*: deterministic data, so a failure reproduces. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile of sorted v[0..n): the definition nl_hist documents. */
static uint64_t ref_percentile(const uint64_t *v, size_t n, double pct)
{
    if (pct <= 0.0)
        return v[0];
    if (pct >= 100.0)
        return v[n - 1];
    double want = pct / 100.0 * (double)n;
    size_t rank = (size_t)want;
    if ((double)rank < want)
        rank++;
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

static void test_nl_hist_size_fits_8k(void **state)
{
    (void)state;
    assert_true(sizeof(nl_hist_t) <= 8192);
    assert_int_equal(NL_HIST_BUCKETS, 976);
}

static void test_nl_hist_empty(void **state)
{
    nl_hist_t *h = *state;
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    assert_int_equal(s.count, 0);
    assert_int_equal(s.sum, 0);
    assert_int_equal(s.min, 0);
    assert_int_equal(s.max, 0);
    assert_int_equal(s.p50, 0);
    assert_int_equal(s.p999, 0);
    assert_int_equal(nl_hist_count(h), 0);
    assert_int_equal(nl_hist_percentile(h, 99.0), 0);
    assert_int_equal(nl_hist_count_le(h, UINT64_MAX), 0);
}

/* Values below 16 have a bucket each, so every percentile is exact. */
static void test_nl_hist_small_values_exact(void **state)
{
    nl_hist_t *h = *state;
    for (uint64_t v = 0; v < 16; v++)
        for (uint64_t i = 0; i <= v; i++)
            nl_hist_record(h, v); /* value v recorded v+1 times: 136 values */
    assert_int_equal(nl_hist_count(h), 136);
    assert_int_equal(nl_hist_percentile(h, 0.0), 0);
    /* Ranks: cumulative counts are 1,3,6,10,15,21,28,36,45,55,66,78,91,105,120,136. */
    assert_int_equal(nl_hist_percentile(h, 50.0), 11); /* rank 68 */
    assert_int_equal(nl_hist_percentile(h, 10.0), 4);  /* rank 14 */
    assert_int_equal(nl_hist_percentile(h, 100.0), 15);
    for (uint64_t v = 0; v < 16; v++)
        assert_int_equal(nl_hist_count_le(h, v), (v + 1) * (v + 2) / 2);
}

/* Extremes: 0, the first linear-log boundary, and UINT64_MAX in the very last bucket. */
static void test_nl_hist_extremes(void **state)
{
    nl_hist_t *h = *state;
    nl_hist_record(h, 0);
    nl_hist_record(h, 16);
    nl_hist_record(h, 17);
    nl_hist_record(h, UINT64_MAX);
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    assert_int_equal(s.count, 4);
    assert_int_equal(s.min, 0);
    assert_true(s.max == UINT64_MAX);
    assert_true(nl_hist_percentile(h, 100.0) == UINT64_MAX);
    assert_int_equal(nl_hist_percentile(h, 50.0), 16); /* rank 2: bucket [16,16] */
    assert_int_equal(nl_hist_percentile(h, 75.0), 17); /* rank 3: bucket [17,17] */
    /* 2^63 .. 2^64-1 is cut into 16 buckets of 2^59; the last holds UINT64_MAX. */
    uint64_t p = nl_hist_percentile(h, 99.0);
    assert_true(p >= (31ull << 59) && p <= UINT64_MAX);
    assert_int_equal(nl_hist_count_le(h, 15), 1);
    assert_int_equal(nl_hist_count_le(h, 16), 2);
    assert_int_equal(nl_hist_count_le(h, 1u << 20), 3);
    assert_int_equal(nl_hist_count_le(h, UINT64_MAX), 4);
}

/* Bucket edges above 16: [2^k, 2^k + 2^(k-4)) is one bucket, the next starts right after. */
static void test_nl_hist_count_le_boundaries(void **state)
{
    nl_hist_t *h = *state;
    nl_hist_record(h, 1023); /* last bucket below 1024: [960, 1023] */
    nl_hist_record(h, 1024); /* [1024, 1087] */
    nl_hist_record(h, 1087);
    nl_hist_record(h, 1088); /* [1088, 1151] */
    assert_int_equal(nl_hist_count_le(h, 1022), 0);
    assert_int_equal(nl_hist_count_le(h, 1023), 1);
    assert_int_equal(nl_hist_count_le(h, 1086), 1); /* straddling bucket left out */
    assert_int_equal(nl_hist_count_le(h, 1087), 3);
    assert_int_equal(nl_hist_count_le(h, 1151), 4);
}

enum { SHAPE_UNIFORM, SHAPE_LOG, SHAPE_CLUSTER, SHAPE_COUNT };

static uint64_t draw(uint64_t *rng, int shape)
{
    uint64_t r = rng_next(rng);
    switch (shape) {
    case SHAPE_UNIFORM:
        return r % 1000000u;
    case SHAPE_LOG: /* log-uniform over 0 .. 2^48: every magnitude represented */
        return (r >> 16) >> (r % 49u);
    default: /* a latency-like cluster around 20k with a long tail */
        return 20000u + (r % 1000u) + ((r % 100u) == 0 ? (r >> 40) : 0);
    }
}

/* Every percentile is within 1/32 of the sorted reference (the documented bound). */
static void test_nl_hist_percentile_accuracy(void **state)
{
    nl_hist_t *h = *state;
    enum { N = 200000 };
    uint64_t *v = malloc(N * sizeof *v);
    assert_non_null(v);
    static const double pcts[] = {0.0,  0.1,  1.0,  10.0, 25.0,  50.0,
                                  75.0, 90.0, 99.0, 99.9, 99.99, 100.0};
    for (int shape = 0; shape < SHAPE_COUNT; shape++) {
        uint64_t rng = 0x9E3779B97F4A7C15ULL + (uint64_t)shape;
        nl_hist_reset(h);
        uint64_t sum = 0;
        for (size_t i = 0; i < N; i++) {
            v[i] = draw(&rng, shape);
            sum += v[i];
            nl_hist_record(h, v[i]);
        }
        qsort(v, N, sizeof *v, cmp_u64);
        for (size_t p = 0; p < sizeof pcts / sizeof pcts[0]; p++) {
            uint64_t want = ref_percentile(v, N, pcts[p]);
            uint64_t got = nl_hist_percentile(h, pcts[p]);
            uint64_t err = got > want ? got - want : want - got;
            if (err > want / 32)
                fail_msg("shape %d p%.2f: got %llu want %llu", shape, pcts[p],
                         (unsigned long long)got, (unsigned long long)want);
        }
        nl_hist_summary_t s;
        nl_hist_summarize(h, &s);
        assert_int_equal(s.count, N);
        assert_true(s.sum == sum);
        assert_true(s.min == v[0]);
        assert_true(s.max == v[N - 1]);
        assert_true(s.mean == sum / N);
        assert_true(s.p99 == nl_hist_percentile(h, 99.0));
        assert_true(s.p999 == nl_hist_percentile(h, 99.9));
    }
    free(v);
}

static void assert_hist_equal(const nl_hist_t *a, const nl_hist_t *b)
{
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++)
        assert_true(atomic_load(&a->counts[i]) == atomic_load(&b->counts[i]));
    nl_hist_summary_t sa;
    nl_hist_summary_t sb;
    nl_hist_summarize(a, &sa);
    nl_hist_summarize(b, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa);
}

/* Four per-loop histograms merged into an empty one equal one histogram fed everything. */
static void test_nl_hist_merge(void **state)
{
    nl_hist_t *all = *state;
    nl_hist_t *parts = calloc(4, sizeof *parts);
    nl_hist_t *merged = calloc(1, sizeof *merged);
    assert_non_null(parts);
    assert_non_null(merged);
    uint64_t rng = 42;
    for (int i = 0; i < 40000; i++) {
        uint64_t x = draw(&rng, SHAPE_LOG);
        nl_hist_record(all, x);
        nl_hist_record_local(&parts[i % 4], x);
    }
    for (int p = 0; p < 4; p++)
        nl_hist_merge(merged, &parts[p]);
    assert_hist_equal(all, merged);
    /* Merging an empty histogram changes nothing, min included. */
    nl_hist_t *empty = calloc(1, sizeof *empty);
    assert_non_null(empty);
    nl_hist_merge(merged, empty);
    assert_hist_equal(all, merged);
    free(empty);
    free(merged);
    free(parts);
}

static void test_nl_hist_local_matches_atomic(void **state)
{
    nl_hist_t *a = *state;
    nl_hist_t *b = calloc(1, sizeof *b);
    assert_non_null(b);
    uint64_t rng = 7;
    for (int i = 0; i < 50000; i++) {
        uint64_t x = draw(&rng, SHAPE_CLUSTER);
        nl_hist_record(a, x);
        nl_hist_record_local(b, x);
    }
    assert_hist_equal(a, b);
    free(b);
}

static void test_nl_hist_reset(void **state)
{
    nl_hist_t *h = *state;
    nl_hist_record(h, 5);
    nl_hist_record(h, 500);
    nl_hist_reset(h);
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    assert_int_equal(s.count, 0);
    assert_int_equal(s.max, 0);
    nl_hist_record(h, 300);
    nl_hist_summarize(h, &s);
    assert_int_equal(s.count, 1);
    assert_int_equal(s.min, 300);
    assert_int_equal(s.max, 300);
    assert_int_equal(s.sum, 300);
}

/* A percentile is the middle of its bucket, clamped to [min, max]: a lone value comes back
 * exact, though its bucket's middle lies above or below it. */
static void test_nl_hist_percentile_clamped_to_min_max(void **state)
{
    nl_hist_t *h = *state;
    nl_hist_record(h, 1000); /* bucket [992, 1023], middle 1007 */
    assert_int_equal(nl_hist_percentile(h, 50.0), 1000);
    assert_int_equal(nl_hist_percentile(h, 99.9), 1000);
    nl_hist_reset(h);
    nl_hist_record(h, 1022); /* same bucket, above its middle */
    assert_int_equal(nl_hist_percentile(h, 50.0), 1022);
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    assert_int_equal(s.p50, 1022);
    assert_int_equal(s.p999, 1022);
}

enum { REC_THREADS = 4, REC_PER_THREAD = 200000 };

typedef struct rec_arg_s {
    nl_hist_t *h;
    int idx;
    _Atomic int *running;
} rec_arg_t;

/* Thread t records t*REC_PER_THREAD + 0 .. +REC_PER_THREAD-1, so the exact sum is known. */
static void *rec_thread(void *p)
{
    rec_arg_t *a = p;
    uint64_t base = (uint64_t)a->idx * REC_PER_THREAD;
    for (uint64_t i = 0; i < REC_PER_THREAD; i++)
        nl_hist_record(a->h, base + i);
    atomic_fetch_sub(a->running, 1);
    return NULL;
}

/* Several threads record into one histogram while a reader summarizes: the final count, sum,
 * min and max are exact and every intermediate summary is internally sane. */
static void test_nl_hist_concurrent_record(void **state)
{
    nl_hist_t *h = *state;
    pthread_t th[REC_THREADS];
    rec_arg_t args[REC_THREADS];
    _Atomic int running = REC_THREADS;
    for (int i = 0; i < REC_THREADS; i++) {
        args[i] = (rec_arg_t){h, i, &running};
        assert_int_equal(pthread_create(&th[i], NULL, rec_thread, &args[i]), 0);
    }
    uint64_t last_count = 0;
    while (atomic_load(&running) > 0) {
        nl_hist_summary_t s;
        nl_hist_summarize(h, &s);
        assert_true(s.count >= last_count);
        assert_true(s.count <= (uint64_t)REC_THREADS * REC_PER_THREAD);
        last_count = s.count;
    }
    for (int i = 0; i < REC_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    const uint64_t n = (uint64_t)REC_THREADS * REC_PER_THREAD;
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    assert_true(s.count == n);
    assert_true(s.sum == n * (n - 1) / 2);
    assert_int_equal(s.min, 0);
    assert_true(s.max == n - 1);
    uint64_t p50 = s.p50;
    assert_true(p50 >= n / 2 - n / 64 && p50 <= n / 2 + n / 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_hist_size_fits_8k),
        cmocka_unit_test_setup_teardown(test_nl_hist_empty, setup_hist, teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_small_values_exact, setup_hist, teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_extremes, setup_hist, teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_count_le_boundaries, setup_hist,
                                        teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_percentile_accuracy, setup_hist,
                                        teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_merge, setup_hist, teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_local_matches_atomic, setup_hist,
                                        teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_reset, setup_hist, teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_percentile_clamped_to_min_max, setup_hist,
                                        teardown_hist),
        cmocka_unit_test_setup_teardown(test_nl_hist_concurrent_record, setup_hist, teardown_hist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
