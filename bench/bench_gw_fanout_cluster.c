/*
 * bench_gw_fanout_cluster: issue 18's figure, --mode cluster of bench_gw_fanout.
 *
 * Two sides, --subs subscribers (10,000) on one broadcast channel "fan":
 *   memory  one herald node with the memory engine and --io-threads 2;
 *   redis   redis-server and two herald nodes with the Redis engine, --io-threads 1 each, the
 *           fleet's connections alternating between them (5,000 on each); the publisher is
 *           on the first node, so every message goes node -> Redis -> both nodes.
 * Both sides run two IO loops in all, everything unpinned (three server processes and the
 * fleet share this machine's two CPUs; the Redis side also pays for redis-server). Per side
 * and round: a throughput run (--window messages in flight, --seconds) and a latency run
 * (--rate stamped broadcasts a second for --latency-seconds, each on a fresh fleet with kernel
 * receive stamps), both checking that every subscriber got every message in order. --rounds
 * rounds, the order of the sides swapped every round; printed: every run, then per side
 * deliveries/s, server CPU per delivery and latency p99, median [min-max], and the redis /
 * memory ratios of the rates per round.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_gw_fanout.h"
#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_hist.h"

#define CLUSTER_NODES 2
#define READY_MS 20000

/* One side's running servers. */
typedef struct servers_s {
    pid_t redis; /* 0: none (memory side) */
    uint16_t redis_port;
    test_herald_t *nodes[CLUSTER_NODES];
    uint16_t ports[CLUSTER_NODES];
    pid_t pids[CLUSTER_NODES + 1]; /* every server process, for the CPU figure */
    size_t n_nodes;
    size_t n_pids;
} servers_t;

/* One side's figures over the rounds. */
typedef struct side_s {
    const char *name;
    bool is_redis;
    double rate[MAX_ROUNDS];   /* deliveries/s */
    double cpu[MAX_ROUNDS];    /* server ns per delivery, all processes */
    double arrive[MAX_ROUNDS]; /* latency p99, publish to arrival in the socket, ms */
    double proc[MAX_ROUNDS];   /* latency p99, publish to processed by the fleet, ms */
} side_t;

/* Polls GET /readyz until it answers 200: a Redis-engine node has its links up. */
static int await_ready(const test_herald_t *h)
{
    for (int i = 0; i < READY_MS / 10; i++) {
        test_http_resp_t r;
        if (test_http_request(h->admin_port, "GET", "/readyz", NULL, NULL, 0, 5000, &r) == 0) {
            int status = r.status;
            test_http_resp_free(&r);
            if (status == 200)
                return 0;
        }
        usleep(10000); /* /readyz has no change to wait on: its polling interval */
    }
    fprintf(stderr, "herald on port %u: /readyz not 200 within %d ms\n", h->port, READY_MS);
    return -1;
}

static int servers_down(servers_t *s)
{
    int failed = 0;
    for (size_t i = 0; i < s->n_nodes; i++)
        failed += s->nodes[i] && test_herald_stop(s->nodes[i], 0) != 0;
    if (s->redis > 0)
        failed += fan_redis_down(s->redis) != 0;
    memset(s, 0, sizeof(*s));
    return failed ? -1 : 0;
}

static int servers_up(const opts_t *o, bool is_redis, servers_t *s)
{
    memset(s, 0, sizeof(*s));
    opts_t node_opts = *o;
    char addr[32];
    if (is_redis) {
        s->redis = fan_redis_up(o, -1, &s->redis_port);
        if (s->redis <= 0)
            return -1;
        s->pids[s->n_pids++] = s->redis;
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", s->redis_port);
        node_opts.redis_engine = addr;
    }
    size_t n = is_redis ? CLUSTER_NODES : 1;
    for (size_t i = 0; i < n; i++) {
        test_herald_t *h = fan_start_herald(&node_opts, is_redis ? "1" : "2", -1, NULL);
        if (!h || (is_redis && await_ready(h) != 0)) {
            if (h)
                s->nodes[s->n_nodes++] = h;
            servers_down(s);
            return -1;
        }
        s->nodes[s->n_nodes++] = h;
        s->ports[i] = h->port;
        s->pids[s->n_pids++] = h->pid;
    }
    return 0;
}

