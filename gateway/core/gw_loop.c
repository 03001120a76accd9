/*
 * gw_loop: an IO loop's life on its own thread: setting up each room's part of it, what runs
 * before it sleeps, the presence refresh, its reaction to a reload, and the hooks an engine
 * uses to ask the loop's sessions (gw_engine_host_ops_t). See gw_node_int.h.
 *
 * Before-sleep order matters: fan-out batches go to the other loops first (a message accepted
 * in this iteration then reaches them before anything this loop posts later), then this loop's
 * own output is written and its publish-to-flush samples taken, then the engine's housekeeping.
 *
 * Heap trim: a burst of connections and subscriptions (thousands of clients at once) leaves
 * free memory inside malloc's arenas (the burst's requests, answers and queues, gone by now,
 * between the sessions that stay), which malloc keeps resident. Once a second each loop looks
 * at its churn (connections accepted and closed, Connect, Subscribe and Unsubscribe frames):
 * after at least GW_LOOP_TRIM_CHURN of it since the last trim, the first second with almost
 * none (GW_LOOP_TRIM_QUIET) unmaps the loop's auth arena if it is empty (32 KiB) and calls
 * malloc_trim(0), which hands the whole free pages inside the heap back to the kernel. Idle
 * connections are what a node holds most of the time, so this is the memory they are charged; a
 * steady trickle of churn trims about every thousand events, and a busy loop not at all. A trim
 * took 1 ms at 10,000 connections. Measured with bench_gw_idle at 10,000 connections, RSS when all
 * were set up against 2 s later: 10-16 bytes per idle connection back on one IO loop, 19-28 on two
 * (more after clients that pipeline Subscribe behind Connect).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "gw_node_int.h"
#include "gw_session.h"
#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

static void loop_before_sleep(nl_loop_t *loop, void *arg)
{
    gw_loop_t *lp = arg;
    /* Input that waited for an answer sent this iteration goes first: what it publishes leaves
     * with this flush. */
    gw_session_flow_run(lp);
    lp->auth_unflushed = 0; /* the connections' output is written right after this hook */
    gw_fanout_flush(&lp->fo);
    gw_fanout_flush_done(&lp->fo);
    lp->node->engine->ops->tick(lp->node->engine, lp->fo.index);
    nl_loop_stats_t st;
    nl_loop_get_stats(loop, &st);
    nl_hist_record_local(&lp->stats.loop_lag_us, st.last_lag_us);
}

/* Every [presence] refresh_interval: the walk stamps the sessions that read a frame since the
 * last one, and if any did, the engine gets the loop's one batch of the interval. */
static void loop_on_refresh(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_loop_t *lp = arg;
    uint16_t stamp = gw_online_stamp(nl_loop_now_ms(lp->fo.loop));
    uint32_t n = gw_session_presence_sweep(lp, stamp);
    lp->presence.last_stamp = stamp;
    if (n == 0)
        return;
    gw_presence_batch_t batch = gw_presence_batch_make(&lp->presence, lp->fo.index, stamp, n);
    lp->stats.presence_refreshes++;
    lp->stats.presence_refreshed_users += n;
    lp->node->engine->ops->refresh(lp->node->engine, &batch);
}

static int loop_start_refresh(gw_loop_t *lp)
{
    uint64_t interval_ms = gw_loop_cfg(lp)->presence_refresh_ms;
    int err = nl_timer_new(&lp->refresh_timer, lp->fo.loop, loop_on_refresh, lp);
    if (err == 0)
        err = nl_timer_start(lp->refresh_timer, interval_ms, interval_ms);
    if (err < 0 && lp->refresh_timer) {
        nl_timer_close(lp->refresh_timer, NULL);
        lp->refresh_timer = NULL;
    }
    return err;
}

#define GW_LOOP_TRIM_TICK_MS 1000u
/* Connections and subscriptions made or ended since the last trim that make a burst. */
#define GW_LOOP_TRIM_CHURN 1000u
/* At most this many in the last tick: the burst is over. */
#define GW_LOOP_TRIM_QUIET 16u

/* What shapes the heap for good: connections and subscriptions made and ended. */
static uint64_t loop_churn(const gw_loop_t *lp)
{
    const gw_stats_t *s = &lp->stats;
    uint64_t n = s->accepts + s->frames_in[HERALD__FRAME__BODY_CONNECT] +
                 s->frames_in[HERALD__FRAME__BODY_SUBSCRIBE] +
                 s->frames_in[HERALD__FRAME__BODY_UNSUBSCRIBE];
    for (int i = 0; i < GW_CLOSE_REASONS; i++)
        n += s->closes[i];
    return n;
}

