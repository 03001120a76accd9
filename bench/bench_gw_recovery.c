/*
 * bench_gw_recovery: issue 17's recovery storm.
 *
 * herald keeps the last --keep (100) messages of the channel "room" (`--history-rules
 * room=100`). --clients (10,000) storm clients and --stayers (1,000) clients connect with
 * their own HS256 tokens and subscribe to room; a publisher thread publishes --rate (10)
 * messages a second to room, each stamped with its send time (CLOCK_REALTIME, as in
 * bench_gw_fanout's latency mode). Then:
 *
 *   1. reference: --quiet-seconds (3) of live publishing with everyone subscribed.
 *   2. away: live publishing pauses; once every client has every message (offset X of epoch
 *      E), the storm clients close their connections; once herald counts them gone, a second
 *      publisher publishes --missed (50) messages. Each storm client has missed exactly those.
 *   3. storm: live publishing resumes and every storm client reconnects: a new connection,
 *      Connect with its token and Subscribe{room, recover, offset X, epoch E} sent together,
 *      as fast as herald takes them (at most --in-flight clients between connect() and
 *      ConnectOk) or, with --spread-ms S, started evenly over S ms. A client is live once it
 *      has SubscribeOk{recovered, offset X} and the missed messages X+1..X+missed. The phase
 *      ends when every storm client is live or has failed (or at --storm-timeout).
 *   4. after: --after-seconds (2) more of live publishing; then the publisher stops and every
 *      client must hold the last message.
 *   With --storms N, phases 2-4 run N times in a row, each storm reported on its own: herald's
 *   RSS after one storm and after the next tells memory kept for reuse from memory lost.
 *
 * --plain is the reference for the storm itself: the same run, but the clients come back with
 * a plain Subscribe (no recover; the missed messages are lost to them) and are live at its
 * SubscribeOk; the check is then only that their Pushes continue from SubscribeOk's offset
 * with no gap. With --keep 0 (only with --plain) herald gets no history rules at all, so the
 * same program drives a herald from before the history work (--herald PATH).
 *
 * Checks: every storm client got SubscribeOk{recovered = true, offset = X}, then Pushes at
 * X+1, X+2, ... with no gap and no duplicate to the end, the first --missed of them the
 * missed messages (a mark in the payload), the rest live ones; the stayers' offsets are
 * consecutive all along. Printed: the time from the first reconnect to the last client live
 * (and each client's reconnect-to-live time), herald's RSS at several points, herald's CPU time
 * during the storm, recovered / not recovered counts with the reasons, /metrics' recovery
 * counters, and the publish-to-arrival latency (kernel receive stamp) of the live pushes at
 * clients that are live, per phase: at the stayers, and at the storm clients counting only
 * messages published after that client went live (a message recovered from history is not a
 * live push). Phase 4 is the same measurement without a storm in the same run, and the one to
 * hold the storm against: phase 1 sees herald's subscriber lists in another order (the
 * stayers, subscribed last, behind the 10,000; after a storm ahead of them). Also printed,
 * from /metrics: herald's own publish-to-flush and loop lag histograms over the storm and
 * over phase 4 (coarse buckets; herald_loop_lag_seconds samples one iteration in 16 and
 * records that sample at every iteration, so an idle loop repeats its last one: a rough
 * guide only).
 *
 * With --rate R and --keep K, a storm client can recover only while the history still holds
 * X+1, i.e. for (K - missed) / R seconds after the storm begins (5 s at the defaults): past
 * that herald rightly answers "cannot recover", and the check counts the client as not
 * recovered.
 *
 * Everything runs in this process: the storm clients' fleet (the main thread, raw mode:
 * Pushes parsed in place), the stayers' fleet in a thread of its own, and the publisher
 * thread. The stayers have their own thread because a fleet reads each socket only when it
 * gets round to it: the storm clients' fleet, busy with 10,000 connects and 500,000 recovered
 * Pushes, read some sockets hundreds of ms late, and a read that takes several Pushes gives
 * them all the kernel stamp of the last one. Such Pushes are counted as "stamped late" (their
 * arrival figure is an upper bound: herald may have written them together); at the stayers
 * there are next to none. A process may hold 20,000 descriptors, so --clients plus --stayers
 * is at most 19,900. herald runs with its default IO loops (one per CPU) unless --io-threads
 * says otherwise, and --worker-queue 65536 so that the setup's 11,000 Connects sent at once
 * are not refused as busy (the storm itself keeps --in-flight below the default queue of
 * 4,096).
 *
 * Usage: bench_gw_recovery [--clients N] [--stayers N] [--missed N] [--keep N] [--rate R]
 *        [--payload B] [--in-flight N] [--spread-ms S] [--quiet-seconds S] [--after-seconds S]
 *        [--storm-timeout S] [--storms N] [--plain] [--io-threads T] [--herald PATH]
 * This is a benchmark program, never a ctest case (STYLE.md §9).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_gw_recovery.h"
#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_hist.h"

#define SECRET "bench-recovery-secret-0123456789abcdef"
#define API_KEY "bench-recovery-key"
#define SETUP_MS 300000
#define WAIT_MS 60000
#define MAX_CLIENTS 19900

/* Polls the fleet until done(r) or the deadline. Returns 0 or -ETIMEDOUT. */
static int poll_until(run_t *r, bool (*done)(const run_t *r), int timeout_ms)
{
    int64_t until = test_now_ms() + timeout_ms;
    while (!done(r)) {
        if (test_now_ms() >= until)
            return -ETIMEDOUT;
        test_fleet_poll_raw(r->fl, 5, rec_on_raw, r);
    }
    return 0;
}

