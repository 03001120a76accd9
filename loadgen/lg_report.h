/*
 * lg_report: what herald-loadgen prints: the progress line once a second (rewritten in place
 * on a terminal, one plain line per second when piped), the summary table at the end, the
 * --json document, and the SLO verdict behind the exit status.
 *
 * Progress goes to stderr so that stdout carries only the summary (and --json -).
 *
 * Thread: the control (main) thread only. Ownership: nothing retained beyond lg_progress_t.
 * Usage: lg_progress_init(&p, cfg); each second lg_progress_line(&p, ...); lg_progress_end(&p);
 *        lg_report_summary(stdout, cfg, r); lg_report_json(cfg, r); rc = lg_report_slo(...).
 */
#ifndef HERALD_LOADGEN_LG_REPORT_H
#define HERALD_LOADGEN_LG_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_config.h"
#include "lg_fleet.h"
#include "lg_stats.h"

typedef struct lg_progress_s {
    const lg_config_t *cfg;
    bool is_enabled;
    bool is_tty;       /* rewrite one line in place */
    bool is_line_open; /* a live line is on screen without its newline */
    uint64_t last_ns;
    uint64_t last_handshakes;
    uint64_t last_connect_failures;
    uint64_t last_publishes;
    uint64_t last_deliveries;
} lg_progress_t;

/* Chooses the output mode from cfg->progress and whether stderr is a terminal. */
void lg_progress_init(lg_progress_t *p, const lg_config_t *cfg, uint64_t now_ns);

/* Prints one progress line: phase, elapsed time, ready clients, rates since the last line,
 * latency so far (to processed, and the p99 to arrival in the socket), loss, and the busiest
 * loop thread's CPU. */
void lg_progress_line(lg_progress_t *p, const char *phase, uint64_t now_ns, uint64_t start_ns,
                      const lg_totals_t *t, double max_thread_cpu_pct);

/* Prints a free-form note (ramp done, storm, warnings) on its own line, keeping a live
 * progress line intact. printf-style. */
void lg_progress_note(lg_progress_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends a live line with its newline. */
void lg_progress_end(lg_progress_t *p);

/* Lost deliveries: expected minus unique deliveries when expected is exact, else the offset
 * gaps; and their share of expected in percent. */
uint64_t lg_report_lost(const lg_result_t *r);
double lg_report_loss_pct(const lg_result_t *r);

/* Prints the summary table. */
void lg_report_summary(FILE *out, const lg_config_t *cfg, const lg_result_t *r);

/* Writes the JSON document to cfg->json_path ("-" is stdout). Returns 0 or -errno. */
int lg_report_json(const lg_config_t *cfg, const lg_result_t *r);

/* Checks --max-p99, --max-arrival-p99 and --max-loss, printing each broken threshold to out
 * (NULL: silent).
 * Returns: true when every threshold given holds. */
bool lg_report_slo_ok(FILE *out, const lg_config_t *cfg, const lg_result_t *r);

#endif
