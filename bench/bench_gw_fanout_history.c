/*
 * bench_gw_fanout_history: issue 17's cost of history on broadcast (see the usage in
 * bench_gw_fanout.c).
 *
 *   history        whole throughput runs, herald without history and herald keeping 100, in
 *                  turn: the two configurations as deployed, each its own process.
 *   history-mixed  one herald (--history-rules, default fan=100), one fleet subscribed to two
 *                  channels: "fan", which keeps history, and "nofan", which no rule names.
 *                  The publisher broadcasts to one channel for --slice-ms (1 s), waits until
 *                  the slice is delivered, then to the other, --slices pairs (40) in the order
 *                  AB BA AB ...; a slice's rate is its deliveries over its time, drain included.
 *                  Both sides share the process, its connections and the minute the machine
 *                  is in, so a pair's ratio is the cost of history with little else in it;
 *                  the separate runs of --mode history move by a third from one quarter-hour
 *                  to the next on this VM. Besides the rate, each slice records herald's CPU
 *                  time (all its threads' /proc schedstat run time, in ns) per delivery: time
 *                  other processes take from herald's CPU lowers its rate but not that.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gw_fanout.h"
#include "herald_client.h"
#include "herald_harness.h"

#define MIXED_CHAN_OFF "nofan"
#define DRAIN_SLICE_MS 30000

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

double fan_print_spread(const double *v, int n, double div, int decimals)
{
    double sorted[2 * MAX_SLICES];
    memcpy(sorted, v, (size_t)n * sizeof(*v));
    qsort(sorted, (size_t)n, sizeof(*sorted), cmp_double);
    double med = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    printf("%.*f [%.*f-%.*f]", decimals, med / div, decimals, sorted[0] / div, decimals,
           sorted[n - 1] / div);
    return med;
}

/* --mode history: alternates throughput runs of herald without history and with it,
 * o->rounds pairs, the order swapped every round; prints the runs and the summary. */
int fan_run_history(const opts_t *o)
{
    const char *on = o->history_rules[0] ? o->history_rules : HISTORY_ON_DEFAULT;
    double rate[2][MAX_ROUNDS]; /* [0] history on, [1] off */
    double cpu[2][MAX_ROUNDS];
    double ratio[2][MAX_ROUNDS];
    int failed = 0;
    for (int k = 0; k < o->rounds; k++) {
        for (int j = 0; j < 2; j++) {
            int side = (j == 0) == (k % 2 == 1) ? 0 : 1; /* off-on, on-off, ... */
            printf("history round %d/%d, run %d: history %s\n", k + 1, o->rounds, j + 1,
                   side == 0 ? on : "off");
            rate[side][k] = 0;
            cpu[side][k] = 0;
            failed += fan_run_herald_throughput(o, side == 0 ? on : NULL, &rate[side][k],
                                                &cpu[side][k]) != 0;
        }
        ratio[0][k] = rate[1][k] > 0 ? rate[0][k] / rate[1][k] : 0;
        ratio[1][k] = cpu[1][k] > 0 ? cpu[0][k] / cpu[1][k] : 0;
    }
    printf("history: %d pairs, %zu subscribers, %zu-byte payload, %d s runs, herald io_threads=1 "
           "on CPU 0; median [min-max]\n  M deliveries/s: history off ",
           o->rounds, o->subs, o->payload, o->seconds);
    fan_print_spread(rate[1], o->rounds, 1e6, 2);
    printf(", on (%s) ", on);
    fan_print_spread(rate[0], o->rounds, 1e6, 2);
    printf("; on/off per pair ");
    double ratio_med = fan_print_spread(ratio[0], o->rounds, 1, 3);
    printf("\n  herald CPU ns per delivery: history off ");
    fan_print_spread(cpu[1], o->rounds, 1, 1);
    printf(", on ");
    fan_print_spread(cpu[0], o->rounds, 1, 1);
    printf("; on/off per pair ");
    fan_print_spread(ratio[1], o->rounds, 1, 3);
    printf("\n  history costs %.1f%% of the broadcast rate (median pair; target < 10%%); loss "
           "check: %s\n",
           (1 - ratio_med) * 100, failed ? "FAILED in some run" : "zero loss in every run");
    return failed ? -1 : 0;
}

