/*
 * gw_engine_redis: the engine for several nodes (DESIGN.md, "Engines"): channels, offsets,
 * history and cross-node fan-out in Redis, through hiredis on a netlib loop of its own.
 *
 * One engine thread (E, "herald-redis") owns every Redis connection: per server in
 * [engine] redis, a command link and a pub/sub connection (gw_redis_link, gw_redis_sub).
 * Channels map to servers by consistent hashing (gw_hashring). IO loops and the HTTP thread
 * post requests to E (publish, join, leave, history); E posts to the IO loops the messages
 * that arrive from Redis, batched once per E iteration and loop (like gw_fanout), and the
 * answers to joins and history requests, each after that loop's batch so that ordering holds
 * as the engine contract in gw_engine.h asks.
 *
 * A publish is FCALL herald_publish on the channel's server (gw_redis_schema.h): Redis gives
 * it the next offset and publishes it on herald:C; every node with subscribers of C, this one
 * included, receives it there and delivers it once. Nothing is delivered from the publishing
 * node directly, so no node delivers a message twice. When the channel's server is down the
 * message goes to this node's subscribers only, outside the sequence (offset 0), so local
 * delivery continues; /readyz says the node is degraded meanwhile.
 *
 * Sentinel ([engine] sentinels): each shard is a master name instead of an address. E asks
 * the sentinels for each master (gw_redis_sentinel), moves the shard's two connections there,
 * checks with ROLE that the server is a master before it loads the functions, follows
 * +switch-master at once, and asks again after any disconnect and every RE_SENTINEL_ASK_MS
 * while the shard has no master. A failover is thus a reconnect like any other (backoff,
 * resubscribe, presence resync), plus the fence below.
 *
 * Fences. Replication is asynchronous: a new master (or a Redis restarted from disk) may hold
 * less of a channel than a node delivered. Before a shard is ready again, E sends
 * herald_fence for every channel it has delivered from (gw_redis_schema.h): a channel Redis
 * holds less of starts a new epoch, so clients are told they cannot recover instead of
 * getting a gap or an offset given twice. The fences go before anything else this node sends
 * to that server, its publishes included.
 *
 * The channel side (what a node knows of each channel, joins, messages, recovery) is
 * gw_engine_redis_chan.c. This file: threads, requests in, batches and answers out, stats.
 *
 * Shutdown: detach (from the node, before it stops the IO loops) makes E stop posting to
 * them; free stops E, which closes its connections.
 */
#include "gw_engine_redis.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_engine_redis_int.h"
#include "gw_redis_schema.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* How often E checks join timeouts and ages histories. */
#define RE_TICK_MS 250

/* --- E -> IO loops ------------------------------------------------------------------------ */

void re_flush_loop(redis_engine_t *re, uint32_t loop)
{
    if (!re->is_detached)
        gw_fanout_outbox_flush_target(&re->out, loop);
}

static void re_flush_all(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    redis_engine_t *re = arg;
    if (!re->is_detached)
        gw_fanout_outbox_flush(&re->out);
    /* Joins before presence writes: a client waits on each join. */
    for (uint32_t i = 0; i < re->n_shards; i++)
        re_chans_flush_joins(re, i);
    re_presence_flush(re);
}

void re_answer_join(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash,
                    int status, uint64_t offset, uint64_t epoch)
{
    if (re->is_detached)
        return;
    gw_engine_join_t *j = gw_engine_join_new(re, loop, name, len, hash);
    if (!j) {
        /* The loop's subscribers would wait for ever: nothing sensible is left to do but say
         * so (a join answer cannot be made without memory). */
        NL_LOG(NL_ERROR, "redis_join_reply_lost", "loop=%u", loop);
        return;
    }
    j->status = status;
    j->offset = offset;
    j->epoch = epoch;
    gw_engine_join_answer(re->hub, &re->out, j);
}

uint64_t re_epoch_candidate(redis_engine_t *re, uint32_t hash)
{
    /* splitmix64 over the node's seed, the channel and a counter: distinct per node start. */
    return gw_engine_epoch_mix(re->epoch_seed ^ ((uint64_t)hash << 32) ^ nl_now_ns());
}

