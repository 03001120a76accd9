/*
 * bench_gw_idle: herald's memory per idle authenticated connection, the way a client sees it
 * (issue 5's figure, issue 25's patterns: at most 512 bytes of RSS per connection subscribed to
 * its own channel plus one shared one).
 *
 * Each pattern starts a fresh herald (token secret, a long idle timeout so nothing is closed
 * while it measures) and reads its VmRSS before anything has connected: the baseline is the
 * process as it stands after its listening line, with no connection, no admin request and
 * no warm-up. Then --procs client processes each open their share of --conns connections,
 * authenticate, subscribe to "user:<i>" and to "shared", and report ready. With every
 * connection in place herald's VmRSS is read again, then once more --settle-ms (3 s) later:
 * the figure printed, what idle connections keep for good (herald's IO loops trim the heap in
 * the second after a burst of connections ends; 3 s leaves room for it),
 * /metrics is checked (connections, subscriptions), the clients are released and herald stops.
 *
 * Patterns:
 *   --pipelined    Subscribe rides behind Connect in the same write (PROTOCOL.md section 3
 *                  allows it): Connect, Subscribe{user:<i>}, Subscribe{shared} in one send,
 *                  then the three answers are awaited. Default: each connection waits for
 *                  ConnectOk, then subscribes.
 *   --same-user    one user and one token (channels "user:*,shared") for every connection.
 *                  Default: distinct users u<i>, each with its own token ("user:<i>,shared").
 *   --io-threads T herald's IO loops (0: one per CPU).
 *   --matrix       every combination of the above with 1 and 2 IO loops (8 patterns), each
 *                  --repeat times, alternating, then a table of every run.
 *
 * One process may hold at most 20,000 descriptors, so the client side is split over several
 * processes; herald holds all connections itself (19,000 by default fits). Clients send
 * Connect once their whole share is connected, which can take longer than the default 10 s
 * connect timeout, so herald runs with --connect-timeout 10m.
 *
 * Usage: bench_gw_idle [--conns N] [--procs P] [--io-threads T] [--pipelined] [--same-user]
 *                      [--settle-ms MS] [--matrix [--repeat K]] [--herald PATH]
 * Prints one line per run: "idle <pattern> conns=N: B bytes per connection (target <= 512)".
 * Exit status 0 when every run set up; the target is reported, not enforced.
 * This is a benchmark program, never a ctest case (STYLE.md §9).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

#define SECRET "bench-idle-secret-0123456789abcdef"
#define API_KEY "bench-idle-key"
#define SETUP_MS 300000
#define MAX_PROCS 16
#define MAX_RUNS 64
#define TARGET_BYTES 512.0

typedef struct pattern_s {
    bool is_pipelined;
    bool is_same_user;
    int io_threads;
} pattern_t;

typedef struct opts_s {
    size_t conns;
    int procs;
    int settle_ms;
    int repeat;
    bool is_matrix;
    pattern_t pat;
} opts_t;

/* What one run measured. */
typedef struct result_s {
    pattern_t pat;
    long rss0_kb;     /* fresh herald, no connection yet */
    long rss1_kb;     /* every connection ready */
    long rss2_kb;     /* settle_ms later */
    int64_t setup_ms; /* clients started to all ready */
    double conns;     /* herald_connections */
    double subs;      /* herald_subscriptions */
} result_t;

/* One client process's share: connections [first, first + n). */
typedef struct share_s {
    size_t first;
    size_t n;
    const pattern_t *pat;
    char **tokens;
    char (*chans)[32];
} share_t;

static const char *token_of(size_t i, void *arg)
{
    const share_t *sh = arg;
    return sh->tokens[sh->pat->is_same_user ? 0 : i];
}

static const char *channel_of(size_t i, void *arg)
{
    return ((share_t *)arg)->chans[i];
}

static const char *pattern_str(const pattern_t *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "%-9s %-8s io_threads=%d", p->is_pipelined ? "pipelined" : "waits",
             p->is_same_user ? "one-user" : "users", p->io_threads);
    return buf;
}

