/*
 * lg_html: the --report page (see lg_html.h for what it holds and its data attributes).
 *
 * The page is written top to bottom with fprintf: head and stylesheet, the verdict, the
 * settings and results tables, six charts, and every interval in a table folded away in a
 * <details>. A Content-Security-Policy meta tag forbids scripts and every fetch, so the page
 * shows exactly what the file holds, offline, and a browser test can assert as much.
 */
#include "lg_html.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lg_report.h"
#include "lg_svg.h"
#include "lg_timeline.h"

static double ns_to_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double ns_to_s(uint64_t ns)
{
    return (double)ns / 1e9;
}

static double per_s(uint64_t count, uint64_t ns)
{
    return ns > 0 ? (double)count * 1e9 / (double)ns : 0.0;
}

static const char style[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2330;"
    "background:#f6f7f9}"
    "main{max-width:1000px;margin:0 auto;padding:16px 20px 40px}"
    "h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:28px 0 8px}"
    ".sub{color:#5a6272;margin:0 0 12px}"
    ".verdict{display:inline-block;padding:3px 10px;border-radius:4px;font-weight:600}"
    ".v-ok{background:#dff3e4;color:#1e6b33}.v-bad{background:#fbe3e1;color:#9b1c13}"
    "table{border-collapse:collapse;background:#fff;width:100%}"
    "th,td{text-align:left;padding:4px 10px;border-bottom:1px solid #e3e6eb;vertical-align:top}"
    "th{font-weight:600;width:30%;color:#39404d}"
    "table.intervals th,table.intervals td{width:auto;text-align:right;font-size:12px;"
    "padding:2px 6px}"
    "figure{margin:0 0 10px;background:#fff;border:1px solid #e3e6eb;border-radius:4px}"
    "figcaption{padding:8px 12px 0;font-weight:600}"
    "svg.chart{display:block;width:100%;height:auto}"
    "svg text{font:12px system-ui,sans-serif;fill:#39404d}"
    ".grid{stroke:#e6e8ec;stroke-width:1}.frame{fill:none;stroke:#9aa1ad}"
    ".band-ramp{fill:#eef1f6}.band-drain{fill:#f6f1e8}.band-label{fill:#7a8291}"
    ".s-p50{stroke:#4c78a8;fill:#4c78a8}.s-p90{stroke:#f58518;fill:#f58518}"
    ".s-p99{stroke:#e45756;fill:#e45756}"
    ".s-deliveries{fill:#4c78a8;stroke:#4c78a8}.s-publishes{fill:#72b7b2;stroke:#72b7b2}"
    ".s-connects{fill:#9ecae9;stroke:#9ecae9}.s-ready{stroke:#54a24b;fill:#54a24b}"
    ".s-connect_failures{fill:#e45756;stroke:#e45756}"
    ".s-disconnects{fill:#f58518;stroke:#f58518}.s-errors{fill:#b279a2;stroke:#b279a2}"
    ".s-histogram{fill:#8fa7c4;stroke:#8fa7c4}"
    "polyline.line{fill:none;stroke-width:2}"
    ".marker{stroke-width:1.5;stroke-dasharray:4 3}"
    "details{margin-top:8px}summary{cursor:pointer}";

/* --- Head, verdict, tables. ------------------------------------------------------------------ */

static void page_head(FILE *out, const lg_config_t *cfg, const lg_timeline_t *tl)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
          "style-src 'unsafe-inline'\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"herald-loadgen\">\n<title>herald-loadgen report: ",
          out);
    lg_svg_escape(out, cfg->host);
    fprintf(out, ":%u</title>\n<style>%s</style>\n</head>\n", cfg->port, style);
    time_t started = (time_t)(lg_timeline_started_unix_ms(tl) / 1000);
    struct tm tm;
    char when[40] = "";
    if (gmtime_r(&started, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    fprintf(out,
            "<body>\n<main data-report=\"herald-loadgen\" data-version=\"1\" "
            "data-started-unix-ms=\"%lld\">\n<h1>herald-loadgen report</h1>\n"
            "<p class=\"sub\">Run started %s against ",
            (long long)lg_timeline_started_unix_ms(tl), when);
    lg_svg_escape(out, cfg->host);
    fprintf(out, ":%u.</p>\n", cfg->port);
}

static void verdict(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    const char *status = "ok";
    const char *text = "Run completed; every threshold given holds.";
    if (r->is_failed) {
        status = "failed";
        text = "Run FAILED: no client became ready, or every client was lost while measuring.";
    } else if (!lg_report_slo_ok(NULL, cfg, r)) {
        status = "slo_broken";
        text = "SLO broken: a --max-p99, --max-arrival-p99 or --max-loss threshold was exceeded.";
    }
    bool is_ok = strcmp(status, "ok") == 0;
    fprintf(out, "<p><span class=\"verdict %s\" data-status=\"%s\">%s</span>%s</p>\n",
            is_ok ? "v-ok" : "v-bad", status, text,
            r->is_interrupted ? " Interrupted by a signal: the phases were cut short." : "");
}

/* One settings row: the label and printf-formatted text (escaped). */
static void setting(FILE *out, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void setting(FILE *out, const char *label, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(out, "<tr><th>%s</th><td>", label);
    lg_svg_escape(out, text);
    fputs("</td></tr>\n", out);
}

static void settings_table(FILE *out, const lg_config_t *cfg)
{
    char pattern[32];
    fputs("<h2>Settings</h2>\n<table class=\"settings\">\n", out);
    setting(out, "target", "%s:%u over %s%s", cfg->host, cfg->port,
            lg_transport_name(cfg->transport),
            cfg->is_insecure ? ", herald --insecure" : ", tokens signed with --secret");
    setting(out, "clients", "%u idle + %u active = %u, on %u loadgen thread%s", cfg->idle_count,
            cfg->active_count, lg_config_clients(cfg), cfg->threads, cfg->threads == 1 ? "" : "s");
    if (cfg->connect_rate)
        setting(out, "connect rate", "%u connects/s", cfg->connect_rate);
    else
        setting(out, "connect rate", "%s", "unlimited (no ramp)");
    setting(out, "pattern", "%s%s, channel prefix %s",
            lg_config_pattern_str(cfg, pattern, sizeof(pattern)),
            cfg->is_idle_shared ? " (idle clients subscribe too)" : "", cfg->channel_prefix);
    setting(out, "publishing", "%.1f publishes/s in total, %u-byte payloads, via %s",
            lg_config_fleet_rate(cfg), cfg->payload_bytes,
            cfg->is_publish_http ? "POST /api/publish" : "Publish frames");
    setting(out, "phases", "ramp timeout %.1f s, measured %.1f s, drain at most %.1f s",
            (double)cfg->ramp_timeout_ms / 1e3, (double)cfg->duration_ms / 1e3,
            (double)cfg->drain_ms / 1e3);
    if (cfg->drop_at_ms)
        setting(out, "reconnect storm", "%.0f%% of the clients at %.1f s into the measured phase",
                cfg->drop_fraction * 100, (double)cfg->drop_at_ms / 1e3);
    char slo[160];
    int n = snprintf(slo, sizeof(slo), "%s", "");
    if (cfg->has_max_p99)
        n += snprintf(slo + n, sizeof(slo) - (size_t)n, "p99 <= %.3f ms; ",
                      ns_to_ms(cfg->max_p99_ns));
    if (cfg->has_max_arrival_p99 && n < (int)sizeof(slo))
        n += snprintf(slo + n, sizeof(slo) - (size_t)n, "arrival p99 <= %.3f ms; ",
                      ns_to_ms(cfg->max_arrival_p99_ns));
    if (cfg->has_max_loss && n < (int)sizeof(slo))
        snprintf(slo + n, sizeof(slo) - (size_t)n, "loss <= %.4f%%", cfg->max_loss_pct);
    setting(out, "thresholds", "%s", slo[0] ? slo : "none");
    fputs("</table>\n", out);
}

/* One results row: <tr data-figure="name" data-value="value"> with label and text. */
static void figure(FILE *out, const char *name, const char *value, const char *label,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void figure(FILE *out, const char *name, const char *value, const char *label,
                   const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(out, "<tr data-figure=\"%s\" data-value=\"%s\"><th>%s</th><td>", name, value, label);
    lg_svg_escape(out, text);
    fputs("</td></tr>\n", out);
}

static const char *u64_str(char *buf, size_t len, uint64_t v)
{
    snprintf(buf, len, "%llu", (unsigned long long)v);
    return buf;
}

static const char *ms_str(char *buf, size_t len, uint64_t ns)
{
    snprintf(buf, len, "%.6f", ns_to_ms(ns));
    return buf;
}

static void reasons_text(char *buf, size_t len, const lg_reason_list_t *l)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < l->len && k < len; i++) {
        int n = snprintf(buf + k, len - k, "%s%s %llu", i ? ", " : " (", l->names[i],
                         (unsigned long long)l->counts[i]);
        k += n > 0 ? (size_t)n : 0;
    }
    if (l->len > 0 && k + 1 < len)
        strcat(buf, ")");
}

static void results_connect(FILE *out, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    char v[32];
    char why[400];
    figure(out, "ready_at_start", u64_str(v, sizeof(v), r->ready_at_start), "ready at start",
           "%llu clients ready when the measured phase began",
           (unsigned long long)r->ready_at_start);
    snprintf(v, sizeof(v), "%.3f", per_s(r->handshakes_in_ramp, r->ramp_ns));
    figure(out, "connects_per_s", v, "ramp", "%.2f s, %.0f connects/s", ns_to_s(r->ramp_ns),
           per_s(r->handshakes_in_ramp, r->ramp_ns));
    reasons_text(why, sizeof(why), &t->connect_reasons);
    figure(out, "connect_failures", u64_str(v, sizeof(v), t->connect_failures), "connect failures",
           "%llu of %llu attempts%s", (unsigned long long)t->connect_failures,
           (unsigned long long)t->connect_attempts, why);
    reasons_text(why, sizeof(why), &t->disconnect_reasons);
    figure(out, "disconnects", u64_str(v, sizeof(v), t->disconnects), "disconnects", "%llu%s",
           (unsigned long long)t->disconnects, why);
    reasons_text(why, sizeof(why), &t->error_reasons);
    figure(out, "errors", u64_str(v, sizeof(v), t->errors), "error frames", "%llu%s",
           (unsigned long long)t->errors, why);
}

static void results_traffic(FILE *out, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    char v[32];
    figure(out, "publishes", u64_str(v, sizeof(v), t->publishes), "publishes",
           "%llu sent, %llu ok, %llu errors, %llu skipped; %.1f/s in the measured phase (%.2f s)",
           (unsigned long long)t->publishes, (unsigned long long)t->publish_oks,
           (unsigned long long)t->publish_errors, (unsigned long long)t->publish_skipped,
           per_s(r->publishes_in_window, r->measure_ns), ns_to_s(r->measure_ns));
    figure(out, "deliveries", u64_str(v, sizeof(v), t->deliveries), "deliveries",
           "%llu of %llu expected (%s); %.1f/s in the measured phase",
           (unsigned long long)t->deliveries, (unsigned long long)t->expected,
           r->is_expected_exact ? "exact" : "approximate: clients came and went",
           per_s(r->deliveries_in_window, r->measure_ns));
    figure(out, "lost", u64_str(v, sizeof(v), lg_report_lost(r)), "lost",
           "%llu (%.4f%%), offset gaps %llu, duplicates %llu%s",
           (unsigned long long)lg_report_lost(r), lg_report_loss_pct(r),
           (unsigned long long)t->missing, (unsigned long long)t->duplicates,
           r->is_drained ? "" : "; the drain timed out");
}

/* Five rows for one latency histogram: p50, p90, p99, p999 and max, named prefix_pNN_ms. */
static void results_latency(FILE *out, const char *prefix, const char *label, const nl_hist_t *h)
{
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    static const char *const names[] = {"p50", "p90", "p99", "p999", "max"};
    const uint64_t values[] = {s.p50, s.p90, s.p99, s.p999, s.max};
    for (size_t i = 0; i < 5; i++) {
        char name[48];
        char row[64];
        char v[32];
        snprintf(name, sizeof(name), "%s_%s_ms", prefix, names[i]);
        snprintf(row, sizeof(row), "%s %s", label, names[i]);
        figure(out, name, ms_str(v, sizeof(v), values[i]), row, "%.3f ms (%llu samples)",
               ns_to_ms(values[i]), (unsigned long long)s.count);
    }
}

static void results_table(FILE *out, const lg_result_t *r)
{
    fputs("<h2>Results</h2>\n<table class=\"results\">\n", out);
    results_connect(out, r);
    results_traffic(out, r);
    results_latency(out, "latency", "latency processed", &r->totals.latency_ns);
    results_latency(out, "arrival", "latency arrival", &r->totals.latency_arrival_ns);
    char v[32];
    snprintf(v, sizeof(v), "%.2f", r->cpu_thread_max_pct);
    figure(out, "cpu_thread_max_pct", v, "loadgen cpu",
           "process %.0f%% of a core; busiest thread %.0f%% in the measured phase%s",
           r->cpu_process_pct, r->cpu_thread_max_pct,
           r->is_generator_bound ? ": the generator was the bottleneck" : "");
    fputs("</table>\n", out);
}

/* --- Charts over time. ---------------------------------------------------------------------- */

/* The attributes every per-interval element carries. */
static void point_attrs(FILE *out, const char *series, const lg_sample_t *s)
{
    fprintf(out, " data-series=\"%s\" data-phase=\"%s\" data-t0=\"%.3f\" data-t1=\"%.3f\"", series,
            lg_phase_name(s->phase), ns_to_s(s->start_ns), ns_to_s(s->end_ns));
}

/* Shades the ramp and the drain behind a time chart, one band per run of samples. */
static void phase_bands(const lg_chart_t *c, const lg_timeline_t *tl)
{
    size_t n = lg_timeline_len(tl);
    for (size_t i = 0; i < n;) {
        const lg_sample_t *first = lg_timeline_sample(tl, i);
        size_t j = i;
        while (j + 1 < n && lg_timeline_sample(tl, j + 1)->phase == first->phase)
            j++;
        const lg_sample_t *last = lg_timeline_sample(tl, j);
        double x0 = lg_chart_px(c, ns_to_s(first->start_ns));
        double x1 = lg_chart_px(c, ns_to_s(last->end_ns));
        const char *name = lg_phase_name(first->phase);
        if (first->phase != LG_PHASE_MEASURE)
            fprintf(c->out,
                    "<rect class=\"band-%s\" data-phase-band=\"%s\" x=\"%.1f\" y=\"%.1f\" "
                    "width=\"%.1f\" height=\"%.1f\"/>\n",
                    name, name, x0, c->top, x1 - x0, c->height);
        if (x1 - x0 > 40)
            fprintf(c->out, "<text class=\"band-label\" x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0 + 4,
                    c->top + 14, name);
        i = j + 1;
    }
}

static double run_end_s(const lg_timeline_t *tl)
{
    size_t n = lg_timeline_len(tl);
    return n ? ns_to_s(lg_timeline_sample(tl, n - 1)->end_ns) : 1;
}

static void figure_open(FILE *out, const char *caption)
{
    fputs("<figure><figcaption>", out);
    lg_svg_escape(out, caption);
    fputs("</figcaption>\n", out);
}

/* The latency percentile of a sample for series i (0 p50, 1 p90, 2 p99), in ms. */
static double sample_pct_ms(const lg_sample_t *s, int i)
{
    return ns_to_ms(i == 0 ? s->p50_ns : i == 1 ? s->p90_ns : s->p99_ns);
}

static void chart_latency(FILE *out, const lg_timeline_t *tl)
{
    static const char *const series[] = {"p50", "p90", "p99"};
    static const lg_chart_key_t keys[] = {{"p50", "s-p50"}, {"p90", "s-p90"}, {"p99", "s-p99"}};
    size_t n = lg_timeline_len(tl);
    double y_max = 0;
    for (size_t i = 0; i < n; i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        if (s->latency_count > 0 && sample_pct_ms(s, 2) > y_max)
            y_max = sample_pct_ms(s, 2);
    }
    figure_open(out, "Publish-to-deliver latency per interval (processed by loadgen)");
    lg_chart_t c;
    lg_chart_opts_t o = {.name = "latency",
                         .title = "Latency percentiles over time",
                         .x_label = "seconds since the start",
                         .y_label = "latency, ms",
                         .x_max = run_end_s(tl),
                         .y_max = lg_chart_nice_ceil(y_max * 1.05),
                         .keys = keys,
                         .key_count = 3};
    lg_chart_begin(&c, out, &o);
    phase_bands(&c, tl);
    for (int k = 0; k < 3; k++) {
        fprintf(out, "<polyline class=\"line s-%s\" data-line=\"%s\" points=\"", series[k],
                series[k]);
        for (size_t i = 0; i < n; i++) {
            const lg_sample_t *s = lg_timeline_sample(tl, i);
            if (s->latency_count > 0)
                fprintf(out, "%.1f,%.1f ", lg_chart_px(&c, ns_to_s(s->start_ns + s->end_ns) / 2),
                        lg_chart_py(&c, sample_pct_ms(s, k)));
        }
        fputs("\"/>\n", out);
        for (size_t i = 0; i < n; i++) {
            const lg_sample_t *s = lg_timeline_sample(tl, i);
            if (s->latency_count == 0)
                continue;
            double v = sample_pct_ms(s, k);
            fprintf(out, "<circle class=\"s-%s\" r=\"3\" cx=\"%.1f\" cy=\"%.1f\"", series[k],
                    lg_chart_px(&c, ns_to_s(s->start_ns + s->end_ns) / 2), lg_chart_py(&c, v));
            point_attrs(out, series[k], s);
            fprintf(out,
                    " data-value=\"%.6f\" data-count=\"%llu\"><title>%s %.3f ms, %.1f-%.1f s"
                    "</title></circle>\n",
                    v, (unsigned long long)s->latency_count, series[k], v, ns_to_s(s->start_ns),
                    ns_to_s(s->end_ns));
        }
    }
    lg_chart_end(&c);
    fputs("</figure>\n", out);
}

/* The count of series `name` in a sample. */
static uint64_t sample_count(const lg_sample_t *s, const char *name)
{
    if (strcmp(name, "deliveries") == 0)
        return s->deliveries;
    if (strcmp(name, "publishes") == 0)
        return s->publishes;
    if (strcmp(name, "connects") == 0)
        return s->handshakes;
    if (strcmp(name, "connect_failures") == 0)
        return s->connect_failures;
    if (strcmp(name, "disconnects") == 0)
        return s->disconnects;
    if (strcmp(name, "errors") == 0)
        return s->errors;
    return s->ready;
}

/* Bars of one or more count series, side by side within each interval. With is_rate the bar
 * height is the per-second rate, else the count. */
static void count_bars(const lg_chart_t *c, const lg_timeline_t *tl, const char *const *series,
                       size_t k, bool is_rate)
{
    for (size_t i = 0; i < lg_timeline_len(tl); i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        double x0 = lg_chart_px(c, ns_to_s(s->start_ns));
        double x1 = lg_chart_px(c, ns_to_s(s->end_ns));
        double gap = (x1 - x0) > 4 ? (x1 - x0) * 0.1 : 0;
        double w = (x1 - x0 - 2 * gap) / (double)k;
        for (size_t j = 0; j < k; j++) {
            uint64_t count = sample_count(s, series[j]);
            double rate = per_s(count, s->end_ns - s->start_ns);
            double y = lg_chart_py(c, is_rate ? rate : (double)count);
            fprintf(c->out,
                    "<rect class=\"s-%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                    "height=\"%.1f\"",
                    series[j], x0 + gap + w * (double)j, y, w > 0.5 ? w : 0.5,
                    c->top + c->height - y);
            point_attrs(c->out, series[j], s);
            fprintf(c->out,
                    " data-value=\"%llu\" data-rate=\"%.3f\"><title>%s %llu (%.1f/s), "
                    "%.1f-%.1f s</title></rect>\n",
                    (unsigned long long)count, rate, series[j], (unsigned long long)count, rate,
                    ns_to_s(s->start_ns), ns_to_s(s->end_ns));
        }
    }
}

/* The largest value of a series over the run: its rate with is_rate, else its count. */
static double series_max(const lg_timeline_t *tl, const char *name, bool is_rate)
{
    double max = 0;
    for (size_t i = 0; i < lg_timeline_len(tl); i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        uint64_t count = sample_count(s, name);
        double v = is_rate ? per_s(count, s->end_ns - s->start_ns) : (double)count;
        max = v > max ? v : max;
    }
    return max;
}

/* A chart of per-second rates of one count series. */
static void chart_rate(FILE *out, const lg_timeline_t *tl, const char *name, const char *caption,
                       const char *y_label)
{
    lg_chart_key_t key = {name, NULL};
    char css[48];
    snprintf(css, sizeof(css), "s-%s", name);
    key.css_class = css;
    figure_open(out, caption);
    lg_chart_t c;
    lg_chart_opts_t o = {.name = name,
                         .title = caption,
                         .x_label = "seconds since the start",
                         .y_label = y_label,
                         .x_max = run_end_s(tl),
                         .y_max = lg_chart_nice_ceil(series_max(tl, name, true) * 1.05),
                         .keys = &key,
                         .key_count = 1};
    lg_chart_begin(&c, out, &o);
    phase_bands(&c, tl);
    const char *series[] = {name};
    count_bars(&c, tl, series, 1, true);
    lg_chart_end(&c);
    fputs("</figure>\n", out);
}

/* Clients: connects per interval as bars, ready clients at each interval's end as a line. */
static void chart_connections(FILE *out, const lg_timeline_t *tl)
{
    static const lg_chart_key_t keys[] = {{"became ready in the interval", "s-connects"},
                                          {"ready at its end", "s-ready"}};
    double y_max = series_max(tl, "ready", false);
    double connects = series_max(tl, "connects", false);
    y_max = connects > y_max ? connects : y_max;
    figure_open(out, "Clients: ready, and connects (handshakes completed) per interval");
    lg_chart_t c;
    lg_chart_opts_t o = {.name = "connections",
                         .title = "Clients ready and connects",
                         .x_label = "seconds since the start",
                         .y_label = "clients",
                         .x_max = run_end_s(tl),
                         .y_max = lg_chart_nice_ceil(y_max * 1.05),
                         .keys = keys,
                         .key_count = 2};
    lg_chart_begin(&c, out, &o);
    phase_bands(&c, tl);
    const char *series[] = {"connects"};
    count_bars(&c, tl, series, 1, false);
    fputs("<polyline class=\"line s-ready\" data-line=\"ready\" points=\"", out);
    for (size_t i = 0; i < lg_timeline_len(tl); i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        fprintf(out, "%.1f,%.1f ", lg_chart_px(&c, ns_to_s(s->end_ns)),
                lg_chart_py(&c, (double)s->ready));
    }
    fputs("\"/>\n", out);
    for (size_t i = 0; i < lg_timeline_len(tl); i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        fprintf(out, "<circle class=\"s-ready\" r=\"2.5\" cx=\"%.1f\" cy=\"%.1f\"",
                lg_chart_px(&c, ns_to_s(s->end_ns)), lg_chart_py(&c, (double)s->ready));
        point_attrs(out, "ready", s);
        fprintf(out, " data-value=\"%llu\"><title>ready %llu at %.1f s</title></circle>\n",
                (unsigned long long)s->ready, (unsigned long long)s->ready, ns_to_s(s->end_ns));
    }
    lg_chart_end(&c);
    fputs("</figure>\n", out);
}

static void chart_errors(FILE *out, const lg_timeline_t *tl)
{
    static const char *const series[] = {"connect_failures", "disconnects", "errors"};
    static const lg_chart_key_t keys[] = {{"connect failures", "s-connect_failures"},
                                          {"disconnects", "s-disconnects"},
                                          {"Error frames", "s-errors"}};
    double y_max = 0;
    for (size_t j = 0; j < 3; j++) {
        double m = series_max(tl, series[j], false);
        y_max = m > y_max ? m : y_max;
    }
    figure_open(out, y_max > 0 ? "Connect failures, disconnects and Error frames per interval"
                               : "Connect failures, disconnects and Error frames per interval: "
                                 "none in this run");
    lg_chart_t c;
    lg_chart_opts_t o = {.name = "errors",
                         .title = "Connect failures, disconnects, errors",
                         .x_label = "seconds since the start",
                         .y_label = "count",
                         .x_max = run_end_s(tl),
                         .y_max = lg_chart_nice_ceil(y_max * 1.05),
                         .keys = keys,
                         .key_count = 3};
    lg_chart_begin(&c, out, &o);
    phase_bands(&c, tl);
    count_bars(&c, tl, series, 3, false);
    lg_chart_end(&c);
    fputs("</figure>\n", out);
}

/* --- The latency histogram. ----------------------------------------------------------------- */

/* Deliveries with a latency in [lo, hi) ns. nl_hist_count_le is exact at its bucket
 * boundaries, and every bound used here is one: a power of two times 1, 1.25, 1.5 or 1.75
 * (4 of its 16 sub-buckets) from 16 ns up. */
static uint64_t hist_count_in(const nl_hist_t *h, uint64_t lo, uint64_t hi)
{
    uint64_t below_hi = nl_hist_count_le(h, hi - 1);
    uint64_t below_lo = lo > 0 ? nl_hist_count_le(h, lo - 1) : 0;
    return below_hi - below_lo;
}

/* The next histogram bin bound after b: quarter steps of each power of two. */
static uint64_t bin_next(uint64_t b)
{
    if (b < 16)
        return 16;
    uint64_t p = (uint64_t)1 << (63 - __builtin_clzll(b)); /* the power of two at or below b */
    return b + p / 4;
}

static void hist_bars(const lg_chart_t *c, const nl_hist_t *h, const nl_hist_summary_t *s)
{
    uint64_t lo = s->min < 16 ? 0 : (uint64_t)1 << (63 - __builtin_clzll(s->min));
    while (lo <= s->max && lo < UINT64_MAX / 2) {
        uint64_t hi = bin_next(lo);
        uint64_t n = hist_count_in(h, lo, hi);
        double x0 = lg_chart_px(c, ns_to_ms(lo > 0 ? lo : 1));
        double x1 = lg_chart_px(c, ns_to_ms(hi));
        double y = lg_chart_py(c, (double)n);
        fprintf(c->out,
                "<rect class=\"s-histogram\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                "height=\"%.1f\" data-series=\"histogram\" data-lo-ms=\"%.6f\" "
                "data-hi-ms=\"%.6f\" data-value=\"%llu\"><title>%.3f-%.3f ms: %llu</title>"
                "</rect>\n",
                x0 + 0.5, y, x1 - x0 > 1.5 ? x1 - x0 - 1 : 0.5, c->top + c->height - y,
                ns_to_ms(lo), ns_to_ms(hi), (unsigned long long)n, ns_to_ms(lo), ns_to_ms(hi),
                (unsigned long long)n);
        lo = hi;
    }
}

static void chart_histogram(FILE *out, const nl_hist_t *h)
{
    static const lg_chart_key_t keys[] = {
        {"deliveries", "s-histogram"}, {"p50", "s-p50"}, {"p90", "s-p90"}, {"p99", "s-p99"}};
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    uint64_t lo = s.min < 16 ? 1 : (uint64_t)1 << (63 - __builtin_clzll(s.min));
    uint64_t tallest = 0;
    for (uint64_t b = s.min < 16 ? 0 : lo; s.count > 0 && b <= s.max && b < UINT64_MAX / 2;
         b = bin_next(b)) {
        uint64_t n = hist_count_in(h, b, bin_next(b));
        tallest = n > tallest ? n : tallest;
    }
    uint64_t hi = lo;
    while (s.count > 0 && hi <= s.max && hi < UINT64_MAX / 2)
        hi = bin_next(hi);
    char attrs[320];
    snprintf(attrs, sizeof(attrs),
             "data-count=\"%llu\" data-p50-ms=\"%.6f\" data-p90-ms=\"%.6f\" data-p99-ms=\"%.6f\" "
             "data-p999-ms=\"%.6f\" data-max-ms=\"%.6f\"",
             (unsigned long long)s.count, ns_to_ms(s.p50), ns_to_ms(s.p90), ns_to_ms(s.p99),
             ns_to_ms(s.p999), ns_to_ms(s.max));
    figure_open(out, s.count ? "Latency histogram: every delivery of the run (processed)"
                             : "Latency histogram: no delivery was measured");
    lg_chart_t c;
    lg_chart_opts_t o = {.name = "latency-histogram",
                         .title = "Latency histogram",
                         .x_label = "latency, ms (log scale)",
                         .y_label = "deliveries",
                         .x_min = ns_to_ms(lo),
                         .x_max = ns_to_ms(hi > lo ? hi : lo * 2),
                         .y_max = lg_chart_nice_ceil((double)tallest * 1.05),
                         .is_x_log = true,
                         .attrs = attrs,
                         .keys = keys,
                         .key_count = 4};
    lg_chart_begin(&c, out, &o);
    if (s.count > 0) {
        hist_bars(&c, h, &s);
        static const char *const names[] = {"p50", "p90", "p99"};
        const uint64_t values[] = {s.p50, s.p90, s.p99};
        for (size_t i = 0; i < 3; i++) {
            double x = lg_chart_px(&c, ns_to_ms(values[i]));
            fprintf(out,
                    "<line class=\"marker s-%s\" data-marker=\"%s\" data-value=\"%.6f\" "
                    "x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"><title>%s %.3f ms</title>"
                    "</line>\n",
                    names[i], names[i], ns_to_ms(values[i]), x, c.top, x, c.top + c.height,
                    names[i], ns_to_ms(values[i]));
        }
    }
    lg_chart_end(&c);
    fputs("</figure>\n", out);
}

/* --- Every interval, as a table. ------------------------------------------------------------ */

static void interval_table(FILE *out, const lg_timeline_t *tl)
{
    fprintf(out,
            "<details><summary>Every interval (%zu)</summary>\n<table class=\"intervals\">\n"
            "<tr><th>from s</th><th>to s</th><th>phase</th><th>ready</th><th>connects</th>"
            "<th>connect failures</th><th>disconnects</th><th>errors</th><th>publishes</th>"
            "<th>deliveries</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th>"
            "</tr>\n",
            lg_timeline_len(tl));
    for (size_t i = 0; i < lg_timeline_len(tl); i++) {
        const lg_sample_t *s = lg_timeline_sample(tl, i);
        fprintf(out,
                "<tr><td>%.3f</td><td>%.3f</td><td>%s</td><td>%llu</td><td>%llu</td><td>%llu</td>"
                "<td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td>",
                ns_to_s(s->start_ns), ns_to_s(s->end_ns), lg_phase_name(s->phase),
                (unsigned long long)s->ready, (unsigned long long)s->handshakes,
                (unsigned long long)s->connect_failures, (unsigned long long)s->disconnects,
                (unsigned long long)s->errors, (unsigned long long)s->publishes,
                (unsigned long long)s->deliveries);
        if (s->latency_count > 0)
            fprintf(out, "<td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td></tr>\n",
                    ns_to_ms(s->p50_ns), ns_to_ms(s->p90_ns), ns_to_ms(s->p99_ns),
                    ns_to_ms(s->max_ns));
        else
            fputs("<td></td><td></td><td></td><td></td></tr>\n", out);
    }
    fputs("</table>\n</details>\n", out);
}

static void page(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    const lg_timeline_t *tl = r->timeline;
    page_head(out, cfg, tl);
    verdict(out, cfg, r);
    settings_table(out, cfg);
    results_table(out, r);
    fputs("<h2>Over time</h2>\n", out);
    chart_latency(out, tl);
    chart_rate(out, tl, "deliveries", "Deliveries per second (Push frames received)",
               "deliveries/s");
    chart_rate(out, tl, "publishes", "Publishes per second (sent)", "publishes/s");
    chart_connections(out, tl);
    chart_errors(out, tl);
    fputs("<h2>Latency distribution</h2>\n", out);
    chart_histogram(out, &r->totals.latency_ns);
    interval_table(out, tl);
    fputs("</main>\n</body>\n</html>\n", out);
}

int lg_html_write(const lg_config_t *cfg, const lg_result_t *r)
{
    if (!r->timeline)
        return -EINVAL;
    char tmp[LG_PATH_MAX + 16];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", cfg->report_path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    FILE *out = fopen(tmp, "w");
    if (!out)
        return -errno;
    page(out, cfg, r);
    int rc = ferror(out) ? -EIO : 0;
    if (fclose(out) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, cfg->report_path) != 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}
