/*
 * gw_metrics: renders a snapshot of herald's figures as Prometheus text (exposition format
 * 0.0.4, for GET /metrics) or as JSON (for GET /api/stats), from the same calls.
 *
 * gw_metrics holds no metrics itself. Counters live where they are counted (per loop, plain
 * uint64_t, STYLE.md §3); at scrape time the admin handler collects them into a snapshot (by
 * posting to each loop and summing the replies), then writes the snapshot out:
 *
 *     gw_metrics_t w;
 *     gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
 *     gw_metrics_gauge(&w, "herald_connections", "Open client connections.", NULL, 1234);
 *     gw_metrics_counter(&w, "herald_closed_total", "Closed connections by reason.",
 *                        (const char *const[]){"reason", "idle", NULL}, 17);
 *     gw_metrics_hist_nl(&w, "herald_deliver_seconds", "Publish to write latency.", NULL,
 *                        &snapshot_hist, bounds, n_bounds, 1e-9);
 *     char *text; size_t len;
 *     if (gw_metrics_end(&w, &text, &len) == 0) { respond(text, len); free(text); }
 *
 * Families: the HELP and TYPE lines are written once, before a family's first sample; later
 * samples of the same name (other label values) join it. A family's samples must be written
 * consecutively: a name that comes back after another family is an error, as is reusing a
 * name with another type. Names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without
 * ':' and not "__"-prefixed); counters should end in _total. Label values are escaped.
 *
 * Labels are a NULL-terminated array of name, value pairs, or NULL for none.
 *
 * JSON shape: {"<family>": {"type": "counter", "help": "...", "samples": [
 *     {"labels": {"reason": "idle"}, "value": 17}, ...]}, ...}; a histogram sample is
 * {"labels": {...}, "count": N, "sum": S, "buckets": [{"le": 0.005, "count": C}, ...,
 * {"le": "+Inf", "count": N}]}. Non-finite gauge values are null in JSON.
 *
 * Errors are sticky: a failing call records its error and later calls do nothing, so call
 * sites need no checks; gw_metrics_end() reports it.
 *
 * Thread: a gw_metrics_t belongs to the thread writing it; different writers are independent.
 * Ownership: the writer owns its buffer until gw_metrics_end() hands it to the caller, who
 * frees it with free(). gw_metrics_end() releases everything else, on success and on error.
 */
#ifndef HERALD_GATEWAY_METRICS_GW_METRICS_H
#define HERALD_GATEWAY_METRICS_GW_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_hist.h"

#define GW_METRICS_NAME_MAX 128                 /* metric and label name bytes */
#define GW_METRICS_MAX_BYTES ((size_t)16 << 20) /* rendered output cap */

typedef enum gw_metrics_format_e {
    GW_METRICS_PROMETHEUS = 0, /* text/plain; version=0.0.4 */
    GW_METRICS_JSON = 1,       /* application/json */
} gw_metrics_format_t;

/* One histogram bucket: how many observations were <= le (cumulative). */
typedef struct gw_metrics_bucket_s {
    double le;
    uint64_t count;
} gw_metrics_bucket_t;

/* The writer. A value type: declare it on the stack and start it with gw_metrics_begin. */
typedef struct gw_metrics_s {
    gw_metrics_format_t format;
    int err; /* first error, sticky */
    char *buf;
    size_t len;
    size_t cap;
    char family[GW_METRICS_NAME_MAX]; /* the open family, "" before the first */
    int family_type;
    char **seen; /* families already closed, to refuse a name coming back */
    size_t n_seen;
    size_t cap_seen;
} gw_metrics_t;

/* Starts an empty document in the given format. Thread: the writer's. */
void gw_metrics_begin(gw_metrics_t *w, gw_metrics_format_t format);

/* Adds a counter sample. Thread: the writer's. */
void gw_metrics_counter(gw_metrics_t *w, const char *name, const char *help,
                        const char *const *labels, uint64_t value);

/* Adds a gauge sample (NaN and infinities allowed). Thread: the writer's. */
void gw_metrics_gauge(gw_metrics_t *w, const char *name, const char *help,
                      const char *const *labels, double value);

/* Adds a histogram from n cumulative buckets with strictly increasing le (the +Inf bucket is
 * added from count; do not pass it), plus the sum and count of all observations. Bucket
 * counts must not decrease and must not exceed count. A "le" label is refused.
 * Thread: the writer's. */
void gw_metrics_hist(gw_metrics_t *w, const char *name, const char *help, const char *const *labels,
                     const gw_metrics_bucket_t *buckets, size_t n, double sum, uint64_t count);

/* Adds a histogram read from an nl_hist_t: bounds[0..n) are the le values in output units
 * (seconds, say), unit the size of one recorded unit in output units (1e-9 for nanoseconds
 * shown as seconds). A bound is counted with nl_hist_count_le, so it is exact on the
 * histogram's bucket edges (powers of two and their sixteenths) and otherwise leaves out the
 * one straddling bucket. Read from one snapshot (an nl_hist_merge into a zeroed histogram)
 * for a consistent result. Thread: the writer's; h may be recorded into meanwhile. */
void gw_metrics_hist_nl(gw_metrics_t *w, const char *name, const char *help,
                        const char *const *labels, const nl_hist_t *h, const double *bounds,
                        size_t n, double unit);

/* Finishes the document and hands it over: *out is NUL-terminated and malloc'd, *out_len its
 * length without the NUL.
 * Returns: 0; or the first error: -EINVAL (bad name, label, bucket, or a family split or
 *          retyped), -ENOBUFS (over GW_METRICS_MAX_BYTES), -ENOMEM. On error *out is NULL.
 * Thread: the writer's. Ownership: the caller frees *out; the writer is released either way. */
int gw_metrics_end(gw_metrics_t *w, char **out, size_t *out_len);

#endif
