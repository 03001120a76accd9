/*
 * lg_progress: the live line on a terminal and the plain per-second lines (see lg_progress.h).
 */
#include "lg_progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lg_fleet.h"

#define LIVE_WIDTH_DEFAULT 120 /* columns when the terminal does not say */
#define LIVE_LINE_MAX 512

static double ns_to_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double per_s(uint64_t count, uint64_t ns)
{
    return ns > 0 ? (double)count * 1e9 / (double)ns : 0.0;
}

void lg_progress_init(lg_progress_t *p, const lg_config_t *cfg, uint64_t now_ns)
{
    memset(p, 0, sizeof(*p));
    p->cfg = cfg;
    p->last_ns = now_ns;
    switch (cfg->progress) {
    case LG_PROGRESS_TTY:
        p->is_enabled = p->is_tty = true;
        break;
    case LG_PROGRESS_PLAIN:
        p->is_enabled = true;
        break;
    case LG_PROGRESS_NONE:
        break;
    default:
        p->is_enabled = true;
        p->is_tty = isatty(STDERR_FILENO) == 1;
        break;
    }
}

static void progress_clear(lg_progress_t *p)
{
    if (p->is_line_open) {
        fputs("\r\033[K", stderr);
        p->is_line_open = false;
    }
}

void lg_progress_line(lg_progress_t *p, const char *phase, uint64_t now_ns, uint64_t start_ns,
                      const lg_totals_t *t, double max_thread_cpu_pct)
{
    uint64_t dt = now_ns - p->last_ns;
    double conn_s = per_s(t->handshakes - p->last_handshakes, dt);
    double pub_s = per_s(t->publishes - p->last_publishes, dt);
    double dlv_s = per_s(t->deliveries - p->last_deliveries, dt);
    uint64_t fails = t->connect_failures - p->last_connect_failures;
    p->last_ns = now_ns;
    p->last_handshakes = t->handshakes;
    p->last_publishes = t->publishes;
    p->last_deliveries = t->deliveries;
    p->last_connect_failures = t->connect_failures;
    p->cpu_pct = max_thread_cpu_pct;
    if (!p->is_enabled || p->is_tty)
        return;
    nl_hist_summary_t lat;
    nl_hist_summarize(&t->latency_ns, &lat);
    nl_hist_summary_t arr;
    nl_hist_summarize(&t->latency_arrival_ns, &arr);
    fprintf(stderr,
            "[%6.1fs] %-7s ready %llu/%u conn/s %.0f fail %llu | pub/s %.0f dlv/s %.0f | "
            "p50 %.3f p99 %.3f max %.3f ms (arrival p99 %.3f) | miss %llu dup %llu | cpu %.0f%%\n",
            (double)(now_ns - start_ns) / 1e9, phase, (unsigned long long)t->ready,
            lg_config_clients(p->cfg), conn_s, (unsigned long long)fails, pub_s, dlv_s,
            ns_to_ms(lat.p50), ns_to_ms(lat.p99), ns_to_ms(lat.max), ns_to_ms(arr.p99),
            (unsigned long long)t->missing, (unsigned long long)t->duplicates, max_thread_cpu_pct);
    fflush(stderr);
}

