/*
 * gw_engine_redis_recover: answering a recovery (Subscribe{recover}) with the Redis engine, on
 * the engine thread (E). See gw_engine_redis_chan.c's header ("History") for what is kept
 * where: the channel's latest messages in memory, all of them in the Redis stream herald:h:C.
 *
 * re_recover runs once the channel is ACTIVE (gw_engine_redis_chan.c queues a request until
 * then). Memory answers when it holds every message since the client's offset; otherwise the
 * stream is read from there up to the latest offset E had handed out when it asked, and what
 * E handed out since is added from memory, so that the answer meets the live stream exactly.
 * A client whose epoch is not the channel's (Redis lost the channel, a fence reset it) is told
 * it cannot recover.
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
#include "proto_frame.h"

/* Appends a reference to m to req's answer. Returns false without memory. */
static bool hist_push(re_hist_req_t *req, gw_msg_t *m)
{
    return gw_engine_hist_add(req, m) == 0;
}

static void hist_drop_msgs(re_hist_req_t *req)
{
    for (uint32_t i = 0; i < req->n_msgs; i++)
        gw_msg_unref(req->msgs[i]);
    req->n_msgs = 0;
}

/* Adds c's kept messages with offsets in (from, to] to the answer. Returns false when the
 * memory does not hold them all (or without memory). */
static bool hist_take_kept(re_hist_req_t *req, const re_chan_t *c, uint64_t from, uint64_t to)
{
    if (from == to)
        return true;
    if (!c->hist || !gw_history_covers(c->hist, from, c->last_offset))
        return false;
    gw_msg_t *const *a;
    gw_msg_t *const *b;
    uint32_t n0;
    uint32_t n;
    uint64_t bytes;
    gw_history_since(c->hist, from, &a, &n0, &b, &n, &bytes);
    for (uint32_t i = 0; i < n; i++) {
        gw_msg_t *m = i < n0 ? a[i] : b[i - n0];
        if (m->offset > to)
            break;
        if (!hist_push(req, m))
            return false;
    }
    return true;
}

/* The answer's bytes against the client's output limit. */
static bool hist_fits(const re_hist_req_t *req)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < req->n_msgs; i++)
        bytes += gw_history_msg_bytes(req->msgs[i]);
    return bytes <= req->max_bytes;
}

static void hist_finish(redis_engine_t *re, re_hist_req_t *req, gw_recovery_t result)
{
    if (result == GW_RECOVERY_RECOVERED && !hist_fits(req))
        result = GW_RECOVERY_TOO_LARGE;
    if (result != GW_RECOVERY_RECOVERED)
        hist_drop_msgs(req);
    req->answer.result = result;
    re_hist_answer(re, req);
}

/* A stream read on its way: the request, and the latest offset E had handed out. */
typedef struct hist_cmd_s {
    re_hist_req_t *req;
    uint64_t upto;
} hist_cmd_t;

/* Decodes one XRANGE entry [id, [p, payload, t, ms]] into a message of c. */
static gw_msg_t *hist_entry_msg(const re_chan_t *c, const redisReply *entry, uint64_t *offset,
                                uint64_t *time_ms)
{
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2 ||
        entry->element[0]->type != REDIS_REPLY_STRING ||
        entry->element[1]->type != REDIS_REPLY_ARRAY)
        return NULL;
    *offset = strtoull(entry->element[0]->str, NULL, 10);
    const redisReply *f = entry->element[1];
    const redisReply *payload = NULL;
    *time_ms = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i];
        const redisReply *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || k->len != 1)
            continue;
        if (k->str[0] == 'p')
            payload = v;
        else if (k->str[0] == 't')
            *time_ms = strtoull(v->str, NULL, 10);
    }
    if (!payload || *offset == 0)
        return NULL;
    return gw_msg_new(c->name, c->key.name_len, c->key.hash, *offset, c->epoch, payload->str,
                      payload->len, *time_ms);
}

