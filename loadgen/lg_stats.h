/*
 * lg_stats: the load generator's counters: one lg_stats_t per loop thread, written only by
 * that thread, read at any time by the reporting thread, and summed into a plain lg_totals_t.
 *
 * Counters are C11 atomics written with a relaxed load and store (one writer, so no lock
 * prefix is needed) and read with relaxed loads: a report may lag by the increments in flight,
 * never tear. Reasons (connect failures, disconnects, error codes) are small tables of static
 * names and counts, filled in first-seen order; a name never leaves its slot once published.
 * Latency and connect-time histograms are nl_hist_t recorded with nl_hist_record_local.
 *
 * Thread: the lg_stats_* writers on the owning loop thread only; lg_stats_sum from any thread.
 * Ownership: lg_stats_t is embedded in the worker; lg_totals_t is a value the caller owns (it
 * holds three histograms, about 24 KiB: allocate it, do not put many on a stack).
 * Usage: lg_stats_add(&st->deliveries, 1); lg_reasons_add(&st->disconnects, "eof");
 *        reporter: lg_totals_t *t = calloc(1, sizeof *t); lg_stats_sum(t, stats, n);
 */
#ifndef HERALD_LOADGEN_LG_STATS_H
#define HERALD_LOADGEN_LG_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_hist.h"

#define LG_REASON_SLOTS 24 /* distinct reasons kept per table; the rest count as "other" */

typedef struct lg_reasons_s {
    _Atomic(const char *) names[LG_REASON_SLOTS];
    _Atomic uint64_t counts[LG_REASON_SLOTS];
} lg_reasons_t;

/* A merged, plain copy of reason tables. */
typedef struct lg_reason_list_s {
    const char *names[LG_REASON_SLOTS];
    uint64_t counts[LG_REASON_SLOTS];
    size_t len;
} lg_reason_list_t;

/* The counters every loop thread keeps. Gauges (connected, ready) go up and down. */
#define LG_STATS_FIELDS(X)                                                                         \
    X(connect_attempts) /* TCP connects started (first tries and reconnects) */                    \
    X(connect_failures) /* attempts that failed (see connect_reasons) */                           \
    X(tcp_connects)     /* TCP connects that succeeded */                                          \
    X(handshakes)       /* ConnectOk plus every SubscribeOk: client ready */                       \
    X(connected)        /* gauge: TCP connections open */                                          \
    X(ready)            /* gauge: clients ready (handshake and subscriptions done) */              \
    X(disconnects)      /* connections that closed while the run wanted them open */               \
    X(drops)            /* connections the storm closed on purpose */                              \
    X(pings)            /* Ping frames sent */                                                     \
    X(pongs)            /* Pong frames received */                                                 \
    X(scheduled)        /* publishes the schedule makes: rate x duration */                        \
    X(publishes)        /* Publish frames sent */                                                  \
    X(publish_oks)      /* PublishOk received */                                                   \
    X(publish_errors)   /* Error replies to a Publish */                                           \
    X(publish_unacked)  /* Publishes whose connection closed before the reply */                   \
    X(publish_skipped)  /* scheduled publishes dropped: the thread fell behind > 1 s */            \
    X(publish_unready)  /* scheduled publishes with no ready client to send them */                \
    X(expected)         /* deliveries owed by the PublishOks (acks x subscribers) */               \
    X(deliveries)       /* Push frames received */                                                 \
    X(missing)          /* offsets skipped (per client and channel) */                             \
    X(duplicates)       /* offsets repeated or going backwards */                                  \
    X(foreign)          /* Pushes whose payload is not a loadgen timestamp */                      \
    X(errors)           /* Error frames (or HTTP error statuses) received */                       \
    X(bytes_out)        /* frame bytes sent */                                                     \
    X(bytes_in)         /* frame bytes received */                                                 \
    X(cpu_ns)           /* this thread's CPU time (CLOCK_THREAD_CPUTIME_ID) */

#define LG_STATS_ATOMIC(name) _Atomic uint64_t name;
#define LG_STATS_PLAIN(name) uint64_t name;

typedef struct lg_stats_s {
    LG_STATS_FIELDS(LG_STATS_ATOMIC)
    lg_reasons_t connect_reasons;    /* why connects failed: errno names, auth error codes */
    lg_reasons_t disconnect_reasons; /* Disconnect codes, "eof", errno names */
    lg_reasons_t error_reasons;      /* Error frame codes */
    nl_hist_t latency_ns;            /* publish to the Push processed by this thread */
    nl_hist_t latency_arrival_ns;    /* publish to the Push's arrival in the socket (kernel) */
    nl_hist_t connect_ns;            /* connect start to ready */
} lg_stats_t;

typedef struct lg_totals_s {
    LG_STATS_FIELDS(LG_STATS_PLAIN)
    lg_reason_list_t connect_reasons;
    lg_reason_list_t disconnect_reasons;
    lg_reason_list_t error_reasons;
    nl_hist_t latency_ns;
    nl_hist_t latency_arrival_ns;
    nl_hist_t connect_ns;
} lg_totals_t;

/* Adds n to a counter. Thread: the counter's single writer. */
static inline void lg_stats_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Subtracts n from a gauge. Thread: the gauge's single writer. */
static inline void lg_stats_sub(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) - n,
                          memory_order_relaxed);
}

/* Sets a counter. Thread: the counter's single writer. */
static inline void lg_stats_set(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
}

/* Reads a counter. Thread: any. */
static inline uint64_t lg_stats_get(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* Zeroes a stats block before its thread starts. Thread: before sharing. */
void lg_stats_init(lg_stats_t *st);

/* Counts one occurrence of reason name (a static string; compared by content). A table that is
 * full counts it under "other". Thread: the table's single writer. */
void lg_reasons_add(lg_reasons_t *r, const char *name);

/* Sums n stats blocks into *out (which it zeroes first, histograms included).
 * Thread: any, while the writers run. */
void lg_stats_sum(lg_totals_t *out, lg_stats_t *const *stats, size_t n);

/* Sum of every count in a reason list. Thread: any. */
uint64_t lg_reason_list_total(const lg_reason_list_t *l);

#endif
