/*
 * lg_report: summary table, JSON and SLO verdict (see lg_report.h).
 *
 * Latencies are kept in ns and printed in ms with enough decimals for loopback figures (tens
 * of microseconds). Publish-to-deliver comes twice: to arrival in loadgen's socket (the
 * kernel's receive timestamp) and to processed by loadgen's loop thread; "latency" alone, in
 * the progress line, the JSON's latency_ms and --max-p99, is the processed one, as it was
 * before the split. The JSON carries raw counts plus the derived rates, so a script never has
 * to recompute anything, and names every unit in its keys.
 */
#include "lg_report.h"

#include <errno.h>
#include <string.h>

#include "lg_client.h"

static double ns_to_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double per_s(uint64_t count, uint64_t ns)
{
    return ns > 0 ? (double)count * 1e9 / (double)ns : 0.0;
}

uint64_t lg_report_lost(const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    uint64_t lost = t->missing;
    if (r->is_expected_exact) {
        uint64_t unique = t->deliveries - t->duplicates;
        if (t->expected > unique && t->expected - unique > lost)
            lost = t->expected - unique;
    }
    return lost;
}

double lg_report_loss_pct(const lg_result_t *r)
{
    uint64_t expected = r->totals.expected;
    return expected > 0 ? 100.0 * (double)lg_report_lost(r) / (double)expected : 0.0;
}

static void print_reasons(FILE *out, const lg_reason_list_t *l)
{
    for (size_t i = 0; i < l->len; i++)
        fprintf(out, "%s%s %llu", i == 0 ? " (" : ", ", l->names[i],
                (unsigned long long)l->counts[i]);
    if (l->len > 0)
        fputc(')', out);
    fputc('\n', out);
}

/* The count of one reason (an Error code's name) in l, 0 when absent. */
static uint64_t reasons_count(const lg_reason_list_t *l, const char *name)
{
    for (size_t i = 0; i < l->len; i++)
        if (strcmp(l->names[i], name) == 0)
            return l->counts[i];
    return 0;
}

static void print_latency(FILE *out, const char *label, const nl_hist_t *h)
{
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    fprintf(out, "  %-17s p50 %.3f  p90 %.3f  p99 %.3f  p999 %.3f  max %.3f ms  (%llu samples)\n",
            label, ns_to_ms(s.p50), ns_to_ms(s.p90), ns_to_ms(s.p99), ns_to_ms(s.p999),
            ns_to_ms(s.max), (unsigned long long)s.count);
}

static void summary_fleet(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    char pattern[32];
    fprintf(out, "  %-17s %s:%u over %s, %u thread%s, pattern %s, %u-byte payloads%s\n", "target",
            cfg->host, cfg->port, lg_transport_name(cfg->transport), cfg->threads,
            cfg->threads == 1 ? "" : "s", lg_config_pattern_str(cfg, pattern, sizeof(pattern)),
            cfg->payload_bytes, cfg->is_publish_http ? ", published via POST /api/publish" : "");
    fprintf(out, "  %-17s %u idle + %u active = %u; %llu ready when measuring began\n", "clients",
            cfg->idle_count, cfg->active_count, lg_config_clients(cfg),
            (unsigned long long)r->ready_at_start);
    fprintf(out, "  %-17s %.2f s, %.0f connects/s\n", "ramp", (double)r->ramp_ns / 1e9,
            per_s(r->handshakes_in_ramp, r->ramp_ns));
    print_latency(out, "connect time", &t->connect_ns);
    fprintf(out, "  %-17s %llu of %llu attempts", "connect failures",
            (unsigned long long)t->connect_failures, (unsigned long long)t->connect_attempts);
    print_reasons(out, &t->connect_reasons);
    fprintf(out, "  %-17s %llu", "disconnects", (unsigned long long)t->disconnects);
    print_reasons(out, &t->disconnect_reasons);
    fprintf(out, "  %-17s %llu", "error frames", (unsigned long long)t->errors);
    print_reasons(out, &t->error_reasons);
    uint64_t limited = reasons_count(&t->error_reasons, "RATE_LIMITED");
    if (limited > 0)
        fprintf(out,
                "  %-17s %llu publishes were refused RATE_LIMITED: herald's per-connection "
                "publish limit (publish_rate, by default %d/s after a burst of %d) is below "
                "the rate asked of each active client; run herald with --publish-rate 0 or use "
                "more --active clients\n",
                "note", (unsigned long long)limited, LG_HERALD_PUBLISH_RATE,
                LG_HERALD_PUBLISH_BURST);
    fprintf(out, "  %-17s %llu pings, %llu pongs\n", "heartbeats", (unsigned long long)t->pings,
            (unsigned long long)t->pongs);
}