/* The history-mixed run's state. Side 0 is "fan" (history on), side 1 "nofan" (off). */
typedef struct mixed_s {
    const opts_t *o;
    pid_t pid; /* herald's */
    test_fleet_t *fl;
    run_t *r;
    publisher_t pub[2];
    double rate[2][MAX_SLICES];   /* deliveries/s per slice */
    double cpu_ns[2][MAX_SLICES]; /* herald CPU ns per delivery per slice */
    double deliveries[2];         /* totals over the measured slices */
    double seconds[2];
    double cpu_total_ns[2];
} mixed_t;

/* One slice on side: publishes to its channel under the window for o->slice_ms, then waits
 * until everything it published is delivered; records the slice as number k (k < 0: warm-up,
 * not recorded). Returns 0, or -1 when the drain timed out or a send failed. */
static int mixed_slice(mixed_t *m, int side, int k)
{
    const opts_t *o = m->o;
    run_t *r = m->r;
    publisher_t *pub = &m->pub[side];
    uint64_t n = r->n;
    uint64_t d0 = r->delivered;
    uint64_t s0 = pub->sent;
    uint64_t cpu0 = fan_proc_cpu_ns(m->pid);
    uint64_t t0 = fan_now_ns();
    uint64_t t_end = t0 + (uint64_t)o->slice_ms * 1000000ull;
    while (fan_now_ns() < t_end) {
        while ((pub->sent - s0) * n - (r->delivered - d0) < o->window * n)
            if (fan_publish(pub, pub->sent) < 0)
                return -1;
        test_fleet_poll_raw(m->fl, 10, fan_herald_raw, r);
        fan_publisher_drain(pub); /* both publishers share one connection */
    }
    uint64_t drain_until = fan_now_ns() + (uint64_t)DRAIN_SLICE_MS * 1000000ull;
    while (r->delivered - d0 < (pub->sent - s0) * n && fan_now_ns() < drain_until) {
        test_fleet_poll_raw(m->fl, 10, fan_herald_raw, r);
        fan_publisher_drain(pub);
    }
    uint64_t t1 = fan_now_ns();
    uint64_t cpu1 = fan_proc_cpu_ns(m->pid);
    double got = (double)(r->delivered - d0);
    if (r->delivered - d0 != (pub->sent - s0) * n || got == 0)
        return -1;
    if (k >= 0) {
        m->rate[side][k] = got * 1e9 / (double)(t1 - t0);
        m->cpu_ns[side][k] = (double)(cpu1 - cpu0) / got;
        m->deliveries[side] += got;
        m->seconds[side] += (double)(t1 - t0) / 1e9;
        m->cpu_total_ns[side] += (double)(cpu1 - cpu0);
    }
    return 0;
}

/* Subscribes the fleet to the second channel; r->next_b gets where its Pushes continue. */
static int mixed_second_channel(test_fleet_t *fl, run_t *r)
{
    r->next_b = calloc(r->n, sizeof(uint64_t));
    if (!r->next_b)
        return -1;
    int rc = test_fleet_subscribe_all(fl, MIXED_CHAN_OFF, r->next_b, NULL, NULL, 300000);
    if (rc != 0) {
        fprintf(stderr, "fleet subscribe " MIXED_CHAN_OFF ": %s\n", test_fleet_what(fl));
        return -1;
    }
    for (size_t i = 0; i < r->n; i++)
        r->next_b[i]++;
    return 0;
}

/* A warm-up slice on each side (the first broadcasts grow herald's buffers), then o->slices
 * pairs in the order AB, BA, AB, ... Returns 0, or -1 when a slice failed. */
static int mixed_slices(mixed_t *m)
{
    if (mixed_slice(m, 0, -1) < 0 || mixed_slice(m, 1, -1) < 0)
        return -1;
    for (int k = 0; k < m->o->slices; k++)
        for (int j = 0; j < 2; j++)
            if (mixed_slice(m, (j == 0) == (k % 2 == 0) ? 0 : 1, k) < 0)
                return -1;
    return 0;
}