/* Polls the fleet for ms milliseconds. */
static void poll_for(run_t *r, int ms)
{
    int64_t until = test_now_ms() + ms;
    while (test_now_ms() < until)
        test_fleet_poll_raw(r->fl, 5, rec_on_raw, r);
}

/* Every client still in (subscribed, or live again) has every message before r->want_next,
 * the stayers included (as their thread last saw them). */
static bool all_caught_up(const run_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        if ((r->c[i].state == CS_SUBSCRIBED || r->c[i].state == CS_LIVE) &&
            r->c[i].next < r->want_next)
            return false;
    return r->stayers->n == 0 || atomic_load(&r->stayers->min_next) >= r->want_next;
}

/* The stayers' thread: reads their fleet until told to stop (or the deadline), and publishes
 * the lowest next offset among them for all_caught_up. */
static void *stayers_main(void *arg)
{
    run_t *s = arg;
    while (s->n > 0 && !atomic_load(&s->is_quit) && test_now_ms() < s->deadline_ms) {
        test_fleet_poll_raw(s->fl, 5, rec_on_raw, s);
        uint64_t lo = UINT64_MAX;
        for (size_t i = 0; i < s->n; i++)
            if (s->c[i].state == CS_SUBSCRIBED && s->c[i].next < lo)
                lo = s->c[i].next;
        atomic_store(&s->min_next, lo);
    }
    return NULL;
}

/* --- setup ------------------------------------------------------------------------------------ */

static const char *token_of(size_t i, void *arg)
{
    return ((run_t *)arg)->tokens[i];
}

/* Every client's own token: storm clients first, then the stayers. */
static char **mint_tokens(const opts_t *o)
{
    size_t n = o->clients + o->stayers;
    char **tokens = calloc(n, sizeof(*tokens));
    for (size_t i = 0; tokens && i < n; i++) {
        char user[32];
        char tok[1024];
        snprintf(user, sizeof(user), "%s%zu", i < o->clients ? "u" : "s", i);
        if (test_token(tok, sizeof(tok), user, CHANNEL, 3600, 0, SECRET) <= 0 ||
            !(tokens[i] = strdup(tok)))
            return NULL;
    }
    return tokens;
}

static test_herald_t *start_herald(const opts_t *o)
{
    char threads[16];
    char maxc[32];
    char rules[64];
    snprintf(threads, sizeof(threads), "%d", o->io_threads);
    snprintf(maxc, sizeof(maxc), "%zu", o->clients + o->stayers + 100);
    snprintf(rules, sizeof(rules), CHANNEL "=%u", o->keep);
    const char *args[] = {"--secret",
                          SECRET,
                          "--api-key",
                          API_KEY,
                          "--io-threads",
                          threads,
                          "--max-connections",
                          maxc,
                          "--worker-queue",
                          "65536",
                          "--publish-rate",
                          "0",
                          "--idle-timeout",
                          "1h",
                          "--ping-interval",
                          "30m",
                          "--connect-timeout",
                          "10m",
                          NULL,
                          NULL,
                          NULL};
    if (o->keep > 0) {
        /* After the last flag: the first NULL of the three. */
        size_t at = sizeof(args) / sizeof(args[0]) - 3;
        args[at] = "--history-rules";
        args[at + 1] = rules;
    }
    test_herald_opts_t ho = {.args = args, .cpu = -1};
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, &ho);
    if (rc != 0) {
        fprintf(stderr, "herald did not start: %s\n", strerror(-rc));
        return NULL;
    }
    return h;
}