/* One throughput run and one latency run of a side; fills round k of its figures. */
static int run_side(const opts_t *o, side_t *side, int k)
{
    servers_t s;
    if (servers_up(o, side->is_redis, &s) != 0)
        return -1;
    int rc = -1;
    run_t r = {.n = o->subs, .payload = o->payload, .next = calloc(o->subs, sizeof(uint64_t))};
    test_fleet_t *fl = fan_herald_fleet_on(o, s.ports, s.n_nodes, &r);
    test_client_t c = {.fd = -1};
    if (fl && test_client_auth(&c, s.ports[0], "pub", 10000) == 0) {
        publisher_t pub;
        fan_publisher_init(&pub, c.fd, false, o->payload);
        rc = fan_throughput_loop(o, side->name, fl, &r, &pub, fan_herald_raw, s.pids, s.n_pids,
                                 &side->rate[k], &side->cpu[k]);
        free(pub.buf);
    }
    test_client_close(&c);
    test_fleet_free(fl);
    free(r.next);

    nl_hist_t lat;
    nl_hist_t arrive;
    nl_hist_init(&lat);
    nl_hist_init(&arrive);
    run_t rl = {.n = o->subs,
                .payload = o->payload,
                .next = calloc(o->subs, sizeof(uint64_t)),
                .lat_us = &lat,
                .arrive_us = &arrive};
    fl = rc == 0 ? fan_herald_fleet_on(o, s.ports, s.n_nodes, &rl) : NULL;
    c.fd = -1;
    rc = -1;
    if (fl && test_client_auth(&c, s.ports[0], "pub", 10000) == 0) {
        publisher_t pub;
        fan_publisher_init(&pub, c.fd, false, o->payload);
        int64_t sent = fan_latency_loop(o, fl, &rl, &pub, fan_herald_raw);
        if (sent >= 0)
            rc = fan_print_latency(o, side->name, &rl, (uint64_t)sent);
        nl_hist_summary_t sa;
        nl_hist_summary_t sp;
        nl_hist_summarize(&arrive, &sa);
        nl_hist_summarize(&lat, &sp);
        side->arrive[k] = (double)sa.p99 / 1000.0;
        side->proc[k] = (double)sp.p99 / 1000.0;
        free(pub.buf);
    }
    test_client_close(&c);
    test_fleet_free(fl);
    free(rl.next);
    int st = servers_down(&s);
    return rc == 0 && st == 0 ? 0 : -1;
}

static void print_side(const opts_t *o, const side_t *side)
{
    printf("  %-52s deliveries/s ", side->name);
    fan_print_spread(side->rate, o->rounds, 1e6, 2);
    printf("M, CPU ns/delivery ");
    fan_print_spread(side->cpu, o->rounds, 1, 0);
    printf(", p99 arrival ");
    fan_print_spread(side->arrive, o->rounds, 1, 1);
    printf(" ms, p99 processed ");
    fan_print_spread(side->proc, o->rounds, 1, 1);
    printf(" ms\n");
}

int fan_run_cluster(const opts_t *o)
{
    side_t sides[2] = {
        {.name = "memory engine, 1 node, io_threads=2", .is_redis = false},
        {.name = "redis engine, 2 nodes x io_threads=1 + redis-server", .is_redis = true},
    };
    int failed = 0;
    for (int k = 0; k < o->rounds; k++) {
        printf("round %d of %d\n", k + 1, o->rounds);
        for (int j = 0; j < 2; j++)
            failed += run_side(o, &sides[(j + k) % 2], k) != 0;
    }
    double ratio[MAX_ROUNDS];
    double ratio_cpu[MAX_ROUNDS];
    for (int k = 0; k < o->rounds; k++) {
        ratio[k] = sides[0].rate[k] > 0 ? sides[1].rate[k] / sides[0].rate[k] : 0;
        ratio_cpu[k] = sides[0].cpu[k] > 0 ? sides[1].cpu[k] / sides[0].cpu[k] : 0;
    }
    printf("cluster: %zu subscribers on one channel, %zu-byte payload, %d rounds (sides "
           "alternating), %d s throughput at window %llu, %d s latency at %d broadcasts/s; "
           "median [min-max]\n",
           o->subs, o->payload, o->rounds, o->seconds, (unsigned long long)o->window,
           o->latency_seconds, o->rate);
    for (int j = 0; j < 2; j++)
        print_side(o, &sides[j]);
    printf("  redis / memory per round: deliveries/s ");
    fan_print_spread(ratio, o->rounds, 1, 3);
    printf(", CPU per delivery ");
    fan_print_spread(ratio_cpu, o->rounds, 1, 3);
    printf("; loss check: %s\n", failed ? "FAILED" : "zero loss in every run");
    return failed ? -1 : 0;
}
