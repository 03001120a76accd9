/*
 * bench_gw_transport_series: runs every transport --rounds times in a turning order, prints
 * each run as it ends, then per transport the median [min-max] and, against TCP, the ratio of
 * the runs of the same round (median [min-max]): the machine moves whole rounds, a ratio taken
 * within one round sees less of that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gw_transport.h"

static const char *const names[BT_COUNT] = {"tcp", "ws", "tls", "wss"};

const char *bt_name(bt_transport_t t)
{
    return (unsigned)t < BT_COUNT ? names[t] : "?";
}

int bt_parse_transports(const char *text, bt_opts_t *o)
{
    char copy[64];
    if (strlen(text) >= sizeof(copy))
        return -EINVAL;
    strcpy(copy, text);
    o->n_transports = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < BT_COUNT && strcmp(item, names[k]) != 0)
            k++;
        if (k == BT_COUNT || o->n_transports == BT_COUNT)
            return -EINVAL;
        o->transports[o->n_transports++] = (bt_transport_t)k;
    }
    return o->n_transports > 0 ? 0 : -EINVAL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, min and max of v[0..n) (sorted in place). */
static void stats(double *v, int n, double *med, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    *lo = v[0];
    *hi = v[n - 1];
    *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void loadavg(char *out, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
    else
        snprintf(out, cap, "?");
    if (f)
        fclose(f);
}

static void print_run(const char *mode, int round, bt_transport_t t, const bt_result_t *r, int rc,
                      const bt_opts_t *o)
{
    char la[64];
    loadavg(la, sizeof(la));
    char answer[96] = "";
    if (o->is_admin_publisher)
        snprintf(answer, sizeof(answer), " (POST /api/publish answered in %.1f ms, at most %.1f)",
                 r->answer_ms_mean, r->answer_ms_max);
    if (strcmp(mode, "broadcast") == 0)
        printf("broadcast round %d %-3s: %.3fM deliveries/s, herald %.1f ns CPU per delivery "
               "(%.0f%% of a CPU; its loop ran %.0f%% and waited for a CPU %.0f%% of the time), "
               "fleet %.0f%% of CPU 1, %llu messages to %zu%s, %s; kTLS %s; load %s\n",
               round, bt_name(t), r->deliveries_per_s / 1e6, r->cpu_ns_per_delivery,
               r->herald_cpu_pct, r->loop_run_pct, r->loop_wait_pct, r->fleet_cpu_pct,
               (unsigned long long)r->published, o->subs, answer, rc == 0 ? "zero loss" : "FAILED",
               r->ktls, la);
    else
        printf("idle round %d %-3s: herald RSS %.1f -> %.1f MiB for %zu connections: %.0f B per "
               "connection, %.0f B per connection of the second half%s; kTLS %s; load %s\n",
               round, bt_name(t), (double)r->rss_before_kb / 1024, (double)r->rss_after_kb / 1024,
               o->idle_conns, r->bytes_per_conn, r->bytes_per_added_conn,
               rc == 0 ? "" : " (FAILED)", r->ktls, la);
}

/* Prints figure f of every transport: median [min-max], and the ratio to TCP per round. */
static void print_summary(const bt_opts_t *o, const char *what, const char *unit, double scale,
                          double fig[BT_MAX_ROUNDS][BT_COUNT],
                          const bool ok[BT_MAX_ROUNDS][BT_COUNT])
{
    printf("%s:\n", what);
    for (size_t k = 0; k < o->n_transports; k++) {
        bt_transport_t t = o->transports[k];
        double v[BT_MAX_ROUNDS];
        double ratio[BT_MAX_ROUNDS];
        int n = 0;
        int nr = 0;
        for (int r = 0; r < o->rounds; r++) {
            if (!ok[r][t])
                continue;
            v[n++] = fig[r][t] * scale;
            if (t != BT_TCP && ok[r][BT_TCP] && fig[r][BT_TCP] > 0)
                ratio[nr++] = fig[r][t] / fig[r][BT_TCP];
        }
        if (n == 0) {
            printf("  %-3s  no complete run\n", bt_name(t));
            continue;
        }
        double med, lo, hi;
        stats(v, n, &med, &lo, &hi);
        printf("  %-3s  %.3f%s [%.3f-%.3f] over %d run%s", bt_name(t), med, unit, lo, hi, n,
               n == 1 ? "" : "s");
        if (nr > 0) {
            stats(ratio, nr, &med, &lo, &hi);
            printf(";  / tcp in the same round: %.3f [%.3f-%.3f]", med, lo, hi);
        }
        printf("\n");
    }
}

int bt_series(const bt_opts_t *o, const char *mode, bt_run_fn fn)
{
    static double rate[BT_MAX_ROUNDS][BT_COUNT];
    static double cpu[BT_MAX_ROUNDS][BT_COUNT];
    static double bytes[BT_MAX_ROUNDS][BT_COUNT];
    static double added[BT_MAX_ROUNDS][BT_COUNT];
    static bool ok[BT_MAX_ROUNDS][BT_COUNT];
    memset(ok, 0, sizeof(ok));
    bool is_broadcast = strcmp(mode, "broadcast") == 0;
    char la[64];
    loadavg(la, sizeof(la));
    time_t start = time(NULL);
    char when[64];
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&start));
    printf("== %s, %d round%s of %zu transport%s, started %s, load %s%s\n", mode, o->rounds,
           o->rounds == 1 ? "" : "s", o->n_transports, o->n_transports == 1 ? "" : "s", when, la,
           !is_broadcast           ? ""
           : o->is_admin_publisher ? ", publisher: POST /api/publish"
                                   : ", publisher: Publish frames, in bursts");
    int failed = 0;
    for (int r = 0; r < o->rounds; r++) {
        for (size_t k = 0; k < o->n_transports; k++) {
            /* Even rounds in the given order, odd ones reversed. */
            bt_transport_t t = o->transports[r % 2 ? o->n_transports - 1 - k : k];
            bt_result_t res;
            int rc = fn(o, t, &res);
            print_run(mode, r + 1, t, &res, rc, o);
            ok[r][t] = rc == 0;
            failed += rc != 0;
            rate[r][t] = res.deliveries_per_s;
            cpu[r][t] = res.cpu_ns_per_delivery;
            bytes[r][t] = res.bytes_per_conn;
            added[r][t] = res.bytes_per_added_conn;
        }
    }
    if (is_broadcast) {
        print_summary(o, "deliveries/s (millions)", "M", 1e-6, rate, ok);
        print_summary(o, "herald CPU per delivery (ns)", " ns", 1, cpu, ok);
    } else {
        print_summary(o, "herald RSS per idle connection (bytes)", " B", 1, bytes, ok);
        print_summary(o, "herald RSS per idle connection, second half (bytes)", " B", 1, added, ok);
    }
    loadavg(la, sizeof(la));
    printf("== %s done in %.0f s, load %s\n", mode, difftime(time(NULL), start), la);
    return failed ? -1 : 0;
}
