/*
 * bench_gw_idle: herald's memory per idle authenticated connection (issue 5's figure: at most
 * 512 bytes of RSS growth per connection subscribed to its own channel plus one shared one).
 *
 * The program starts herald (token secret, a long idle timeout so nothing is closed while it
 * measures), reads herald's VmRSS, then forks --procs client processes that each open their
 * share of --conns connections, authenticate with their own HS256 token (channels
 * "user:<i>,shared"), subscribe to "user:<i>" and to "shared", and report ready. With every
 * connection in place it reads VmRSS again and checks /metrics (connections and
 * subscriptions), then releases the clients and stops herald.
 *
 * One process may hold at most 20,000 descriptors, so the client side is split over several
 * processes; herald holds all connections itself (19,000 by default fits). Printed: RSS before
 * and after, and the growth per connection.
 *
 * Clients send Connect once their whole share is connected, which can take longer than the
 * default 10 s connect timeout, so herald runs with --connect-timeout 10m.
 *
 * Usage: bench_gw_idle [--conns N] [--procs P] [--io-threads T] [--herald PATH]
 * This is a benchmark program, never a ctest case (STYLE.md §9).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "herald_client.h"
#include "herald_harness.h"

#define SECRET "bench-idle-secret-0123456789abcdef"
#define API_KEY "bench-idle-key"
#define SETUP_MS 300000
#define MAX_PROCS 16

typedef struct opts_s {
    size_t conns;
    int procs;
    int io_threads;
} opts_t;

/* One client process's share: connections [first, first + n). */
typedef struct share_s {
    size_t first;
    size_t n;
    char **tokens;
    char (*chans)[32];
} share_t;

static const char *token_of(size_t i, void *arg)
{
    return ((share_t *)arg)->tokens[i];
}

static const char *channel_of(size_t i, void *arg)
{
    return ((share_t *)arg)->chans[i];
}

/* Mints the share's tokens and channel names. */
static int share_prepare(share_t *sh)
{
    sh->tokens = calloc(sh->n, sizeof(*sh->tokens));
    sh->chans = calloc(sh->n, sizeof(*sh->chans));
    if (!sh->tokens || !sh->chans)
        return -ENOMEM;
    for (size_t i = 0; i < sh->n; i++) {
        char user[32];
        char pats[64];
        char tok[1024];
        snprintf(user, sizeof(user), "u%zu", sh->first + i);
        snprintf(sh->chans[i], sizeof(sh->chans[i]), "user:%zu", sh->first + i);
        snprintf(pats, sizeof(pats), "%s,shared", sh->chans[i]);
        int len = test_token(tok, sizeof(tok), user, pats, 3600, 0, SECRET);
        if (len <= 0)
            return len < 0 ? len : -EINVAL;
        sh->tokens[i] = strdup(tok);
        if (!sh->tokens[i])
            return -ENOMEM;
    }
    return 0;
}

/* The client process: connect, authenticate, subscribe twice, say 'R', wait for release. */
static int client_main(uint16_t port, share_t *sh, int ready_fd, int release_fd)
{
    test_raise_nofile(sh->n + 64);
    test_fleet_t *fl = NULL;
    int rc = share_prepare(sh);
    if (rc == 0)
        rc = test_fleet_new(&fl, sh->n);
    if (rc == 0)
        rc = test_fleet_open_hello(fl, &port, 1, 256, NULL, token_of, sh, SETUP_MS);
    if (rc == 0)
        rc = test_fleet_subscribe_each(fl, channel_of, sh, SETUP_MS);
    if (rc == 0)
        rc = test_fleet_subscribe_all(fl, "shared", NULL, NULL, NULL, SETUP_MS);
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
    static const struct option longs[] = {{"conns", required_argument, NULL, 'n'},
                                          {"procs", required_argument, NULL, 'p'},
                                          {"io-threads", required_argument, NULL, 't'},
                                          {"herald", required_argument, NULL, 'H'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch == 'n')
            o->conns = strtoull(optarg, NULL, 10);
        else if (ch == 'p')
            o->procs = atoi(optarg);
        else if (ch == 't')
            o->io_threads = atoi(optarg);
        else if (ch == 'H')
            setenv("TEST_HERALD_BIN", optarg, 1);
        else
            exit(2);
    }
    if (o->procs < 1 || o->procs > MAX_PROCS || o->conns < (size_t)o->procs) {
        fprintf(stderr, "bad --procs/--conns\n");
        exit(2);
    }
}

/* Forks the client processes and waits until each has answered ('R' ready, 'F' failed);
 * returns how many are ready. */
static int run_clients(const opts_t *o, uint16_t port, pid_t *pids, const int *release)
{
    int ready[2];
    if (pipe(ready) != 0)
        return -errno;
    size_t per = o->conns / (size_t)o->procs;
    for (int p = 0; p < o->procs; p++) {
        share_t sh = {.first = (size_t)p * per,
                      .n = p == o->procs - 1 ? o->conns - (size_t)p * per : per};
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
    static const char *const hdrs[] = {"X-Api-Key: " API_KEY, NULL};
    test_http_resp_t r;
    if (test_http_request(admin_port, "GET", "/metrics", hdrs, NULL, 0, 30000, &r) != 0)
        return -1;
    double sum = 0;
    size_t flen = strlen(family);
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, family, flen) == 0 && (line[flen] == ' ' || line[flen] == '{'))
            sum += strtod(strchr(line, ' ') + 1, NULL);
    test_http_resp_free(&r);
    return sum;
}

int main(int argc, char **argv)
{
    opts_t o = {.conns = 19000, .procs = 2, .io_threads = 0};
    parse_opts(argc, argv, &o);
    char threads[16];
    char maxc[32];
    snprintf(threads, sizeof(threads), "%d", o.io_threads);
    snprintf(maxc, sizeof(maxc), "%zu", o.conns + 100);
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
        return 1;
    }
    long rss0 = test_proc_rss_kb(h->pid);
    int release[2];
    if (pipe(release) != 0)
        return 1;
    pid_t pids[MAX_PROCS];
    int64_t t0 = test_now_ms();
    int ready = run_clients(&o, h->port, pids, release);
    int64_t t1 = test_now_ms();
    long rss1 = test_proc_rss_kb(h->pid);
    double conns = metric(h->admin_port, "herald_connections");
    double subs = metric(h->admin_port, "herald_subscriptions");
    close(release[1]); /* EOF releases every client */
    close(release[0]);
    int failed = 0;
    for (int p = 0; p < o.procs; p++) {
        int st = 0;
        waitpid(pids[p], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    int stop = test_herald_stop(h, 0);
    if (ready != o.procs || failed || conns != (double)o.conns) {
        fprintf(stderr, "setup failed: %d/%d clients ready, %d failed, %.0f connections\n", ready,
                o.procs, failed, conns);
        return 1;
    }
    printf("bench_gw_idle: %zu authenticated connections (%d client processes, io_threads=%d), "
           "each subscribed to user:<i> and shared; setup %lld ms\n",
           o.conns, o.procs, o.io_threads, (long long)(t1 - t0));
    printf("  herald_connections %.0f  herald_subscriptions %.0f\n", conns, subs);
    printf("  VmRSS before %ld KiB, after %ld KiB: %.1f bytes per connection (target <= 512)\n",
           rss0, rss1, (double)(rss1 - rss0) * 1024.0 / (double)o.conns);
    return stop == 0 ? 0 : 1;
}
