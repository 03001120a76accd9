/*
 * lg_fleet: runs a whole load: the loop threads and their clients, the connect ramp, the
 * measured phase with its publish schedule, the optional reconnect storm, the drain, and the
 * once-a-second progress line.
 *
 * Phases: RAMP (clients connect at --connect-rate until all are ready or --ramp-timeout),
 * MEASURE (--duration: active clients publish at their rate), DRAIN (publishing stopped; wait
 * up to --drain until every PublishOk and every owed delivery has arrived), then everything
 * closes. The main thread runs a control loop that moves between phases by posting closures
 * to the worker loops; counters travel back as relaxed atomics (lg_stats.h).
 *
 * Thread: lg_fleet_run runs on the main thread and returns when the run is over; it blocks
 * SIGINT and SIGTERM (a first signal ends the run early, with a report; a second ends the
 * drain too). Ownership: *out is the caller's.
 * Usage: lg_result_t *r = calloc(1, sizeof *r); rc = lg_fleet_run(&cfg, r); report r.
 */
#ifndef HERALD_LOADGEN_LG_FLEET_H
#define HERALD_LOADGEN_LG_FLEET_H

#include <stdbool.h>
#include <stdint.h>

#include "lg_config.h"
#include "lg_stats.h"

struct lg_timeline_s;

/* The run's phases, in order (see the header comment). */
typedef enum lg_phase_e {
    LG_PHASE_RAMP = 0,
    LG_PHASE_MEASURE = 1,
    LG_PHASE_DRAIN = 2,
    LG_PHASE_DONE = 3,
} lg_phase_t;

/* The phase's name: "ramp", "measure", "drain", "done". Thread: any. */
const char *lg_phase_name(int phase);

/* What a run measured, for lg_report. */
typedef struct lg_result_s {
    lg_totals_t totals;            /* final counters and histograms */
    uint64_t ready_at_start;       /* clients ready when the measured phase began */
    uint64_t ramp_ns;              /* start to measured phase */
    uint64_t measure_ns;           /* the publishing window */
    uint64_t drain_ns;             /* publishing stopped to the end */
    uint64_t total_ns;             /* the whole run */
    uint64_t handshakes_in_ramp;   /* clients that became ready during the ramp */
    uint64_t deliveries_in_window; /* deliveries during the publishing window */
    uint64_t publishes_in_window;  /* Publish frames sent during it */
    uint64_t disconnects_in_window;
    bool is_expected_exact; /* every client stayed connected: expected is exact */
    bool is_drained;        /* the drain ended with nothing outstanding */

    bool has_storm;
    uint64_t storm_dropped;
    int64_t storm_recover_ns; /* drop to every client ready again; -1 when never */
    uint64_t storm_connect_failures;

    double cpu_process_pct; /* user + system of the process over the run, % of one core */
    double cpu_thread_pct[LG_THREADS_MAX]; /* each loop thread over the measured phase */
    double cpu_thread_max_pct;
    bool is_generator_bound; /* a loop thread above LG_CPU_BOUND_PCT in the measured phase */

    bool is_interrupted; /* SIGINT/SIGTERM ended it early */
    bool is_failed;      /* no client ever ready, all lost while measuring, or no thread */

    /* The run interval by interval, with --report only (else NULL); freed with
     * lg_timeline_free by whoever frees the result. */
    struct lg_timeline_s *timeline;
} lg_result_t;

/* Above this share of one core a loop thread is the bottleneck, not herald. */
#define LG_CPU_BOUND_PCT 90.0

/* Runs the load described by cfg and fills *out (which it zeroes first).
 * Returns: 0 (the run happened, even if no client connected: see out->is_failed); -ENOMEM;
 * negative errno when a loop or thread could not be created. Thread: main. */
int lg_fleet_run(const lg_config_t *cfg, lg_result_t *out);

#endif
