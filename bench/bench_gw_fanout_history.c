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
 *                  to the next on this VM.
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

/* Prints v[0..n) (n >= 1) divided by div as "median [min-max]" with decimals digits.
 * Returns the median (not divided). */
static double print_spread(const double *v, int n, double div, int decimals)
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
    double off_rate[MAX_ROUNDS];
    double on_rate[MAX_ROUNDS];
    double ratio[MAX_ROUNDS];
    int failed = 0;
    for (int k = 0; k < o->rounds; k++) {
        for (int j = 0; j < 2; j++) {
            bool is_on = (j == 0) == (k % 2 == 1);
            printf("history round %d/%d, run %d: history %s\n", k + 1, o->rounds, j + 1,
                   is_on ? on : "off");
            double rate = 0;
            failed += fan_run_herald_throughput(o, is_on ? on : NULL, &rate) != 0;
            (is_on ? on_rate : off_rate)[k] = rate;
        }
        ratio[k] = off_rate[k] > 0 ? on_rate[k] / off_rate[k] : 0;
    }
    printf("history: %d pairs, %zu subscribers, %zu-byte payload, %d s runs, herald io_threads=1 "
           "on CPU 0\n  history off        ",
           o->rounds, o->subs, o->payload, o->seconds);
    double off_med = print_spread(off_rate, o->rounds, 1e6, 2);
    printf(" M deliveries/s\n  history %-10s ", on);
    double on_med = print_spread(on_rate, o->rounds, 1e6, 2);
    printf(" M deliveries/s\n  on/off per pair    ");
    double ratio_med = print_spread(ratio, o->rounds, 1, 3);
    printf("; ratio of the medians %.3f\n", off_med > 0 ? on_med / off_med : 0);
    printf("  history costs %.1f%% of the broadcast rate (median pair; target < 10%%); loss "
           "check: %s\n",
           (1 - ratio_med) * 100, failed ? "FAILED in some run" : "zero loss in every run");
    return failed ? -1 : 0;
}

/* One slice: publishes to pub's channel under the window for o->slice_ms, then waits until
 * everything it published is delivered. Returns the slice's deliveries/s, or -1 when the
 * drain timed out or a send failed. */
