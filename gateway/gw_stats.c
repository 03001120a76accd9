/*
 * gw_stats: collecting per-loop counters at scrape time, and rendering them. See gw_stats.h.
 *
 * Each loop copies its own counters on its own thread, into its own slot of the snapshot, so
 * the copy needs no lock and TSan sees no race; the atomic remaining count orders the slots
 * before the final reader (release on each decrement, acquire by the last).
 */
#include "gw_stats.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_node.h"
#include "herald.pb-c.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

typedef struct collect_s collect_t;

typedef struct collect_part_s {
    collect_t *col;
    uint32_t index; /* an IO loop, or n_loops for the accept loop */
} collect_part_t;

struct collect_s {
    gw_node_t *node;
    gw_stats_snapshot_t *snap;
    gw_stats_done_cb done;
    void *arg;
    _Atomic uint32_t remaining;
    collect_part_t parts[];
};

static const char *const close_names[GW_CLOSE_REASONS] = {
    [GW_CLOSE_PEER] = "peer",
    [GW_CLOSE_IO_ERROR] = "io_error",
    [GW_CLOSE_IDLE_TIMEOUT] = "idle_timeout",
    [GW_CLOSE_HANDSHAKE_TIMEOUT] = "handshake_timeout",
    [GW_CLOSE_PROTOCOL_ERROR] = "protocol_error",
    [GW_CLOSE_FRAME_TOO_LARGE] = "frame_too_large",
    [GW_CLOSE_AUTH_FAILED] = "auth_failed",
    [GW_CLOSE_SLOW_CONSUMER] = "slow_consumer",
    [GW_CLOSE_SERVER_FULL] = "server_full",
    [GW_CLOSE_SHUTDOWN] = "shutdown",
    [GW_CLOSE_TOKEN_EXPIRED] = "token_expired",
};

static const char *const auth_fail_names[GW_AUTH_FAIL_REASONS] = {
    [GW_AUTH_FAIL_MALFORMED] = "malformed",         [GW_AUTH_FAIL_ALG] = "bad_alg",
    [GW_AUTH_FAIL_SIGNATURE] = "bad_signature",     [GW_AUTH_FAIL_EXPIRED] = "expired",
    [GW_AUTH_FAIL_NOT_YET_VALID] = "not_yet_valid", [GW_AUTH_FAIL_MISSING_SUB] = "missing_sub",
    [GW_AUTH_FAIL_CLAIMS] = "bad_claims",           [GW_AUTH_FAIL_BUSY] = "busy",
};

static const char *const error_code_names[] = {
    "unspecified",    "bad_request",  "unauthorized",       "token_expired",          "forbidden",
    "busy",           "rate_limited", "frame_too_large",    "too_many_subscriptions", "bad_channel",
    "not_subscribed", "internal",     "already_subscribed", "not_supported",          "cancelled",
};
_Static_assert(sizeof(error_code_names) / sizeof(error_code_names[0]) == GW_STATS_ERROR_CODES,
               "one metric label per Error code");

const char *gw_close_reason_str(gw_close_reason_t r)
{
    return (unsigned)r < GW_CLOSE_REASONS ? close_names[r] : "unknown";
}

const char *gw_auth_fail_str(gw_auth_fail_t r)
{
    return (unsigned)r < GW_AUTH_FAIL_REASONS ? auth_fail_names[r] : "unknown";
}

void gw_stats_init(gw_stats_t *st)
{
    memset(st, 0, sizeof(*st));
}

void gw_stats_snapshot_free(gw_stats_snapshot_t *snap)
{
    if (!snap)
        return;
    free(snap->loops);
    free(snap);
}

/* --- collection --------------------------------------------------------------------------- */

/* Users online, each once: one loop's table is already distinct; several loops' lists are
 * merged by name (O(users), on the thread that finishes the collection). */