static void loop_on_trim_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_loop_t *lp = arg;
    uint64_t churn = loop_churn(lp);
    uint64_t last_tick = lp->trim_tick_churn;
    lp->trim_tick_churn = churn;
    if (churn - lp->trim_churn < GW_LOOP_TRIM_CHURN || churn - last_tick > GW_LOOP_TRIM_QUIET)
        return;
    lp->trim_churn = churn;
    nl_arena_trim(&lp->auth_arena);
#ifdef __GLIBC__
    uint64_t t0_ms = nl_wall_ms();
    int is_trimmed = malloc_trim(0);
    NL_LOG(NL_DEBUG, "heap_trimmed", "loop=%u churn=%" PRIu64 " released=%d ms=%" PRIu64,
           lp->fo.index, churn - last_tick, is_trimmed, nl_wall_ms() - t0_ms);
#endif
}

static int loop_start_trim(gw_loop_t *lp)
{
    int err = nl_timer_new(&lp->trim_timer, lp->fo.loop, loop_on_trim_tick, lp);
    if (err == 0)
        err = nl_timer_start(lp->trim_timer, GW_LOOP_TRIM_TICK_MS, GW_LOOP_TRIM_TICK_MS);
    if (err < 0 && lp->trim_timer) {
        nl_timer_close(lp->trim_timer, NULL);
        lp->trim_timer = NULL;
    }
    return err;
}

/* On the new IO thread, before its loop runs. */
static int loop_setup(nl_loop_t *loop, gw_loop_t *lp, uint32_t index)
{
    gw_node_t *node = lp->node;
    const gw_config_t *cfg = gw_loop_cfg(lp);
    nl_loop_set_data(loop, lp);
    int err = gw_fanout_loop_init(&lp->fo, &node->hub, index, loop, &gw_session_sub_cbs, lp,
                                  gw_session_on_slow, lp);
    if (err < 0)
        return err;
    gw_loop_config_changed(lp, NULL, cfg);
    nl_buf_init(&lp->scratch, 0);
    nl_arena_init(&lp->auth_arena);
    gw_stats_init(&lp->stats);
    nl_conn_set_batch_sends(loop, cfg->is_batch_sends);
    err = gw_chantab_init(&lp->recovering);
    if (err < 0)
        goto fail_fanout;
    err = gw_chantab_init(&lp->sides);
    if (err < 0)
        goto fail_recovering;
    err = gw_session_preauth_init(lp);
    if (err < 0)
        goto fail_sides;
    uint64_t shortest = cfg->connect_timeout_ms < cfg->idle_timeout_ms ? cfg->connect_timeout_ms
                                                                       : cfg->idle_timeout_ms;
    uint64_t longest = cfg->connect_timeout_ms > cfg->idle_timeout_ms ? cfg->connect_timeout_ms
                                                                      : cfg->idle_timeout_ms;
    err = gw_heartbeat_init(&lp->hb, loop, gw_heartbeat_tick_ms(shortest), longest,
                            gw_session_on_deadline, gw_session_on_exact, lp);
    if (err < 0)
        goto fail_preauth;
    err = gw_presence_loop_init(&lp->presence);
    if (err < 0)
        goto fail_hb;
    err = gw_evgate_init(&lp->evgate);
    if (err < 0)
        goto fail_presence_loop;
    err = loop_start_refresh(lp);
    if (err < 0)
        goto fail_presence;
    err = loop_start_trim(lp);
    if (err < 0)
        goto fail_refresh;
    err = nl_loop_add_before_sleep(loop, loop_before_sleep, lp);
    if (err < 0)
        goto fail_trim;
    return 0;
fail_trim:
    nl_timer_close(lp->trim_timer, NULL);
    lp->trim_timer = NULL;
fail_refresh:
    nl_timer_close(lp->refresh_timer, NULL);
    lp->refresh_timer = NULL;
fail_presence:
    gw_evgate_deinit(&lp->evgate);
fail_presence_loop:
    gw_presence_loop_deinit(&lp->presence);
fail_hb:
    gw_heartbeat_deinit(&lp->hb);
fail_preauth:
    gw_session_preauth_deinit(lp);
fail_sides:
    gw_session_flow_deinit(lp);
fail_recovering:
    gw_session_recover_deinit(lp);
fail_fanout:
    nl_buf_deinit(&lp->scratch);
    gw_fanout_loop_deinit(&lp->fo);
    return err;
}