/* herald's user + system CPU time in ms (/proc/<pid>/stat), or -1. */
static long cpu_ms(pid_t pid)
{
    char path[64];
    char buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may hold spaces */
    unsigned long ut = 0;
    unsigned long st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

static double metric(const test_herald_t *h, const char *family, const char *label)
{
    double v = -1;
    if (test_metric_sum(h->admin_port, API_KEY, family, label, &v) != 0)
        return -1;
    return v;
}

/* A herald histogram's cumulative buckets (all label sets summed per bound), from /metrics. */
#define SNAP_BOUNDS 32
typedef struct hsnap_s {
    int n;
    double le[SNAP_BOUNDS]; /* upper bounds in seconds, +Inf as 1e9, in /metrics' order */
    double count[SNAP_BOUNDS];
} hsnap_t;

/* Reads family's _bucket lines into *out (left empty when /metrics cannot be read). */
static void hsnap_take(const test_herald_t *h, const char *family, hsnap_t *out)
{
    static const char *const hdrs[] = {"X-Api-Key: " API_KEY, NULL};
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s_bucket{", family);
    size_t plen = strlen(prefix);
    out->n = 0;
    test_http_resp_t resp;
    if (test_http_request(h->admin_port, "GET", "/metrics", hdrs, NULL, 0, 30000, &resp) != 0)
        return;
    for (char *line = strtok(resp.body, "\n"); line; line = strtok(NULL, "\n")) {
        char *le = strstr(line, "le=\"");
        char *sp = strrchr(line, ' ');
        if (strncmp(line, prefix, plen) != 0 || !le || !sp)
            continue;
        double bound = strncmp(le + 4, "+Inf", 4) == 0 ? 1e9 : strtod(le + 4, NULL);
        int k = 0;
        while (k < out->n && out->le[k] != bound)
            k++;
        if (k == out->n) {
            if (out->n == SNAP_BOUNDS)
                continue;
            out->le[out->n] = bound;
            out->count[out->n++] = 0;
        }
        out->count[k] += strtod(sp + 1, NULL);
    }
    test_http_resp_free(&resp);
}

/* The upper bound (ms) of the bucket holding the pct-th percentile of what was recorded
 * between snapshots a and b, or -1 when nothing was; *n gets the number recorded. */
static double hsnap_pct_ms(const hsnap_t *a, const hsnap_t *b, double pct, double *n)
{
    *n = 0;
    if (b->n == 0 || b->n != a->n)
        return -1;
    *n = b->count[b->n - 1] - a->count[a->n - 1];
    for (int k = 0; *n > 0 && k < b->n; k++)
        if (b->count[k] - a->count[k] >= pct / 100.0 * *n)
            return b->le[k] * 1000.0;
    return -1;
}

/* The upper bound (ms) of the highest bucket that grew between a and b, or -1. */
static double hsnap_max_ms(const hsnap_t *a, const hsnap_t *b)
{
    if (b->n == 0 || b->n != a->n)
        return -1;
    double top = -1;
    double below = 0; /* cumulative growth up to the previous bound */
    for (int k = 0; k < b->n; k++) {
        double d = b->count[k] - a->count[k];
        if (d > below)
            top = b->le[k] * 1000.0;
        below = d;
    }
    return top;
}

/* Waits until herald counts want connections. */
static int await_connections(run_t *r, const test_herald_t *h, double want)
{
    int64_t until = test_now_ms() + WAIT_MS;
    while (metric(h, "herald_connections", NULL) != want) {
        if (test_now_ms() >= until)
            return -ETIMEDOUT;
        poll_for(r, 20);
    }
    return 0;
}

/* --- the storm -------------------------------------------------------------------------------- */

/* Reconnects storm client i: connect, then Connect and Subscribe{recover} queued behind it. */
static void reconnect(run_t *r, const test_herald_t *h, size_t i)
{
    client_t *c = &r->c[i];
    c->start_ms = test_now_ms();
    c->state = CS_CONNECTING;
    int rc = test_fleet_connect(r->fl, i, h->port);
    Herald__Frame f;
    Herald__Connect conn;
    test_frame_connect(&f, &conn, r->tokens[i]);
    f.id = 1;
    if (rc == 0)
        rc = test_fleet_send(r->fl, i, &f);
    Herald__Subscribe sub;
    test_frame_subscribe(&f, &sub, CHANNEL);
    f.id = 2;
    sub.recover = !r->o->is_plain;
    sub.offset = r->x;
    sub.epoch = r->epoch;
    if (rc == 0)
        rc = test_fleet_send(r->fl, i, &f);
    if (rc != 0)
        rec_client_fail(r, i, F_CLOSED);
}

/* Phase 3. Returns the time from the first reconnect to the last client live, in ms, or -1
 * when not every client went live. */
static int64_t storm(run_t *r, const test_herald_t *h)
{
    const opts_t *o = r->o;
    int64_t t0 = test_now_ms();
    int64_t until = t0 + (int64_t)o->storm_timeout_s * 1000;
    size_t started = 0;
    while (r->live + r->failed < o->clients && test_now_ms() < until) {
        int64_t now = test_now_ms();
        if (o->spread_ms > 0) {
            size_t due = (size_t)((double)(now - t0) * (double)o->clients / o->spread_ms) + 1;
            while (started < o->clients && started < due)
                reconnect(r, h, started++);
        } else {
            /* In flight: between connect() and ConnectOk (or failure). */
            while (started < o->clients && started - r->authed - r->connect_failed < o->in_flight)
                reconnect(r, h, started++);
        }
        test_fleet_poll_raw(r->fl, 1, rec_on_raw, r);
    }
    for (size_t i = 0; i < o->clients; i++)
        if (r->c[i].state != CS_LIVE && r->c[i].state != CS_FAILED)
            rec_client_fail(r, i, F_TIMEOUT);
    return r->live == o->clients ? r->last_live_ms - t0 : -1;
}

static void parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option longs[] = {{"clients", required_argument, NULL, 'c'},
                                          {"stayers", required_argument, NULL, 's'},
                                          {"missed", required_argument, NULL, 'm'},
                                          {"keep", required_argument, NULL, 'k'},
                                          {"rate", required_argument, NULL, 'r'},
                                          {"payload", required_argument, NULL, 'b'},
                                          {"in-flight", required_argument, NULL, 'f'},
                                          {"spread-ms", required_argument, NULL, 'S'},
                                          {"quiet-seconds", required_argument, NULL, 'q'},
                                          {"after-seconds", required_argument, NULL, 'a'},
                                          {"storm-timeout", required_argument, NULL, 'T'},
                                          {"storms", required_argument, NULL, 'n'},
                                          {"plain", no_argument, NULL, 'p'},
                                          {"io-threads", required_argument, NULL, 't'},
                                          {"herald", required_argument, NULL, 'H'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'c':
            o->clients = strtoull(optarg, NULL, 10);
            break;
        case 's':
            o->stayers = strtoull(optarg, NULL, 10);
            break;
        case 'm':
            o->missed = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'k':
            o->keep = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'r':
            o->rate = atoi(optarg);
            break;
        case 'b':
            o->payload = strtoull(optarg, NULL, 10);
            break;
        case 'f':
            o->in_flight = strtoull(optarg, NULL, 10);
            break;
        case 'S':
            o->spread_ms = atoi(optarg);
            break;
        case 'q':
            o->quiet_s = atoi(optarg);
            break;
        case 'a':
            o->after_s = atoi(optarg);
            break;
        case 'T':
            o->storm_timeout_s = atoi(optarg);
            break;
        case 'n':
            o->storms = atoi(optarg);
            break;
        case 'p':
            o->is_plain = true;
            break;
        case 't':
            o->io_threads = atoi(optarg);
            break;
        case 'H':
            setenv("TEST_HERALD_BIN", optarg, 1);
            break;
        default:
            exit(2);
        }
    }
    if (o->clients == 0 || o->clients + o->stayers > MAX_CLIENTS ||
        (o->keep == 0 && !o->is_plain) || (o->missed > o->keep && !o->is_plain) || o->rate < 1 ||
        o->rate > 10000 || o->payload < MIN_PAYLOAD || o->payload > 65536 || o->in_flight == 0 ||
        o->spread_ms < 0 || o->spread_ms > 60000 || o->quiet_s < 1 || o->quiet_s > 60 ||
        o->after_s < 1 || o->after_s > 60 || o->storm_timeout_s < 1 || o->storm_timeout_s > 300 ||
        o->storms < 1 || o->storms > 10 || o->io_threads < 0) {
        fprintf(stderr, "bad options\n");
        exit(2);
    }
}

/* --- report ----------------------------------------------------------------------------------- */

/* One line: a run's live pushes of storm k, phase ph. */
static void print_lat(const char *what, const run_t *r, int k, int ph)
{
    nl_hist_summary_t s;
    nl_hist_summary_t q;
    nl_hist_summarize(&r->arrive_us[k][ph], &s);
    nl_hist_summarize(&r->processed_us[k][ph], &q);
    if (s.count == 0) {
        printf("    %-42s no samples\n", what);
        return;
    }
    printf("    %-42s %7llu pushes: arrival p50 %6.2f  p99 %7.2f  max %7.2f ms (%llu stamped "
           "late); processed p99 %7.2f ms\n",
           what, (unsigned long long)s.count, (double)s.p50 / 1000.0, (double)s.p99 / 1000.0,
           (double)s.max / 1000.0, (unsigned long long)r->late[k][ph], (double)q.p99 / 1000.0);
}

/* Prints storm k's phase ph: at the stayers and at the storm clients. */
static void report_latency(const run_t *r, int k, int ph)
{
    static const char *const names[PH_COUNT] = {"reference", "during the storm", "after it"};
    char what[96];
    snprintf(what, sizeof(what), "%s, %zu stayers", names[ph], r->stayers->n);
    print_lat(what, r->stayers, k, ph);
    snprintf(what, sizeof(what), "%s, storm clients%s", names[ph],
             ph == PH_STORM ? " once live" : "");
    print_lat(what, r, k, ph);
}

static void report_setup(const run_t *r, int64_t setup_ms, long rss)
{
    const opts_t *o = r->o;
    char hist[64] = "no history rules";
    if (o->keep > 0)
        snprintf(hist, sizeof(hist), "history " CHANNEL "=%u", o->keep);
    printf("bench_gw_recovery: herald io_threads=%d, %s; %zu storm clients + %zu stayers (own "
           "HS256 tokens), %d live publishes/s of %zu bytes; each storm: %u missed, then the "
           "clients reconnect with %s ",
           o->io_threads, hist, o->clients, o->stayers, o->rate, o->payload, o->missed,
           o->is_plain ? "a plain Subscribe (--plain: no recovery)" : "Subscribe{recover}");
    if (o->spread_ms)
        printf("spread evenly over %d ms\n", o->spread_ms);
    else
        printf("as fast as herald takes them (at most %zu between connect() and ConnectOk)\n",
               o->in_flight);
    printf("  setup %lld ms; herald VmRSS with everyone subscribed %ld KiB\n", (long long)setup_ms,
           rss);
    printf("  live pushes, publish to arrival in the client's socket (kernel stamp; a push "
           "that shared a read with a later one has that one's stamp and is counted as stamped "
           "late: its figure is an upper bound):\n");
    report_latency(r, 0, PH_REF);
}

/* What one storm measured besides the run's counters. */
typedef struct storm_figs_s {
    long rss_before;
    long rss_live;
    long rss_end;
    long cpu_ms;
    int64_t to_all_live_ms; /* -1: not every client went live */
    int64_t phase_ms;
    /* herald's histograms before the storm, when all are live, after the after phase. */
    hsnap_t flush[3];
    hsnap_t lag[3];
} storm_figs_t;

/* Prints herald's own view of a phase: publish-to-flush and loop lag between two snapshots. */
static void report_herald_view(const char *what, const storm_figs_t *g, int from)
{
    double n_flush = 0;
    double n_lag = 0;
    double f99 = hsnap_pct_ms(&g->flush[from], &g->flush[from + 1], 99, &n_flush);
    double l99 = hsnap_pct_ms(&g->lag[from], &g->lag[from + 1], 99, &n_lag);
    printf("    %-42s publish-to-flush p99 <= %.0f ms, max <= %.0f ms (%.0f samples); loop lag "
           "p99 <= %.1f ms, max <= %.0f ms (%.0f samples)\n",
           what, f99, hsnap_max_ms(&g->flush[from], &g->flush[from + 1]), n_flush, l99,
           hsnap_max_ms(&g->lag[from], &g->lag[from + 1]), n_lag);
}

static void report_storm(const run_t *r, const test_herald_t *h, int k, const storm_figs_t *g)
{
    const opts_t *o = r->o;
    nl_hist_summary_t s;
    nl_hist_summarize(&r->to_live_ms, &s);
    printf("storm %d/%d: ", k + 1, o->storms);
    if (g->to_all_live_ms >= 0)
        printf("first reconnect to all %zu live: %lld ms", o->clients,
               (long long)g->to_all_live_ms);
    else
        printf("NOT all live: %zu of %zu after %lld ms", r->live, o->clients,
               (long long)g->phase_ms);
    printf("; each client's reconnect to live p50 %llu, p99 %llu, max %llu ms\n",
           (unsigned long long)s.p50, (unsigned long long)s.p99, (unsigned long long)s.max);
    printf("  herald CPU meanwhile %ld ms (%.0f%% of one CPU)\n", g->cpu_ms,
           g->phase_ms > 0 ? 100.0 * (double)g->cpu_ms / (double)g->phase_ms : 0.0);
    if (o->is_plain)
        printf("  live check (--plain): %zu of %zu live again, Pushes from SubscribeOk's offset on "
               "with no gap, no duplicate; failed %zu",
               r->live, o->clients, r->failed);
    else
        printf("  recovery check: %zu of %zu recovered exactly their %u missed messages in "
               "order, then the live ones, no gap, no duplicate; not recovered %zu",
               r->live, o->clients, o->missed, r->failed);
    for (int f = 1; f < F_COUNT; f++)
        if (r->fails[f])
            printf(" (%s: %zu)", rec_fail_names[f], r->fails[f]);
    printf("; %llu recovered Pushes; stayers with a gap so far %zu of %zu%s\n",
           (unsigned long long)r->recovered_pushes, atomic_load(&r->stayers->gaps), o->stayers,
           r->is_stayers_behind ? ", SOME STAYERS LACK THE LAST MESSAGE" : "");
    printf("  herald VmRSS: before the storm %ld KiB (storm clients away, %u missed kept), all "
           "live %ld KiB, after it %ld KiB\n",
           g->rss_before, o->missed, g->rss_live, g->rss_end);
    static const char *const results[] = {"recovered", "epoch_changed", "not_covered", "no_history",
                                          "too_large"};
    printf("  /metrics (whole run): herald_recoveries_total");
    for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        char label[64];
        snprintf(label, sizeof(label), "result=\"%s\"", results[i]);
        printf(" %s %.0f", results[i], metric(h, "herald_recoveries_total", label));
    }
    printf("; herald_history_messages %.0f, herald_history_bytes %.0f\n",
           metric(h, "herald_history_messages", NULL), metric(h, "herald_history_bytes", NULL));
    printf("  live pushes, publish to arrival in the client's socket (kernel stamp):\n");
    report_latency(r, k, PH_STORM);
    report_latency(r, k, PH_AFTER);
    printf("  herald's own histograms (/metrics buckets: 100, 250, 500, 1000 ms, ...):\n");
    report_herald_view("during the storm", g, 0);
    report_herald_view("after it", g, 1);
    if (r->unstamped + r->stayers->unstamped)
        printf("  %llu pushes so far had no kernel stamp (left out)\n",
               (unsigned long long)(r->unstamped + r->stayers->unstamped));
}