static int64_t collect_users_online(gw_stats_snapshot_t *snap)
{
    int64_t users = (int64_t)snap->loops[0].online_users;
    gw_online_list_t *lists[GW_NODE_MAX_LOOPS];
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        lists[i] = &snap->loops[i].users;
        /* Without every name the count would be wrong: it is reported as unknown. */
        if (snap->loops[i].users_err < 0)
            users = snap->loops[i].users_err;
    }
    if (users >= 0 && snap->n_loops > 1)
        users = gw_online_list_distinct(lists, snap->n_loops);
    for (uint32_t i = 0; i < snap->n_loops; i++)
        gw_online_list_free(&snap->loops[i].users);
    return users;
}

static void collect_finish(collect_t *col)
{
    gw_node_t *node = col->node;
    gw_stats_snapshot_t *snap = col->snap;
    if (node->pool) {
        nl_pool_get_stats(node->pool, &snap->pool);
        nl_pool_merge_hists(node->pool, &snap->pool_wait_ns, NULL);
    }
    if (node->http)
        gw_http_stats(node->http, &snap->http);
    snap->is_ready = atomic_load_explicit(&node->is_ready, memory_order_relaxed) &&
                     node->engine->ops->is_ready(node->engine);
    snap->is_draining = atomic_load_explicit(&node->is_draining, memory_order_relaxed);
    snap->uptime_ms = nl_now_ms() - node->start_ms;
    snap->users_online = collect_users_online(snap);
    col->done(snap, col->arg);
    free(col);
}

static void collect_part_done(collect_t *col)
{
    if (atomic_fetch_sub_explicit(&col->remaining, 1, memory_order_acq_rel) == 1)
        collect_finish(col);
}

/* On an IO loop: copies this loop's figures into its slot. */
static void collect_loop(void *arg)
{
    collect_part_t *part = arg;
    collect_t *col = part->col;
    gw_loop_t *lp = &col->node->loops[part->index];
    gw_stats_loop_snap_t *out = &col->snap->loops[part->index];
    /* The counters are plain fields written by this thread only; the histograms are copied
     * through nl_hist_merge into the zeroed slot. */
    memcpy(&out->s, &lp->stats, offsetof(gw_stats_t, latency_ns));
    nl_hist_merge(&out->s.latency_ns, &lp->stats.latency_ns);
    nl_hist_merge(&out->s.flush_ns, &lp->stats.flush_ns);
    nl_hist_merge(&out->s.loop_lag_us, &lp->stats.loop_lag_us);
    nl_conn_get_loop_stats(lp->loop, &out->conn);
    nl_loop_get_stats(lp->loop, &out->loop);
    out->queue_depth = nl_loop_queue_depth(lp->loop);
    out->channels = gw_sub_index_channels(&lp->subs);
    /* Listener channels are the index's too, but not subscriptions anybody asked for. */
    uint64_t listening = lp->stats.presence_listener_subs;
    out->subscriptions =
        lp->subs.subscriptions > listening ? lp->subs.subscriptions - listening : 0;
    col->node->engine->ops->loop_stats(col->node->engine, lp->index, &out->engine);
    out->online_users = gw_online_users(&lp->presence.online);
    if (col->node->n_loops > 1)
        out->users_err = gw_presence_loop_users(lp, &out->users);
    collect_part_done(col);
}

/* On the accept loop: the listener's figures. */
static void collect_main(void *arg)
{
    collect_part_t *part = arg;
    collect_t *col = part->col;
    if (col->node->server)
        nl_server_get_stats(col->node->server, &col->snap->server);
    /* The node's current config is the main thread's to read. */
    col->snap->max_connections = col->node->snap->cfg.max_connections;
    col->snap->pool_capacity = col->node->snap->cfg.worker_queue_capacity;
    collect_part_done(col);
}