/* Mints the share's tokens (one for all with is_same_user) and channel names. */
static int share_prepare(share_t *sh)
{
    size_t n_tokens = sh->pat->is_same_user ? 1 : sh->n;
    sh->tokens = calloc(n_tokens, sizeof(*sh->tokens));
    sh->chans = calloc(sh->n, sizeof(*sh->chans));
    if (!sh->tokens || !sh->chans)
        return -ENOMEM;
    for (size_t i = 0; i < sh->n; i++)
        snprintf(sh->chans[i], sizeof(sh->chans[i]), "user:%zu", sh->first + i);
    for (size_t i = 0; i < n_tokens; i++) {
        char user[32];
        char pats[64];
        char tok[1024];
        if (sh->pat->is_same_user) {
            snprintf(user, sizeof(user), "u");
            snprintf(pats, sizeof(pats), "user:*,shared");
        } else {
            snprintf(user, sizeof(user), "u%zu", sh->first + i);
            snprintf(pats, sizeof(pats), "%s,shared", sh->chans[i]);
        }
        int len = test_token(tok, sizeof(tok), user, pats, 3600, 0, SECRET);
        if (len <= 0)
            return len < 0 ? len : -EINVAL;
        sh->tokens[i] = strdup(tok);
        if (!sh->tokens[i])
            return -ENOMEM;
    }
    return 0;
}

/* Answers awaited by the pipelined setup. */
typedef struct pipe_wait_s {
    size_t pending;
    bool has_failed;
} pipe_wait_t;

static void pipe_wait_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    pipe_wait_t *w = arg;
    if (f && (f->body_case == HERALD__FRAME__BODY_CONNECT_OK ||
              f->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK)) {
        w->pending--;
        return;
    }
    if (!w->has_failed) {
        char fs[256];
        fprintf(stderr, "connection %zu: %s\n", i,
                f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
    }
    NL_UNUSED(fl);
    w->has_failed = true;
}

/* Connect, Subscribe{user:<i>} and Subscribe{shared} leave in one write per connection, queued
 * as its connect starts; at most PIPE_WINDOW connections are awaiting their 3 answers at a time,
 * as clients arriving at a real node would (thousands opened at once and greeted later would be
 * held unauthenticated, which herald caps: [limits] max_unauthenticated_per_address). */
enum { PIPE_WINDOW = 256 };

static int setup_pipelined(test_fleet_t *fl, uint16_t port, share_t *sh)
{
    nl_buf_t b;
    nl_buf_init(&b, 0);
    pipe_wait_t w = {0};
    int rc = 0;
    int64_t deadline = test_now_ms() + SETUP_MS;
    for (size_t i = 0; i < sh->n && rc == 0; i++) {
        while (rc == 0 && w.pending >= 3 * PIPE_WINDOW && !w.has_failed) {
            if (test_ms_left(deadline) <= 0) {
                rc = -ETIMEDOUT;
                break;
            }
            int n = test_fleet_poll(fl, test_ms_left(deadline), pipe_wait_cb, &w);
            if (n < 0)
                rc = n;
        }
        if (rc != 0 || w.has_failed)
            break;
        Herald__Frame f;
        Herald__Connect cb;
        Herald__Subscribe sb;
        test_frame_connect(&f, &cb, token_of(i, sh));
        f.id = 1;
        rc = proto_frame_append(&b, &f);
        test_frame_subscribe(&f, &sb, sh->chans[i]);
        f.id = 2;
        if (rc == 0)
            rc = proto_frame_append(&b, &f);
        test_frame_subscribe(&f, &sb, "shared");
        f.id = 3;
        if (rc == 0)
            rc = proto_frame_append(&b, &f);
        if (rc == 0)
            rc = test_fleet_connect(fl, i, port);
        if (rc == 0)
            rc = test_fleet_send_raw(fl, i, nl_buf_peek(&b), nl_buf_readable(&b));
        nl_buf_retrieve_all(&b);
        w.pending += 3;
    }
    nl_buf_deinit(&b);
    while (rc == 0 && w.pending > 0 && !w.has_failed && test_ms_left(deadline) > 0) {
        int n = test_fleet_poll(fl, test_ms_left(deadline), pipe_wait_cb, &w);
        if (n < 0)
            rc = n;
    }
    if (rc == 0 && (w.has_failed || w.pending > 0))
        rc = w.has_failed ? -EPROTO : -ETIMEDOUT;
    return rc;
}