/* --- the phases ------------------------------------------------------------------------------- */

/* Phase 2: pause, everyone caught up, storm clients away, the missed messages published. */
static int go_away(run_t *r, const test_herald_t *h, pubthr_t *pt, test_client_t *pub2)
{
    const opts_t *o = r->o;
    int rc = rec_pub_pause(pt);
    if (rc != 0)
        return rc;
    r->x = atomic_load(&pt->last_offset);
    r->want_next = r->x + 1;
    if ((rc = poll_until(r, all_caught_up, WAIT_MS)) != 0) {
        fprintf(stderr, "clients did not catch up with offset %llu\n", (unsigned long long)r->x);
        return rc;
    }
    for (size_t i = 0; i < o->clients; i++) {
        test_fleet_close(r->fl, i);
        r->c[i].state = CS_AWAY;
        r->c[i].missed_got = 0;
    }
    if ((rc = await_connections(r, h, (double)(o->stayers + 2))) != 0) {
        fprintf(stderr, "herald did not see the storm clients go\n");
        return rc;
    }
    uint8_t *buf = calloc(1, o->payload);
    for (uint32_t k = 0; rc == 0 && k < o->missed; k++) {
        uint64_t off = 0;
        char ep[17] = "";
        rec_payload_mark(buf, rec_wall_ns(), k, KIND_MISSED);
        rc = test_client_publish_ex(pub2, CHANNEL, buf, o->payload, &off, ep, WAIT_MS);
        /* Without history the channel's numbering (epoch) restarts whenever it had neither
         * subscribers nor history, as after the prelude: --plain checks the offset only. */
        bool is_epoch_ok = o->is_plain || strcmp(ep, r->epoch) == 0;
        if (rc == 0 && (off != r->x + 1 + k || !is_epoch_ok)) {
            fprintf(stderr, "missed message %u: offset %llu epoch %s, expected %llu %s\n", k,
                    (unsigned long long)off, ep, (unsigned long long)(r->x + 1 + k), r->epoch);
            rc = -EPROTO;
        }
    }
    free(buf);
    if (rc != 0)
        return rc;
    r->want_next = r->x + o->missed + 1;
    return poll_until(r, all_caught_up, WAIT_MS);
}

