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
 * The channel side (what a node knows of each channel, joins, messages, recovery) is
 * gw_engine_redis_chan.c. This file: threads, requests in, batches and answers out, stats.
 *
 * Shutdown: detach (from the node, before it stops the IO loops) makes E stop posting to
 * them; free stops E, which closes its connections.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "gw_engine_redis_int.h"
#include "gw_redis_schema.h"
#include "gw_sub.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* How often E checks join timeouts and ages histories. */
#define RE_TICK_MS 250
/* First capacity of a batch toward a loop. */
#define RE_BATCH_MIN 16

struct re_batch_s {
    redis_engine_t *re;
    uint32_t loop;
    uint32_t count;
    uint32_t cap;
    gw_msg_t *msgs[];
};

/* --- E -> IO loops ------------------------------------------------------------------------ */

static void re_run_batch(void *arg)
{
    re_batch_t *b = arg;
    gw_loop_t *lp = &b->re->node->loops[b->loop];
    for (uint32_t i = 0; i < b->count; i++) {
        gw_fanout_deliver(lp, b->msgs[i]);
        gw_msg_unref(b->msgs[i]);
    }
    free(b);
}

static void batch_free(re_batch_t *b)
{
    for (uint32_t i = 0; i < b->count; i++)
        gw_msg_unref(b->msgs[i]);
    free(b);
}

void re_flush_loop(redis_engine_t *re, uint32_t loop)
{
    re_batch_t *b = re->batches[loop];
    if (!b)
        return;
    re->batches[loop] = NULL;
    re->batch_mask &= ~(UINT64_C(1) << loop);
    if (re->is_detached || nl_loop_post(re->node->loops[loop].loop, re_run_batch, b) < 0)
        batch_free(b);
}

static void re_flush_all(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    redis_engine_t *re = arg;
    for (uint64_t mask = re->batch_mask; mask; mask &= mask - 1)
        re_flush_loop(re, (uint32_t)__builtin_ctzll(mask));
    re_presence_flush(re);
}

void re_send(redis_engine_t *re, gw_msg_t *m, uint64_t mask)
{
    for (; mask; mask &= mask - 1) {
        uint32_t loop = (uint32_t)__builtin_ctzll(mask);
        re_batch_t *b = re->batches[loop];
        if (!b || b->count == b->cap) {
            uint32_t cap = b ? b->cap * 2 : RE_BATCH_MIN;
            re_batch_t *nb = realloc(b, sizeof(*nb) + sizeof(nb->msgs[0]) * cap);
            if (!nb) {
                NL_LOG(NL_ERROR, "redis_batch_failed", "loop=%u err=%s", loop,
                       nl_strerror(-ENOMEM));
                continue;
            }
            if (!b) {
                nb->re = re;
                nb->loop = loop;
                nb->count = 0;
            }
            nb->cap = cap;
            re->batches[loop] = b = nb;
            re->batch_mask |= UINT64_C(1) << loop;
        }
        b->msgs[b->count++] = gw_msg_ref(m);
    }
}

/* A join answer on its way to a loop. */
typedef struct re_joined_s {
    redis_engine_t *re;
    uint32_t loop;
    uint32_t hash;
    int status;
    uint32_t len;
    uint64_t offset;
    uint64_t epoch;
    char name[];
} re_joined_t;

static void re_run_joined(void *arg)
{
    re_joined_t *j = arg;
    gw_loop_t *lp = &j->re->node->loops[j->loop];
    gw_sub_joined(&lp->subs, j->name, j->len, j->hash, j->status, j->offset, j->epoch);
    free(j);
}

void re_answer_join(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash,
                    int status, uint64_t offset, uint64_t epoch)
{
    re_joined_t *j = malloc(sizeof(*j) + len + 1);
    if (!j) {
        /* The loop's subscribers would wait for ever: nothing sensible is left to do but say
         * so (a join answer cannot be made without memory). */
        NL_LOG(NL_ERROR, "redis_join_reply_lost", "loop=%u", loop);
        return;
    }
    *j = (re_joined_t){.re = re,
                       .loop = loop,
                       .hash = hash,
                       .status = status,
                       .len = (uint32_t)len,
                       .offset = offset,
                       .epoch = epoch};
    memcpy(j->name, name, len);
    j->name[len] = '\0';
    re_flush_loop(re, loop);
    if (re->is_detached || nl_loop_post(re->node->loops[loop].loop, re_run_joined, j) < 0)
        free(j);
}