static void summary_traffic(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    fprintf(out, "  %-17s %.2f s\n", "measured phase", (double)r->measure_ns / 1e9);
    fprintf(out,
            "  %-17s %llu sent, %llu ok, %llu errors, %llu unacked, %llu skipped, %llu unready; "
            "%.1f/s\n",
            "publishes", (unsigned long long)t->publishes, (unsigned long long)t->publish_oks,
            (unsigned long long)t->publish_errors, (unsigned long long)t->publish_unacked,
            (unsigned long long)t->publish_skipped, (unsigned long long)t->publish_unready,
            per_s(r->publishes_in_window, r->measure_ns));
    fprintf(out, "  %-17s %llu of %llu expected (%s); %.1f/s\n", "deliveries",
            (unsigned long long)t->deliveries, (unsigned long long)t->expected,
            r->is_expected_exact ? "exact" : "approximate: clients came and went",
            per_s(r->deliveries_in_window, r->measure_ns));
    if (cfg->transport == LG_TRANSPORT_TCP)
        print_latency(out, "latency arrival", &t->latency_arrival_ns);
    else /* the transport reads the socket: netlib has no kernel receive stamp to give */
        fprintf(out, "  %-17s not measured over %s (kernel receive stamps: tcp only)\n",
                "latency arrival", lg_transport_name(cfg->transport));
    print_latency(out, "latency processed", &t->latency_ns);
    fprintf(out, "  %-17s lost %llu (%.4f%%), offset gaps %llu, duplicates %llu%s\n", "loss",
            (unsigned long long)lg_report_lost(r), lg_report_loss_pct(r),
            (unsigned long long)t->missing, (unsigned long long)t->duplicates,
            r->is_drained ? "" : "; the drain timed out");
    if (r->has_storm) {
        fprintf(out, "  %-17s %llu dropped; ", "reconnect storm",
                (unsigned long long)r->storm_dropped);
        if (r->storm_recover_ns >= 0)
            fprintf(out, "all back in %.0f ms", (double)r->storm_recover_ns / 1e6);
        else
            fprintf(out, "NOT all back by the end");
        fprintf(out,
                "; %llu connect failures; messages lost on history channels: history not "
                "yet available\n",
                (unsigned long long)r->storm_connect_failures);
    }
}

void lg_report_summary(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    fprintf(out, "herald-loadgen summary%s\n", r->is_interrupted ? " (interrupted)" : "");
    summary_fleet(out, cfg, r);
    summary_traffic(out, cfg, r);
    fprintf(out,
            "  %-17s process %.0f%% of a core; busiest thread %.0f%% in the measured phase%s\n",
            "loadgen cpu", r->cpu_process_pct, r->cpu_thread_max_pct,
            r->is_generator_bound ? " -- the generator was the bottleneck: add --threads or "
                                    "loadgen processes"
                                  : "");
    fflush(out);
}

/* One p99 threshold: what names the figure in the message ("latency", "arrival latency") and
 * the option that set it. Returns: true when it holds. */
static bool slo_p99_ok(FILE *out, const nl_hist_t *h, uint64_t max_ns, const char *what,
                       const char *option)
{
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    if (s.count == 0) {
        if (out)
            fprintf(out, "SLO broken: %s given but no delivery was measured\n", option);
        return false;
    }
    if (s.p99 > max_ns) {
        if (out)
            fprintf(out, "SLO broken: p99 %s %.3f ms > %s %.3f ms\n", what, ns_to_ms(s.p99), option,
                    ns_to_ms(max_ns));
        return false;
    }
    return true;
}

bool lg_report_slo_ok(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    bool ok = true;
    if (cfg->has_max_p99 &&
        !slo_p99_ok(out, &r->totals.latency_ns, cfg->max_p99_ns, "latency", "--max-p99"))
        ok = false;
    if (cfg->has_max_arrival_p99 &&
        !slo_p99_ok(out, &r->totals.latency_arrival_ns, cfg->max_arrival_p99_ns, "arrival latency",
                    "--max-arrival-p99"))
        ok = false;
    if (cfg->has_max_loss && lg_report_loss_pct(r) > cfg->max_loss_pct) {
        if (out)
            fprintf(out, "SLO broken: loss %.4f%% > --max-loss %.4f%%\n", lg_report_loss_pct(r),
                    cfg->max_loss_pct);
        ok = false;
    }
    return ok;
}