/* Phase 4's end: the publisher stops and every client still in must hold the last message;
 * one that does not has a gap. */
static void final_check(run_t *r, pubthr_t *pt)
{
    if (rec_pub_pause(pt) != 0)
        return;
    r->want_next = atomic_load(&pt->last_offset) + 1;
    (void)poll_until(r, all_caught_up, WAIT_MS);
    for (size_t i = 0; i < r->n; i++)
        if ((r->c[i].state == CS_SUBSCRIBED || r->c[i].state == CS_LIVE) &&
            r->c[i].next != r->want_next)
            rec_client_fail(r, i, F_GAP);
    if (r->stayers->n > 0 && atomic_load(&r->stayers->min_next) < r->want_next)
        r->is_stayers_behind = true;
}

/* Clears the storm clients' counters of the last storm and makes k the current one (no live
 * message is in flight: the publisher is paused and everyone has caught up). Latencies are
 * kept per storm, so nothing a thread records into is cleared. */
static void storm_reset(run_t *r, int k)
{
    r->authed = 0;
    r->connect_failed = 0;
    r->live = 0;
    r->failed = 0;
    memset(r->fails, 0, sizeof(r->fails));
    r->recovered_pushes = 0;
    nl_hist_init(&r->to_live_ms);
    atomic_store(&r->phase->storm, k);
    atomic_store(&r->phase->storm_wall, 0);
    atomic_store(&r->phase->after_wall, 0);
}

