/*
 * gw_node_int.h: the node's and its IO loops' layout, and what the core's files share:
 * gw_node.c (startup, config, reload), gw_node_stop.c (signals, drain, shutdown), gw_loop.c
 * (an IO loop's life and the engine's hooks into it), gw_stats.c (collection) and the
 * session files. Private to the core.
 */
#ifndef HERALD_GATEWAY_GW_NODE_INT_H
#define HERALD_GATEWAY_GW_NODE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <pthread.h>

#include "gw_channel.h"
#include "gw_drain.h"
#include "gw_fanout.h"
#include "gw_heartbeat.h"
#include "gw_transport.h"
#include "gw_core.h"
#include "gw_state.h"
#include "netlib/nl_arena.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_pool.h"
#include "netlib/nl_server.h"
#include "netlib/nl_signal.h"
#include "netlib/nl_timer.h"

typedef struct gw_loop_s gw_loop_t;

/* The node's client listeners: herald frames over TCP (or TLS), and WebSocket. */
enum { GW_NODE_LISTEN_TCP = 0, GW_NODE_LISTEN_WS = 1, GW_NODE_LISTENERS = 2 };

/* What a client connection's ctx (nl_conn_ctx) points to: its node, and its framing. */
typedef struct gw_node_listen_ctx_s {
    gw_node_t *node;
    bool is_ws;
} gw_node_listen_ctx_t;

/* A loop's unauthenticated connections, oldest first, overall and by source address
 * (gw_session_preauth.c). */
typedef struct gw_preauth_s {
    struct gw_preauth_rec_s *recs; /* slab of records */
    uint32_t cap;
    uint32_t free_head;
    uint32_t head; /* oldest */
    uint32_t tail;
    uint32_t count;
    gw_chantab_t addrs;                  /* source address -> its records */
    struct gw_preauth_addr_s **by_count; /* by_count[n]: the addresses holding n */
    uint32_t by_count_cap;
    uint32_t max_count; /* the most any address holds */
} gw_preauth_t;

/* One IO loop's gateway state: what each room keeps per loop, side by side. Only that loop's
 * thread touches it. */
struct gw_loop_s {
    gw_fanout_loop_t fo; /* fan-out's part: index, nl loop, subscription index, batches, policy */
    gw_presence_loop_t presence; /* the loop's users (state) */
    gw_node_t *node;
    bool is_stopping;        /* sessions closed for shutdown: refuse new work */
    bool is_draining;        /* drain step D1 reached this loop: refuse new connections */
    gw_config_snap_t *snap;  /* this loop's config (a reference); see gw_loop_cfg */
    gw_heartbeat_t hb;       /* deadlines of this loop's sessions */
    nl_buf_t scratch;        /* encodes one reply frame at a time */
    gw_chantab_t recovering; /* Subscribe{recover} waiting for history (gw_session_recover) */
    gw_chantab_t sides;      /* sessions' side records, by connection id (gw_session_flow) */
    gw_preauth_t preauth;    /* the unauthenticated connections (gw_session_preauth) */
    uint64_t *wake_ids;      /* sessions whose waiting input to look at before sleeping */
    uint32_t n_wake;
    uint32_t cap_wake;
    uint64_t recover_seq;      /* tickets of those requests */
    uint64_t acked_posts;      /* fo.posts when the loop last answered a shutdown step */
    nl_timer_t *refresh_timer; /* the presence refresh batch (gw_loop.c) */
    gw_evgate_t evgate;        /* join/leave events of this loop's sessions, coalesced */
    nl_timer_t *evgate_timer;  /* its window, running while it holds records */
    int start_err;             /* set up on the loop's thread before it runs */
    gw_drain_t drain;          /* the spread-out disconnects of a drain */
    gw_stats_t stats;          /* the sessions' counters */
    nl_arena_t auth_arena;     /* Connects being verified (gw_session_auth.c) */
    uint32_t auth_unflushed;   /* verdicts answered since the last flush (gw_session_auth.c) */
    nl_timer_t *trim_timer;    /* the heap trim after a burst (gw_loop.c) */
    uint64_t trim_churn;       /* loop_churn at the last trim */
    uint64_t trim_tick_churn;  /* loop_churn at the last tick */
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
    /* The client listeners: tcp, and ws when [websocket] listen is set; their connections'
     * ctx (nl_conn_ctx) says which. Closed to stop accepting, freed after the IO loops. */
    gw_listener_t *listeners[GW_NODE_LISTENERS];
    gw_node_listen_ctx_t listen_ctx[GW_NODE_LISTENERS];
    gw_tls_t *tls; /* both listeners' TLS ([tls] cert_file and key_file), or NULL */
    nl_pool_t *pool;
    gw_fanout_t hub; /* the IO loops as fan-out and the engine see them */
    gw_engine_host_t host;
    gw_engine_t *engine;
    nl_signal_t *sig;
    uint16_t port;    /* the tcp listener's */
    uint16_t ws_port; /* the ws listener's; 0: none */
    gw_node_part_t parts[GW_NODE_PARTS_MAX];
    uint32_t n_parts;
    /* What nl_server applies to every accepted connection (from the startup config); a
     * session of a reloaded config that differs sets its own (gw_session's on_connected). */
    uint64_t conn_high_water_bytes;
    uint64_t conn_max_input_bytes;
    int client_fd_line; /* nl_server's max_fd: descriptors clients may have (0: no limit) */
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

/* Runs once a replaced config is in force on every IO loop. */
typedef void (*gw_node_applied_cb)(void *arg);

/* Puts snap (the caller's reference, which the node takes over) in place as the node's config
 * and posts it to every IO loop, where gw_loop_config_changed runs; on_applied(arg) (may be
 * NULL) runs once every loop has it, on the loop that was last (or here, if posts failed).
 * The main thread's part of a reload (gw_node_reload).
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
 * anything that could is checked on the main thread (gw_config_reload.c) before the config is
 * posted. Sessions and their connections are left as they are.
 * Thread: lp's. Implemented in gw_loop.c.
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

/* --- gw_loop.c ------------------------------------------------------------------------------ */

/* nl_loop_thread's hooks for IO loop lp (arg): set up on the loop's own thread before it runs
 * (a failure is left in lp->start_err), torn down as it stops. */
void gw_loop_on_start(nl_loop_t *loop, void *arg);
void gw_loop_on_stop(nl_loop_t *loop, void *arg);

/* The engine's hooks into the node (gw_engine_host_t.ops; arg = the node). */
extern const gw_engine_host_ops_t gw_loop_host_ops;

/* --- gw_node_stop.c ------------------------------------------------------------------------- */

/* The accept loop's signal handler: SIGHUP reloads, SIGINT/SIGTERM drain or stop. */
void gw_node_on_signal(nl_signal_t *s, int signum, void *arg);

/* --- gw_node.c -------------------------------------------------------------------------------- */

/* SIGHUP: loads the config again and puts what changed in place (gw_config.h's reload), and
 * reads the TLS certificate files again. Returns: 0; or the reload's error (nothing changed).
 * Thread: main. */
int gw_node_reload(gw_node_t *node);

/* Stops accepting on every listener (idempotent). Thread: main. */
void gw_node_close_listeners(gw_node_t *node);

#endif