/* --- JSON. ----------------------------------------------------------------------------------- */

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void json_reasons(FILE *out, const lg_reason_list_t *l)
{
    fputc('{', out);
    for (size_t i = 0; i < l->len; i++) {
        if (i > 0)
            fputs(", ", out);
        json_string(out, l->names[i]);
        fprintf(out, ": %llu", (unsigned long long)l->counts[i]);
    }
    fputc('}', out);
}

static void json_hist_ms(FILE *out, const nl_hist_t *h)
{
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    fprintf(out,
            "{\"count\": %llu, \"min\": %.6f, \"mean\": %.6f, \"p50\": %.6f, \"p90\": %.6f, "
            "\"p99\": %.6f, \"p999\": %.6f, \"max\": %.6f}",
            (unsigned long long)s.count, ns_to_ms(s.min), ns_to_ms(s.mean), ns_to_ms(s.p50),
            ns_to_ms(s.p90), ns_to_ms(s.p99), ns_to_ms(s.p999), ns_to_ms(s.max));
}

static void json_config(FILE *out, const lg_config_t *cfg)
{
    char pattern[32];
    fprintf(out, "  \"config\": {\"host\": ");
    json_string(out, cfg->host);
    fprintf(out,
            ", \"port\": %u, \"transport\": \"%s\", \"idle\": %u, \"active\": %u, \"threads\": %u, "
            "\"connect_rate\": %u, \"sources\": %u, \"pattern\": \"%s\", \"idle_shared\": %s, "
            "\"payload_bytes\": %u, \"rate_per_client\": %.3f, \"total_rate\": %.3f, "
            "\"fleet_rate\": %.3f, \"publish_via\": \"%s\", \"duration_ms\": %llu, "
            "\"drop_at_ms\": %llu, \"drop_fraction\": %.3f},\n",
            cfg->port, lg_transport_name(cfg->transport), cfg->idle_count, cfg->active_count,
            cfg->threads, cfg->connect_rate, cfg->source_count,
            lg_config_pattern_str(cfg, pattern, sizeof(pattern)),
            cfg->is_idle_shared ? "true" : "false", cfg->payload_bytes, cfg->rate_per_client,
            cfg->total_rate, lg_config_fleet_rate(cfg), cfg->is_publish_http ? "http" : "client",
            (unsigned long long)cfg->duration_ms, (unsigned long long)cfg->drop_at_ms,
            cfg->drop_fraction);
}

static void json_connect(FILE *out, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    fprintf(out,
            "  \"connect\": {\"attempts\": %llu, \"tcp_connects\": %llu, \"handshakes\": %llu, "
            "\"failures\": %llu, \"per_s\": %.3f, \"failures_by_reason\": ",
            (unsigned long long)t->connect_attempts, (unsigned long long)t->tcp_connects,
            (unsigned long long)t->handshakes, (unsigned long long)t->connect_failures,
            per_s(r->handshakes_in_ramp, r->ramp_ns));
    json_reasons(out, &t->connect_reasons);
    fputs(", \"time_ms\": ", out);
    json_hist_ms(out, &t->connect_ns);
    fputs("},\n", out);
}

static void json_traffic(FILE *out, const lg_result_t *r)
{
    const lg_totals_t *t = &r->totals;
    fprintf(out,
            "  \"publish\": {\"scheduled\": %llu, \"sent\": %llu, \"ok\": %llu, \"errors\": %llu, "
            "\"unacked\": %llu, \"skipped\": %llu, \"unready\": %llu, \"per_s\": %.3f},\n",
            (unsigned long long)t->scheduled, (unsigned long long)t->publishes,
            (unsigned long long)t->publish_oks, (unsigned long long)t->publish_errors,
            (unsigned long long)t->publish_unacked, (unsigned long long)t->publish_skipped,
            (unsigned long long)t->publish_unready, per_s(r->publishes_in_window, r->measure_ns));
    fprintf(out,
            "  \"delivery\": {\"deliveries\": %llu, \"expected\": %llu, \"expected_exact\": %s, "
            "\"per_s\": %.3f, \"missing\": %llu, \"duplicates\": %llu, \"lost\": %llu, "
            "\"loss_pct\": %.6f, \"foreign\": %llu, \"drained\": %s},\n",
            (unsigned long long)t->deliveries, (unsigned long long)t->expected,
            r->is_expected_exact ? "true" : "false", per_s(r->deliveries_in_window, r->measure_ns),
            (unsigned long long)t->missing, (unsigned long long)t->duplicates,
            (unsigned long long)lg_report_lost(r), lg_report_loss_pct(r),
            (unsigned long long)t->foreign, r->is_drained ? "true" : "false");
    fputs("  \"latency_ms\": ", out);
    json_hist_ms(out, &t->latency_ns);
    fputs(",\n  \"latency_arrival_ms\": ", out);
    json_hist_ms(out, &t->latency_arrival_ns);
    fprintf(out, ",\n  \"disconnects\": {\"total\": %llu, \"by_reason\": ",
            (unsigned long long)t->disconnects);
    json_reasons(out, &t->disconnect_reasons);
    fprintf(out,
            "},\n  \"errors\": {\"total\": %llu, \"by_code\": ", (unsigned long long)t->errors);
    json_reasons(out, &t->error_reasons);
    fprintf(out, "},\n  \"heartbeat\": {\"pings\": %llu, \"pongs\": %llu},\n",
            (unsigned long long)t->pings, (unsigned long long)t->pongs);
    fprintf(out, "  \"bytes\": {\"out\": %llu, \"in\": %llu},\n", (unsigned long long)t->bytes_out,
            (unsigned long long)t->bytes_in);
}

