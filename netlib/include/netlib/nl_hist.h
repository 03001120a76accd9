/*
 * nl_hist: a fixed-size log-linear histogram of uint64 values in any unit (ns, us, bytes),
 * for latencies and sizes: pool wait and run time, publish-to-deliver latency, loop lag.
 *
 * Buckets follow HdrHistogram's shape: values 0..15 each have their own bucket; above that,
 * every power of two [2^k, 2^(k+1)) is cut into 16 equal sub-buckets. A bucket is therefore
 * at most 1/16 of its lower bound wide, and a percentile, reported as the middle of the bucket
 * holding it, is within 1/32 (3.1 %) of the exact value, at any magnitude from 0 to 2^64-1.
 * The 976 buckets and the sum, min and max take 7,840 bytes whatever is recorded: no
 * allocation, no resizing, no configuration.
 *
 * Thread: nl_hist_record and nl_hist_merge use relaxed atomic increments and are safe from any
 * number of threads at once. nl_hist_record_local is the cheaper variant for a histogram that
 * only one thread ever writes (a per-loop or per-worker histogram): plain loads and stores,
 * still readable from any thread. Never mix the two variants on one histogram. The readers
 * (percentile, summarize, count, ...) are safe from any thread at any time; while recorders
 * run they see a snapshot that may lag by the values in flight. nl_hist_reset is not atomic
 * with respect to concurrent recorders.
 * Ownership: nl_hist_t is a transparent value type, embedded or allocated by the caller; a
 * zero-filled histogram (static, calloc, nl_hist_init) is a valid empty one. Touch the fields
 * only through nl_hist_*.
 * Usage: nl_hist_t h; nl_hist_init(&h); nl_hist_record(&h, nl_now_ns() - t0); ...
 *        nl_hist_summarize(&h, &s); printf("p99=%llu", s.p99); or merge several per-loop
 *        histograms into a zeroed one with nl_hist_merge and summarize that.
 */
#ifndef HERALD_NETLIB_NL_HIST_H
#define HERALD_NETLIB_NL_HIST_H

#include <stdatomic.h>
#include <stdint.h>

/* Linear sub-buckets per power of two: 2^NL_HIST_SUB_BITS. */
#define NL_HIST_SUB_BITS 4
#define NL_HIST_SUB (1u << NL_HIST_SUB_BITS)
/* 16 exact buckets for 0..15, then 16 for each of the 60 powers 2^4 .. 2^63. */
#define NL_HIST_BUCKETS (NL_HIST_SUB + (64u - NL_HIST_SUB_BITS) * NL_HIST_SUB)

typedef struct nl_hist_s {
    _Atomic uint64_t sum;     /* wraps after 2^64 total: 584 years of nanoseconds */
    _Atomic uint64_t max;     /* 0 when empty */
    _Atomic uint64_t min_inv; /* ~min, so that a zero-filled histogram reads min = UINT64_MAX */
    _Atomic uint64_t counts[NL_HIST_BUCKETS];
} nl_hist_t;

/* Figures computed from one snapshot of the buckets, so they agree with each other. */
typedef struct nl_hist_summary_s {
    uint64_t count;
    uint64_t sum;
    uint64_t min; /* 0 when count is 0 */
    uint64_t max;
    uint64_t mean; /* sum / count, rounded down; 0 when empty */
    uint64_t p50;
    uint64_t p90;
    uint64_t p99;
    uint64_t p999;
} nl_hist_summary_t;

/* Empties the histogram (a memset; a zero-filled histogram needs no init). Thread: the caller
 * must know no thread records into it meanwhile. */
void nl_hist_init(nl_hist_t *h);

/* Empties the histogram bucket by bucket with relaxed stores. Values recorded concurrently
 * may survive in part (their bucket but not their sum, or the reverse). Thread: any. */
void nl_hist_reset(nl_hist_t *h);

/* Records one value. Thread: any, concurrently with other recorders and readers. */
void nl_hist_record(nl_hist_t *h, uint64_t value);

/* Records one value with plain loads and stores (no lock prefix, no CAS): for a histogram that
 * only the calling thread writes. Readers on other threads stay safe. Thread: the single writer. */
void nl_hist_record_local(nl_hist_t *h, uint64_t value);

/* Adds every value recorded in src to dst (e.g. one histogram per loop, summed by a reader).
 * Uses atomic increments on dst, so dst may be recorded into meanwhile. dst != src.
 * Thread: any. */
void nl_hist_merge(nl_hist_t *dst, const nl_hist_t *src);

/* Values recorded so far (sum of the buckets). O(buckets). Thread: any. */
uint64_t nl_hist_count(const nl_hist_t *h);

/* The value below which pct percent of the recorded values lie (pct in [0, 100]; 99.9 for
 * p999), within 1/32 of the exact order statistic and clamped to [min, max]. pct 100 returns the
 * exact max and pct 0 the exact min. Returns 0 for an empty histogram. Thread: any. */
uint64_t nl_hist_percentile(const nl_hist_t *h, double pct);

/* Fills out with count, sum, min, max, mean and p50/p90/p99/p999 from one snapshot.
 * Thread: any. */
void nl_hist_summarize(const nl_hist_t *h, nl_hist_summary_t *out);

/* Number of recorded values whose bucket lies entirely at or below value (Prometheus's "le"
 * buckets). Exact when value + 1 is a bucket boundary (0..16, and every 2^k, for instance);
 * otherwise it leaves out the one bucket that straddles value. Thread: any. */
uint64_t nl_hist_count_le(const nl_hist_t *h, uint64_t value);

#endif