int gw_stats_collect(gw_node_t *node, gw_stats_done_cb done, void *arg)
{
    if (atomic_load_explicit(&node->is_stopping, memory_order_relaxed))
        return -ESHUTDOWN;
    uint32_t n = node->n_loops;
    collect_t *col = calloc(1, sizeof(*col) + sizeof(col->parts[0]) * (n + 1));
    gw_stats_snapshot_t *snap = calloc(1, sizeof(*snap));
    gw_stats_loop_snap_t *loops = calloc(n, sizeof(*loops));
    if (!col || !snap || !loops) {
        free(col);
        free(snap);
        free(loops);
        return -ENOMEM;
    }
    snap->n_loops = n;
    snap->loops = loops;
    col->node = node;
    col->snap = snap;
    col->done = done;
    col->arg = arg;
    atomic_init(&col->remaining, n + 1);
    for (uint32_t i = 0; i <= n; i++) {
        col->parts[i] = (collect_part_t){.col = col, .index = i};
        nl_loop_t *loop = i < n ? node->loops[i].loop : node->main_loop;
        if (nl_loop_post(loop, i < n ? collect_loop : collect_main, &col->parts[i]) < 0) {
            /* That slot stays zero; the collection still completes. */
            NL_LOG(NL_WARN, "stats_post_failed", "loop=%u", i);
            collect_part_done(col);
        }
    }
    return 0;
}

/* --- rendering ---------------------------------------------------------------------------- */

/* Latency bounds in seconds; lag bounds too. Powers of two in ns/us would be exact, but
 * operators read decimal bounds; nl_hist_count_le leaves out at most one straddling bucket. */
static const double latency_bounds_s[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};
#define N_LATENCY (sizeof(latency_bounds_s) / sizeof(latency_bounds_s[0]))

typedef struct totals_s {
    gw_stats_t s;
    nl_conn_loop_stats_t conn;
    uint64_t channels;
    uint64_t subscriptions;
    gw_engine_stats_t engine;
} totals_t;

static void sum_loops(const gw_stats_snapshot_t *snap, totals_t *t)
{
    memset(t, 0, sizeof(*t));
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        const gw_stats_loop_snap_t *l = &snap->loops[i];
        /* Every counter before the histograms is a uint64_t: sum them as an array. */
        const uint64_t *src = (const uint64_t *)&l->s;
        uint64_t *dst = (uint64_t *)&t->s;
        for (size_t k = 0; k < offsetof(gw_stats_t, latency_ns) / sizeof(uint64_t); k++)
            dst[k] += src[k];
        nl_hist_merge(&t->s.latency_ns, &l->s.latency_ns);
        nl_hist_merge(&t->s.flush_ns, &l->s.flush_ns);
        t->conn.open += l->conn.open;
        t->conn.bytes_in += l->conn.bytes_in;
        t->conn.bytes_out += l->conn.bytes_out;
        t->conn.writev_calls += l->conn.writev_calls;
        t->conn.batch_submits += l->conn.batch_submits;
        t->conn.batch_sends += l->conn.batch_sends;
        t->conn.short_writes += l->conn.short_writes;
        t->conn.send_to_dropped += l->conn.send_to_dropped;
        t->channels += l->channels;
        t->subscriptions += l->subscriptions;
        t->engine.channels += l->engine.channels;
        t->engine.published += l->engine.published;
        t->engine.history_channels += l->engine.history_channels;
        t->engine.history_messages += l->engine.history_messages;
        t->engine.history_bytes += l->engine.history_bytes;
        t->engine.history_max_bytes += l->engine.history_max_bytes;
        for (int r = 0; r < GW_HISTORY_EVICT_REASONS; r++)
            t->engine.history_evicted[r] += l->engine.history_evicted[r];
        /* Engine-wide figures come from one loop only. */
        if (l->engine.redis.n_servers)
            t->engine.redis = l->engine.redis;
        t->engine.last_seen_records += l->engine.last_seen_records;
    }
}