static void json_tail(FILE *out, const lg_config_t *cfg, const lg_result_t *r)
{
    if (r->has_storm) {
        fprintf(out, "  \"storm\": {\"dropped\": %llu, \"recover_ms\": ",
                (unsigned long long)r->storm_dropped);
        if (r->storm_recover_ns >= 0)
            fprintf(out, "%.3f", (double)r->storm_recover_ns / 1e6);
        else
            fputs("null", out);
        fprintf(out, ", \"connect_failures\": %llu, \"history\": \"not yet available\"},\n",
                (unsigned long long)r->storm_connect_failures);
    } else {
        fputs("  \"storm\": null,\n", out);
    }
    fprintf(out, "  \"cpu\": {\"process_pct\": %.2f, \"thread_pct\": [", r->cpu_process_pct);
    for (uint32_t i = 0; i < cfg->threads; i++)
        fprintf(out, "%s%.2f", i ? ", " : "", r->cpu_thread_pct[i]);
    fprintf(out, "], \"max_thread_pct\": %.2f, \"generator_bound\": %s},\n", r->cpu_thread_max_pct,
            r->is_generator_bound ? "true" : "false");
    fputs("  \"slo\": {\"max_p99_ms\": ", out);
    if (cfg->has_max_p99)
        fprintf(out, "%.6f", ns_to_ms(cfg->max_p99_ns));
    else
        fputs("null", out);
    fputs(", \"max_arrival_p99_ms\": ", out);
    if (cfg->has_max_arrival_p99)
        fprintf(out, "%.6f", ns_to_ms(cfg->max_arrival_p99_ns));
    else
        fputs("null", out);
    fputs(", \"max_loss_pct\": ", out);
    if (cfg->has_max_loss)
        fprintf(out, "%.6f", cfg->max_loss_pct);
    else
        fputs("null", out);
    bool ok = lg_report_slo_ok(NULL, cfg, r);
    fprintf(out, ", \"ok\": %s},\n", ok ? "true" : "false");
    fprintf(out, "  \"interrupted\": %s,\n  \"failed\": %s\n}\n",
            r->is_interrupted ? "true" : "false", r->is_failed ? "true" : "false");
}

int lg_report_json(const lg_config_t *cfg, const lg_result_t *r)
{
    bool is_stdout = strcmp(cfg->json_path, "-") == 0;
    FILE *out = is_stdout ? stdout : fopen(cfg->json_path, "w");
    if (!out)
        return -errno;
    fputs("{\n  \"version\": 1,\n", out);
    json_config(out, cfg);
    fprintf(out, "  \"clients\": {\"total\": %u, \"ready_at_start\": %llu},\n",
            lg_config_clients(cfg), (unsigned long long)r->ready_at_start);
    fprintf(out,
            "  \"phases_ms\": {\"ramp\": %.3f, \"measure\": %.3f, \"drain\": %.3f, "
            "\"total\": %.3f},\n",
            ns_to_ms(r->ramp_ns), ns_to_ms(r->measure_ns), ns_to_ms(r->drain_ns),
            ns_to_ms(r->total_ns));
    json_connect(out, r);
    json_traffic(out, r);
    json_tail(out, cfg, r);
    if (is_stdout)
        return fflush(out) == 0 ? 0 : -errno;
    int rc = ferror(out) ? -EIO : 0;
    if (fclose(out) != 0 && rc == 0)
        rc = -errno;
    return rc;
}
