/*
 * gw_stats: collecting every room's per-loop counters at scrape time. See gw_core.h.
 *
 * Each loop copies its own counters on its own thread, into its own slot of the snapshot, so
 * the copy needs no lock and TSan sees no race; the atomic remaining count orders the slots
 * before the final reader (release on each decrement, acquire by the last).
 */
#include "gw_core.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_node_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

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
    unsigned flags; /* gw_stats_flags_t */
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
    [GW_CLOSE_UNAUTH_LIMIT] = "unauthenticated_limit",
};

static const char *const auth_fail_names[GW_AUTH_FAIL_REASONS] = {
    [GW_AUTH_FAIL_MALFORMED] = "malformed",         [GW_AUTH_FAIL_ALG] = "bad_alg",
    [GW_AUTH_FAIL_SIGNATURE] = "bad_signature",     [GW_AUTH_FAIL_EXPIRED] = "expired",
    [GW_AUTH_FAIL_NOT_YET_VALID] = "not_yet_valid", [GW_AUTH_FAIL_MISSING_SUB] = "missing_sub",
    [GW_AUTH_FAIL_CLAIMS] = "bad_claims",           [GW_AUTH_FAIL_BUSY] = "busy",
};

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
 * merged by name (O(users), on the thread that finishes the collection), unless left out. */
static int64_t collect_users_online(gw_stats_snapshot_t *snap, unsigned flags)
{
    int64_t users = (int64_t)snap->loops[0].online_users;
    if (snap->n_loops > 1 && (flags & GW_STATS_NO_USERS))
        return -ENODATA;
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
    snap->is_ready = atomic_load_explicit(&node->is_ready, memory_order_relaxed) &&
                     node->engine->ops->is_ready(node->engine) && gw_node_can_authenticate(node);
    snap->is_draining = atomic_load_explicit(&node->is_draining, memory_order_relaxed);
    snap->uptime_ms = nl_now_ms() - node->start_ms;
    snap->users_online = collect_users_online(snap, col->flags);
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
    memcpy(&out->s, &lp->stats, offsetof(gw_stats_t, loop_lag_us));
    nl_hist_merge(&out->s.loop_lag_us, &lp->stats.loop_lag_us);
    memcpy(&out->fo, &lp->fo.stats, offsetof(gw_fanout_stats_t, latency_ns));
    nl_hist_merge(&out->fo.latency_ns, &lp->fo.stats.latency_ns);
    nl_hist_merge(&out->fo.flush_ns, &lp->fo.stats.flush_ns);
    out->fanout_batches = lp->fo.out.batches_posted;
    out->fanout_failures = lp->fo.out.failures;
    nl_conn_get_loop_stats(lp->fo.loop, &out->conn);
    nl_loop_get_stats(lp->fo.loop, &out->loop);
    /* The depth counts the batch being run until it ends, this closure among them: the
     * collection does not count itself (an idle loop reads 0, not 1). */
    uint64_t depth = nl_loop_queue_depth(lp->fo.loop);
    out->queue_depth = depth > 0 ? depth - 1 : 0;
    out->channels = gw_sub_index_channels(&lp->fo.subs);
    /* Listener channels are the index's too, but not subscriptions anybody asked for. */
    uint64_t listening = lp->stats.presence_listener_subs;
    out->subscriptions =
        lp->fo.subs.subscriptions > listening ? lp->fo.subs.subscriptions - listening : 0;
    col->node->engine->ops->loop_stats(col->node->engine, lp->fo.index, &out->engine);
    out->online_users = gw_online_users(&lp->presence.online);
    out->s.unauthenticated = lp->preauth.count;
    out->s.presence_events_held = lp->evgate.held;
    if (col->node->n_loops > 1 && !(col->flags & GW_STATS_NO_USERS))
        out->users_err = gw_presence_loop_users(&lp->presence, &out->users);
    collect_part_done(col);
}

/* On the accept loop: the listener's figures. */
static void collect_main(void *arg)
{
    collect_part_t *part = arg;
    collect_t *col = part->col;
    for (int i = 0; i < GW_NODE_LISTENERS; i++) {
        gw_listener_t *l = col->node->listeners[i];
        if (!l)
            continue;
        gw_listener_server_stats(l, &col->snap->server);
        gw_listener_stats(l, &col->snap->listeners[i]);
        col->snap->has_listener[i] = true;
    }
    /* The node's current config is the main thread's to read. */
    col->snap->max_connections = col->node->snap->cfg.max_connections;
    col->snap->pool_capacity = col->node->snap->cfg.worker_queue_capacity;
    collect_part_done(col);
}

int gw_stats_collect(gw_node_t *node, gw_stats_done_cb done, void *arg)
{
    return gw_stats_collect_some(node, 0, done, arg);
}

int gw_stats_collect_some(gw_node_t *node, unsigned flags, gw_stats_done_cb done, void *arg)
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
    col->flags = flags;
    atomic_init(&col->remaining, n + 1);
    for (uint32_t i = 0; i <= n; i++) {
        col->parts[i] = (collect_part_t){.col = col, .index = i};
        nl_loop_t *loop = i < n ? node->loops[i].fo.loop : node->main_loop;
        if (nl_loop_post(loop, i < n ? collect_loop : collect_main, &col->parts[i]) < 0) {
            /* That slot stays zero; the collection still completes. */
            NL_LOG(NL_WARN, "stats_post_failed", "loop=%u", i);
            collect_part_done(col);
        }
    }
    return 0;
}
