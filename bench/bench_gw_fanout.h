/*
 * bench_gw_fanout.h: what bench_gw_fanout.c (setup, wire parsing, publishers, throughput,
 * options) shares with bench_gw_fanout_latency.c (the light-load latency modes). A benchmark
 * program's own header, not a library interface.
 */
#ifndef HERALD_BENCH_GW_FANOUT_H
#define HERALD_BENCH_GW_FANOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_hist.h"

#define API_KEY "bench-fanout-key"
#define MAX_ROUNDS 16
#define MAX_SLICES 200
#define HISTORY_ON_DEFAULT "fan=100" /* issue 17: 100 kept per channel */

typedef struct opts_s {
    char mode[16];
    size_t subs;
    size_t payload;
    int seconds;
    uint64_t window;
    int rate;
    int fleet_nice; /* latency modes: this thread's nice value while measuring */
    bool is_pin_io; /* latency modes: herald's two IO loops pinned, one per CPU */
    bool is_one_core; /* latency modes: the server on CPU 0 (herald with one IO loop), the fleet
                       * on CPU 1, as the throughput modes run */
    int latency_seconds;
    int rounds;              /* history mode: pairs of runs, history off and on */
    int slices;              /* history-mixed mode: pairs of slices */
    int slice_ms;            /* history-mixed mode: one slice's publishing time */
    char history_rules[256]; /* herald's --history-rules ("": none; history mode: its "on") */
    char redis[256];
    const char *redis_engine; /* herald runs [engine] redis with these servers (NULL: memory) */
} opts_t;

/* The run's shared state: per-subscriber expectations and the counters. */
typedef struct run_s {
    size_t n;
    size_t payload;
    bool is_redis;
    uint64_t *next;    /* herald: next offset expected; redis: next sequence number */
    uint64_t *next_b;  /* history-mixed: next offset on the second channel (else NULL) */
    uint8_t *is_ready; /* redis: subscribe confirmation seen */
    size_t ready;
    uint64_t delivered;
    uint64_t lost;        /* out-of-sequence deliveries */
    uint64_t other;       /* frames that were neither Push nor Pong (herald), or malformed */
    uint64_t unstamped;   /* latency mode: deliveries read without a kernel receive stamp */
    nl_hist_t *lat_us;    /* latency mode: publish to processed by the fleet, microseconds */
    nl_hist_t *arrive_us; /* latency mode: publish to arrival in the socket (kernel stamp) */
    test_fleet_t *fl;     /* latency mode: where the arrival stamps come from */
} run_t;

typedef struct publisher_s {
    int fd;
    bool is_redis;
    char *buf; /* one encoded request, rewritten per message */
    size_t len;
    size_t payload_at;
    uint64_t sent;
} publisher_t;

/* CLOCK_MONOTONIC and CLOCK_REALTIME now, in ns (payload stamps use the second: the kernel's
 * receive timestamps do). */
uint64_t fan_now_ns(void);
uint64_t fan_wall_ns(void);
/* A process's CPU time so far: the run time of all its threads (/proc/<pid>/task/<tid>/
 * schedstat, first field, ns), or 0 when unreadable. Time other processes take from its CPU
 * is not in it, so CPU per delivery moves less with the machine than the rate does. */
uint64_t fan_proc_cpu_ns(pid_t pid);

/* The fleet's raw callbacks: parse herald Pushes or Redis messages in place, check order,
 * count, and in latency mode record both latencies. arg is the run_t. */
size_t fan_herald_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg);
size_t fan_redis_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg);

/* One publisher connection: the request is encoded once and patched per message. */
void fan_publisher_init(publisher_t *p, int fd, bool is_redis, size_t payload);
/* As fan_publisher_init, publishing to channel (herald; Redis always publishes to "fan"). */
void fan_publisher_init_on(publisher_t *p, int fd, bool is_redis, const char *channel,
                           size_t payload);