/* Phases 2-4 once. Returns: 0 when every storm client recovered and no stayer has a gap; 1
 * when a check failed; a negative errno when the run itself broke (setup of the phase). */
static int one_storm(run_t *r, const test_herald_t *h, pubthr_t *pt, test_client_t *pub2, int k)
{
    storm_figs_t g = {0};
    storm_reset(r, k);
    int rc = go_away(r, h, pt, pub2);
    if (rc != 0)
        return rc;
    g.rss_before = test_proc_rss_kb(h->pid);
    hsnap_take(h, "herald_publish_to_flush_seconds", &g.flush[0]);
    hsnap_take(h, "herald_loop_lag_seconds", &g.lag[0]);
    long cpu0 = cpu_ms(h->pid);
    atomic_store(&r->phase->storm_wall, rec_wall_ns());
    atomic_store(&pt->is_on, 1);
    int64_t s0 = test_now_ms();
    g.to_all_live_ms = storm(r, h);
    g.phase_ms = test_now_ms() - s0;
    atomic_store(&r->phase->after_wall, rec_wall_ns());
    g.cpu_ms = cpu_ms(h->pid) - cpu0;
    g.rss_live = test_proc_rss_kb(h->pid);
    hsnap_take(h, "herald_publish_to_flush_seconds", &g.flush[1]);
    hsnap_take(h, "herald_loop_lag_seconds", &g.lag[1]);
    poll_for(r, r->o->after_s * 1000);
    final_check(r, pt);
    g.rss_end = test_proc_rss_kb(h->pid);
    hsnap_take(h, "herald_publish_to_flush_seconds", &g.flush[2]);
    hsnap_take(h, "herald_loop_lag_seconds", &g.lag[2]);
    report_storm(r, h, k, &g);
    return r->live == r->o->clients && atomic_load(&r->stayers->gaps) == 0 && !r->is_stayers_behind
               ? 0
               : 1;
}

