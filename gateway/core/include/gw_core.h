/*
 * gw_core.h: the room's public header.
 *
 * core: a node: its IO loops, its client sessions and their protocol, its drain and
 * shutdown, and the collection of every room's figures at scrape time. Other rooms see only
 * this header: the node's lifecycle and accessors, the parts that attach beside it, and the
 * stats snapshot.
 *
 * Sections, one per module (each .c of the room): gw_node, gw_stats.
 */
#ifndef HERALD_GATEWAY_CORE_GW_CORE_H
#define HERALD_GATEWAY_CORE_GW_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_config.h"
#include "gw_engine.h"
#include "gw_fanout.h"
#include "gw_state.h"
#include "gw_transport.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_hist.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_pool.h"
#include "netlib/nl_server.h"

/* --- gw_node ---------------------------------------------------------------------------------- */

/*
 * gw_node: one herald node: the accept loop (the main thread's), N IO loops (nl_loop_thread),
 * the worker pool for token verification, the engine (picked by [engine] type from a table)
 * and the client listener, started in that order and stopped in reverse on SIGINT/SIGTERM
 * (nl_signal). What runs beside it (the admin API) is attached by whoever built the node
 * (main.c): the node knows it only as a gw_node_part_t, told of reloads and of the stop.
 *
 * Each IO loop carries a gw_loop_t (nl_loop_data, gw_node_int.h): fan-out's part (its
 * subscription index and batches), its users, its deadline wheel, its counters, its config
 * snapshot. Only that loop's thread touches it; other threads name a loop by its index and
 * post to it (gw_fanout_post).
 *
 * Startup logs one line `ev=listening port=<client port> admin_port=<admin port>` (stderr;
 * each attached part adds its port), which tests read to find ports bound as 0.
 *
 * Shutdown. The first SIGTERM or SIGINT starts a graceful drain when [server] drain > 0
 * (ev=drain_begin window_ms=... sessions=...):
 *   D1. stop accepting (the listener closes: connecting clients are refused), mark not ready
 *       (/readyz answers 503 from now on; /healthz, the admin API and /metrics still answer),
 *       and post "draining" to every loop. Each loop answers from its next iteration, so
 *       everything a loop accepted before it saw the post has been handed to the other loops
 *       (fan-out batches leave in the before-sleep of the iteration that made them) before
 *       step D2 reaches them: a message accepted before the signal is queued to every
 *       subscriber before any subscriber is told to go.
 *   D2. each loop lists its sessions by connection id and tells them Disconnect{SHUTDOWN,
 *       reconnect} a few at a time, spread evenly over the window (gw_drain.h), each one
 *       queued behind that client's pending output and followed by a half-close and a short
 *       linger. Sessions not yet told carry on: they receive what is published meanwhile
 *       (the engine, the worker pool and the admin API keep running). A loop whose sessions
 *       have all left answers; when every loop has (ev=drain_end), or when the window plus
 *       GW_NODE_DRAIN_GRACE_MS has passed (ev=drain_end forced=true), steps 1-4 below run.
 * A second SIGTERM or SIGINT during the drain, or drain = 0, runs steps 1-4 at once:
 *   1. stop accepting (server closed), mark not ready, stop the attached parts (the admin
 *      API: requests waiting are answered 503), stop the worker pool (pending verifications
 *      are cancelled); then every IO loop posts the fan-out batches it holds and answers, so that a
 * message accepted before the stop is queued to every subscriber before step 2 reaches them;
 *   2. each IO loop sends Disconnect{SHUTDOWN} to its remaining sessions and closes them;
 *   3. quiesce: rounds of "post to every loop and wait" until a round in which no loop posted
 *      to another (leaves, batches and replies in flight have all landed);
 *   4. stop the IO loop threads, free the engine, then the main loop returns (exit 0).
 * Each step waits for every loop's answer before the next. So a node exits within drain +
 * GW_NODE_DRAIN_GRACE_MS after the first signal (plus the few ms of steps 1-4, and at most
 * 2 s more while admin requests are still waiting), and within milliseconds of a second one.
 *
 * Reload (SIGHUP, gw_config.h): the config is loaded again from the same sources; what
 * may change at runtime goes into a new immutable snapshot (gw_config.h), which the main
 * loop posts to every IO loop. On each loop gw_loop_config_changed runs with the old and the
 * new config: THE place where a loop reacts to a reload. Connections stay as they are.
 *
 * Thread: gw_node_new/attach/listen/run/free/stop on the main thread; the accessors and
 * gw_node_config_acquire from any thread.
 * Ownership: the caller owns the node; the node owns every thread, loop and handle it made.
 */
