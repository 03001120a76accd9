/*
 * lg_html: the --report page: one self-contained HTML file (inline CSS and SVG, no script, no
 * font, image or stylesheet from anywhere else) that a person opens to see a run: its
 * settings, its results, and charts of the run interval by interval (lg_timeline.h) — latency
 * percentiles over time, the latency histogram, deliveries and publishes per second, clients
 * ready and connects, and connect failures, disconnects and Error frames.
 *
 * The numbers stay machine-readable in the page, for tests and scripts:
 *   - each chart is <svg data-chart="NAME">: latency, latency-histogram, deliveries,
 *     publishes, connections, errors;
 *   - each interval's value of a series is one element with data-series (p50, p90, p99 in
 *     ms; deliveries, publishes, connects, ready, connect_failures, disconnects, errors as
 *     counts in the interval, ready as clients at its end), data-phase (ramp, measure, drain),
 *     data-t0 and data-t1 (seconds since the run's start), data-value, and for counts data-rate
 *     (per second). Every interval has one element per count series, so those series add up to
 *     the run's totals; a latency point exists only for an interval with deliveries;
 *   - the histogram's bars are data-series="histogram" with data-lo-ms, data-hi-ms and
 *     data-value (deliveries in [lo, hi)); its <svg> carries data-count and data-p50-ms,
 *     data-p90-ms, data-p99-ms, data-p999-ms, data-max-ms, the figures of the summary table;
 *   - each results row is <tr data-figure="NAME" data-value="V"> (deliveries, latency_p99_ms,
 *     ... : see figures in lg_html.c).
 * Latency values are printed with six decimals (ms), as in the --json document; the summary
 * table rounds the same figures to three.
 *
 * Thread: the control (main) thread, after the run. Ownership: nothing retained.
 * Usage: if (cfg->report_path[0]) rc = lg_html_write(cfg, r);
 */
#ifndef HERALD_LOADGEN_LG_HTML_H
#define HERALD_LOADGEN_LG_HTML_H

#include "lg_config.h"
#include "lg_fleet.h"

/* Writes the report of run r to cfg->report_path (through a temporary file renamed into
 * place, so a reader never sees half a page).
 * Returns: 0; -EINVAL when r has no timeline; -errno when the file cannot be written. */
int lg_html_write(const lg_config_t *cfg, const lg_result_t *r);

#endif
