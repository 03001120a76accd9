/* nl_hist: log-linear histogram (see nl_hist.h for the bucket layout and its error bound). */
#include "netlib/nl_hist.h"

#include <string.h>

/*
 * Index of the bucket holding v. Values below 16 index themselves. For v >= 16 with its top
 * bit at position k (k >= 4), the 4 bits after the top bit pick one of the 16 sub-buckets of
 * [2^k, 2^(k+1)), and the power contributes 16 * (k - 3). So 16 -> 16, 2^64-1 -> 975.
 */
static unsigned hist_index(uint64_t v)
{
    if (v < NL_HIST_SUB)
        return (unsigned)v;
    unsigned k = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = k - NL_HIST_SUB_BITS;
    return NL_HIST_SUB * (shift + 1u) + (unsigned)((v >> shift) - NL_HIST_SUB);
}

/* Smallest value of bucket i, and its width (highest value = lower + width - 1, which does not
 * overflow even for the last bucket). */
static uint64_t bucket_lower(unsigned i, uint64_t *width)
{
    if (i < NL_HIST_SUB) {
        *width = 1;
        return i;
    }
    unsigned shift = i / NL_HIST_SUB - 1u;
    uint64_t sub = i % NL_HIST_SUB;
    *width = (uint64_t)1 << shift;
    return (NL_HIST_SUB + sub) << shift;
}

void nl_hist_init(nl_hist_t *h)
{
    memset(h, 0, sizeof(*h));
}

void nl_hist_reset(nl_hist_t *h)
{
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++)
        atomic_store_explicit(&h->counts[i], 0, memory_order_relaxed);
    atomic_store_explicit(&h->sum, 0, memory_order_relaxed);
    atomic_store_explicit(&h->max, 0, memory_order_relaxed);
    atomic_store_explicit(&h->min_inv, 0, memory_order_relaxed);
}

/* Raises *slot to v unless it already holds more. Most calls return after the first load:
 * the max of a latency distribution changes rarely once warm. */
static void atomic_raise(_Atomic uint64_t *slot, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(slot, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(slot, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/*
 * There is deliberately no separate count field: the count is the sum of the buckets, which
 * saves one contended increment per record and keeps count and percentiles consistent.
 */
void nl_hist_record(nl_hist_t *h, uint64_t value)
{
    atomic_fetch_add_explicit(&h->counts[hist_index(value)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, value, memory_order_relaxed);
    atomic_raise(&h->max, value);
    atomic_raise(&h->min_inv, ~value);
}

/* Relaxed load + relaxed store compile to plain moves on x86 and arm64; they are still atomic
 * accesses, so a reader on another thread sees whole values and is not a data race. */
static void local_add(_Atomic uint64_t *slot, uint64_t n)
{
    uint64_t cur = atomic_load_explicit(slot, memory_order_relaxed);
    atomic_store_explicit(slot, cur + n, memory_order_relaxed);
}

static void local_raise(_Atomic uint64_t *slot, uint64_t v)
{
    if (v > atomic_load_explicit(slot, memory_order_relaxed))
        atomic_store_explicit(slot, v, memory_order_relaxed);
}

void nl_hist_record_local(nl_hist_t *h, uint64_t value)
{
    local_add(&h->counts[hist_index(value)], 1);
    local_add(&h->sum, value);
    local_raise(&h->max, value);
    local_raise(&h->min_inv, ~value);
}

void nl_hist_merge(nl_hist_t *dst, const nl_hist_t *src)
{
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++) {
        uint64_t n = atomic_load_explicit(&src->counts[i], memory_order_relaxed);
        if (n)
            atomic_fetch_add_explicit(&dst->counts[i], n, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&dst->sum, atomic_load_explicit(&src->sum, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_raise(&dst->max, atomic_load_explicit(&src->max, memory_order_relaxed));
    atomic_raise(&dst->min_inv, atomic_load_explicit(&src->min_inv, memory_order_relaxed));
}

uint64_t nl_hist_count(const nl_hist_t *h)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++)
        total += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return total;
}

/* A copy of the buckets taken once, so every figure of a summary comes from the same data. */
typedef struct hist_snap_s {
    uint64_t counts[NL_HIST_BUCKETS];
    uint64_t total;
    uint64_t min;
    uint64_t max;
} hist_snap_t;

static void hist_snapshot(const nl_hist_t *h, hist_snap_t *s)
{
    s->total = 0;
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++) {
        s->counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        s->total += s->counts[i];
    }
    s->min = ~atomic_load_explicit(&h->min_inv, memory_order_relaxed);
    s->max = atomic_load_explicit(&h->max, memory_order_relaxed);
}

/*
 * The rank-th smallest value with rank = ceil(pct / 100 * total), clamped to [1, total]: the
 * nearest-rank definition, which the unit test's sorted reference uses too. The bucket holding
 * that value is exact; within it the middle is returned, which is at most half a bucket width
 * (1/32 of the value) away. Clamping to [min, max] only moves the answer closer.
 */
static uint64_t snap_percentile(const hist_snap_t *s, double pct)
{
    if (s->total == 0)
        return 0;
    if (pct >= 100.0)
        return s->max;
    if (pct <= 0.0)
        return s->min;
    double want = pct / 100.0 * (double)s->total;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    unsigned i = 0;
    for (; i < NL_HIST_BUCKETS - 1; i++) {
        seen += s->counts[i];
        if (seen >= rank)
            break;
    }
    uint64_t width;
    uint64_t v = bucket_lower(i, &width);
    v += (width - 1) / 2;
    /* Under concurrent recording min/max may be newer than the snapshot; clamp only when sane. */
    if (s->min <= s->max) {
        if (v < s->min)
            v = s->min;
        if (v > s->max)
            v = s->max;
    }
    return v;
}

uint64_t nl_hist_percentile(const nl_hist_t *h, double pct)
{
    hist_snap_t s;
    hist_snapshot(h, &s);
    return snap_percentile(&s, pct);
}

void nl_hist_summarize(const nl_hist_t *h, nl_hist_summary_t *out)
{
    hist_snap_t s;
    hist_snapshot(h, &s);
    memset(out, 0, sizeof(*out));
    out->count = s.total;
    if (s.total == 0)
        return;
    out->sum = atomic_load_explicit(&h->sum, memory_order_relaxed);
    out->min = s.min;
    out->max = s.max;
    out->mean = out->sum / s.total;
    out->p50 = snap_percentile(&s, 50.0);
    out->p90 = snap_percentile(&s, 90.0);
    out->p99 = snap_percentile(&s, 99.0);
    out->p999 = snap_percentile(&s, 99.9);
}

uint64_t nl_hist_count_le(const nl_hist_t *h, uint64_t value)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < NL_HIST_BUCKETS; i++) {
        uint64_t width;
        uint64_t lower = bucket_lower(i, &width);
        if (lower + (width - 1) > value)
            break;
        total += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    }
    return total;
}