/* Writes n with thousands separators ("1,234,567") to buf. Returns buf. */
static const char *count_str(char *buf, size_t len, uint64_t n)
{
    char digits[24];
    int d = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)n);
    size_t k = 0;
    for (int i = 0; i < d && k + 2 < len; i++) {
        if (i > 0 && (d - i) % 3 == 0)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

/* Adds the snapshot to the rate ring and returns the oldest point it held: about a second
 * old once the ring is full, the run's start before anything was drawn. */
static lg_progress_point_t rate_base(lg_progress_t *p, const lg_progress_view_t *v)
{
    lg_progress_point_t base = {.ns = v->start_ns};
    if (p->point_count == LG_PROGRESS_RATE_SLOTS)
        base = p->points[p->point_next];
    else if (p->point_count > 0)
        base = p->points[0];
    p->points[p->point_next] = (lg_progress_point_t){.ns = v->now_ns,
                                                     .handshakes = v->t->handshakes,
                                                     .publishes = v->t->publishes,
                                                     .deliveries = v->t->deliveries};
    p->point_next = (p->point_next + 1) % LG_PROGRESS_RATE_SLOTS;
    if (p->point_count < LG_PROGRESS_RATE_SLOTS)
        p->point_count++;
    return base;
}

/* The phase-specific part of the live line: what is done and what is left. */
static int live_phase_text(char *buf, size_t len, const lg_progress_t *p,
                           const lg_progress_view_t *v, const lg_progress_point_t *base)
{
    const lg_totals_t *t = v->t;
    uint64_t dt = v->now_ns - base->ns;
    double in_phase_s = (double)(v->now_ns - v->phase_start_ns) / 1e9;
    double left_s = v->deadline_ns > v->now_ns ? (double)(v->deadline_ns - v->now_ns) / 1e9 : 0;
    uint32_t clients = lg_config_clients(p->cfg);
    char a[32];
    char b[32];
    switch (v->phase) {
    case LG_PHASE_RAMP:
        return snprintf(buf, len,
                        "ramp    %5.1fs, timeout in %.1fs | ready %s/%u (%.0f%%) | %.0f conn/s | "
                        "fail %s",
                        in_phase_s, left_s, count_str(a, sizeof(a), t->ready), clients,
                        clients ? 100.0 * (double)t->ready / clients : 0.0,
                        per_s(t->handshakes - base->handshakes, dt),
                        count_str(b, sizeof(b), t->connect_failures));
    case LG_PHASE_MEASURE:
        return snprintf(
            buf, len,
            "measure %5.1fs of %.1fs, %.1fs left | ready %s/%u | %.0f pub/s %.0f dlv/s "
            "| %s delivered",
            in_phase_s, (double)p->cfg->duration_ms / 1e3, left_s,
            count_str(a, sizeof(a), t->ready), clients, per_s(t->publishes - base->publishes, dt),
            per_s(t->deliveries - base->deliveries, dt), count_str(b, sizeof(b), t->deliveries));
    default: {
        uint64_t unique = t->deliveries - t->duplicates;
        uint64_t owed = t->expected > unique ? t->expected - unique : 0;
        return snprintf(buf, len, "drain   %5.1fs, at most %.1fs left | %s owed | %s delivered",
                        in_phase_s, left_s, count_str(a, sizeof(a), owed),
                        count_str(b, sizeof(b), t->deliveries));
    }
    }
}

/* The terminal's width in columns, so the line never wraps (a wrapped line cannot be redrawn
 * with a carriage return). Asked at every redraw: the window may be resized meanwhile. */
static size_t live_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
        return ws.ws_col;
    return LIVE_WIDTH_DEFAULT;
}

void lg_progress_live(lg_progress_t *p, const lg_progress_view_t *v)
{
    if (!p->is_enabled || !p->is_tty || v->phase == LG_PHASE_DONE)
        return;
    if (p->drawn_ns && v->now_ns - p->drawn_ns < LG_PROGRESS_REDRAW_MS * 1000000ull)
        return;
    p->drawn_ns = v->now_ns;
    lg_progress_point_t base = rate_base(p, v);
    char line[LIVE_LINE_MAX];
    int n = live_phase_text(line, sizeof(line), p, v, &base);
    if (n < 0)
        return;
    size_t k = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    nl_hist_summary_t lat;
    nl_hist_summarize(&v->t->latency_ns, &lat);
    if (lat.count > 0) {
        n = snprintf(line + k, sizeof(line) - k, " | p50 %.3f p99 %.3f ms", ns_to_ms(lat.p50),
                     ns_to_ms(lat.p99));
        k += n > 0 && (size_t)n < sizeof(line) - k ? (size_t)n : 0;
    }
    n = snprintf(line + k, sizeof(line) - k, " | miss %llu dup %llu err %llu | cpu %.0f%%",
                 (unsigned long long)v->t->missing, (unsigned long long)v->t->duplicates,
                 (unsigned long long)v->t->errors, p->cpu_pct);
    k += n > 0 && (size_t)n < sizeof(line) - k ? (size_t)n : 0;
    size_t width = live_width() - 1;
    if (k > width)
        k = width;
    fprintf(stderr, "\r%.*s\033[K", (int)k, line);
    p->is_line_open = true;
    fflush(stderr);
}

void lg_progress_note(lg_progress_t *p, const char *fmt, ...)
{
    if (!p->is_enabled && strncmp(fmt, "herald-loadgen:", 15) != 0 &&
        strncmp(fmt, "warning:", 8) != 0)
        return;
    /* A note interrupts a live line; the next redraw puts it back. */
    progress_clear(p);
    p->drawn_ns = 0;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

void lg_progress_end(lg_progress_t *p)
{
    if (p->is_line_open) {
        fputc('\n', stderr);
        p->is_line_open = false;
    }
}
