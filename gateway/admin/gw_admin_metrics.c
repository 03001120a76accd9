/*
 * gw_admin_metrics: a stats snapshot (gw_core.h) written out as Prometheus text or JSON for
 * GET /metrics and GET /api/stats, through gw_metrics. Every figure herald exports is named
 * here, but the engine's own families (the Redis engine's herald_redis_*), which the engine
 * writes itself (gw_engine_ops_t.metrics).
 */
#include "gw_admin_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herald.pb-c.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

static const char *const error_code_names[] = {
    "unspecified",    "bad_request",  "unauthorized",       "token_expired",          "forbidden",
    "busy",           "rate_limited", "frame_too_large",    "too_many_subscriptions", "bad_channel",
    "not_subscribed", "internal",     "already_subscribed", "not_supported",          "cancelled",
};
_Static_assert(sizeof(error_code_names) / sizeof(error_code_names[0]) == GW_STATS_ERROR_CODES,
               "one metric label per Error code");

/* Latency bounds in seconds; lag bounds too. Powers of two in ns/us would be exact, but
 * operators read decimal bounds; nl_hist_count_le leaves out at most one straddling bucket. */
static const double latency_bounds_s[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};
#define N_LATENCY (sizeof(latency_bounds_s) / sizeof(latency_bounds_s[0]))

typedef struct totals_s {
    gw_stats_t s;
    gw_fanout_stats_t fo;
    uint64_t fanout_batches;
    uint64_t fanout_failures;
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
        for (size_t k = 0; k < offsetof(gw_stats_t, loop_lag_us) / sizeof(uint64_t); k++)
            dst[k] += src[k];
        /* Fan-out's counters likewise, before its histograms. */
        const uint64_t *fsrc = (const uint64_t *)&l->fo;
        uint64_t *fdst = (uint64_t *)&t->fo;
        for (size_t k = 0; k < offsetof(gw_fanout_stats_t, latency_ns) / sizeof(uint64_t); k++)
            fdst[k] += fsrc[k];
        nl_hist_merge(&t->fo.latency_ns, &l->fo.latency_ns);
        nl_hist_merge(&t->fo.flush_ns, &l->fo.flush_ns);
        t->fanout_batches += l->fanout_batches;
        t->fanout_failures += l->fanout_failures;
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
        t->engine.last_seen_records += l->engine.last_seen_records;
        t->engine.event_failures += l->engine.event_failures;
        t->engine.idempotency_keys += l->engine.idempotency_keys;
        t->engine.idempotency_duplicates += l->engine.idempotency_duplicates;
        t->engine.idempotency_evicted += l->engine.idempotency_evicted;
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
        gw_metrics_gauge(w, "herald_output_queued_bytes",
                         "Output bytes queued to the loop's clients, not yet written.",
                         (const char *const[]){"loop", idx, NULL},
                         (double)snap->loops[i].conn.out_queued_bytes);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_gauge(w, "herald_slow_consumers",
                         "Connections whose queued output is at or above output_high_water now.",
                         (const char *const[]){"loop", idx, NULL},
                         (double)snap->loops[i].conn.over_high_water);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_gauge(w, "herald_input_held_bytes",
                         "Input buffer bytes the loop's clients hold (0 when none has unread "
                         "input).",
                         (const char *const[]){"loop", idx, NULL},
                         (double)snap->loops[i].conn.in_held_bytes);
    }
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        snprintf(idx, sizeof(idx), "%u", i);
        gw_metrics_hist_nl(w, "herald_loop_lag_seconds",
                           "Time per loop iteration spent outside epoll_wait.",
                           (const char *const[]){"loop", idx, NULL}, &snap->loops[i].s.loop_lag_us,
                           latency_bounds_s, N_LATENCY, 1e-6);
    }
}

/* Frames sent of type k: Pushes and join/leave events are fan-out's, the rest the sessions'. */
static uint64_t render_frames_out(const totals_t *t, int k)
{
    if (k == HERALD__FRAME__BODY_PUSH)
        return t->fo.deliveries;
    if (k == HERALD__FRAME__BODY_PRESENCE_EVENT)
        return t->s.frames_out[k] + t->fo.events;
    return t->s.frames_out[k];
}