typedef struct gw_node_s gw_node_t;

/* At most this many IO loops: audiences are 64-bit masks (gw_fanout.h). */
#define GW_NODE_MAX_LOOPS GW_FANOUT_MAX_LOOPS

/* How long past the drain window the node waits for its last sessions before closing them
 * at once: their linger after the Disconnect (GW_SESSION_LINGER_MS, 2 s), the wheel's
 * lateness (at most 1 s), and room to spare. */
#define GW_NODE_DRAIN_GRACE_MS 5000

/* At most this many parts attach to a node. */
#define GW_NODE_PARTS_MAX 4

/* Something that runs beside a node (the admin API), as the node sees it. Hooks run on the
 * main thread. */
typedef struct gw_node_part_s {
    const char *port_key; /* ev=listening shows <port_key>=<port> (e.g. "admin_port") */
    uint16_t port;
    /* A reload changed the config (both valid during the call); before the IO loops get it. */
    void (*on_reload)(void *arg, const gw_config_t *old, const gw_config_t *cfg);
    /* Shutdown step 1: stop taking work. */
    void (*on_stop)(void *arg);
    void *arg;
} gw_node_part_t;

/* Builds a node from cfg (copied): IO loops, pool, engine. It does not take clients until
 * gw_node_listen. src (may be NULL: SIGHUP then only logs that it cannot reload) is where cfg
 * came from. Returns: 0; -ENOMEM; -EINVAL; a thread start error. Thread: main.
 * Ownership: free with gw_node_free; src's arrays stay the caller's and must outlive it. */
int gw_node_new(gw_node_t **out, const gw_config_t *cfg, const gw_config_source_t *src);

/* Attaches part (copied) before gw_node_listen. Returns: 0; -ENOSPC (GW_NODE_PARTS_MAX).
 * Thread: main. */
int gw_node_attach(gw_node_t *node, const gw_node_part_t *part);

/* Starts the client listener, marks the node ready and logs ev=listening.
 * Returns: 0; -EADDRINUSE and other bind errors. Thread: main. */
int gw_node_listen(gw_node_t *node);

/* Runs the accept loop until the node has stopped (signals: see above).
 * Returns: 0 after a clean stop, or a negative errno. Thread: main. */
int gw_node_run(gw_node_t *node);

/* Stops whatever still runs and frees the node. NULL is fine. Thread: main, after every
 * attached part is stopped. */
void gw_node_free(gw_node_t *node);

/* Stops now (steps 1-4 above), as a second SIGTERM does; during a drain it ends the drain.
 * Idempotent. Thread: main (the accept loop). */
void gw_node_stop(gw_node_t *node);

/* A reference to the node's current config, for a thread that is not an IO loop (the admin
 * HTTP thread). Takes a small mutex: not for the delivery path, where each loop reads its own
 * reference (gw_loop_cfg). Returns: the snapshot (never NULL); drop it with
 * gw_config_snap_unref. Thread: any. */
gw_config_snap_t *gw_node_config_acquire(gw_node_t *node);

/* The node's engine (publish, presence, online status: gw_engine.h). Thread: any. */
gw_engine_t *gw_node_engine(const gw_node_t *node);