/* --- requests into E ---------------------------------------------------------------------- */

static void re_run_publish(void *arg)
{
    gw_engine_pub_t *req = arg;
    re_chan_publish(req->engine, req);
}

static int re_publish(gw_engine_t *e, const gw_engine_msg_t *msg, const gw_engine_reply_t *reply)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return -ESHUTDOWN;
    gw_engine_pub_t *req = gw_engine_pub_new(re, msg, gw_sub_hash(msg->chan, msg->chan_len), reply);
    if (!req)
        return -ENOMEM;
    int err = gw_fanout_post_to(re->hub, re->loop, re_run_publish, req);
    if (err < 0)
        free(req);
    return err;
}

typedef struct re_member_req_s {
    redis_engine_t *re;
    uint32_t loop;
    uint32_t hash;
    bool is_join;
    uint32_t len;
    char name[];
} re_member_req_t;

static void re_run_member(void *arg)
{
    re_member_req_t *req = arg;
    if (req->is_join)
        re_chan_join(req->re, req->loop, req->name, req->len, req->hash);
    else
        re_chan_leave(req->re, req->loop, req->name, req->len, req->hash);
    free(req);
}

static void re_post_member(redis_engine_t *re, uint32_t loop, const char *chan, size_t len,
                           uint32_t hash, bool is_join)
{
    re_member_req_t *req = NULL;
    if (!atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        req = malloc(sizeof(*req) + len + 1);
    if (req) {
        *req = (re_member_req_t){
            .re = re, .loop = loop, .hash = hash, .is_join = is_join, .len = (uint32_t)len};
        memcpy(req->name, chan, len);
        req->name[len] = '\0';
        if (gw_fanout_post_to(re->hub, re->loop, re_run_member, req) == 0)
            return;
        free(req);
    }
    /* A join must be answered, or its subscribers wait for ever. */
    if (is_join)
        gw_sub_joined(&re->hub->loops[loop]->subs, chan, len, hash, -ESHUTDOWN, 0, 0);
}

static void re_join(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                    uint32_t hash)
{
    re_post_member((redis_engine_t *)e, loop_index, chan, chan_len, hash, true);
}

static void re_leave(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                     uint32_t hash)
{
    re_post_member((redis_engine_t *)e, loop_index, chan, chan_len, hash, false);
}

static void re_run_history(void *arg)
{
    re_hist_req_t *req = arg;
    re_chan_history(req->engine, req);
}

static int re_history(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                      uint32_t hash, uint64_t since, uint64_t epoch, uint64_t max_bytes,
                      const gw_engine_reply_t *reply)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return -ESHUTDOWN;
    re_hist_req_t *req =
        gw_engine_hist_new(re, loop_index, chan, chan_len, hash, since, epoch, max_bytes, reply);
    if (!req)
        return -ENOMEM;
    int err = gw_fanout_post_to(re->hub, re->loop, re_run_history, req);
    if (err < 0)
        free(req);
    return err;
}

void re_hist_answer(redis_engine_t *re, re_hist_req_t *req)
{
    if (re->is_detached) {
        gw_engine_hist_free(req);
        return;
    }
    gw_engine_hist_answer(re->hub, &re->out, req);
}

/* --- the rest of the vtable --------------------------------------------------------------- */

static bool re_is_recoverable(gw_engine_t *e, uint32_t loop_index, const char *chan,
                              size_t chan_len)
{
    redis_engine_t *re = (redis_engine_t *)e;
    return gw_history_rule_keeps(
        gw_history_rules_match(&re->loop_rules[loop_index], chan, chan_len));
}

static void re_tick(gw_engine_t *e, uint32_t loop_index)
{
    NL_UNUSED(e);
    NL_UNUSED(loop_index);
}

typedef struct re_config_msg_s {
    redis_engine_t *re;
    gw_config_t cfg;
} re_config_msg_t;

static void re_run_reconfigure(void *arg)
{
    re_config_msg_t *msg = arg;
    re_chans_reconfigure(msg->re, &msg->cfg);
    free(msg);
}

