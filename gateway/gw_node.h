/*
 * gw_node: one herald node: the accept loop (the main thread's), N IO loops (nl_loop_thread),
 * the worker pool for token verification, the engine, the client listener and the admin HTTP
 * server, started in that order and stopped in reverse on SIGINT/SIGTERM (nl_signal).
 *
 * Each IO loop carries a gw_loop_t (nl_loop_data): its subscription index, its deadline wheel,
 * its outgoing fan-out batches, its share of the engine, its counters, its config snapshot.
 * Only that loop's thread touches it; other threads name a loop by its index and post to it
 * (gw_loop_post).
 *
 * Startup logs one line `ev=listening port=<client port> admin_port=<admin port>` (stderr),
 * which tests read to find ports bound as 0.
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
 *   1. stop accepting (server closed), mark not ready, stop the HTTP server (requests waiting
 *      are answered 503), stop the worker pool (pending verifications are cancelled); then
 *      every IO loop posts the fan-out batches it holds and answers, so that a message
 *      accepted before the stop is queued to every subscriber before step 2 reaches them;
 *   2. each IO loop sends Disconnect{SHUTDOWN} to its remaining sessions and closes them;
 *   3. quiesce: rounds of "post to every loop and wait" until a round in which no loop posted
 *      to another (leaves, batches and replies in flight have all landed);
 *   4. stop the IO loop threads, free the engine, then the main loop returns (exit 0).
 * Each step waits for every loop's answer before the next. So a node exits within drain +
 * GW_NODE_DRAIN_GRACE_MS after the first signal (plus the few ms of steps 1-4, and at most
 * 2 s more while admin requests are still waiting), and within milliseconds of a second one.
 *
 * Reload (SIGHUP, gw_reload.h): the config is loaded again from the same sources; what may
 * change at runtime goes into a new immutable snapshot (gw_config_snap.h), which the main
 * loop posts to every IO loop. On each loop gw_loop_config_changed runs with the old and the
 * new config: THE place where a loop reacts to a reload. Connections stay as they are.
 *
 * Thread: gw_node_new/run/free/stop on the main thread. gw_loop_post from the loop named by
 * from. gw_node_config_acquire from any thread.
 * Ownership: the caller owns the node; the node owns every thread, loop and handle it made.
 */
#ifndef HERALD_GATEWAY_GW_NODE_H
#define HERALD_GATEWAY_GW_NODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <pthread.h>

#include "gw_config.h"
#include "gw_config_snap.h"
#include "gw_drain.h"
#include "gw_engine.h"
#include "gw_fanout.h"
#include "gw_heartbeat.h"
#include "gw_http.h"
#include "gw_presence.h"
#include "gw_stats.h"
#include "gw_sub.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_pool.h"
#include "netlib/nl_server.h"
#include "netlib/nl_signal.h"
#include "netlib/nl_timer.h"

/* At most this many IO loops: the memory engine keeps a channel's audience in 64 bits. */
#define GW_NODE_MAX_LOOPS 64

/* How long past the drain window the node waits for its last sessions before closing them
 * at once: their linger after the Disconnect (GW_SESSION_LINGER_MS, 2 s), the wheel's
 * lateness (at most 1 s), and room to spare. */
#define GW_NODE_DRAIN_GRACE_MS 5000

/* Where the running node's config came from, read again on SIGHUP (gw_config_load's
 * arguments). The arrays must outlive the node: main's argv and environ. */
typedef struct gw_config_source_s {
    int argc;
    char *const *argv;
    char *const *envp;
} gw_config_source_t;

/* One IO loop's gateway state. */
struct gw_loop_s {
    gw_node_t *node;
    nl_loop_t *loop;
    uint32_t index;
    bool is_stopping;           /* sessions closed for shutdown: refuse new work */
    bool is_draining;           /* drain step D1 reached this loop: refuse new connections */
    uint8_t slow_policy;        /* gw_slow_policy_t, copied here for the delivery loop */
    uint64_t high_water_bytes;  /* per-connection output limit; 0 disables */
    gw_config_snap_t *snap;     /* this loop's config (a reference); see gw_loop_cfg */
    gw_sub_index_t subs;        /* channel -> subscribers on this loop */
    gw_heartbeat_t hb;          /* deadlines of this loop's sessions */
    gw_fanout_t fanout;         /* batches toward other loops */
    void *engine_shard;         /* the engine's per-loop state */
    nl_buf_t scratch;           /* encodes one reply frame at a time */
    gw_chantab_t recovering;    /* Subscribe{recover} waiting for history (gw_session_recover) */
    uint64_t recover_seq;       /* tickets of those requests */
    uint64_t cross_posts;       /* posts made to other loops (shutdown quiescence) */
    uint64_t acked_cross_posts; /* cross_posts when the loop last answered a shutdown step */
    int start_err;              /* set up on the loop's thread before it runs */
    uint64_t *flush_pub_ns;     /* publish times of messages delivered this iteration */
    uint32_t n_flush_pub;
    uint32_t cap_flush_pub;
    /* Slow consumers told to go during one gw_session_deliver, whose subscriptions it removes
     * once its loop over the members is done. */
    struct gw_session_s **leaving;
    uint32_t n_leaving;
    uint32_t cap_leaving;
    gw_drain_t drain; /* the spread-out disconnects of a drain */
    gw_stats_t stats;
    gw_presence_loop_t presence; /* the loop's users, its refresh batch timer */
};