void gw_loop_on_start(nl_loop_t *loop, void *arg)
{
    gw_loop_t *lp = arg;
    lp->start_err = loop_setup(loop, lp, (uint32_t)(lp - lp->node->loops));
}

void gw_loop_on_stop(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    gw_loop_t *lp = arg;
    if (lp->start_err < 0)
        return;
    gw_drain_stop(lp);
    if (gw_heartbeat_count(&lp->hb) > 0) {
        /* Sessions are closed in shutdown step 2; reaching here with some open is a bug. Their
         * on_close would touch the state freed below, so leak it rather than crash. */
        NL_LOG(NL_ERROR, "loop_stop_with_sessions", "sessions=%zu", gw_heartbeat_count(&lp->hb));
        return;
    }
    if (lp->refresh_timer) {
        nl_timer_close(lp->refresh_timer, NULL);
        lp->refresh_timer = NULL;
    }
    if (lp->evgate_timer) {
        nl_timer_close(lp->evgate_timer, NULL);
        lp->evgate_timer = NULL;
    }
    gw_evgate_deinit(&lp->evgate);
    if (lp->trim_timer) {
        nl_timer_close(lp->trim_timer, NULL);
        lp->trim_timer = NULL;
    }
    gw_presence_loop_deinit(&lp->presence);
    gw_heartbeat_deinit(&lp->hb);
    gw_session_preauth_deinit(lp);
    gw_session_flow_deinit(lp);
    gw_session_recover_deinit(lp);
    gw_fanout_loop_deinit(&lp->fo);
    nl_buf_deinit(&lp->scratch);
    nl_arena_deinit(&lp->auth_arena);
}

/* The values a loop keeps copies of, for its delivery path. (Add the loop's other reactions to
 * a reload here; see gw_node_int.h.) */
void gw_loop_config_changed(gw_loop_t *lp, const gw_config_t *old, const gw_config_t *cfg)
{
    gw_fanout_loop_set_policy(&lp->fo, cfg->slow_consumer, cfg->output_high_water_bytes);
    /* This loop's engine shard re-applies the history rules to the channels it holds; at the
     * loop's start (old NULL) it has them from its creation. */
    gw_engine_t *engine = lp->node->engine;
    if (old && (strcmp(old->history_rules, cfg->history_rules) != 0 ||
                old->history_max_bytes != cfg->history_max_bytes))
        engine->ops->reconfigure(engine, lp->fo.index, cfg);
}

/* --- the engine's hooks (gw_engine_host_ops_t), on the loop they name ----------------------- */

static gw_loop_t *host_loop(void *arg, uint32_t loop)
{
    gw_node_t *node = arg;
    gw_loop_t *lp = &node->loops[loop];
    NL_ASSERT(gw_loop_current() == lp);
    return lp;
}

static int host_presence_part(void *arg, uint32_t loop, const char *chan, size_t len,
                              gw_presence_part_t *out)
{
    return gw_session_presence_collect(host_loop(arg, loop), chan, len, out);
}

static void host_online_part(void *arg, uint32_t loop, const char *user, size_t len,
                             gw_online_part_t *out)
{
    gw_session_online_collect(host_loop(arg, loop), user, len, out);
}

static int host_counts_part(void *arg, uint32_t loop, uint64_t *users, uint64_t *conns,
                            gw_online_list_t *names)
{
    gw_loop_t *lp = host_loop(arg, loop);
    *users = gw_online_users(&lp->presence.online);
    *conns = lp->presence.online.conns;
    return names ? gw_presence_loop_users(&lp->presence, names) : 0;
}

static void host_resync(void *arg, uint32_t loop)
{
    gw_session_presence_resync(host_loop(arg, loop));
}

static uint64_t host_connections(void *arg)
{
    gw_node_t *node = arg;
    return atomic_load_explicit(&node->connections, memory_order_relaxed);
}

static bool host_is_ready(void *arg)
{
    return gw_node_is_ready(arg);
}

static bool host_is_stopping(void *arg)
{
    return gw_node_is_stopping(arg);
}

const gw_engine_host_ops_t gw_loop_host_ops = {
    .presence_part = host_presence_part,
    .online_part = host_online_part,
    .counts_part = host_counts_part,
    .resync = host_resync,
    .connections = host_connections,
    .is_ready = host_is_ready,
    .is_stopping = host_is_stopping,
};