static void re_reconfigure(gw_engine_t *e, uint32_t loop_index, const gw_config_t *cfg)
{
    redis_engine_t *re = (redis_engine_t *)e;
    (void)gw_history_rules_parse(cfg->history_rules, &re->loop_rules[loop_index], NULL, 0);
    if (loop_index != 0)
        return;
    /* Loop 0 carries the change to E as well. */
    re_config_msg_t *msg = malloc(sizeof(*msg));
    if (msg) {
        msg->re = re;
        msg->cfg = *cfg;
    }
    if (!msg || nl_loop_post(re->loop, re_run_reconfigure, msg) < 0) {
        NL_LOG(NL_ERROR, "redis_reconfigure_lost", "err=%s", nl_strerror(-ENOMEM));
        free(msg);
    }
}

/* Engine-wide figures, reported once (by loop 0), from E's counters. */
static void re_loop_stats(gw_engine_t *e, uint32_t loop_index, gw_engine_stats_t *out)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (loop_index != 0)
        return;
    const re_stats_t *st = &re->stats;
#define LOAD(x) atomic_load_explicit(&st->x, memory_order_relaxed)
    out->channels += LOAD(channels);
    out->published += LOAD(published);
    out->idempotency_duplicates += LOAD(idem_duplicates);
    out->history_channels += LOAD(history_channels);
    out->history_messages += LOAD(history_messages);
    out->history_bytes += LOAD(history_bytes);
    out->history_max_bytes += LOAD(history_max_bytes);
#undef LOAD
}

/* The herald_redis_* families, from E's counters and each server's mirrors. A family's
 * samples must stand together, so one pass per family. */
static void re_metrics(const gw_engine_t *e, gw_metrics_t *w)
{
    const redis_engine_t *re = (const redis_engine_t *)e;
    const re_stats_t *st = &re->stats;
    uint32_t n = re->n_shards;
#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define SERVER(i) ((const char *const[]){"server", re->shards[i].name, NULL})
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_gauge(w, "herald_redis_up",
                         "1 while the Redis server is connected and has herald's functions.",
                         SERVER(i), LOAD(re->shards[i].is_ready_atomic) ? 1.0 : 0.0);
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_gauge(w, "herald_redis_pending_commands",
                         "Commands sent to the Redis server, not answered yet.", SERVER(i),
                         (double)LOAD(re->shards[i].pending));
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_refused_commands_total",
                           "Commands not sent: redis_max_pending were in flight to the server.",
                           SERVER(i), LOAD(re->shards[i].refused));
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_reconnects_total",
                           "Times the connection to the Redis server went down.", SERVER(i),
                           LOAD(re->shards[i].reconnects));
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_failovers_total",
                           "Times Sentinel moved the server's master to another address.",
                           SERVER(i), LOAD(re->shards[i].failovers));
    for (uint32_t i = 0; i < n; i++)
        gw_metrics_counter(w, "herald_redis_no_master_seconds_total",
                           "Time without a ready Redis master for the server (down, failing "
                           "over, not found).",
                           SERVER(i), (double)LOAD(re->shards[i].no_master_ms) / 1000.0);
    if (re->n_sentinels > 0)
        gw_metrics_gauge(w, "herald_redis_sentinel_up",
                         "1 while this node is connected to one of its sentinels.", NULL,
                         LOAD(re->is_sentinel_up) ? 1.0 : 0.0);
    gw_metrics_counter(w, "herald_redis_delivered_total",
                       "Messages from Redis handed to this node's loops.", NULL,
                       LOAD(st->delivered));
    gw_metrics_counter(w, "herald_redis_lost_messages_total",
                       "Offsets that never reached this node (Redis outages, pub/sub gaps).", NULL,
                       LOAD(st->lost));
    gw_metrics_counter(w, "herald_redis_duplicates_total",
                       "Messages that reached this node twice (dropped).", NULL,
                       LOAD(st->duplicates));
    gw_metrics_counter(w, "herald_redis_unsequenced_total",
                       "Plain PUBLISHes delivered outside the channel's offsets.", NULL,
                       LOAD(st->unsequenced));
    gw_metrics_counter(w, "herald_redis_local_only_publishes_total",
                       "Publishes delivered on this node only while Redis was down.", NULL,
                       LOAD(st->local_only));
    gw_metrics_counter(w, "herald_redis_busy_publishes_total",
                       "Publishes refused: too many commands in flight toward Redis.", NULL,
                       LOAD(st->busy));
    gw_metrics_counter(w, "herald_redis_unavailable_publishes_total",
                       "Publishes to history channels refused (BUSY) while their Redis server was "
                       "down or failing over.",
                       NULL, LOAD(st->unavailable));
    gw_metrics_counter(w, "herald_redis_join_timeouts_total",
                       "Subscriptions refused because Redis did not answer in time.", NULL,
                       LOAD(st->join_timeouts));
    gw_metrics_counter(w, "herald_redis_epoch_changes_total",
                       "Channel epochs that changed under subscribers (Redis lost them).", NULL,
                       LOAD(st->epoch_changes));
    gw_metrics_counter(w, "herald_redis_epoch_resets_total",
                       "Channels this node gave a new epoch: Redis held fewer of their messages "
                       "than it had delivered (a failover, a restart from disk).",
                       NULL, LOAD(st->epoch_resets));
    gw_metrics_counter(w, "herald_redis_history_fetches_total",
                       "Recoveries answered from a Redis stream.", NULL, LOAD(st->history_fetches));
    gw_metrics_counter(w, "herald_redis_presence_dropped_total",
                       "Presence and online-status writes dropped: too many waiting for Redis.",
                       NULL, LOAD(st->presence_dropped));