static void chan_on_xrange(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    hist_cmd_t *cmd = arg;
    re_hist_req_t *req = cmd->req;
    redis_engine_t *re = req->engine;
    uint64_t upto = cmd->upto;
    free(cmd);
    uint64_t since = req->answer.since;
    re_chan_t *c = re_chan_find(re, req->chan, req->answer.chan_len, req->hash);
    if (!c || !reply || reply->type != REDIS_REPLY_ARRAY) {
        req->status = c ? -EIO : -ENOENT;
        re_hist_answer(re, req);
        return;
    }
    /* The channel may have moved on meanwhile: the answer ends where E stands now. */
    req->answer.latest = c->last_offset;
    req->answer.epoch = c->epoch;
    if (req->epoch != c->epoch) {
        hist_finish(re, req, GW_RECOVERY_EPOCH_CHANGED);
        return;
    }
    const gw_history_rule_t *r = gw_history_rules_match(&re->rules, c->name, c->key.name_len);
    uint64_t oldest_ok_ms = r && r->age_ms ? nl_wall_ms() - r->age_ms : 0;
    uint64_t want = since + 1;
    for (size_t i = 0; i < reply->elements && want <= upto; i++) {
        uint64_t offset;
        uint64_t time_ms;
        gw_msg_t *m = hist_entry_msg(c, reply->element[i], &offset, &time_ms);
        bool is_ok = m && offset == want && time_ms >= oldest_ok_ms && hist_push(req, m);
        if (m)
            gw_msg_unref(m);
        if (!is_ok)
            break;
        want++;
    }
    if (want <= upto || !hist_take_kept(req, c, upto, c->last_offset)) {
        hist_finish(re, req, GW_RECOVERY_NOT_COVERED);
        return;
    }
    hist_finish(re, req, GW_RECOVERY_RECOVERED);
}

/* Reads the stream from since + 1 up to what E handed out. */
static void chan_read_stream(redis_engine_t *re, re_chan_t *c, re_hist_req_t *req)
{
    char key[RE_KEY_MAX];
    char from[24];
    char to[24];
    hist_cmd_t *cmd = malloc(sizeof(*cmd));
    int err = cmd ? 0 : -ENOMEM;
    if (err == 0 &&
        gw_redis_key(key, sizeof(key), GW_REDIS_HIST_PREFIX, c->name, c->key.name_len) < 0)
        err = -EINVAL;
    if (err == 0) {
        cmd->req = req;
        cmd->upto = c->last_offset;
        snprintf(from, sizeof(from), "%" PRIu64, req->answer.since + 1);
        snprintf(to, sizeof(to), "%" PRIu64, c->last_offset);
        const char *argv[] = {"XRANGE", key, from, to};
        err = gw_redis_link_command(re_chan_shard(re, c)->link, chan_on_xrange, cmd, 4, argv, NULL);
    }
    if (err < 0) {
        free(cmd);
        /* Redis unreachable: what memory holds is all there is. */
        hist_finish(re, req, GW_RECOVERY_NOT_COVERED);
        return;
    }
    re_count(&re->stats.history_fetches, 1);
}

void re_recover(redis_engine_t *re, re_chan_t *c, re_hist_req_t *req)
{
    gw_engine_history_t *a = &req->answer;
    a->latest = c->last_offset;
    a->epoch = c->epoch;
    a->is_recoverable =
        gw_history_rule_keeps(gw_history_rules_match(&re->rules, c->name, c->key.name_len));
    if (req->epoch != c->epoch) {
        hist_finish(re, req,
                    a->is_recoverable ? GW_RECOVERY_EPOCH_CHANGED : GW_RECOVERY_NO_HISTORY);
    } else if (a->since == a->latest) {
        hist_finish(re, req, GW_RECOVERY_RECOVERED);
    } else if (!a->is_recoverable) {
        hist_finish(re, req, GW_RECOVERY_NO_HISTORY);
    } else if (a->since > a->latest) {
        hist_finish(re, req, GW_RECOVERY_NOT_COVERED);
    } else if (c->hist && (gw_history_trim_age(&re->store, c->hist, nl_now_ns()), true) &&
               hist_take_kept(req, c, a->since, a->latest)) {
        hist_finish(re, req, GW_RECOVERY_RECOVERED);
    } else {
        hist_drop_msgs(req);
        chan_read_stream(re, c, req);
    }
}