/* Connects, authenticates and subscribes one run's fleet. */
static int setup_fleet(run_t *r, const test_herald_t *h)
{
    if (r->n == 0)
        return 0;
    uint64_t *offsets = calloc(r->n, sizeof(*offsets));
    int rc = offsets ? test_fleet_new(&r->fl, r->n) : -ENOMEM;
    if (rc == 0) {
        test_fleet_set_rx_timestamps(r->fl, true);
        rc = test_fleet_open(r->fl, h->port, 256, SETUP_MS);
    }
    if (rc == 0)
        rc = test_fleet_hello_all(r->fl, NULL, token_of, r, SETUP_MS);
    if (rc == 0)
        rc = test_fleet_subscribe_all(r->fl, CHANNEL, offsets, NULL, NULL, SETUP_MS);
    for (size_t i = 0; rc == 0 && i < r->n; i++)
        r->c[i].next = offsets[i] + 1;
    free(offsets);
    if (rc != 0)
        fprintf(stderr, "setup of the %s: %s (%s)\n", r->is_stayers ? "stayers" : "storm clients",
                strerror(-rc), r->fl ? test_fleet_what(r->fl) : "");
    return rc;
}

/* Setup: the second publisher, the channel's epoch, everyone connected and subscribed. */
static int setup(run_t *r, const test_herald_t *h, test_client_t *pub2)
{
    const opts_t *o = r->o;
    char tok[1024];
    int rc = test_token(tok, sizeof(tok), "p2", CHANNEL, 3600, 0, SECRET) > 0 ? 0 : -EINVAL;
    if (rc == 0)
        rc = test_client_auth(pub2, h->port, tok, WAIT_MS);
    /* A first message gives the channel its epoch. */
    uint8_t *buf = calloc(1, o->payload);
    uint64_t off = 0;
    rec_payload_mark(buf, rec_wall_ns(), 0, KIND_PRELUDE);
    if (rc == 0)
        rc = test_client_publish_ex(pub2, CHANNEL, buf, o->payload, &off, r->epoch, WAIT_MS);
    else
        fprintf(stderr, "publisher: %s\n", test_client_what(pub2));
    free(buf);
    if (rc == 0)
        rc = setup_fleet(r, h);
    if (rc == 0)
        rc = setup_fleet(r->stayers, h);
    return rc;
}