static void render_per_loop(gw_metrics_t *w, const gw_stats_snapshot_t *snap)
{
    char idx[16];
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_gauge(w, "herald_connections", "Open client connections, per IO loop.",
                         (const char *const[]){"loop", idx, NULL},
                         (double)snap->loops[i].conn.open);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_gauge(
            w, "herald_sessions_authenticated", "Connections past Connect, per IO loop.",
            (const char *const[]){"loop", idx, NULL}, (double)snap->loops[i].s.authenticated);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_gauge(w, "herald_loop_queue_depth", "Closures posted to the loop, not yet run.",
                         (const char *const[]){"loop", idx, NULL},
                         (double)snap->loops[i].queue_depth);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_hist_nl(w, "herald_loop_lag_seconds",
                           "Time per loop iteration spent outside epoll_wait.",
                           (const char *const[]){"loop", idx, NULL}, &snap->loops[i].s.loop_lag_us,
                           latency_bounds_s, N_LATENCY, 1e-6);
    }
}

static void render_sessions(gw_metrics_t *w, const totals_t *t, const gw_stats_snapshot_t *snap)
{
    gw_metrics_counter(w, "herald_accepted_total", "Connections accepted by the listener.", NULL,
                       snap->server.accepted);
    gw_metrics_counter(w, "herald_emfile_events_total", "Times accept hit descriptor exhaustion.",
                       NULL, snap->server.emfile_events);
    for (int r = 0; r < GW_CLOSE_REASONS; r++)
        gw_metrics_counter(w, "herald_closed_total", "Closed client connections by reason.",
                           (const char *const[]){"reason", close_names[r], NULL}, t->s.closes[r]);
    gw_metrics_counter(w, "herald_auth_ok_total", "Connects accepted.", NULL, t->s.auth_ok);
    gw_metrics_counter(w, "herald_auth_ok_previous_secret_total",
                       "Connects accepted with a token signed by a previous secret (rotation).",
                       NULL, t->s.auth_ok_previous);
    gw_metrics_counter(w, "herald_drained_total",
                       "Sessions told to reconnect elsewhere by a drain (SIGTERM).", NULL,
                       t->s.drained);
    for (int r = 0; r < GW_AUTH_FAIL_REASONS; r++)
        gw_metrics_counter(w, "herald_auth_failures_total", "Connects refused by reason.",
                           (const char *const[]){"reason", auth_fail_names[r], NULL},
                           t->s.auth_failures[r]);
    for (int k = 1; k < GW_STATS_FRAME_TYPES; k++)
        gw_metrics_counter(w, "herald_frames_in_total", "Frames received by type.",
                           (const char *const[]){"type", proto_body_name(k), NULL},
                           t->s.frames_in[k]);
    for (int k = 1; k < GW_STATS_FRAME_TYPES; k++)
        gw_metrics_counter(w, "herald_frames_out_total", "Frames sent by type.",
                           (const char *const[]){"type", proto_body_name(k), NULL},
                           k == HERALD__FRAME__BODY_PUSH ? t->s.deliveries : t->s.frames_out[k]);
    for (int k = 1; k < GW_STATS_ERROR_CODES; k++)
        gw_metrics_counter(w, "herald_errors_sent_total", "Error frames sent by code.",
                           (const char *const[]){"code", error_code_names[k], NULL},
                           t->s.errors_out[k]);
    gw_metrics_counter(w, "herald_bytes_in_total", "Bytes read from clients.", NULL,
                       t->conn.bytes_in);
    gw_metrics_counter(w, "herald_bytes_out_total", "Bytes written to clients.", NULL,
                       t->conn.bytes_out);
    gw_metrics_counter(w, "herald_writev_calls_total", "Output system calls, one per write.", NULL,
                       t->conn.writev_calls);
    gw_metrics_counter(w, "herald_batch_submits_total",
                       "Output system calls that wrote to many connections (io_uring).", NULL,
                       t->conn.batch_submits);
    gw_metrics_counter(w, "herald_batch_sends_total", "Writes made by batched system calls.", NULL,
                       t->conn.batch_sends);
    gw_metrics_counter(w, "herald_short_writes_total",
                       "Writes the kernel took only part of: a client's socket was full.", NULL,
                       t->conn.short_writes);
}

