/*
 * lg_timeline: the run cut into intervals (one second by default) for --report: per interval
 * the connects, connect failures, disconnects, Error frames, publishes and deliveries, the
 * ready clients at its end, and the publish-to-processed latency percentiles of the deliveries
 * handled in it.
 *
 * Counters come from the control loop's cumulative snapshots (lg_stats_sum), so an interval's
 * count is the difference of two snapshots and the intervals add up exactly to the run's
 * totals. Percentiles cannot be differenced from cumulative histograms, so every worker also
 * records each latency into a small ring of per-interval histograms ("slices"): at an interval
 * boundary the control loop posts lg_timeline_worker_cut to every worker, which moves on to its
 * next slice and counts the cut in slice_cuts (release); once every worker has counted it, the
 * control loop reads the finished slices (acquire), summarizes them and empties them. The ring
 * holds LG_TIMELINE_SLICES slices and at most LG_TIMELINE_SLICES - 1 cuts are outstanding, so a
 * slice is never written while it is read. A boundary reached while the ring is full (a worker
 * stalled for seconds) closes the interval's counters without a cut: its latencies go to the
 * next interval that has one.
 *
 * Memory is bounded whatever the run's length: each phase is cut into at most
 * LG_TIMELINE_PHASE_POINTS intervals (a longer phase gets wider intervals, whole seconds), and
 * the store never holds more than LG_TIMELINE_MAX samples. Intervals never straddle a phase:
 * the measured phase of a --duration of N whole seconds is exactly N one-second intervals, the
 * last one stretched to the phase's real end (a worker's last publishes may land a tick late).
 *
 * Thread: the control (main) thread, except lg_timeline_worker_cut (a worker's own loop).
 * Ownership: the timeline is the caller's (lg_timeline_free); the worker slices are allocated
 * by lg_timeline_new and freed with it, and must outlive the worker threads.
 * Usage: lg_timeline_new(&tl, cfg, workers, n, now); each control tick:
 *        if (lg_timeline_is_due(tl, now) && lg_timeline_cut(tl, now, snap)) post the cut to
 *        every worker; lg_timeline_collect(tl). At a phase change lg_timeline_phase(...), at the
 *        end (worker threads stopped) lg_timeline_finish(tl, now, &totals).
 */
#ifndef HERALD_LOADGEN_LG_TIMELINE_H
#define HERALD_LOADGEN_LG_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lg_config.h"
#include "lg_stats.h"

struct lg_worker_s;

#define LG_TIMELINE_SLICES 4          /* latency histograms per worker, in a ring */
#define LG_TIMELINE_PHASE_POINTS 1200 /* intervals per phase before they widen */
#define LG_TIMELINE_MAX (3 * LG_TIMELINE_PHASE_POINTS + 16) /* samples held, at most */

/* The counters an interval reports, as differences of cumulative totals. */
#define LG_SAMPLE_COUNTERS(X)                                                                      \
    X(handshakes)       /* clients that became ready */                                            \
    X(connect_failures) /* connect attempts that failed */                                         \
    X(disconnects)      /* connections that closed while wanted open */                            \
    X(errors)           /* Error frames (or HTTP error statuses) */                                \
    X(publishes)        /* Publish frames sent */                                                  \
    X(publish_oks)      /* PublishOk received */                                                   \
    X(deliveries)       /* Push frames received */

#define LG_SAMPLE_FIELD(name) uint64_t name;

/* One interval. Times are ns since the run's start. */
typedef struct lg_sample_s {
    uint64_t start_ns;
    uint64_t end_ns;
    int phase; /* lg_phase_t */
    LG_SAMPLE_COUNTERS(LG_SAMPLE_FIELD)
    uint64_t ready; /* clients ready at the interval's end (a gauge) */
    /* Publish-to-processed latency of the deliveries handled in the interval; meaningful
     * when latency_count > 0. */
    uint64_t latency_count;
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t max_ns;
    int64_t cut_seq; /* internal: which slice cut closed it, -1 none */
} lg_sample_t;

typedef struct lg_timeline_s lg_timeline_t;

/* Creates a timeline for a run that starts now, in phase LG_PHASE_RAMP, and gives each of the
 * n workers its ring of latency slices (w->slices).
 * Returns: 0; -ENOMEM. Thread: main, before the worker threads start. */
int lg_timeline_new(lg_timeline_t **out, const lg_config_t *cfg, struct lg_worker_s *workers,
                    uint32_t n, uint64_t start_ns);

/* Frees the workers' slices (set to NULL) and forgets the workers; the samples stay. Call it
 * before the workers are freed. Idempotent. Thread: main, after the worker threads stopped. */
void lg_timeline_detach(lg_timeline_t *tl);

/* Frees the timeline (detaching it first if need be). NULL is fine. Thread: main. */
void lg_timeline_free(lg_timeline_t *tl);

/* Tells whether the open interval's periodic boundary has come. Thread: main. */
bool lg_timeline_is_due(const lg_timeline_t *tl, uint64_t now_ns);

/* Closes the open interval at now with the cumulative totals t and opens the next one in the
 * same phase.
 * Returns: true when the caller must now post lg_timeline_worker_cut to every worker (once
 *          each); false when the interval closed without a cut (empty interval, full ring).
 * Thread: main. */
bool lg_timeline_cut(lg_timeline_t *tl, uint64_t now_ns, const lg_totals_t *t);

/* Closes the open interval (as lg_timeline_cut, same return) and starts phase `phase`, which
 * lasts at most max_len_ns: its intervals are one second wide, or wider for a long phase, and
 * none begins within the last interval's width of start + max_len_ns. Thread: main. */
bool lg_timeline_phase(lg_timeline_t *tl, int phase, uint64_t now_ns, uint64_t max_len_ns,
                       const lg_totals_t *t);

/* Moves to the next latency slice and counts the cut: an nl_loop_post callback, arg is the
 * lg_worker_t. Thread: the worker's loop. */
void lg_timeline_worker_cut(void *arg);

/* Reads the latency of every closed interval whose cut every worker has made. Thread: main. */
void lg_timeline_collect(lg_timeline_t *tl);

/* Closes the last interval at now with the final totals and reads every slice left. ready is
 * the clients ready at the run's end, before loadgen closed them (the final totals' gauge reads
 * 0 by then). Call it once, after the worker threads stopped. Thread: main. */
void lg_timeline_finish(lg_timeline_t *tl, uint64_t now_ns, const lg_totals_t *t, uint64_t ready);

/* The samples, in time order. Thread: main (or any, after lg_timeline_finish). */
size_t lg_timeline_len(const lg_timeline_t *tl);
const lg_sample_t *lg_timeline_sample(const lg_timeline_t *tl, size_t i);

/* The run's start as Unix time in ms (CLOCK_REALTIME when the timeline was created). */
int64_t lg_timeline_started_unix_ms(const lg_timeline_t *tl);

#endif