/* Prints one figure's sides, per-pair ratio (on/off) and the ratio over all slices. */
static void mixed_print(const mixed_t *m, const char *what, const double v[2][MAX_SLICES],
                        double div, int decimals, double all_on, double all_off)
{
    int n = m->o->slices;
    double ratio[MAX_SLICES];
    for (int k = 0; k < n; k++)
        ratio[k] = v[1][k] > 0 ? v[0][k] / v[1][k] : 0;
    printf("  %s: history on ", what);
    fan_print_spread(v[0], n, div, decimals);
    printf(", off ");
    fan_print_spread(v[1], n, div, decimals);
    printf("; on/off per pair ");
    fan_print_spread(ratio, n, 1, 3);
    printf("; all slices together %.3f\n", all_off > 0 ? all_on / all_off : 0);
}

static void mixed_report(const mixed_t *m, const char *rules, double secs)
{
    const opts_t *o = m->o;
    printf("history-mixed: one herald (io_threads=1, CPU 0, rules %s), %zu subscribers on "
           "\"fan\" (keeps history) and \"" MIXED_CHAN_OFF "\" (none), %zu-byte payload, %d "
           "pairs of %d ms slices (AB BA ...), %.0f s; median [min-max] over the slices\n",
           rules, m->r->n, o->payload, o->slices, o->slice_ms, secs);
    mixed_print(m, "M deliveries/s", m->rate, 1e6, 2, m->deliveries[0] / m->seconds[0],
                m->deliveries[1] / m->seconds[1]);
    mixed_print(m, "herald CPU ns per delivery", m->cpu_ns, 1, 1,
                m->cpu_total_ns[0] / m->deliveries[0], m->cpu_total_ns[1] / m->deliveries[1]);
    printf("  pairs, on/off M deliveries/s (herald CPU ns per delivery):");
    for (int k = 0; k < o->slices; k++)
        printf(" %.2f/%.2f (%.0f/%.0f)", m->rate[0][k] / 1e6, m->rate[1][k] / 1e6, m->cpu_ns[0][k],
               m->cpu_ns[1][k]);
    printf("\n");
}

int fan_run_history_mixed(const opts_t *o)
{
    const char *on = o->history_rules[0] ? o->history_rules : HISTORY_ON_DEFAULT;
    test_herald_t *h = fan_start_herald(o, "1", 0, on);
    if (!h)
        return -1;
    mixed_t *m = calloc(1, sizeof(*m));
    run_t r = {.n = o->subs, .payload = o->payload, .next = calloc(o->subs, sizeof(uint64_t))};
    test_fleet_t *fl = m ? fan_herald_fleet(o, h, &r) : NULL;
    int rc = fl ? mixed_second_channel(fl, &r) : -1;
    test_client_t c = {.fd = -1};
    if (rc == 0)
        rc = test_client_auth(&c, h->port, "pub", 10000);
    uint64_t want = 0;
    if (rc == 0) {
        *m = (mixed_t){.o = o, .pid = h->pid, .fl = fl, .r = &r};
        fan_publisher_init_on(&m->pub[0], c.fd, false, "fan", o->payload);
        fan_publisher_init_on(&m->pub[1], c.fd, false, MIXED_CHAN_OFF, o->payload);
        uint64_t t0 = fan_now_ns();
        rc = mixed_slices(m);
        if (rc == 0)
            mixed_report(m, on, (double)(fan_now_ns() - t0) / 1e9);
        fan_print_history_metrics(h);
        want = (m->pub[0].sent + m->pub[1].sent) * r.n;
        free(m->pub[0].buf);
        free(m->pub[1].buf);
    }
    bool is_complete = rc == 0 && r.delivered == want && r.lost == 0 && r.other == 0 &&
                       test_fleet_open_count(fl) == r.n;
    printf("  loss check: %s (delivered %llu of %llu, out of sequence %llu, other %llu)\n",
           is_complete ? "zero loss" : "FAILED", (unsigned long long)r.delivered,
           (unsigned long long)want, (unsigned long long)r.lost, (unsigned long long)r.other);
    test_client_close(&c);
    test_fleet_free(fl);
    free(r.next);
    free(r.next_b);
    free(m);
    int st = test_herald_stop(h, 0);
    return is_complete && st == 0 ? 0 : -1;
}