static void render_delivery(gw_metrics_t *w, const totals_t *t)
{
    gw_metrics_counter(w, "herald_publishes_total", "Messages given an offset.", NULL,
                       t->engine.published);
    gw_metrics_counter(w, "herald_deliveries_total", "Push frames queued to subscribers.", NULL,
                       t->s.deliveries);
    gw_metrics_counter(w, "herald_slow_consumer_drops_total",
                       "Push frames dropped for slow consumers.", NULL, t->s.slow_drops);
    gw_metrics_counter(w, "herald_unrouted_messages_total",
                       "Messages that reached a loop with no local subscriber.", NULL,
                       t->s.unrouted);
    gw_metrics_counter(w, "herald_fanout_batches_total", "Message batches posted between loops.",
                       NULL, t->s.fanout_batches);
    gw_metrics_counter(w, "herald_fanout_failures_total",
                       "Messages lost to a failed post between loops.", NULL, t->s.fanout_failures);
    gw_metrics_gauge(w, "herald_channels",
                     "Channels the engine holds: subscribed somewhere, or keeping history.", NULL,
                     (double)t->engine.channels);
    gw_metrics_gauge(w, "herald_subscriptions", "Connection-channel subscriptions.", NULL,
                     (double)t->subscriptions);
    gw_metrics_hist_nl(w, "herald_publish_to_enqueue_seconds",
                       "From the engine accepting a message to its Push queued on a loop.", NULL,
                       &t->s.latency_ns, latency_bounds_s, N_LATENCY, 1e-9);
    gw_metrics_hist_nl(w, "herald_publish_to_flush_seconds",
                       "From the engine accepting a message to its Push written to the sockets "
                       "of a loop's subscribers (those with room).",
                       NULL, &t->s.flush_ns, latency_bounds_s, N_LATENCY, 1e-9);
}

static void render_history(gw_metrics_t *w, const totals_t *t)
{
    static const char *const evict_names[GW_HISTORY_EVICT_REASONS] = {
        [GW_HISTORY_EVICT_COUNT] = "count",
        [GW_HISTORY_EVICT_AGE] = "age",
        [GW_HISTORY_EVICT_MEMORY] = "memory",
    };
    const gw_engine_stats_t *e = &t->engine;
    gw_metrics_gauge(w, "herald_history_channels", "Channels keeping history.", NULL,
                     (double)e->history_channels);
    gw_metrics_gauge(w, "herald_history_messages", "Messages kept in channel histories.", NULL,
                     (double)e->history_messages);
    gw_metrics_gauge(w, "herald_history_bytes",
                     "Memory of channel histories (messages, rings), estimated.", NULL,
                     (double)e->history_bytes);
    gw_metrics_gauge(w, "herald_history_max_bytes", "The cap on herald_history_bytes.", NULL,
                     (double)e->history_max_bytes);
    for (int r = 0; r < GW_HISTORY_EVICT_REASONS; r++)
        gw_metrics_counter(w, "herald_history_evicted_total",
                           "Messages dropped from histories, by the bound that dropped them.",
                           (const char *const[]){"reason", evict_names[r], NULL},
                           e->history_evicted[r]);
    for (int r = 0; r < GW_RECOVERY_RESULTS; r++)
        gw_metrics_counter(w, "herald_recoveries_total",
                           "Subscribe{recover} requests answered, by result.",
                           (const char *const[]){"result", gw_recovery_str((gw_recovery_t)r), NULL},
                           t->s.recoveries[r]);
}

