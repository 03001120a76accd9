/*
 * bench_gw_transport: what its parts share (bench_gw_transport.c: the fleet, herald, the
 * broadcast and idle runs; bench_gw_transport_series.c: rounds, medians and ratios;
 * bench_gw_transport_tlsmem.c: one TLS connection's memory). A benchmark program, never a
 * ctest case.
 */
#ifndef HERALD_BENCH_BENCH_GW_TRANSPORT_H
#define HERALD_BENCH_BENCH_GW_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lg_transport.h"
#include "netlib/nl_loop.h"

#define BT_MAX_ROUNDS 16

typedef enum bt_transport_e {
    BT_TCP = 0,
    BT_WS = 1,
    BT_TLS = 2,
    BT_WSS = 3,
    BT_COUNT
} bt_transport_t;

typedef struct bt_opts_s {
    char mode[32];
    bt_transport_t transports[BT_COUNT];
    size_t n_transports;
    size_t subs;
    size_t idle_conns;
    size_t payload;
    int seconds;
    uint64_t window;
    int rounds;
    bool is_admin_publisher; /* --publisher admin: POST /api/publish, else Publish frames */
    bool is_unpinned;        /* --unpinned: neither herald's loop nor the fleet pinned */
} bt_opts_t;

/* One run's figures. */
typedef struct bt_result_s {
    double deliveries_per_s;
    double cpu_ns_per_delivery; /* herald's, all threads */
    double herald_cpu_pct;      /* all its threads, % of one CPU over the measured window */
    double loop_run_pct;        /* its busiest thread (the IO loop) on a CPU, same base */
    double loop_wait_pct;       /* the loop runnable but waiting for a CPU (other work there) */
    double fleet_cpu_pct;       /* this process */
    uint64_t published;
    double answer_ms_mean; /* POST /api/publish, request to answer */
    double answer_ms_max;
    long rss_before_kb;
    long rss_after_kb;
    double bytes_per_conn;       /* RSS growth / connections */
    double bytes_per_added_conn; /* the growth from half to all / the second half */
    bool is_complete;            /* zero loss (broadcast); every connection up (idle) */
    char ktls[48];
} bt_result_t;

typedef int (*bt_run_fn)(const bt_opts_t *o, bt_transport_t t, bt_result_t *res);

/* "tcp", "ws", "tls", "wss". */
const char *bt_name(bt_transport_t t);

/* Parses "tcp,ws,..." into o->transports. Returns 0 or -EINVAL. */
int bt_parse_transports(const char *text, bt_opts_t *o);

/* Runs fn for every transport, o->rounds times in turning order, prints every run and the
 * summary. Returns 0, or -1 when a run failed. */
int bt_series(const bt_opts_t *o, const char *mode, bt_run_fn fn);

int bt_broadcast_run(const bt_opts_t *o, bt_transport_t t, bt_result_t *res);
int bt_idle_run(const bt_opts_t *o, bt_transport_t t, bt_result_t *res);

/* The memory of one server-side TLS connection, counted through OpenSSL's allocator hooks,
 * with the certificate in dir (server.pem, server.key); must run before anything else in the
 * process uses OpenSSL. Prints; returns 0 or -1. */
int bt_tls_memory(const char *dir);

/* --- the publisher (bench_gw_transport_pub.c) --- */

#define BT_PUB_HTTP_CONNS 64 /* admin: keep-alive connections, a request each at most */

typedef struct bt_pub_opts_s {
    nl_loop_t *loop;
    bool is_admin;            /* POST /api/publish, else Publish frames on one connection */
    uint16_t port;            /* herald's admin port, or its client port */
    const lg_transport_t *tp; /* client: TLS when herald's client listener speaks it; NULL */
    const char *token;        /* client: the Connect token */
    const char *api_key;      /* admin */
    size_t payload;
    void (*on_answer)(void *arg); /* admin: an answer came (a connection is free again) */
    void *arg;
    bool is_closing; /* internal: closes from here on are not errors */
} bt_pub_opts_t;

typedef struct bt_pub_s bt_pub_t;

/* Connects the publisher. Returns 0 or a negative errno; *out is set either way (free it). */
int bt_pub_new(bt_pub_t **out, const bt_pub_opts_t *o);
/* Every connection up (client: ConnectOk received). */
bool bt_pub_is_ready(const bt_pub_t *p);
/* Sends up to n messages numbered from seq (client: all in the loop's next flush, one write;
 * admin: one per free connection). Returns how many went. */
uint64_t bt_pub_send(bt_pub_t *p, uint64_t seq, uint64_t n);
void bt_pub_stats(const bt_pub_t *p, double *answer_ms_mean, double *answer_ms_max,
                  uint64_t *errors);
/* Closes the connections (their closes run in the next loop iterations). */
void bt_pub_close(bt_pub_t *p);
/* Frees it, once the loop has run the closes. */
void bt_pub_free(bt_pub_t *p);

/* All threads' CPU time of a process (schedstat), ns. */
uint64_t bt_proc_cpu_ns(pid_t pid);

#endif