/* The client process: connect, authenticate, subscribe twice, say 'R', wait for release. */
static int client_main(uint16_t port, share_t *sh, int ready_fd, int release_fd)
{
    test_raise_nofile(sh->n + 64);
    test_fleet_t *fl = NULL;
    int rc = share_prepare(sh);
    if (rc == 0)
        rc = test_fleet_new(&fl, sh->n);
    if (rc == 0 && sh->pat->is_pipelined) {
        rc = setup_pipelined(fl, port, sh);
    } else if (rc == 0) {
        rc = test_fleet_open_hello(fl, &port, 1, 256, NULL, token_of, sh, SETUP_MS);
        if (rc == 0)
            rc = test_fleet_subscribe_each(fl, channel_of, sh, SETUP_MS);
        if (rc == 0)
            rc = test_fleet_subscribe_all(fl, "shared", NULL, NULL, NULL, SETUP_MS);
    }
    char c = 'R';
    if (rc != 0) {
        fprintf(stderr, "client %zu..%zu: %s (%s)\n", sh->first, sh->first + sh->n, strerror(-rc),
                fl ? test_fleet_what(fl) : "");
        c = 'F';
        (void)!write(ready_fd, &c, 1);
        return 1;
    }
    if (write(ready_fd, &c, 1) != 1)
        return 1;
    /* Blocks until the parent has measured (a benchmark may block; nothing else runs). */
    if (read(release_fd, &c, 1) < 0)
        return 1;
    test_fleet_free(fl);
    return 0;
}

static void parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option longs[] = {
        {"conns", required_argument, NULL, 'n'},      {"procs", required_argument, NULL, 'p'},
        {"io-threads", required_argument, NULL, 't'}, {"pipelined", no_argument, NULL, 'P'},
        {"same-user", no_argument, NULL, 'U'},        {"settle-ms", required_argument, NULL, 's'},
        {"matrix", no_argument, NULL, 'M'},           {"repeat", required_argument, NULL, 'r'},
        {"herald", required_argument, NULL, 'H'},     {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch == 'n')
            o->conns = strtoull(optarg, NULL, 10);
        else if (ch == 'p')
            o->procs = atoi(optarg);
        else if (ch == 't')
            o->pat.io_threads = atoi(optarg);
        else if (ch == 'P')
            o->pat.is_pipelined = true;
        else if (ch == 'U')
            o->pat.is_same_user = true;
        else if (ch == 's')
            o->settle_ms = atoi(optarg);
        else if (ch == 'M')
            o->is_matrix = true;
        else if (ch == 'r')
            o->repeat = atoi(optarg);
        else if (ch == 'H')
            setenv("TEST_HERALD_BIN", optarg, 1);
        else
            exit(2);
    }
    if (o->procs < 1 || o->procs > MAX_PROCS || o->conns < (size_t)o->procs) {
        fprintf(stderr, "bad --procs/--conns\n");
        exit(2);
    }
    if (o->repeat < 1 || o->repeat * 8 > MAX_RUNS || o->settle_ms < 0) {
        fprintf(stderr, "bad --repeat/--settle-ms\n");
        exit(2);
    }
}

/* Forks the client processes and waits until each has answered ('R' ready, 'F' failed);
 * returns how many are ready. */
static int run_clients(const opts_t *o, const pattern_t *pat, uint16_t port, pid_t *pids,
                       const int *release)
{
    int ready[2];
    if (pipe(ready) != 0)
        return -errno;
    size_t per = o->conns / (size_t)o->procs;
    for (int p = 0; p < o->procs; p++) {
        share_t sh = {.first = (size_t)p * per,
                      .n = p == o->procs - 1 ? o->conns - (size_t)p * per : per,
                      .pat = pat};
        pids[p] = fork();
        if (pids[p] == 0) {
            close(ready[0]);
            close(release[1]); /* so the parent's close is the clients' EOF */
            _exit(client_main(port, &sh, ready[1], release[0]));
        }
    }
    close(ready[1]);
    int n = 0;
    int answers = 0;
    char c;
    while (answers < o->procs && read(ready[0], &c, 1) == 1) {
        answers++;
        n += c == 'R';
    }
    close(ready[0]);
    return n;
}

