/*
 * gw_stats: the sessions' counters (per IO loop, plain uint64_t written only by that loop's
 * thread) and the collection at scrape time of every room's figures into one snapshot
 * (STYLE.md §3: no shared atomic counters on the per-message path). Fan-out and the engine
 * keep their own counters (gw_fanout_stats_t, gw_engine_stats_t); the collection copies them.
 *
 * Collection: gw_stats_collect posts one closure to every IO loop and one to the accept loop.
 * Each copies its own figures into its slot of a snapshot (a slot per loop, so no two threads
 * write the same bytes) and decrements a remaining count; the thread that brings it to zero
 * adds the thread-safe figures (worker pool, HTTP server), counts the distinct users over the
 * loops' user lists (a user connected through several loops is one user online), and hands
 * the snapshot to the callback. The admin API renders it (Prometheus text or JSON).
 *
 * Thread: a gw_stats_t belongs to its loop. gw_stats_collect may be called from any thread
 * (the HTTP thread); the callback runs on whichever loop replied last.
 * Ownership: the callback owns the snapshot and frees it with gw_stats_snapshot_free.
 */
#ifndef HERALD_GATEWAY_GW_STATS_H
#define HERALD_GATEWAY_GW_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_engine.h"
#include "gw_fanout.h"
#include "gw_online.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_hist.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_pool.h"
#include "netlib/nl_server.h"

/* Frame types counted: Herald__Frame__BodyCase runs 0 (not set) .. 17 (presence_event). */
#define GW_STATS_FRAME_TYPES 18
/* Error frame codes counted: Herald__Error__Code runs 0 .. 14. */
#define GW_STATS_ERROR_CODES 15

/* Why a connection closed (herald_closed_total{reason}). */
typedef enum gw_close_reason_e {
    GW_CLOSE_PEER = 0,          /* the client closed */
    GW_CLOSE_IO_ERROR,          /* reset or another socket error */
    GW_CLOSE_IDLE_TIMEOUT,      /* silent past the idle timeout */
    GW_CLOSE_HANDSHAKE_TIMEOUT, /* no successful Connect in time */
    GW_CLOSE_PROTOCOL_ERROR,    /* undecodable or out-of-order frame */
    GW_CLOSE_FRAME_TOO_LARGE,
    GW_CLOSE_AUTH_FAILED,
    GW_CLOSE_SLOW_CONSUMER,
    GW_CLOSE_SERVER_FULL,
    GW_CLOSE_SHUTDOWN,
    GW_CLOSE_TOKEN_EXPIRED, /* the token's exp passed during the session */
    GW_CLOSE_REASONS
} gw_close_reason_t;

/* Why a Connect was refused (herald_auth_failures_total{reason}): the gw_token_err_t values
 * -1..-7 map to 0..6, then the pool being full. */
typedef enum gw_auth_fail_e {
    GW_AUTH_FAIL_MALFORMED = 0,
    GW_AUTH_FAIL_ALG,
    GW_AUTH_FAIL_SIGNATURE,
    GW_AUTH_FAIL_EXPIRED,
    GW_AUTH_FAIL_NOT_YET_VALID,
    GW_AUTH_FAIL_MISSING_SUB,
    GW_AUTH_FAIL_CLAIMS,
    GW_AUTH_FAIL_BUSY,
    GW_AUTH_FAIL_REASONS
} gw_auth_fail_t;

/* One loop's counters. Owner thread only; read by a closure posted to the loop. */
typedef struct gw_stats_s {
    uint64_t accepts;       /* connections handed to this loop */
    uint64_t authenticated; /* gauge: sessions past Connect now */
    uint64_t auth_ok;
    uint64_t auth_failures[GW_AUTH_FAIL_REASONS];
    uint64_t closes[GW_CLOSE_REASONS];
    uint64_t frames_in[GW_STATS_FRAME_TYPES];
    /* Push and PresenceEvent frames are fan-out's (gw_fanout_stats_t) */
    uint64_t frames_out[GW_STATS_FRAME_TYPES];
    uint64_t errors_out[GW_STATS_ERROR_CODES];
    uint64_t drained;          /* sessions told to go by a drain (SIGTERM) */
    uint64_t auth_ok_previous; /* of auth_ok: tokens signed with a previous secret */
    uint64_t recoveries[GW_RECOVERY_RESULTS]; /* Subscribe{recover} answers by result */
    /* Presence (gw_presence). Gauges are counted up and down by this loop; summed like the
     * counters. */
    uint64_t presence_entries;         /* gauge: visible (connection, channel) subscriptions */
    uint64_t presence_listener_subs;   /* gauge: subscriptions to join/leave events */
    uint64_t presence_refreshes;       /* refresh batches handed to the engine */
    uint64_t presence_refreshed_users; /* users in them */
    uint64_t presence_joins;           /* join events published */
    uint64_t presence_leaves;          /* leave events published */
    uint64_t presence_event_failures;  /* events lost to a failed allocation */
    nl_hist_t loop_lag_us; /* per iteration: time spent outside epoll_wait */
} gw_stats_t;

/* What one loop reports at scrape time. */
typedef struct gw_stats_loop_snap_s {
    gw_stats_t s;
    gw_fanout_stats_t fo;
    uint64_t fanout_batches;  /* batches posted to other loops */
    uint64_t fanout_failures; /* messages lost because a batch could not be made or posted */
    nl_conn_loop_stats_t conn;
    nl_loop_stats_t loop;
    uint64_t queue_depth;   /* posted closures waiting */
    uint64_t channels;      /* subscription index entries */
    uint64_t subscriptions; /* (connection, channel) pairs */
    gw_engine_stats_t engine;
    uint64_t online_users;  /* users with a session on this loop */
    gw_online_list_t users; /* their names, with several loops (freed by the collection) */
    int users_err;          /* the list is incomplete (-ENOMEM) */
} gw_stats_loop_snap_t;

typedef struct gw_stats_snapshot_s {
    uint32_t n_loops;
    gw_stats_loop_snap_t *loops;
    nl_server_stats_t server;
    nl_pool_stats_t pool;
    nl_hist_t pool_wait_ns;
    bool is_ready;
    bool is_draining;
    uint64_t uptime_ms;
    uint64_t max_connections; /* the configured limit, for "near max" alerts */
    int64_t users_online;     /* distinct users over every loop; negative errno if unknown */
    uint64_t pool_capacity;   /* the worker pool's queue capacity, for "saturated" alerts */
} gw_stats_snapshot_t;

typedef struct gw_node_s gw_node_t;

/* The snapshot is complete. Runs on the loop that replied last. */
typedef void (*gw_stats_done_cb)(gw_stats_snapshot_t *snap, void *arg);

/* Zeroes a loop's counters. */
void gw_stats_init(gw_stats_t *st);

/* Collects a snapshot from every loop of node and calls done(snap, arg) once.
 * Returns: 0 (done will run); -ENOMEM; -ESHUTDOWN when the node is stopping (done will not
 * run). Thread: any. */
int gw_stats_collect(gw_node_t *node, gw_stats_done_cb done, void *arg);

/* Frees a snapshot. NULL is fine. Thread: any. */
void gw_stats_snapshot_free(gw_stats_snapshot_t *snap);

/* The stable metric label for a close reason / auth failure ("idle_timeout", "signature").
 * Thread: any. Ownership: static strings. */
const char *gw_close_reason_str(gw_close_reason_t r);
const char *gw_auth_fail_str(gw_auth_fail_t r);

#endif