/* The whole run on a started herald. Returns 0 when every check passed. */
static int run(run_t *r, const test_herald_t *h)
{
    const opts_t *o = r->o;
    test_client_t pub2 = {.fd = -1};
    int64_t t0 = test_now_ms();
    int rc = setup(r, h, &pub2);
    if (rc != 0) {
        test_client_close(&pub2);
        return -1;
    }
    int64_t setup_ms = test_now_ms() - t0;
    long rss = test_proc_rss_kb(h->pid);
    char ptok[1024];
    test_token(ptok, sizeof(ptok), "p1", CHANNEL, 3600, 0, SECRET);
    pubthr_t pt = {.port = h->port,
                   .token = ptok,
                   .rate = o->rate,
                   .payload = o->payload,
                   .deadline_ms = test_now_ms() + 600000};
    pthread_t thr;
    pthread_t st_thr;
    r->stayers->deadline_ms = test_now_ms() + 600000;
    if (pthread_create(&st_thr, NULL, stayers_main, r->stayers) != 0) {
        test_client_close(&pub2);
        return -1;
    }
    if (pthread_create(&thr, NULL, rec_pub_main, &pt) != 0) {
        atomic_store(&r->stayers->is_quit, 1);
        pthread_join(st_thr, NULL);
        test_client_close(&pub2);
        return -1;
    }
    /* 1. reference */
    atomic_store(&pt.is_on, 1);
    poll_for(r, o->quiet_s * 1000);
    if (rec_pub_pause(&pt) == 0 && pt.err == 0)
        report_setup(r, setup_ms, rss);
    int failed = 0;
    for (int k = 0; k < o->storms && pt.err == 0; k++) {
        rc = one_storm(r, h, &pt, &pub2, k);
        if (rc < 0)
            break;
        failed += rc;
        rc = 0;
    }
    atomic_store(&pt.is_quit, 1);
    pthread_join(thr, NULL);
    atomic_store(&r->stayers->is_quit, 1);
    pthread_join(st_thr, NULL);
    if (pt.err != 0)
        fprintf(stderr, "%s (%s)\n", strerror(-pt.err), pt.what);
    printf("%llu live messages published\n", (unsigned long long)atomic_load(&pt.sent));
    test_client_close(&pub2);
    return rc == 0 && failed == 0 && pt.err == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    opts_t o = {.clients = 10000,
                .stayers = 1000,
                .missed = 50,
                .keep = 100,
                .rate = 10,
                .payload = 128,
                .in_flight = 256,
                .quiet_s = 3,
                .after_s = 2,
                .storm_timeout_s = 60,
                .storms = 1};
    parse_opts(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    size_t n = o.clients + o.stayers;
    if (test_raise_nofile(n + 64) < (long)(n + 32)) {
        fprintf(stderr, "RLIMIT_NOFILE too low for %zu clients\n", n);
        return 1;
    }
    /* The storm clients' run and the stayers', sharing the tokens and the phase. */
    run_t *r = calloc(2, sizeof(*r));
    phase_t phase = {0};
    char **tokens = mint_tokens(&o);
    if (!r || !tokens) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    run_t *s = &r[1];
    *r = (run_t){.o = &o, .n = o.clients, .tokens = tokens, .phase = &phase, .stayers = s};
    *s = (run_t){
        .o = &o, .is_stayers = true, .n = o.stayers, .tokens = tokens + o.clients, .phase = &phase};
    r->c = calloc(o.clients, sizeof(*r->c));
    s->c = calloc(o.stayers ? o.stayers : 1, sizeof(*s->c));
    if (!r->c || !s->c)
        return 1;
    test_herald_t *h = start_herald(&o);
    if (!h)
        return 1;
    int rc = run(r, h);
    test_fleet_free(r->fl);
    test_fleet_free(s->fl);
    int st = test_herald_stop(h, 0);
    for (size_t i = 0; i < n; i++)
        free(tokens[i]);
    free(tokens);
    free(r->c);
    free(s->c);
    free(r);
    return rc == 0 && st == 0 ? 0 : 1;
}
