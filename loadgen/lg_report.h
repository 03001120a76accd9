/*
 * lg_report: what herald-loadgen prints at the end: the summary table, the --json document,
 * and the SLO verdict behind the exit status. (While it runs: lg_progress.h; the --report
 * HTML page: lg_html.h.)
 *
 * Thread: the control (main) thread only. Ownership: nothing retained.
 * Usage: lg_report_summary(stdout, cfg, r); lg_report_json(cfg, r); ok = lg_report_slo_ok(...).
 */
#ifndef HERALD_LOADGEN_LG_REPORT_H
#define HERALD_LOADGEN_LG_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_config.h"
#include "lg_fleet.h"
#include "lg_stats.h"

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