uint64_t re_epoch_candidate(redis_engine_t *re, uint32_t hash)
{
    /* splitmix64 over the node's seed, the channel and a counter: distinct per node start. */
    uint64_t x = re->epoch_seed ^ ((uint64_t)hash << 32) ^ nl_now_ns();
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* --- requests into E ---------------------------------------------------------------------- */

typedef struct re_pub_req_s {
    redis_engine_t *re;
    gw_engine_reply_t reply;
    uint32_t hash;
    uint32_t chan_len;
    size_t payload_len;
    char data[]; /* channel, NUL, payload */
} re_pub_req_t;

static void re_run_publish(void *arg)
{
    re_pub_req_t *req = arg;
    re_chan_publish(req->re, req->data, req->chan_len, req->hash, req->data + req->chan_len + 1,
                    req->payload_len, &req->reply);
    free(req);
}

static int re_publish(gw_engine_t *e, const char *chan, size_t chan_len, const void *payload,
                      size_t len, const gw_engine_reply_t *reply)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return -ESHUTDOWN;
    re_pub_req_t *req = malloc(sizeof(*req) + chan_len + 1 + len);
    if (!req)
        return -ENOMEM;
    req->re = re;
    req->reply = *reply;
    req->hash = gw_sub_hash(chan, chan_len);
    req->chan_len = (uint32_t)chan_len;
    req->payload_len = len;
    memcpy(req->data, chan, chan_len);
    req->data[chan_len] = '\0';
    if (len)
        memcpy(req->data + chan_len + 1, payload, len);
    gw_loop_t *cur = gw_loop_current();
    if (cur)
        cur->cross_posts++;
    int err = nl_loop_post(re->loop, re_run_publish, req);
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
    gw_loop_t *lp = &re->node->loops[loop];
    re_member_req_t *req = NULL;
    if (!atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        req = malloc(sizeof(*req) + len + 1);
    if (req) {
        *req = (re_member_req_t){
            .re = re, .loop = loop, .hash = hash, .is_join = is_join, .len = (uint32_t)len};
        memcpy(req->name, chan, len);
        req->name[len] = '\0';
        lp->cross_posts++;
        if (nl_loop_post(re->loop, re_run_member, req) == 0)
            return;
        free(req);
    }
    /* A join must be answered, or its subscribers wait for ever. */
    if (is_join)
        gw_sub_joined(&lp->subs, chan, len, hash, -ESHUTDOWN, 0, 0);
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
    re_chan_history(req->re, req);
}

static int re_history(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                      uint32_t hash, uint64_t since, uint64_t epoch, uint64_t max_bytes,
                      const gw_engine_reply_t *reply)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return -ESHUTDOWN;
    re_hist_req_t *req = calloc(1, sizeof(*req) + chan_len + 1);
    if (!req)
        return -ENOMEM;
    req->re = re;
    req->reply = *reply;
    req->loop_index = loop_index;
    req->hash = hash;
    req->epoch = epoch;
    req->max_bytes = max_bytes;
    memcpy(req->chan, chan, chan_len);
    req->answer.chan = req->chan;
    req->answer.chan_len = chan_len;
    req->answer.since = since;
    re->node->loops[loop_index].cross_posts++;
    int err = nl_loop_post(re->loop, re_run_history, req);
    if (err < 0)
        free(req);
    return err;
}

/* On the asking loop: the answer, then the references go. */
static void re_run_hist_answer(void *arg)
{
    re_hist_req_t *req = arg;
    gw_engine_result_t res = {.status = req->status, .data = &req->answer};
    req->reply.cb(&req->reply, &res);
    for (uint32_t i = 0; i < req->n_msgs; i++)
        gw_msg_unref(req->msgs[i]);
    free(req->msgs);
    free(req);
}

void re_hist_answer(redis_engine_t *re, re_hist_req_t *req)
{
    req->answer.msgs = req->msgs;
    req->answer.n_msgs = req->n_msgs;
    re_flush_loop(re, req->loop_index);
    if (!re->is_detached &&
        nl_loop_post(re->node->loops[req->loop_index].loop, re_run_hist_answer, req) == 0)
        return;
    for (uint32_t i = 0; i < req->n_msgs; i++)
        gw_msg_unref(req->msgs[i]);
    free(req->msgs);
    free(req);
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
    out->history_channels += LOAD(history_channels);
    out->history_messages += LOAD(history_messages);
    out->history_bytes += LOAD(history_bytes);
    out->history_max_bytes += LOAD(history_max_bytes);
    gw_engine_redis_stats_t *r = &out->redis;
    r->n_servers = re->n_shards;
    for (uint32_t i = 0; i < re->n_shards && i < GW_CONFIG_REDIS_SERVERS_MAX; i++) {
        re_shard_t *sh = &re->shards[i];
        r->servers[i].name = sh->name;
        r->servers[i].is_up = atomic_load_explicit(&sh->is_ready_atomic, memory_order_relaxed);
        r->servers[i].pending = atomic_load_explicit(&sh->pending, memory_order_relaxed);
        r->servers[i].reconnects = atomic_load_explicit(&sh->reconnects, memory_order_relaxed);
        r->servers[i].refused = atomic_load_explicit(&sh->refused, memory_order_relaxed);
    }
    r->delivered = LOAD(delivered);
    r->lost = LOAD(lost);
    r->duplicates = LOAD(duplicates);
    r->unsequenced = LOAD(unsequenced);
    r->local_only = LOAD(local_only);
    r->busy = LOAD(busy);
    r->join_timeouts = LOAD(join_timeouts);
    r->epoch_changes = LOAD(epoch_changes);
    r->history_fetches = LOAD(history_fetches);
    r->presence_dropped = LOAD(presence_dropped);
#undef LOAD
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
    NL_LOG(NL_INFO, "redis_ready", "server=%s", sh->name);
    re_set_shard_ready(sh, true);
    re_presence_server_ready(sh->re);
}