static void render_sessions(gw_metrics_t *w, const totals_t *t, const gw_stats_snapshot_t *snap)
{
    gw_metrics_counter(w, "herald_accepted_total", "Connections accepted by the listener.", NULL,
                       snap->server.accepted);
    gw_metrics_counter(w, "herald_emfile_events_total", "Times accept hit descriptor exhaustion.",
                       NULL, snap->server.emfile_events);
    for (int r = 0; r < GW_CLOSE_REASONS; r++)
        gw_metrics_counter(
            w, "herald_closed_total", "Closed client connections by reason.",
            (const char *const[]){"reason", gw_close_reason_str((gw_close_reason_t)r), NULL},
            t->s.closes[r]);
    gw_metrics_counter(w, "herald_auth_ok_total", "Connects accepted.", NULL, t->s.auth_ok);
    gw_metrics_counter(w, "herald_auth_ok_previous_secret_total",
                       "Connects accepted with a token signed by a previous secret (rotation).",
                       NULL, t->s.auth_ok_previous);
    gw_metrics_counter(w, "herald_drained_total",
                       "Sessions told to reconnect elsewhere by a drain (SIGTERM).", NULL,
                       t->s.drained);
    gw_metrics_gauge(w, "herald_unauthenticated_connections",
                     "Connections without a verified Connect yet (capped by [limits] "
                     "max_unauthenticated).",
                     NULL, (double)t->s.unauthenticated);
    gw_metrics_counter(w, "herald_unauthenticated_evicted_total",
                       "Unauthenticated connections closed to make room for a newer one.",
                       (const char *const[]){"cap", "node", NULL}, t->s.unauth_evicted);
    gw_metrics_counter(w, "herald_unauthenticated_evicted_total",
                       "Unauthenticated connections closed to make room for a newer one.",
                       (const char *const[]){"cap", "address", NULL},
                       t->s.unauth_evicted_per_address);
    gw_metrics_counter(w, "herald_requests_held_total",
                       "Times a connection's requests waited for an earlier one (a Subscribe "
                       "not answered yet, presence queries in progress).",
                       NULL, t->s.held_inputs);
    for (int r = 0; r < GW_AUTH_FAIL_REASONS; r++)
        gw_metrics_counter(
            w, "herald_auth_failures_total", "Connects refused by reason.",
            (const char *const[]){"reason", gw_auth_fail_str((gw_auth_fail_t)r), NULL},
            t->s.auth_failures[r]);
    for (int k = 1; k < GW_STATS_FRAME_TYPES; k++)
        gw_metrics_counter(w, "herald_frames_in_total", "Frames received by type.",
                           (const char *const[]){"type", proto_body_name(k), NULL},
                           t->s.frames_in[k]);
    for (int k = 1; k < GW_STATS_FRAME_TYPES; k++)
        gw_metrics_counter(w, "herald_frames_out_total", "Frames sent by type.",
                           (const char *const[]){"type", proto_body_name(k), NULL},
                           render_frames_out(t, k));
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
    gw_metrics_counter(w, "herald_publish_duplicates_total",
                       "Publishes answered from an earlier one with the same idempotency key, "
                       "not published again.",
                       NULL, t->engine.idempotency_duplicates);
    gw_metrics_gauge(w, "herald_publish_idempotency_keys",
                     "Idempotency keys remembered (memory engine).", NULL,
                     (double)t->engine.idempotency_keys);
    gw_metrics_counter(w, "herald_publish_idempotency_evicted_total",
                       "Idempotency keys forgotten before their window ended: [limits] "
                       "idempotency_keys reached (memory engine).",
                       NULL, t->engine.idempotency_evicted);
    gw_metrics_counter(w, "herald_deliveries_total", "Push frames queued to subscribers.", NULL,
                       t->fo.deliveries);
    gw_metrics_counter(w, "herald_slow_consumer_drops_total",
                       "Push frames dropped for slow consumers.", NULL, t->fo.slow_drops);
    gw_metrics_counter(w, "herald_unrouted_messages_total",
                       "Messages that reached a loop with no local subscriber.", NULL,
                       t->fo.unrouted);
    gw_metrics_counter(w, "herald_fanout_batches_total", "Message batches posted between loops.",
                       NULL, t->fanout_batches);
    gw_metrics_counter(w, "herald_fanout_failures_total",
                       "Messages lost to a failed post between loops.", NULL, t->fanout_failures);
    gw_metrics_gauge(w, "herald_channels",
                     "Channels the engine holds: subscribed somewhere, or keeping history.", NULL,
                     (double)t->engine.channels);
    gw_metrics_gauge(w, "herald_subscriptions", "Connection-channel subscriptions.", NULL,
                     (double)t->subscriptions);
    gw_metrics_hist_nl(w, "herald_publish_to_enqueue_seconds",
                       "From the engine accepting a message to its Push queued on a loop.", NULL,
                       &t->fo.latency_ns, latency_bounds_s, N_LATENCY, 1e-9);
    gw_metrics_hist_nl(w, "herald_publish_to_flush_seconds",
                       "From the engine accepting a message to its Push written to the sockets "
                       "of a loop's subscribers (those with room).",
                       NULL, &t->fo.flush_ns, latency_bounds_s, N_LATENCY, 1e-9);
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
    gw_metrics_counter(w, "herald_presence_events_coalesced_total",
                       "Join/leave events not sent: a later change of the same client and "
                       "channel within the event window undid them.",
                       NULL, t->s.presence_events_coalesced);
    gw_metrics_gauge(w, "herald_presence_events_held",
                     "Join/leave events waiting for the end of their event window.", NULL,
                     (double)t->s.presence_events_held);
    gw_metrics_counter(w, "herald_presence_event_failures_total",
                       "Join/leave events lost to a failed allocation or post.", NULL,
                       t->s.presence_event_failures + t->engine.event_failures);
    gw_metrics_gauge(w, "herald_last_seen_records",
                     "Users gone offline whose last-seen time is kept.", NULL,
                     (double)t->engine.last_seen_records);
}