static double mixed_slice(const opts_t *o, test_fleet_t *fl, run_t *r, publisher_t *pub,
                          publisher_t *both[2], double total[2])
{
    uint64_t n = r->n;
    uint64_t d0 = r->delivered;
    uint64_t s0 = pub->sent;
    uint64_t t0 = fan_now_ns();
    uint64_t t_end = t0 + (uint64_t)o->slice_ms * 1000000ull;
    while (fan_now_ns() < t_end) {
        while ((pub->sent - s0) * n - (r->delivered - d0) < o->window * n)
            if (fan_publish(pub, pub->sent) < 0)
                return -1;
        test_fleet_poll_raw(fl, 10, fan_herald_raw, r);
        fan_publisher_drain(both[0]);
    }
    uint64_t drain_until = fan_now_ns() + (uint64_t)DRAIN_SLICE_MS * 1000000ull;
    while (r->delivered - d0 < (pub->sent - s0) * n && fan_now_ns() < drain_until) {
        test_fleet_poll_raw(fl, 10, fan_herald_raw, r);
        fan_publisher_drain(both[0]);
    }
    uint64_t t1 = fan_now_ns();
    if (r->delivered - d0 != (pub->sent - s0) * n)
        return -1;
    total[0] += (double)(r->delivered - d0);
    total[1] += (double)(t1 - t0) / 1e9;
    return (double)(r->delivered - d0) * 1e9 / (double)(t1 - t0);
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

/* Runs the slices; rate[0] (history on) and rate[1] (off) get o->slices figures each, and
 * total[side] the side's deliveries and seconds, warm-up left out.
 * Returns 0, or -1 when a slice failed. */
static int mixed_slices(const opts_t *o, test_fleet_t *fl, run_t *r, publisher_t *pubs[2],
                        double *rate[2], double total[2][2])
{
    /* A warm-up slice on each channel: the first broadcasts grow herald's buffers. */
    double warm[2] = {0, 0};
    if (mixed_slice(o, fl, r, pubs[0], pubs, warm) < 0 ||
        mixed_slice(o, fl, r, pubs[1], pubs, warm) < 0)
        return -1;
    for (int k = 0; k < o->slices; k++) {
        for (int j = 0; j < 2; j++) {
            int side = (j == 0) == (k % 2 == 0) ? 0 : 1; /* AB, BA, AB, ... */
            double v = mixed_slice(o, fl, r, pubs[side], pubs, total[side]);
            if (v < 0)
                return -1;
            rate[side][k] = v;
        }
    }
    return 0;
}

int fan_run_history_mixed(const opts_t *o)
{
    const char *on = o->history_rules[0] ? o->history_rules : HISTORY_ON_DEFAULT;
    test_herald_t *h = fan_start_herald(o, "1", 0, on);
    if (!h)
        return -1;
    run_t r = {.n = o->subs, .payload = o->payload, .next = calloc(o->subs, sizeof(uint64_t))};
    test_fleet_t *fl = fan_herald_fleet(o, h, &r);
    int rc = fl ? mixed_second_channel(fl, &r) : -1;
    test_client_t c = {.fd = -1};
    if (rc == 0)
        rc = test_client_auth(&c, h->port, "pub", 10000);
    double on_rate[MAX_SLICES];
    double off_rate[MAX_SLICES];
    double ratio[MAX_SLICES];
    double *rate[2] = {on_rate, off_rate};
    double total[2][2] = {{0, 0}, {0, 0}}; /* per side: deliveries, seconds */
    publisher_t p_on = {.fd = -1};
    publisher_t p_off = {.fd = -1};
    publisher_t *pubs[2] = {&p_on, &p_off};
    uint64_t t0 = fan_now_ns();
    if (rc == 0) {
        fan_publisher_init_on(&p_on, c.fd, false, "fan", o->payload);
        fan_publisher_init_on(&p_off, c.fd, false, MIXED_CHAN_OFF, o->payload);
        rc = mixed_slices(o, fl, &r, pubs, rate, total);
        fan_print_history_metrics(h);
        free(p_on.buf);
        free(p_off.buf);
    }
    double secs = (double)(fan_now_ns() - t0) / 1e9;
    uint64_t want = (p_on.sent + p_off.sent) * r.n;
    bool is_complete = rc == 0 && r.delivered == want && r.lost == 0 && r.other == 0 &&
                       test_fleet_open_count(fl) == r.n;
    if (rc == 0) {
        for (int k = 0; k < o->slices; k++)
            ratio[k] = off_rate[k] > 0 ? on_rate[k] / off_rate[k] : 0;
        printf("history-mixed: one herald (io_threads=1, CPU 0, rules %s), %zu subscribers on "
               "\"fan\" (keeps history) and \"" MIXED_CHAN_OFF "\" (none), %zu-byte payload, "
               "%d pairs of %d ms slices (AB BA ...), %.0f s\n  history off (" MIXED_CHAN_OFF ")  ",
               on, r.n, o->payload, o->slices, o->slice_ms, secs);
        double off_med = print_spread(off_rate, o->slices, 1e6, 2);
        printf(" M deliveries/s\n  history on (fan)     ");
        double on_med = print_spread(on_rate, o->slices, 1e6, 2);
        printf(" M deliveries/s\n  on/off per pair      ");
        double ratio_med = print_spread(ratio, o->slices, 1, 3);
        printf("; ratio of the medians %.3f\n", off_med > 0 ? on_med / off_med : 0);
        double on_all = total[0][1] > 0 ? total[0][0] / total[0][1] : 0;
        double off_all = total[1][1] > 0 ? total[1][0] / total[1][1] : 0;
        printf("  all slices together: on %.2f M/s, off %.2f M/s, ratio %.3f\n", on_all / 1e6,
               off_all / 1e6, off_all > 0 ? on_all / off_all : 0);
        printf("  history costs %.1f%% of the broadcast rate (median pair; target < 10%%)\n",
               (1 - ratio_med) * 100);
        printf("  pairs, on/off M deliveries/s:");
        for (int k = 0; k < o->slices; k++)
            printf(" %.2f/%.2f", on_rate[k] / 1e6, off_rate[k] / 1e6);
        printf("\n");
    }
    printf("  loss check: %s (delivered %llu of %llu, out of sequence %llu, other %llu)\n",
           is_complete ? "zero loss" : "FAILED", (unsigned long long)r.delivered,
           (unsigned long long)want, (unsigned long long)r.lost, (unsigned long long)r.other);
    test_client_close(&c);
    test_fleet_free(fl);
    free(r.next);
    free(r.next_b);
    int st = test_herald_stop(h, 0);
    return is_complete && st == 0 ? 0 : -1;
}