static void re_on_link_up(gw_redis_link_t *l, void *arg)
{
    re_shard_t *sh = arg;
    const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", gw_redis_functions};
    if (gw_redis_link_command(l, re_on_functions_loaded, sh, 4, argv, NULL) < 0)
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
}

static void re_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    redis_engine_t *re = arg;
    for (uint32_t i = 0; i < re->n_shards; i++) {
        re_shard_t *sh = &re->shards[i];
        gw_redis_link_stats_t ls;
        gw_redis_link_get_stats(sh->link, &ls);
        atomic_store_explicit(&sh->pending, gw_redis_link_pending(sh->link), memory_order_relaxed);
        atomic_store_explicit(&sh->refused, ls.refused_busy, memory_order_relaxed);
    }
    re_chans_tick(re);
    re_presence_tick(re);
}

static int re_shard_start(redis_engine_t *re, re_shard_t *sh, const gw_config_server_t *srv)
{
    gw_redis_link_opts_t lo = {
        .host = srv->host,
        .port = srv->port,
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
        .host = srv->host,
        .port = srv->port,
        .connect_timeout_ms = (uint32_t)re->timeout_ms,
        .on_message = re_chan_on_message,
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
    gw_config_server_t servers[GW_CONFIG_REDIS_SERVERS_MAX];
    int n =
        gw_config_parse_servers(re->node->snap->cfg.redis, servers, GW_CONFIG_REDIS_SERVERS_MAX);
    int err = n > 0 ? 0 : -EINVAL;
    for (int i = 0; err == 0 && i < n; i++)
        err = re_shard_start(re, &re->shards[i], &servers[i]);
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
    for (uint32_t i = 0; i < re->n_loops; i++)
        if (re->batches[i])
            batch_free(re->batches[i]);
    memset(re->batches, 0, sizeof(*re->batches) * re->n_loops);
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
    free(re->batches);
    free(re->loop_rules);
    free(re->shards);
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
    .is_ready = re_is_ready,
    .detach = re_detach,
    .free = re_free,
};

int gw_engine_redis_new(gw_engine_t **out, gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    gw_config_server_t servers[GW_CONFIG_REDIS_SERVERS_MAX];
    int n = gw_config_parse_servers(cfg->redis, servers, GW_CONFIG_REDIS_SERVERS_MAX);
    if (n <= 0 || node->n_loops == 0 || node->n_loops > GW_NODE_MAX_LOOPS)
        return -EINVAL;
    redis_engine_t *re = calloc(1, sizeof(*re));
    if (!re)
        return -ENOMEM;
    re->base.ops = &re_ops;
    re->node = node;
    re->n_loops = node->n_loops;
    re->n_shards = (uint32_t)n;
    re->timeout_ms = cfg->redis_timeout_ms;
    re->max_pending = cfg->redis_max_pending;
    /* A connected user is refreshed at least once per idle timeout (its pings are activity);
     * two refresh intervals of slack cover a batch in flight. */
    re->presence_refresh_ms = cfg->presence_refresh_ms;
    re->presence_ttl_ms = cfg->idle_timeout_ms + 2 * cfg->presence_refresh_ms;
    re->last_seen_ttl_ms = cfg->presence_last_seen_ttl_ms;
    re->presence_max_clients = cfg->presence_max_clients;
    if (getrandom(&re->epoch_seed, sizeof(re->epoch_seed), 0) != sizeof(re->epoch_seed))
        re->epoch_seed = nl_now_ns() ^ ((uint64_t)getpid() << 32);
    re->shards = calloc((size_t)n, sizeof(*re->shards));
    re->batches = calloc(re->n_loops, sizeof(*re->batches));
    re->loop_rules = calloc(re->n_loops, sizeof(*re->loop_rules));
    const char *names[GW_CONFIG_REDIS_SERVERS_MAX];
    int err = re->shards && re->batches && re->loop_rules ? 0 : -ENOMEM;
    for (int i = 0; err == 0 && i < n; i++) {
        re_shard_t *sh = &re->shards[i];
        sh->re = re;
        sh->index = (uint32_t)i;
        bool is_v6 = strchr(servers[i].host, ':') != NULL;
        snprintf(sh->name, sizeof(sh->name), is_v6 ? "[%s]:%u" : "%s:%u", servers[i].host,
                 servers[i].port);
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
    NL_LOG(NL_INFO, "redis_engine", "servers=%u timeout_ms=%llu max_pending=%u", re->n_shards,
           (unsigned long long)re->timeout_ms, re->max_pending);
    *out = &re->base;
    return 0;
}