#undef SERVER
#undef LOAD
}

/* Each server's link as the console shows it, from the same mirrors as re_metrics. */
static uint32_t re_servers(const gw_engine_t *e, gw_engine_server_t *out, uint32_t max)
{
    const redis_engine_t *re = (const redis_engine_t *)e;
    for (uint32_t i = 0; i < re->n_shards && i < max; i++) {
        const re_shard_t *sh = &re->shards[i];
        snprintf(out[i].name, sizeof(out[i].name), "%s", sh->name);
        out[i].is_up = atomic_load_explicit(&sh->is_ready_atomic, memory_order_relaxed);
        out[i].pending = atomic_load_explicit(&sh->pending, memory_order_relaxed);
        out[i].max_pending = re->max_pending;
    }
    return re->n_shards;
}

static bool re_is_ready(const gw_engine_t *e)
{
    const redis_engine_t *re = (const redis_engine_t *)e;
    return atomic_load_explicit(&re->is_ready, memory_order_relaxed);
}

/* --- E's thread: connections and shutdown ------------------------------------------------- */

static void re_update_ready(redis_engine_t *re)
{
    bool is_ready = true;
    for (uint32_t i = 0; i < re->n_shards; i++)
        is_ready = is_ready && re->shards[i].is_ready;
    atomic_store_explicit(&re->is_ready, is_ready, memory_order_relaxed);
}

static void re_set_shard_ready(re_shard_t *sh, bool is_ready)
{
    sh->is_ready = is_ready;
    atomic_store_explicit(&sh->is_ready_atomic, is_ready, memory_order_relaxed);
    re_update_ready(sh->re);
}

static void re_on_functions_loaded(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    re_shard_t *sh = arg;
    if (!reply)
        return; /* the link went down: on_down said so */
    if (reply->type == REDIS_REPLY_ERROR) {
        /* Redis before 7, or a function library of another version: nothing will work. */
        NL_LOG(NL_ERROR, "redis_functions_failed", "server=%s err=\"%.*s\"", sh->name,
               (int)(reply->len < 200 ? reply->len : 200), reply->str);
        return;
    }
    gw_redis_addr_t a = gw_redis_link_addr(l);
    NL_LOG(NL_INFO, "redis_ready", "server=%s host=%s port=%u", sh->name, a.host ? a.host : "-",
           a.port);
    /* Redis may hold less of a channel than this node delivered (a failover, a restart from
     * disk): the fences go first, so that whatever this node sends after them, publishes
     * included, finds every channel's epoch settled. */
    re_chans_fence(sh->re, sh->index);
    re_set_shard_ready(sh, true);
    re_chans_rejoin(sh->re, sh->index);
    re_presence_server_ready(sh->re);
}

