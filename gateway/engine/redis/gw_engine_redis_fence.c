/*
 * gw_engine_redis_fence: keeping one (epoch, offset) for one message across a Redis failover,
 * on the engine thread (E). See gw_engine_redis.c ("Fences") and herald_fence in
 * gw_redis_schema.h.
 *
 * A channel needs a fence once this node has delivered from it (or had a publish on it
 * acknowledged): what it reached, (epoch, max(last delivered, last acknowledged)), is what
 * Redis must not have lost. re_chans_fence sends one herald_fence per RE_FENCE_CHUNK channels
 * of a shard when the shard comes back, before the shard is ready, so that every command this
 * node sends afterwards (its publishes among them) runs on settled epochs. re_chan_fence sends
 * one for a single channel: when a message arrives live at an offset already delivered, Redis
 * has already given an offset out twice (another node published before any fence ran), and
 * the fence is forced: the epoch changes whatever Redis holds, unless another node changed it
 * first. One fence per channel is in flight at a time (is_fencing).
 *
 * The answer only counts and logs: the channel's new epoch reaches this node with its next
 * message (chan_deliver starts the channel over then), after every message of the old epoch,
 * since one server publishes them all in order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_engine_redis_int.h"
#include "gw_redis_schema.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* Channels per herald_fence. */
#define RE_FENCE_CHUNK 128

/* A herald_fence on its way: its channels' names, packed (NUL after each), for the answer. */
typedef struct fence_cmd_s {
    redis_engine_t *re;
    uint32_t shard;
    uint32_t n;
    char names[];
} fence_cmd_t;

static void chan_on_fenced(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    fence_cmd_t *cmd = arg;
    redis_engine_t *re = cmd->re;
    bool is_ok = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == cmd->n;
    if (reply && !is_ok)
        NL_LOG(NL_WARN, "redis_fence_failed", "server=%s err=\"%.*s\"", re->shards[cmd->shard].name,
               reply->type == REDIS_REPLY_ERROR ? (int)(reply->len < 200 ? reply->len : 200) : 0,
               reply->type == REDIS_REPLY_ERROR ? reply->str : "");
    const char *name = cmd->names;
    for (uint32_t i = 0; i < cmd->n; i++) {
        size_t len = strlen(name);
        re_chan_t *c = re_chan_find(re, name, len, gw_sub_hash(name, len));
        if (c)
            c->is_fencing = false;
        if (is_ok && reply->element[i]->type == REDIS_REPLY_INTEGER &&
            reply->element[i]->integer == 1) {
            re_count(&re->stats.epoch_resets, 1);
            NL_LOG(NL_WARN, "redis_epoch_reset", "chan=%s server=%s", name,
                   re->shards[cmd->shard].name);
        }
        name += len + 1;
    }
    free(cmd);
}

/* One herald_fence for chans[0..n) (all on shard); is_forced: with the largest offset, which
 * resets the epoch whatever Redis holds (this node saw an offset given out twice). */
static void chan_send_fence(redis_engine_t *re, uint32_t shard, re_chan_t *const *chans, uint32_t n,
                            bool is_forced)
{
    size_t names_len = 0;
    size_t keys_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        names_len += chans[i]->key.name_len + 1u;
        keys_len += 2 * (sizeof(GW_REDIS_META_PREFIX) + chans[i]->key.name_len);
    }
    fence_cmd_t *cmd = malloc(sizeof(*cmd) + names_len);
    char *keys = malloc(keys_len + (size_t)n * 3 * 24);
    const char **argv = malloc((3 + 5 * (size_t)n) * sizeof(*argv));
    if (!cmd || !keys || !argv)
        goto done; /* a fence lost: the next reconnect or duplicate sends it again */
    *cmd = (fence_cmd_t){.re = re, .shard = shard, .n = n};
    char numkeys[16];
    snprintf(numkeys, sizeof(numkeys), "%u", 2 * n);
    int argc = 0;
    argv[argc++] = "FCALL";
    argv[argc++] = "herald_fence";
    argv[argc++] = numkeys;
    char *at = keys;
    char *name_at = cmd->names;
    for (uint32_t i = 0; i < n; i++) {
        const re_chan_t *c = chans[i];
        size_t cap = sizeof(GW_REDIS_META_PREFIX) + c->key.name_len;
        argv[argc++] = at;
        at += gw_redis_key(at, cap, GW_REDIS_META_PREFIX, c->name, c->key.name_len) + 1;
        argv[argc++] = at;
        at += gw_redis_key(at, cap, GW_REDIS_HIST_PREFIX, c->name, c->key.name_len) + 1;
        memcpy(name_at, c->name, c->key.name_len + 1u);
        name_at += c->key.name_len + 1u;
    }
    for (uint32_t i = 0; i < n; i++) {
        const re_chan_t *c = chans[i];
        argv[argc++] = at;
        proto_epoch_str(re_epoch_candidate(re, c->key.hash), at);
        at += 17;
        argv[argc++] = at;
        proto_epoch_str(c->epoch, at);
        at += 17;
        argv[argc++] = at;
        uint64_t seen = c->last_offset > c->acked_offset ? c->last_offset : c->acked_offset;
        if (is_forced)
            seen = UINT64_MAX;
        at += snprintf(at, 24, "%" PRIu64, seen) + 1;
    }
    if (gw_redis_link_command(re->shards[shard].link, chan_on_fenced, cmd, argc, argv, NULL) == 0) {
        for (uint32_t i = 0; i < n; i++)
            chans[i]->is_fencing = true;
        cmd = NULL;
    }
done:
    free(cmd);
    free(keys);
    free(argv);
}

/* Whether c has delivered offsets that Redis could have lost. */
static bool chan_needs_fence(const re_chan_t *c)
{
    return c->state == RE_ACTIVE && (c->last_offset > 0 || c->acked_offset > 0) && c->epoch != 0;
}

void re_chans_fence(redis_engine_t *re, uint32_t shard)
{
    re_chan_t *chunk[RE_FENCE_CHUNK];
    uint32_t n = 0;
    gw_chantab_t *t = &re->chans;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
        re_chan_t *c = re_chan_of(gw_chantab_slot(t, i));
        if (!c || c->shard != shard || !chan_needs_fence(c))
            continue;
        chunk[n++] = c;
        if (n == RE_FENCE_CHUNK) {
            chan_send_fence(re, shard, chunk, n, false);
            n = 0;
        }
    }
    if (n > 0)
        chan_send_fence(re, shard, chunk, n, false);
}

void re_chan_fence(redis_engine_t *re, re_chan_t *c, bool is_forced)
{
    if (c->is_fencing || !chan_needs_fence(c) || !re_chan_shard(re, c)->is_ready)
        return;
    if (is_forced)
        NL_LOG(NL_WARN, "redis_offset_reused", "chan=%s server=%s", c->name,
               re_chan_shard(re, c)->name);
    chan_send_fence(re, c->shard, &c, 1, is_forced);
}