struct gw_node_s {
    /* The current config. Written on the main thread only, under snap_lock; the main thread
     * reads it freely, other threads through gw_node_config_acquire. IO loops read their own
     * reference (gw_loop_t.snap), which the reload posts to them. */
    gw_config_snap_t *snap;
    pthread_mutex_t snap_lock; /* guards the snap pointer for other threads; nothing else */
    gw_config_source_t src;    /* for a reload; argc 0: none */
    char node_id[GW_CONFIG_NAME_MAX];
    uint64_t start_ms;
    nl_loop_t *main_loop;
    uint32_t n_loops;
    gw_loop_t *loops;
    nl_loop_t **io_loops;
    nl_loop_thread_t **threads;
    nl_server_t *server;
    nl_pool_t *pool;
    gw_engine_t *engine;
    gw_http_t *http;
    nl_signal_t *sig;
    uint16_t port;
    uint16_t admin_port;
    /* What nl_server applies to every accepted connection (from the startup config); a
     * session of a reloaded config that differs sets its own (gw_session's on_connected). */
    uint64_t conn_high_water_bytes;
    uint64_t conn_max_input_bytes;
    _Atomic uint64_t connections; /* open client connections, for max_connections */
    _Atomic bool is_ready;
    _Atomic bool is_draining; /* between drain_begin and drain_end */
    _Atomic bool is_stopping;
    /* Subscriptions to join/leave events on the node (gw_presence): none, no event is built. */
    _Atomic uint64_t presence_listeners;
    /* Shutdown sequencing, main loop only. */
    int stop_step;
    uint32_t stop_acks;
    uint64_t stop_posts_seen;
    uint32_t drain_acks;
    uint64_t drain_window_ms; /* written before step D1's posts; the loops read it in D2 */
    uint64_t drain_start_ms;
    nl_timer_t *drain_timer; /* the window plus the grace */
    int exit_status;
};

/* Builds and starts a node from cfg (copied): IO loops, pool, engine, listener, admin API.
 * src (may be NULL: SIGHUP then only logs that it cannot reload) is where cfg came from.
 * Returns: 0; -EADDRINUSE and other bind errors; -ENOMEM; -EINVAL. Thread: main.
 * Ownership: free with gw_node_free; src's arrays stay the caller's and must outlive it. */
int gw_node_new(gw_node_t **out, const gw_config_t *cfg, const gw_config_source_t *src);

/* Runs the accept loop until the node has stopped (signals: see above).
 * Returns: 0 after a clean stop, or a negative errno. Thread: main. */
int gw_node_run(gw_node_t *node);

/* Stops whatever still runs and frees the node. NULL is fine. Thread: main. */
void gw_node_free(gw_node_t *node);

/* Stops now (steps 1-4 above), as a second SIGTERM does; during a drain it ends the drain.
 * Idempotent. Thread: main (the accept loop). */
void gw_node_stop(gw_node_t *node);

/* A reference to the node's current config, for a thread that is not an IO loop (the admin
 * HTTP thread). Takes a small mutex: not for the delivery path, where each loop reads its own
 * reference (gw_loop_cfg). Returns: the snapshot (never NULL); drop it with
 * gw_config_snap_unref. Thread: any. */
gw_config_snap_t *gw_node_config_acquire(gw_node_t *node);

/* Runs once a replaced config is in force on every IO loop. */
typedef void (*gw_node_applied_cb)(void *arg);

/* Puts snap (the caller's reference, which the node takes over) in place as the node's config
 * and posts it to every IO loop, where gw_loop_config_changed runs; on_applied(arg) (may be
 * NULL) runs once every loop has it, on the loop that was last (or here, if posts failed).
 * The main thread's part of a reload (gw_reload.c).
 * Returns: 0; -ENOMEM (nothing changed, snap dropped, on_applied will not run). Thread: main. */
int gw_node_config_replace(gw_node_t *node, gw_config_snap_t *snap, gw_node_applied_cb on_applied,
                           void *arg);

/*
 * THE reload hook of an IO loop: runs on lp's thread when a reloaded config arrives, with
 * lp->snap already pointing at the new snapshot and the old one still alive until it returns
 * (so pointers into old stay valid throughout). It also runs once when the loop starts, with
 * old == NULL, so one function sets up everything a loop derives from its config. Put every
 * per-loop reaction to a reload here (copies the delivery path reads, history rules, ...);
 * settings read straight from gw_loop_cfg(lp) at each use need nothing. It must not fail:
 * anything that could is checked on the main thread (gw_reload.c) before the config is
 * posted. Sessions and their connections are left as they are.
 * Thread: lp's. Implemented in gw_node.c.
 */
void gw_loop_config_changed(gw_loop_t *lp, const gw_config_t *old, const gw_config_t *cfg);

/* lp's current config: read fields through it at each use, never keep the pointer across a
 * return to the loop (a reload may replace it). Thread: lp's. */
static inline const gw_config_t *gw_loop_cfg(const gw_loop_t *lp)
{
    return &lp->snap->cfg;
}

/* The gateway state of the IO loop the calling thread runs, or NULL. Thread: any. */
static inline gw_loop_t *gw_loop_current(void)
{
    nl_loop_t *loop = nl_loop_current();
    return loop ? (gw_loop_t *)nl_loop_data(loop) : NULL;
}

/* Posts fn(arg) from loop `from` to IO loop `target`, counting it for shutdown quiescence.
 * Returns: 0; -ENOMEM (fn will not run). Thread: from's loop. */
int gw_loop_post(gw_loop_t *from, uint32_t target, nl_loop_post_cb fn, void *arg);

/* As gw_loop_post, to a loop named by its nl_loop_t (a reply address). Thread: from's loop. */
int gw_loop_post_to(gw_loop_t *from, nl_loop_t *target, nl_loop_post_cb fn, void *arg);

#endif