static void re_load_functions(gw_redis_link_t *l, re_shard_t *sh)
{
    const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", gw_redis_functions};
    if (gw_redis_link_command(l, re_on_functions_loaded, sh, 4, argv, NULL) < 0)
        gw_redis_link_reset(l, -ENOMEM);
}

/* Through Sentinel, the server reached must be a master: an answer given during a failover
 * may name the old one, back as a replica (whose writes would fail). */
static void re_on_role(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    re_shard_t *sh = arg;
    if (!reply)
        return;
    bool is_master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                     reply->element[0]->type == REDIS_REPLY_STRING &&
                     strcmp(reply->element[0]->str, "master") == 0;
    if (is_master) {
        re_load_functions(l, sh);
        return;
    }
    gw_redis_addr_t a = gw_redis_link_addr(l);
    NL_LOG(NL_WARN, "redis_not_master", "server=%s host=%s port=%u role=%.*s", sh->name,
           a.host ? a.host : "-", a.port,
           reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                   reply->element[0]->type == REDIS_REPLY_STRING
               ? (int)(reply->element[0]->len < 16 ? reply->element[0]->len : 16)
               : 1,
           reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                   reply->element[0]->type == REDIS_REPLY_STRING
               ? reply->element[0]->str
               : "?");
    gw_redis_link_reset(l, -EAGAIN); /* after this callback */
    gw_redis_sentinel_ask(sh->re->sentinel, sh->index);
    sh->last_ask_ms = nl_loop_now_ms(sh->re->loop);
}

static void re_on_link_up(gw_redis_link_t *l, void *arg)
{
    re_shard_t *sh = arg;
    /* The server is back: its pub/sub connection need not wait out the rest of a backoff
     * grown while it was away (joins need both). */
    gw_redis_link_connect_now(gw_redis_sub_link(sh->sub));
    if (!sh->re->sentinel) {
        re_load_functions(l, sh);
        return;
    }
    const char *argv[] = {"ROLE"};
    if (gw_redis_link_command(l, re_on_role, sh, 1, argv, NULL) < 0)
        gw_redis_link_reset(l, -ENOMEM);
}

static void re_on_link_down(gw_redis_link_t *l, int err, void *arg)
{
    NL_UNUSED(l);
    re_shard_t *sh = arg;
    atomic_fetch_add_explicit(&sh->reconnects, 1, memory_order_relaxed);
    re_set_shard_ready(sh, false);
    /* Its pub/sub connection shares the server's fate: a server that hangs answers no
     * command, and would deliver nothing either. */
    if (err == -ETIMEDOUT)
        gw_redis_link_reset(gw_redis_sub_link(sh->sub), err);
    /* Through Sentinel: where is the master now? (A failover, or the same one restarting.) */
    if (sh->re->sentinel) {
        gw_redis_sentinel_ask(sh->re->sentinel, sh->index);
        sh->last_ask_ms = nl_loop_now_ms(sh->re->loop);
    }
}

/* Sentinel's answer or event: the master of shard index is host:port. */
static void re_on_master(gw_redis_sentinel_t *s, uint32_t index, const char *host, uint16_t port,
                         bool is_switch, void *arg)
{
    NL_UNUSED(s);
    redis_engine_t *re = arg;
    re_shard_t *sh = &re->shards[index];
    gw_redis_addr_t was = gw_redis_link_addr(sh->link);
    if (was.host && was.port == port && strcmp(was.host, host) == 0) {
        /* Still there, says Sentinel (asked after a disconnect, or while down): try it now
         * rather than after a backoff grown meanwhile (a master restarted in place). */
        gw_redis_link_connect_now(sh->link);
        gw_redis_link_connect_now(gw_redis_sub_link(sh->sub));
        return;
    }
    if (was.host) {
        atomic_fetch_add_explicit(&sh->failovers, 1, memory_order_relaxed);
        NL_LOG(NL_WARN, "redis_master_changed", "server=%s from=%s:%u to=%s:%u via=%s", sh->name,
               was.host, was.port, host, port, is_switch ? "switch" : "query");
    } else {
        NL_LOG(NL_INFO, "redis_master_found", "server=%s host=%s port=%u", sh->name, host, port);
    }
    (void)gw_redis_link_set_addr(sh->link, host, port);
    (void)gw_redis_link_set_addr(gw_redis_sub_link(sh->sub), host, port);
}