static void render_redis(gw_metrics_t *w, const gw_engine_redis_stats_t *r)
{
    /* A family's samples must stand together, so one pass per family. */
    uint32_t n =
        r->n_servers < GW_ENGINE_REDIS_SERVERS_MAX ? r->n_servers : GW_ENGINE_REDIS_SERVERS_MAX;
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_gauge(w, "herald_redis_up",
                         "1 while the Redis server is connected and has herald's functions.",
                         (const char *const[]){"server", r->servers[i].name, NULL},
                         r->servers[i].is_up ? 1.0 : 0.0);
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_gauge(w, "herald_redis_pending_commands",
                         "Commands sent to the Redis server, not answered yet.",
                         (const char *const[]){"server", r->servers[i].name, NULL},
                         (double)r->servers[i].pending);
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_refused_commands_total",
                           "Commands not sent: redis_max_pending were in flight to the server.",
                           (const char *const[]){"server", r->servers[i].name, NULL},
                           r->servers[i].refused);
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_reconnects_total",
                           "Times the connection to the Redis server went down.",
                           (const char *const[]){"server", r->servers[i].name, NULL},
                           r->servers[i].reconnects);
    gw_metrics_counter(w, "herald_redis_delivered_total",
                       "Messages from Redis handed to this node's loops.", NULL, r->delivered);
    gw_metrics_counter(w, "herald_redis_lost_messages_total",
                       "Offsets that never reached this node (Redis outages, pub/sub gaps).", NULL,
                       r->lost);
    gw_metrics_counter(w, "herald_redis_duplicates_total",
                       "Messages that reached this node twice (dropped).", NULL, r->duplicates);
    gw_metrics_counter(w, "herald_redis_unsequenced_total",
                       "Plain PUBLISHes delivered outside the channel's offsets.", NULL,
                       r->unsequenced);
    gw_metrics_counter(w, "herald_redis_local_only_publishes_total",
                       "Publishes delivered on this node only while Redis was down.", NULL,
                       r->local_only);
    gw_metrics_counter(w, "herald_redis_busy_publishes_total",
                       "Publishes refused: too many commands in flight toward Redis.", NULL,
                       r->busy);
    gw_metrics_counter(w, "herald_redis_join_timeouts_total",
                       "Subscriptions refused because Redis did not answer in time.", NULL,
                       r->join_timeouts);
    gw_metrics_counter(w, "herald_redis_epoch_changes_total",
                       "Channel epochs that changed under subscribers (Redis lost them).", NULL,
                       r->epoch_changes);
    gw_metrics_counter(w, "herald_redis_history_fetches_total",
                       "Recoveries answered from a Redis stream.", NULL, r->history_fetches);
    gw_metrics_counter(w, "herald_redis_presence_dropped_total",
                       "Presence and online-status writes dropped: too many waiting for Redis.",
                       NULL, r->presence_dropped);
}

static void render_presence(gw_metrics_t *w, const totals_t *t, const gw_stats_snapshot_t *snap)
{
    /* Unknown (no memory for the names) is left out rather than shown as a wrong figure. */
    if (snap->users_online >= 0)
        gw_metrics_gauge(w, "herald_users_online",
                         "Users with a connection to the node, each counted once.", NULL,
                         (double)snap->users_online);
    gw_metrics_gauge(w, "herald_presence_entries",
                     "Subscriptions visible to presence: (connection, channel) pairs past "
                     "their SubscribeOk.",
                     NULL, (double)t->s.presence_entries);
    gw_metrics_gauge(w, "herald_presence_listeners",
                     "Subscriptions that asked for join/leave events.", NULL,
                     (double)t->s.presence_listener_subs);
    gw_metrics_counter(w, "herald_presence_refreshes_total",
                       "Online-status refresh batches handed to the engine (one per IO loop "
                       "per refresh interval at most, whatever the pings).",
                       NULL, t->s.presence_refreshes);
    gw_metrics_counter(w, "herald_presence_refreshed_users_total", "Users in those batches.", NULL,
                       t->s.presence_refreshed_users);
    gw_metrics_counter(w, "herald_presence_events_total", "Join/leave events published.",
                       (const char *const[]){"type", "join", NULL}, t->s.presence_joins);
    gw_metrics_counter(w, "herald_presence_events_total", "Join/leave events published.",
                       (const char *const[]){"type", "leave", NULL}, t->s.presence_leaves);
    gw_metrics_counter(w, "herald_presence_event_failures_total",
                       "Join/leave events lost to a failed allocation or post.", NULL,
                       t->s.presence_event_failures);
    gw_metrics_gauge(w, "herald_last_seen_records",
                     "Users gone offline whose last-seen time is kept.", NULL,
                     (double)t->engine.last_seen_records);
}