static double metric(uint16_t admin_port, const char *family)
{
    double v = -1;
    return test_metric_sum(admin_port, API_KEY, family, NULL, &v) == 0 ? v : -1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double per_conn(const result_t *r, size_t conns)
{
    return (double)(r->rss2_kb - r->rss0_kb) * 1024.0 / (double)conns;
}

/* One pattern on a fresh herald. Returns 0, or -1 when the setup failed (said on stderr). */
static int run_pattern(const opts_t *o, const pattern_t *pat, result_t *r)
{
    char threads[16];
    char maxc[32];
    snprintf(threads, sizeof(threads), "%d", pat->io_threads);
    snprintf(maxc, sizeof(maxc), "%zu", o->conns + 100);
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
                          "--idle-timeout",
                          "1h",
                          "--ping-interval",
                          "30m",
                          "--connect-timeout",
                          "10m",
                          NULL};
    test_herald_opts_t ho = {.args = args, .cpu = -1};
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, &ho);
    if (rc != 0) {
        fprintf(stderr, "herald did not start: %s\n", strerror(-rc));
        return -1;
    }
    memset(r, 0, sizeof(*r));
    r->pat = *pat;
    /* The baseline: nothing has connected to either port yet. */
    r->rss0_kb = test_proc_rss_kb(h->pid);
    int release[2];
    if (pipe(release) != 0) {
        test_herald_abort(h);
        return -1;
    }
    pid_t pids[MAX_PROCS];
    int64_t t0 = test_now_ms();
    int ready = run_clients(o, pat, h->port, pids, release);
    r->setup_ms = test_now_ms() - t0;
    r->rss1_kb = test_proc_rss_kb(h->pid);
    sleep_ms(o->settle_ms);
    r->rss2_kb = test_proc_rss_kb(h->pid);
    r->conns = metric(h->admin_port, "herald_connections");
    r->subs = metric(h->admin_port, "herald_subscriptions");
    close(release[1]); /* EOF releases every client */
    close(release[0]);
    int failed = 0;
    for (int p = 0; p < o->procs; p++) {
        int st = 0;
        waitpid(pids[p], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    int stop = test_herald_stop(h, 0);
    if (ready != o->procs || failed || r->conns != (double)o->conns ||
        r->subs != 2.0 * (double)o->conns || stop != 0) {
        fprintf(stderr,
                "setup failed: %d/%d clients ready, %d failed, %.0f connections, "
                "%.0f subscriptions, herald exit %d\n",
                ready, o->procs, failed, r->conns, r->subs, stop);
        return -1;
    }
    char ps[64];
    double b = per_conn(r, o->conns);
    printf("idle %s conns=%zu: %.1f bytes per connection (target <= 512: %s)  "
           "VmRSS %ld KiB fresh, %ld KiB ready, %ld KiB %d ms later; setup %lld ms\n",
           pattern_str(pat, ps, sizeof(ps)), o->conns, b, b <= TARGET_BYTES ? "ok" : "OVER",
           r->rss0_kb, r->rss1_kb, r->rss2_kb, o->settle_ms, (long long)r->setup_ms);
    fflush(stdout);
    return 0;
}

/* Every run of the matrix, then one table row per pattern with all its runs. */
static int run_matrix(const opts_t *o)
{
    pattern_t pats[8];
    int n_pats = 0;
    for (int t = 1; t <= 2; t++)
        for (int u = 0; u < 2; u++)
            for (int p = 0; p < 2; p++)
                pats[n_pats++] = (pattern_t){.is_pipelined = p, .is_same_user = u, .io_threads = t};
    result_t res[MAX_RUNS];
    bool is_ok[MAX_RUNS];
    int failures = 0;
    /* Round by round, so the machine's drift spreads over every pattern alike. */
    for (int k = 0; k < o->repeat; k++) {
        for (int i = 0; i < n_pats; i++) {
            int idx = k * n_pats + i;
            is_ok[idx] = run_pattern(o, &pats[i], &res[idx]) == 0;
            failures += !is_ok[idx];
        }
    }
    printf("\nbench_gw_idle --matrix: %zu connections, subscribed to user:<i> and shared, "
           "VmRSS growth from a fresh herald, %d ms after setup (bytes per connection)\n",
           o->conns, o->settle_ms);
    printf(
        "| pattern                           | runs                        | max   | <= 512 |\n");
    printf(
        "|-----------------------------------|-----------------------------|-------|--------|\n");
    for (int i = 0; i < n_pats; i++) {
        char ps[64];
        char runs[128] = "";
        size_t used = 0;
        double worst = 0;
        bool is_all = true;
        for (int k = 0; k < o->repeat; k++) {
            int idx = k * n_pats + i;
            if (!is_ok[idx]) {
                used +=
                    (size_t)snprintf(runs + used, sizeof(runs) - used, "%sfailed", k ? ", " : "");
                is_all = false;
                continue;
            }
            double b = per_conn(&res[idx], o->conns);
            worst = b > worst ? b : worst;
            used += (size_t)snprintf(runs + used, sizeof(runs) - used, "%s%.0f", k ? ", " : "", b);
        }
        printf("| %-33s | %-27s | %5.0f | %-6s |\n", pattern_str(&pats[i], ps, sizeof(ps)), runs,
               worst, is_all && worst <= TARGET_BYTES ? "yes" : "NO");
    }
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.conns = 19000, .procs = 2, .settle_ms = 3000, .repeat = 1};
    parse_opts(argc, argv, &o);
    if (o.is_matrix)
        return run_matrix(&o);
    int failures = 0;
    for (int k = 0; k < o.repeat; k++) {
        result_t r;
        failures += run_pattern(&o, &o.pat, &r) != 0;
    }
    return failures ? 1 : 0;
}
