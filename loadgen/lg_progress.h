/*
 * lg_progress: what herald-loadgen shows while it runs, on stderr (stdout carries only the
 * summary and --json -).
 *
 * Two forms. On a terminal (--progress auto with stderr a tty, or --progress tty) one live
 * line, redrawn in place with a carriage return at most every LG_PROGRESS_REDRAW_MS: the phase,
 * the time spent and the time left (to --ramp-timeout, to the end of --duration, to the end of
 * --drain), ready clients, rates over about the last second, the totals so far and the
 * latency so far; cut to the terminal's width so that it never wraps. Otherwise (--progress
 * plain, or auto when stderr is not a terminal) one plain line per second, whose format
 * scripts read ("[  12.0s] measure ..."): unchanged by the live form. --progress none is
 * silent. Notes (ramp done, storm, warnings) go on their own line either way.
 *
 * Thread: the control (main) thread only. Ownership: nothing retained beyond lg_progress_t.
 * Usage: lg_progress_init(&p, cfg, now); every control tick lg_progress_live(&p, &view); every
 *        second lg_progress_line(&p, ...); lg_progress_note(&p, "..."); lg_progress_end(&p).
 */
#ifndef HERALD_LOADGEN_LG_PROGRESS_H
#define HERALD_LOADGEN_LG_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "lg_config.h"
#include "lg_stats.h"

#define LG_PROGRESS_REDRAW_MS 250 /* the live line is redrawn at most this often */
#define LG_PROGRESS_RATE_SLOTS 5  /* live rates span the last 4 redraws: about 1 s */

/* One point of the live line's rate window. */
typedef struct lg_progress_point_s {
    uint64_t ns;
    uint64_t handshakes;
    uint64_t publishes;
    uint64_t deliveries;
} lg_progress_point_t;

typedef struct lg_progress_s {
    const lg_config_t *cfg;
    bool is_enabled;
    bool is_tty;       /* the live line instead of plain lines */
    bool is_line_open; /* a live line is on screen without its newline */
    /* Plain lines: the figures of the previous line, for its rates. */
    uint64_t last_ns;
    uint64_t last_handshakes;
    uint64_t last_connect_failures;
    uint64_t last_publishes;
    uint64_t last_deliveries;
    /* Live line: when it was last drawn, and a ring of snapshots for its rates. */
    uint64_t drawn_ns;
    lg_progress_point_t points[LG_PROGRESS_RATE_SLOTS];
    uint32_t point_count;
    uint32_t point_next;
    double cpu_pct; /* the busiest loop thread's share of a core, from lg_progress_line */
} lg_progress_t;

/* What the live line describes. */
typedef struct lg_progress_view_s {
    int phase;               /* lg_phase_t */
    uint64_t now_ns;         /* monotonic, as every time here */
    uint64_t start_ns;       /* the run's start */
    uint64_t phase_start_ns; /* the current phase's start */
    uint64_t deadline_ns;    /* the phase ends by then at the latest */
    const lg_totals_t *t;    /* the counters now */
} lg_progress_view_t;

/* Chooses the form from cfg->progress and whether stderr is a terminal. */
void lg_progress_init(lg_progress_t *p, const lg_config_t *cfg, uint64_t now_ns);

/* The once-a-second tick: prints the plain line (phase, elapsed time, ready clients, rates
 * since the last line, latency so far, to processed and the p99 to arrival, loss, the busiest
 * loop thread's CPU) unless the live line is on; remembers the CPU figure for it. */
void lg_progress_line(lg_progress_t *p, const char *phase, uint64_t now_ns, uint64_t start_ns,
                      const lg_totals_t *t, double max_thread_cpu_pct);

/* Redraws the live line when it is on and LG_PROGRESS_REDRAW_MS have passed since the last
 * draw; cheap to call every control tick. */
void lg_progress_live(lg_progress_t *p, const lg_progress_view_t *v);

/* Prints a free-form note (ramp done, storm, warnings) on its own line, keeping a live
 * progress line intact. printf-style. Notes starting "herald-loadgen:" or "warning:" are
 * printed even with --progress none. */
void lg_progress_note(lg_progress_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends a live line with its newline. */
void lg_progress_end(lg_progress_t *p);

#endif