/* How often a node without a master asks Sentinel again (besides +switch-master). */
#define RE_SENTINEL_ASK_MS 500

static void re_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    redis_engine_t *re = arg;
    uint64_t now_ms = nl_loop_now_ms(re->loop);
    uint64_t elapsed_ms = re->last_tick_ms ? now_ms - re->last_tick_ms : 0;
    re->last_tick_ms = now_ms;
    for (uint32_t i = 0; i < re->n_shards; i++) {
        re_shard_t *sh = &re->shards[i];
        gw_redis_link_stats_t ls;
        gw_redis_link_get_stats(sh->link, &ls);
        atomic_store_explicit(&sh->pending, gw_redis_link_pending(sh->link), memory_order_relaxed);
        atomic_store_explicit(&sh->refused, ls.refused_busy, memory_order_relaxed);
        re_publish_release(re, i); /* those that waited redis_timeout */
        if (sh->is_ready)
            continue;
        atomic_fetch_add_explicit(&sh->no_master_ms, elapsed_ms, memory_order_relaxed);
        if (re->sentinel && now_ms - sh->last_ask_ms >= RE_SENTINEL_ASK_MS) {
            gw_redis_sentinel_ask(re->sentinel, i);
            sh->last_ask_ms = now_ms;
        }
    }
    if (re->sentinel) {
        gw_redis_sentinel_stats_t ss;
        gw_redis_sentinel_get_stats(re->sentinel, &ss);
        atomic_store_explicit(&re->is_sentinel_up, ss.is_up, memory_order_relaxed);
    }
    re_chans_tick(re);
    re_presence_tick(re);
}

/* srv NULL: through Sentinel, no address until it names the master. */
static int re_shard_start(redis_engine_t *re, re_shard_t *sh, const gw_config_server_t *srv)
{
    gw_redis_link_opts_t lo = {
        .host = srv ? srv->host : NULL,
        .port = srv ? srv->port : 0,
        .connect_timeout_ms = (uint32_t)re->timeout_ms,
        .command_timeout_ms = (uint32_t)re->timeout_ms,
        .max_pending = re->max_pending,
        .on_up = re_on_link_up,
        .on_down = re_on_link_down,
        .arg = sh,
    };
    int err = gw_redis_link_new(&sh->link, re->loop, &lo);
    if (err < 0)
        return err;
    gw_redis_sub_opts_t so = {
        .host = srv ? srv->host : NULL,
        .port = srv ? srv->port : 0,
        .connect_timeout_ms = (uint32_t)re->timeout_ms,
        .on_message = re_chan_on_message,
        .on_state = re_chan_on_sub_state,
        .on_subscribed = re_chan_on_subscribed,
        .arg = sh,
    };
    return gw_redis_sub_new(&sh->sub, re->loop, &so);
}

/* On E, before its loop runs. */
static void re_on_start(nl_loop_t *loop, void *arg)
{
    redis_engine_t *re = arg;
    re->loop = loop;
    int err = 0;
    for (uint32_t i = 0; err == 0 && i < re->n_shards; i++)
        err = re_shard_start(re, &re->shards[i], re->n_sentinels ? NULL : &re->servers[i]);
    if (err == 0 && re->n_sentinels > 0) {
        gw_redis_addr_t addrs[GW_CONFIG_REDIS_SERVERS_MAX];
        const char *names[GW_CONFIG_REDIS_SERVERS_MAX];
        for (uint32_t i = 0; i < re->n_sentinels; i++)
            addrs[i] = (gw_redis_addr_t){re->sentinels[i].host, re->sentinels[i].port};
        for (uint32_t i = 0; i < re->n_shards; i++)
            names[i] = re->masters[i];
        gw_redis_sentinel_opts_t so = {
            .sentinels = addrs,
            .n_sentinels = re->n_sentinels,
            .masters = names,
            .n_masters = re->n_shards,
            .password = re->sentinel_password,
            .timeout_ms = (uint32_t)re->timeout_ms,
            .on_master = re_on_master,
            .arg = re,
        };
        err = gw_redis_sentinel_new(&re->sentinel, loop, &so);
    }
    if (err == 0)
        err = nl_timer_new(&re->tick, loop, re_on_tick, re);
    if (err == 0)
        err = nl_timer_start(re->tick, RE_TICK_MS, RE_TICK_MS);
    if (err == 0)
        err = nl_loop_add_before_sleep(loop, re_flush_all, re);
    if (err < 0)
        NL_LOG(NL_ERROR, "redis_engine_start_failed", "err=%s", nl_strerror(err));
}