/* Sends one message carrying value (a send time or a sequence number). Returns 0 or -1. */
int fan_publish(publisher_t *p, uint64_t value);
/* Reads and discards what the server answered the publisher. */
void fan_publisher_drain(publisher_t *p);
/* A blocking loopback connection to port, or -1. */
int fan_connect_port(uint16_t port);

/* herald with the benchmark's settings, io_threads loops, pinned to cpu (-1: not), keeping
 * history as history_rules say (NULL or "": no channel keeps any). */
test_herald_t *fan_start_herald(const opts_t *o, const char *io_threads, int cpu,
                                const char *history_rules);
/* The subscriber fleet on herald's "fan", connected, authenticated and subscribed; sets
 * r->next (the next offset each subscriber expects) and r->fl. */
test_fleet_t *fan_herald_fleet(const opts_t *o, const test_herald_t *h, run_t *r);
/* The same, connection i to 127.0.0.1:ports[i % n_ports]: a fleet over several nodes. */
test_fleet_t *fan_herald_fleet_on(const opts_t *o, const uint16_t *ports, size_t n_ports, run_t *r);
/* redis-server on a free port (pinned to cpu unless -1): its pid, or <= 0. */
pid_t fan_redis_up(const opts_t *o, int cpu, uint16_t *port);
int fan_redis_down(pid_t pid);
/* The subscriber fleet SUBSCRIBEd to Redis's "fan". */
test_fleet_t *fan_redis_fleet(const opts_t *o, uint16_t port, run_t *r);

/* Publishes through pub under the window (--window messages in flight across the fleet) for
 * --seconds, then drains; prints the figure under name; *rate_out gets deliveries/s after a
 * one-second warm-up and *cpu_out the servers' CPU ns per delivery, all n_servers processes
 * together (either may be NULL).
 * Returns: 0 on zero loss, -1 otherwise. */
int fan_throughput_loop(const opts_t *o, const char *name, test_fleet_t *fl, run_t *r,
                        publisher_t *pub, test_fleet_raw_cb raw, const pid_t *servers,
                        size_t n_servers, double *rate_out, double *cpu_out);

/* One herald throughput run (io_threads 1 on CPU 0), keeping history as history_rules say
 * (NULL: none); *rate and *cpu_ns (herald's CPU per delivery; either may be NULL) get the
 * figures.
 * Returns: 0 on zero loss and a clean stop, -1 otherwise. */
int fan_run_herald_throughput(const opts_t *o, const char *history_rules, double *rate,
                              double *cpu_ns);
/* Prints what the history held (herald_history_* from /metrics) on one line. */
void fan_print_history_metrics(const test_herald_t *h);

/* Prints v[0..n) (1 <= n <= 2 * MAX_SLICES) divided by div as "median [min-max]" with
 * decimals digits. Returns the median (not divided). */
double fan_print_spread(const double *v, int n, double div, int decimals);

/* bench_gw_fanout_history.c: the history modes. Return 0, or -1 on loss or failure. */
int fan_run_history(const opts_t *o);
int fan_run_history_mixed(const opts_t *o);

/* bench_gw_fanout_latency.c: the latency modes. Return 0, or -1 on loss or failure. */
int fan_run_herald_latency(const opts_t *o);
int fan_run_redis_latency(const opts_t *o);
/* Publishes --rate stamped messages a second for --latency-seconds at --fleet-nice, then gives
 * the last ones up to 10 s to arrive. Returns: the number sent, or -1 when a send failed. */
int64_t fan_latency_loop(const opts_t *o, test_fleet_t *fl, run_t *r, publisher_t *pub,
                         test_fleet_raw_cb raw);
/* Prints one latency block under name. Returns: 0 when every subscriber got every message in
 * order (zero loss), -1 otherwise. */
int fan_print_latency(const opts_t *o, const char *name, const run_t *r, uint64_t sent);
/* Prints the server's CPU time over the measured phase per delivery. */
void fan_print_latency_cpu(uint64_t cpu_ns, const run_t *r);

/* bench_gw_fanout_cluster.c: issue 18's cluster mode. Returns 0, or -1 on loss or failure. */
int fan_run_cluster(const opts_t *o);

#endif