/* Which listeners a family applies to: those with a handshake (WebSocket or TLS), the
 * WebSocket ones, the TLS ones. A listener on which a family cannot move has no sample of it
 * (a plain TCP listener has no handshake, a plain ws listener no TLS), rather than a 0 for
 * ever in every scrape and dashboard. */
typedef enum tp_scope_e { TP_HANDSHAKE, TP_WS, TP_TLS } tp_scope_t;

static bool tp_applies(const gw_stats_snapshot_t *snap, int i, tp_scope_t scope)
{
    const gw_transport_stats_t *t = &snap->listeners[i];
    if (!snap->has_listener[i])
        return false;
    if (scope == TP_WS)
        return t->is_ws;
    if (scope == TP_TLS)
        return t->is_tls;
    return t->is_ws || t->is_tls;
}

/* The listeners that can fail a handshake for r. */
static tp_scope_t hs_fail_scope(gw_hs_fail_t r)
{
    switch (r) {
    case GW_HS_FAIL_TIMEOUT:
    case GW_HS_FAIL_CLOSED:
        return TP_HANDSHAKE;
    case GW_HS_FAIL_PLAINTEXT:
    case GW_HS_FAIL_TLS:
        return TP_TLS;
    default:
        return TP_WS; /* the upgrade's refusals */
    }
}

/* One counter or gauge family over the listeners it applies to: field picks the figure. */
static void render_per_listener(gw_metrics_t *w, const gw_stats_snapshot_t *snap, const char *name,
                                const char *help, bool is_gauge, tp_scope_t scope,
                                uint64_t (*field)(const gw_transport_stats_t *t))
{
    static const char *const listeners[2] = {"tcp", "ws"};
    for (int i = 0; i < 2; i++) {
        if (!tp_applies(snap, i, scope))
            continue;
        const char *const labels[] = {"listener", listeners[i], NULL};
        uint64_t v = field(&snap->listeners[i]);
        if (is_gauge)
            gw_metrics_gauge(w, name, help, labels, (double)v);
        else
            gw_metrics_counter(w, name, help, labels, v);
    }
}

static uint64_t tp_handshaking(const gw_transport_stats_t *t)
{
    return t->handshaking;
}

static uint64_t tp_handshakes(const gw_transport_stats_t *t)
{
    return t->handshakes;
}

static uint64_t tp_pings(const gw_transport_stats_t *t)
{
    return t->ws_pings;
}

static uint64_t tp_renegotiations(const gw_transport_stats_t *t)
{
    return t->tls_renegotiations;
}