/* On E, as it stops: connections close (commands in flight answered NULL). */
static void re_on_stop(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    redis_engine_t *re = arg;
    re->is_detached = true;
    gw_redis_sentinel_free(re->sentinel);
    re->sentinel = NULL;
    re_chans_deinit_joins(re);
    re_publish_deinit(re);
    re_chans_deinit(re);
    re_presence_deinit(re);
    for (uint32_t i = 0; i < re->n_shards; i++) {
        gw_redis_sub_free(re->shards[i].sub);
        gw_redis_link_free(re->shards[i].link);
        re->shards[i].sub = NULL;
        re->shards[i].link = NULL;
    }
    if (re->tick)
        nl_timer_close(re->tick, NULL);
    re->tick = NULL;
    gw_fanout_outbox_deinit(&re->out);
}

typedef struct re_detach_s {
    redis_engine_t *re;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_done;
} re_detach_t;

static void re_run_detach(void *arg)
{
    re_detach_t *d = arg;
    d->re->is_detached = true;
    pthread_mutex_lock(&d->mu);
    d->is_done = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* The node is about to stop its IO loops: E must not post to them any more. Waits for E to
 * have read that, so every post E made before is already in the loops' queues. */
static void re_detach(gw_engine_t *e)
{
    redis_engine_t *re = (redis_engine_t *)e;
    atomic_store(&re->is_closed, true);
    re_detach_t d = {.re = re, .is_done = false};
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    if (nl_loop_post(re->loop, re_run_detach, &d) == 0) {
        pthread_mutex_lock(&d.mu);
        while (!d.is_done)
            pthread_cond_wait(&d.cv, &d.mu);
        pthread_mutex_unlock(&d.mu);
    }
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
}

static void re_free(gw_engine_t *e)
{
    redis_engine_t *re = (redis_engine_t *)e;
    atomic_store(&re->is_closed, true);
    if (re->thread)
        (void)nl_loop_thread_stop(re->thread); /* re_on_stop frees the channels */
    else
        re_chans_deinit(re);
    gw_hashring_deinit(&re->ring);
    gw_fanout_outbox_deinit(&re->out);
    free(re->loop_rules);
    free(re->shards);
    explicit_bzero(re->sentinel_password, sizeof(re->sentinel_password));
    free(re);
}

static const gw_engine_ops_t re_ops = {
    .name = "redis",
    .is_shared = true,
    .publish = re_publish,
    .join = re_join,
    .leave = re_leave,
    .presence = re_presence,
    .online = re_online,
    .online_counts = re_online_counts,
    .user_online = re_user_online,
    .user_offline = re_user_offline,
    .refresh = re_refresh,
    .event = re_event,
    .presence_add = re_presence_add,
    .presence_remove = re_presence_remove,
    .history = re_history,
    .is_recoverable = re_is_recoverable,
    .tick = re_tick,
    .reconfigure = re_reconfigure,
    .loop_stats = re_loop_stats,
    .metrics = re_metrics,
    .servers = re_servers,
    .nodes = re_nodes,
    .is_ready = re_is_ready,
    .detach = re_detach,
    .free = re_free,
};

int gw_engine_redis_new(gw_engine_t **out, const gw_engine_host_t *host)
{
    const gw_config_t *cfg = host->cfg;
    redis_engine_t *re = calloc(1, sizeof(*re));
    if (!re)
        return -ENOMEM;
    int n = 0;
    if (cfg->sentinels[0]) {
        int n_sentinels =
            gw_config_parse_servers(cfg->sentinels, re->sentinels, GW_CONFIG_REDIS_SERVERS_MAX);
        n = gw_config_parse_names(cfg->sentinel_master, re->masters, GW_CONFIG_REDIS_SERVERS_MAX);
        re->n_sentinels = n_sentinels > 0 ? (uint32_t)n_sentinels : 0;
        if (n_sentinels <= 0)
            n = -EINVAL;
        snprintf(re->sentinel_password, sizeof(re->sentinel_password), "%s",
                 cfg->sentinel_password);
    } else {
        n = gw_config_parse_servers(cfg->redis, re->servers, GW_CONFIG_REDIS_SERVERS_MAX);
    }
    if (n <= 0) {
        free(re);
        return -EINVAL;
    }
    re->base.ops = &re_ops;
    re->host = *host;
    re->hub = host->fanout;
    re->n_loops = host->fanout->n_loops;
    re->n_shards = (uint32_t)n;
    re->timeout_ms = cfg->redis_timeout_ms;
    re->max_pending = cfg->redis_max_pending;
    re->idem_window_ms = cfg->idempotency_window_ms;
    /* A connected user is refreshed at least once per idle timeout (its pings are activity);
     * two refresh intervals of slack cover a batch in flight. */
    re->presence_refresh_ms = cfg->presence_refresh_ms;
    re->presence_ttl_ms = cfg->idle_timeout_ms + 2 * cfg->presence_refresh_ms;
    re->last_seen_ttl_ms = cfg->presence_last_seen_ttl_ms;
    re->presence_max_clients = cfg->presence_max_clients;
    re->epoch_seed = gw_engine_epoch_seed();
    re->shards = calloc((size_t)n, sizeof(*re->shards));
    re->loop_rules = calloc(re->n_loops, sizeof(*re->loop_rules));
    const char *names[GW_CONFIG_REDIS_SERVERS_MAX];
    int err = re->shards && re->loop_rules ? 0 : -ENOMEM;
    if (err == 0)
        err = gw_fanout_outbox_init(&re->out, re->hub);
    for (int i = 0; err == 0 && i < n; i++) {
        re_shard_t *sh = &re->shards[i];
        sh->re = re;
        sh->index = (uint32_t)i;
        if (re->n_sentinels > 0) {
            /* The ring hashes the master's name, which a failover does not change. */
            snprintf(sh->name, sizeof(sh->name), "%s", re->masters[i]);
        } else {
            bool is_v6 = strchr(re->servers[i].host, ':') != NULL;
            snprintf(sh->name, sizeof(sh->name), is_v6 ? "[%s]:%u" : "%s:%u", re->servers[i].host,
                     re->servers[i].port);
        }
        names[i] = sh->name;
    }
    if (err == 0)
        err = gw_hashring_init(&re->ring, names, (uint32_t)n);
    for (uint32_t i = 0; err == 0 && i < re->n_loops; i++)
        (void)gw_history_rules_parse(cfg->history_rules, &re->loop_rules[i], NULL, 0);
    if (err == 0) {
        (void)gw_history_rules_parse(cfg->history_rules, &re->rules, NULL, 0);
        gw_history_store_init(&re->store, cfg->history_max_bytes);
        err = re_chans_init(re);
    }
    if (err == 0) {
        nl_loop_thread_opts_t to = {
            .loop = {.id = -2},
            .name = "herald-redis",
            .on_start = re_on_start,
            .on_stop = re_on_stop,
            .arg = re,
        };
        err = nl_loop_thread_start(&re->thread, &to);
    }
    if (err < 0) {
        re_free(&re->base);
        return err;
    }
    NL_LOG(NL_INFO, "redis_engine", "servers=%u sentinels=%u timeout_ms=%llu max_pending=%u",
           re->n_shards, re->n_sentinels, (unsigned long long)re->timeout_ms, re->max_pending);
    *out = &re->base;
    return 0;
}