static void render_pool(gw_metrics_t *w, const gw_stats_snapshot_t *snap)
{
    const nl_pool_stats_t *p = &snap->pool;
    gw_metrics_gauge(w, "herald_pool_queue_depth", "Token verifications waiting.", NULL,
                     (double)p->queue_depth);
    gw_metrics_gauge(w, "herald_pool_queue_high_water", "Deepest the queue has been.", NULL,
                     (double)p->queue_hwm);
    gw_metrics_gauge(w, "herald_pool_queue_capacity",
                     "Tasks the queue holds at most ([server] worker_queue); past it, rejected.",
                     NULL, (double)snap->pool_capacity);
    gw_metrics_counter(w, "herald_pool_submitted_total", "Tasks queued.", NULL, p->submitted);
    gw_metrics_counter(w, "herald_pool_rejected_total", "Tasks refused: queue full.", NULL,
                       p->rejected);
    gw_metrics_counter(w, "herald_pool_completed_total", "Tasks run.", NULL, p->completed);
    gw_metrics_gauge(w, "herald_pool_threads", "Worker threads alive.", NULL, (double)p->threads);
    gw_metrics_hist_nl(w, "herald_pool_wait_seconds", "Time a task waited in the queue.", NULL,
                       &snap->pool_wait_ns, latency_bounds_s, N_LATENCY, 1e-9);
}

int gw_stats_render(const gw_stats_snapshot_t *snap, gw_metrics_format_t format, char **out,
                    size_t *len)
{
    totals_t *t = malloc(sizeof(*t));
    if (!t)
        return -ENOMEM;
    sum_loops(snap, t);
    gw_metrics_t w;
    gw_metrics_begin(&w, format);
    gw_metrics_gauge(&w, "herald_ready", "1 when the node accepts and serves traffic.", NULL,
                     snap->is_ready ? 1.0 : 0.0);
    gw_metrics_gauge(&w, "herald_draining", "1 while the node drains its clients (SIGTERM).", NULL,
                     snap->is_draining ? 1.0 : 0.0);
    gw_metrics_gauge(&w, "herald_uptime_seconds", "Seconds since the node started.", NULL,
                     (double)snap->uptime_ms / 1000.0);
    gw_metrics_gauge(&w, "herald_io_loops", "IO loops.", NULL, (double)snap->n_loops);
    gw_metrics_gauge(&w, "herald_max_connections", "The configured connection limit.", NULL,
                     (double)snap->max_connections);
    render_per_loop(&w, snap);
    render_sessions(&w, t, snap);
    render_delivery(&w, t);
    render_history(&w, t);
    if (t->engine.redis.n_servers)
        render_redis(&w, &t->engine.redis);
    render_presence(&w, t, snap);
    render_pool(&w, snap);
    gw_metrics_counter(&w, "herald_admin_requests_total", "Admin HTTP requests.", NULL,
                       snap->http.requests);
    gw_metrics_counter(&w, "herald_admin_request_timeouts_total",
                       "Admin connections cut off for not sending a whole request in time.", NULL,
                       snap->http.timed_out);
    free(t);
    return gw_metrics_end(&w, out, len);
}