static uint64_t tp_ktls(const gw_transport_stats_t *t)
{
    return t->tls_ktls;
}

/* The listeners' TLS and WebSocket figures, labelled by listener (tcp, ws), each family and
 * failure reason where it applies (tp_scope_t). */
static void render_transport(gw_metrics_t *w, const gw_stats_snapshot_t *snap)
{
    static const char *const listeners[2] = {"tcp", "ws"};
    render_per_listener(w, snap, "herald_transport_handshaking",
                        "Connections in their TLS or WebSocket handshake now.", true, TP_HANDSHAKE,
                        tp_handshaking);
    render_per_listener(w, snap, "herald_transport_handshakes_total",
                        "TLS or WebSocket handshakes done.", false, TP_HANDSHAKE, tp_handshakes);
    for (int i = 0; i < 2; i++) {
        for (int r = 0; r < GW_HS_FAIL_REASONS; r++) {
            if (!tp_applies(snap, i, hs_fail_scope((gw_hs_fail_t)r)))
                continue;
            gw_metrics_counter(w, "herald_transport_handshake_failures_total",
                               "TLS or WebSocket handshakes that failed, by reason.",
                               (const char *const[]){"listener", listeners[i], "reason",
                                                     gw_hs_fail_str((gw_hs_fail_t)r), NULL},
                               snap->listeners[i].handshake_failures[r]);
        }
    }
    for (int i = 0; i < 2; i++) {
        for (int e = 0; tp_applies(snap, i, TP_WS) && e < GW_WS_ERRS; e++)
            gw_metrics_counter(w, "herald_ws_protocol_errors_total",
                               "WebSocket connections closed for a client's protocol error.",
                               (const char *const[]){"listener", listeners[i], "error",
                                                     gw_ws_err_str((gw_ws_err_t)e), NULL},
                               snap->listeners[i].ws_errors[e]);
    }
    render_per_listener(w, snap, "herald_ws_pings_total", "WebSocket pings answered.", false, TP_WS,
                        tp_pings);
    render_per_listener(w, snap, "herald_tls_renegotiations_total",
                        "TLS renegotiations refused (the connection closed).", false, TP_TLS,
                        tp_renegotiations);
    render_per_listener(w, snap, "herald_tls_ktls_connections_total",
                        "TLS connections whose writes the kernel encrypts (kTLS).", false, TP_TLS,
                        tp_ktls);
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

/* What the admin port's guard did to keep connections for the probes (gw_http_guard.h), and
 * the requests refused for an ambiguous body length. */
static void render_admin_shed(gw_metrics_t *w, const gw_http_stats_t *http)
{
    static const char help[] = "Admin connections turned away to keep the port open for "
                               "probes: shed (gave way to a newcomer), refused (a newcomer with "
                               "nothing to shed), busy (an authenticated request answered 503 "
                               "past the probes' reserve).";
    gw_metrics_counter(w, "herald_admin_connections_shed_total", help,
                       (const char *const[]){"reason", "shed", NULL}, http->shed);
    gw_metrics_counter(w, "herald_admin_connections_shed_total", help,
                       (const char *const[]){"reason", "refused", NULL}, http->refused);
    gw_metrics_counter(w, "herald_admin_connections_shed_total", help,
                       (const char *const[]){"reason", "busy", NULL}, http->busy);
    gw_metrics_counter(w, "herald_admin_bad_framing_total",
                       "Admin requests answered 400 for a body length given two ways.", NULL,
                       http->bad_framing);
}

int gw_admin_render(const gw_stats_snapshot_t *snap, const gw_engine_t *engine,
                    const gw_http_stats_t *http, gw_metrics_format_t format, char **out,
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
    if (engine->ops->metrics)
        engine->ops->metrics(engine, &w);
    render_presence(&w, t, snap);
    render_transport(&w, snap);
    render_pool(&w, snap);
    gw_metrics_counter(&w, "herald_admin_requests_total", "Admin HTTP requests.", NULL,
                       http->requests);
    gw_metrics_counter(&w, "herald_admin_request_timeouts_total",
                       "Admin connections cut off for not sending a whole request in time.", NULL,
                       http->timed_out);
    render_admin_shed(&w, http);
    free(t);
    return gw_metrics_end(&w, out, len);
}