/* The node's id ([server] node_id, else the host name), as presence and the cluster see it.
 * Thread: any. Ownership: the node's, valid while it lives. */
const char *gw_node_id(const gw_node_t *node);

/* Whether the node takes work: listening, not draining, not stopping (the engine's own
 * readiness is gw_engine's is_ready). Thread: any. */
bool gw_node_is_ready(const gw_node_t *node);

/* Whether the node can verify a Connect: a token secret, or insecure mode. Without either it
 * refuses every client, and is not ready. Thread: any. */
bool gw_node_can_authenticate(gw_node_t *node);

/* Whether the node is stopping (shutdown step 1 on). Thread: any. */
bool gw_node_is_stopping(const gw_node_t *node);

/* Bytes of a client session before Connect (its fixed part), for the startup log. Thread: any. */
size_t gw_node_session_bytes(void);

/* --- gw_stats --------------------------------------------------------------------------------- */

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
    GW_CLOSE_UNAUTH_LIMIT,  /* unauthenticated, the oldest at the pre-authentication cap */
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
    uint64_t drained;                         /* sessions told to go by a drain (SIGTERM) */
    uint64_t auth_ok_previous;                /* of auth_ok: tokens signed with a previous secret */
    uint64_t recoveries[GW_RECOVERY_RESULTS]; /* Subscribe{recover} answers by result */
    /* Presence (gw_presence). Gauges are counted up and down by this loop; summed like the
     * counters. */
    uint64_t presence_entries;          /* gauge: visible (connection, channel) subscriptions */
    uint64_t presence_listener_subs;    /* gauge: subscriptions to join/leave events */
    uint64_t presence_refreshes;        /* refresh batches handed to the engine */
    uint64_t presence_refreshed_users;  /* users in them */
    uint64_t presence_joins;            /* join events published */
    uint64_t presence_leaves;           /* leave events published */
    uint64_t presence_event_failures;   /* events lost to a failed allocation */
    uint64_t presence_events_coalesced; /* events not sent: a later one of the window undid it */
    uint64_t presence_events_held;      /* gauge: events waiting for their window's end */
    uint64_t held_inputs;     /* times a connection's requests waited for an earlier one */
    uint64_t unauthenticated; /* gauge: connections without a verified Connect */
    uint64_t unauth_evicted;  /* of them, closed for a newer one at the node's cap */
    uint64_t unauth_evicted_per_address; /* ... at the cap of their source address */
    nl_hist_t loop_lag_us;               /* per iteration: time spent outside epoll_wait */
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
    nl_server_stats_t server; /* every listener's together */
    /* Each listener's (core's GW_NODE_LISTEN_TCP, _WS), has_listener when it exists. */
    gw_transport_stats_t listeners[2];
    bool has_listener[2];
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

/* What a collection may leave out (gw_stats_collect_some). */
typedef enum gw_stats_flags_e {
    /* Users online over several loops: each loop copies its users' names and the last one
     * merges them, O(users) on IO loops (about 1.7 ms for 10,000 users over two loops). With
     * it, users_online is -ENODATA unless the node has one loop (its count is at hand). */
    GW_STATS_NO_USERS = 1,
} gw_stats_flags_t;

/* As gw_stats_collect, leaving out what flags (gw_stats_flags_t, or-ed) name. Thread: any. */
int gw_stats_collect_some(gw_node_t *node, unsigned flags, gw_stats_done_cb done, void *arg);

/* Frees a snapshot. NULL is fine. Thread: any. */
void gw_stats_snapshot_free(gw_stats_snapshot_t *snap);

/* The stable metric label for a close reason / auth failure ("idle_timeout", "signature").
 * Thread: any. Ownership: static strings. */
const char *gw_close_reason_str(gw_close_reason_t r);
const char *gw_auth_fail_str(gw_auth_fail_t r);

#endif
