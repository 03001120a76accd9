/*
 * gw_engine_redis_publish: publishes through Redis, on the engine thread (E). See
 * gw_engine_redis.c for the threads and gw_redis_schema.h for the function they call.
 *
 * A publish is one FCALL herald_publish on the channel's server: Redis gives it the channel's
 * next offset and PUBLISHes it to every node subscribed, this one included, whose subscribers
 * get it from there like any other message. Three answers besides the offset:
 *   - the function ran but answered from the idempotency key's record (a retry): duplicate;
 *   - no answer (the link went down, or redis_timeout passed with nothing back): the function
 *     may have run, OUTCOME_UNKNOWN;
 *   - not sent (the server is down): delivered to this node's subscribers only, outside the
 *     sequence (offset 0), or refused BUSY for a history channel and a publish with a key.
 *
 * Held publishes. When a server comes back (a restart, a failover), the command link is
 * ready before the pub/sub connection has subscribed again, and a publish sent in between
 * would go out while this node hears nothing: its own subscribers would miss it (after an
 * empty restart, offset 1 of the channel's new epoch). So a publish to a channel this node
 * delivers whose SUBSCRIBE is not confirmed on the current pub/sub connection waits, in the
 * server's queue in arrival order, until it is, or until redis_timeout has passed (then it
 * goes, and a gap is what its subscribers see, as when Redis is out of reach).
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

/* Publishes a server holds while its pub/sub connection subscribes again; past it, BUSY. */
#define RE_HELD_MAX 4096

typedef struct held_s {
    gw_engine_pub_t *req;
    uint64_t since_ms;
} held_t;

/* A server's held publishes, oldest first (a ring). */
struct re_held_s {
    held_t *q;
    uint32_t head;
    uint32_t n;
    uint32_t cap;
};

/* Answers where the publisher asked: on its loop (posted), or here (the HTTP thread's answer
 * is safe from any thread). Frees req. Once the node has detached the engine its IO loops
 * are stopping (and then freed): an answer for one, such as a command the closing link
 * answers NULL, is dropped, as nobody waits for it. */
static void pub_answer(gw_engine_pub_t *req)
{
    if (!req->reply.loop) {
        gw_engine_pub_reply_run(req);
        return;
    }
    if (((redis_engine_t *)req->engine)->is_detached) {
        gw_engine_reply_drop(&req->reply);
        free(req);
        return;
    }
    if (nl_loop_post(req->reply.loop, gw_engine_pub_reply_run, req) < 0) {
        NL_LOG(NL_ERROR, "publish_reply_lost", "err=%s", nl_strerror(-ENOMEM));
        free(req);
    }
}

static void pub_fail(gw_engine_pub_t *req, int status)
{
    req->result.status = status;
    pub_answer(req);
}

static void on_published(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    gw_engine_pub_t *req = arg;
    redis_engine_t *re = req->engine;
    uint64_t epoch = 0;
    /* {offset, epoch, time_ms[, duplicate]}: the fourth is 1 when the key's record answered. */
    if (reply && reply->type == REDIS_REPLY_ARRAY &&
        (reply->elements == 3 || reply->elements == 4) &&
        reply->element[0]->type == REDIS_REPLY_INTEGER &&
        reply->element[1]->type == REDIS_REPLY_STRING &&
        proto_epoch_parse(reply->element[1]->str, &epoch) == 0) {
        req->result.offset = (uint64_t)reply->element[0]->integer;
        req->result.epoch = epoch;
        req->result.is_duplicate = reply->elements == 4 &&
                                   reply->element[3]->type == REDIS_REPLY_INTEGER &&
                                   reply->element[3]->integer == 1;
        if (req->result.is_duplicate) {
            re_count(&re->stats.idem_duplicates, 1);
            pub_answer(req);
            return;
        }
        re_count(&re->stats.published, 1);
        /* What Redis acknowledged counts as seen too: after a failover, a message whose
         * publish was answered but whose delivery was cut off still fences its channel. */
        re_chan_t *c = re_chan_find(re, req->data, req->chan_len, req->hash);
        if (c && c->epoch == epoch && req->result.offset > c->acked_offset)
            c->acked_offset = req->result.offset;
    } else if (!reply) {
        /* The command was handed to Redis and the link went (down, or no answer within
         * redis_timeout): the function may have run. The publisher is told so, and retries
         * with its idempotency key (PROTOCOL.md, Publish). */
        req->result.status = GW_ENGINE_OUTCOME_UNKNOWN;
    } else {
        /* Refused: an error from the function, which ran as a whole or not at all. */
        req->result.status = -EIO;
        if (reply->type == REDIS_REPLY_ERROR)
            NL_LOG(NL_WARN, "redis_publish_failed", "err=\"%.*s\"",
                   (int)(reply->len < 200 ? reply->len : 200), reply->str);
    }
    pub_answer(req);
}

/* Redis is out of reach: this node's subscribers get it, outside the sequence. Not for a
 * channel that keeps history: its clients are promised every message or a "cannot recover",
 * and the other nodes' subscribers could neither see nor recover a message sent this way; nor
 * for a publish with an idempotency key, which only Redis can recognise again on every node.
 * The publisher is told to retry (BUSY: not applied), as during a failover it soon can. */
static void publish_local(redis_engine_t *re, gw_engine_pub_t *req)
{
    gw_engine_msg_t m = gw_engine_pub_msg(req);
    if (m.key_len > 0 ||
        gw_history_rule_keeps(gw_history_rules_match(&re->rules, m.chan, m.chan_len))) {
        re_count(&re->stats.unavailable, 1);
        pub_fail(req, -EBUSY);
        return;
    }
    re_count(&re->stats.local_only, 1);
    re_chan_t *c = re_chan_find(re, m.chan, m.chan_len, req->hash);
    if (c && c->state == RE_ACTIVE) {
        gw_msg_t *msg =
            gw_msg_new(m.chan, m.chan_len, req->hash, 0, 0, m.payload, m.len, nl_wall_ms());
        if (msg) {
            re_chan_deliver(re, c, msg);
            gw_msg_unref(msg);
        }
    }
    pub_answer(req); /* offset 0: not sequenced */
}

/* GW_REDIS_IDEM_PREFIX "C K": the record of channel C's publish with key K (a channel name
 * has no space, so the first one ends it). Returns its length, or 0 without a key or window. */
static size_t idem_key(const redis_engine_t *re, const gw_engine_msg_t *m, char *out, size_t cap)
{
    size_t pre = sizeof(GW_REDIS_IDEM_PREFIX) - 1;
    if (m->key_len == 0 || re->idem_window_ms == 0 || pre + m->chan_len + 1 + m->key_len > cap)
        return 0;
    memcpy(out, GW_REDIS_IDEM_PREFIX, pre);
    memcpy(out + pre, m->chan, m->chan_len);
    out[pre + m->chan_len] = ' ';
    memcpy(out + pre + m->chan_len + 1, m->key, m->key_len);
    return pre + m->chan_len + 1 + m->key_len;
}

/* Sends req's FCALL on sh's link (or answers it: BUSY at max_pending, local when down). */
static void publish_send(redis_engine_t *re, re_shard_t *sh, gw_engine_pub_t *req)
{
    if (!sh->is_ready) {
        publish_local(re, req);
        return;
    }
    gw_engine_msg_t m = gw_engine_pub_msg(req);
    char meta[RE_KEY_MAX];
    char hist[RE_KEY_MAX];
    char idem[sizeof(GW_REDIS_IDEM_PREFIX) + GW_CHANNEL_NAME_MAX_LIMIT + 1 + GW_ENGINE_KEY_MAX];
    char keep[16] = "0";
    char age[24] = "0";
    char window[24];
    char candidate[17];
    (void)gw_redis_key(meta, sizeof(meta), GW_REDIS_META_PREFIX, m.chan, m.chan_len);
    (void)gw_redis_key(hist, sizeof(hist), GW_REDIS_HIST_PREFIX, m.chan, m.chan_len);
    size_t idem_len = idem_key(re, &m, idem, sizeof(idem));
    const gw_history_rule_t *r = gw_history_rules_match(&re->rules, m.chan, m.chan_len);
    if (gw_history_rule_keeps(r)) {
        snprintf(keep, sizeof(keep), "%u", r->count);
        snprintf(age, sizeof(age), "%" PRIu64, r->age_ms);
    }
    snprintf(window, sizeof(window), "%" PRIu64, re->idem_window_ms);
    proto_epoch_str(re_epoch_candidate(re, req->hash), candidate);
    /* FCALL herald_publish 2 meta hist C payload keep age epoch, or with a key
     * FCALL herald_publish 3 meta hist idem C payload keep age epoch window. */
    const char *argv[12] = {"FCALL", "herald_publish", idem_len ? "3" : "2", meta, hist};
    size_t lens[12] = {5, 14, 1, strlen(meta), strlen(hist)};
    int argc = 5;
    if (idem_len) {
        argv[argc] = idem;
        lens[argc++] = idem_len;
    }
    const char *rest[] = {m.chan, m.payload, keep, age, candidate, window};
    size_t rest_lens[] = {m.chan_len, m.len, strlen(keep), strlen(age), 16, strlen(window)};
    for (size_t i = 0; i < (idem_len ? 6u : 5u); i++) {
        argv[argc] = rest[i];
        lens[argc++] = rest_lens[i];
    }
    int err = gw_redis_link_command(sh->link, on_published, req, argc, argv, lens);
    if (err == -EBUSY) {
        re_count(&re->stats.busy, 1);
        pub_fail(req, -EBUSY);
    } else if (err < 0) {
        publish_local(re, req);
    }
}

/* --- held publishes ------------------------------------------------------------------------ */

/* Whether a publish to req's channel waits: this node delivers the channel and its SUBSCRIBE
 * is not confirmed on the current pub/sub connection. */
static bool publish_must_wait(redis_engine_t *re, const gw_engine_pub_t *req)
{
    re_chan_t *c = re_chan_find(re, req->data, req->chan_len, req->hash);
    return c && c->state == RE_ACTIVE && !c->is_subscribed;
}

static bool held_push(re_shard_t *sh, gw_engine_pub_t *req, uint64_t now_ms)
{
    struct re_held_s *h = sh->held;
    if (!h && !(h = sh->held = calloc(1, sizeof(*h))))
        return false;
    if (h->n == h->cap) {
        if (h->cap >= RE_HELD_MAX)
            return false;
        uint32_t cap = h->cap ? h->cap * 2 : 16;
        held_t *q = malloc(sizeof(*q) * cap);
        if (!q)
            return false;
        for (uint32_t i = 0; i < h->n; i++)
            q[i] = h->q[(h->head + i) % h->cap];
        free(h->q);
        h->q = q;
        h->head = 0;
        h->cap = cap;
    }
    h->q[(h->head + h->n) % h->cap] = (held_t){req, now_ms};
    h->n++;
    return true;
}

void re_publish_release(redis_engine_t *re, uint32_t shard)
{
    re_shard_t *sh = &re->shards[shard];
    struct re_held_s *h = sh->held;
    uint64_t now_ms = nl_loop_now_ms(re->loop);
    while (h && h->n > 0) {
        held_t *e = &h->q[h->head];
        if (publish_must_wait(re, e->req) && now_ms - e->since_ms < re->timeout_ms)
            return;
        gw_engine_pub_t *req = e->req;
        h->head = (h->head + 1) % h->cap;
        h->n--;
        publish_send(re, sh, req);
    }
}

void re_publish_deinit(redis_engine_t *re)
{
    for (uint32_t i = 0; i < re->n_shards; i++) {
        struct re_held_s *h = re->shards[i].held;
        for (; h && h->n > 0; h->n--, h->head = (h->head + 1) % h->cap)
            pub_fail(h->q[h->head].req, -ESHUTDOWN);
        if (h)
            free(h->q);
        free(h);
        re->shards[i].held = NULL;
    }
}

void re_chan_publish(redis_engine_t *re, gw_engine_pub_t *req)
{
    uint32_t shard = gw_hashring_lookup(&re->ring, req->data, req->chan_len);
    re_shard_t *sh = &re->shards[shard];
    /* Behind held publishes of the same server, to keep each channel's order. */
    if (sh->is_ready && ((sh->held && sh->held->n > 0) || publish_must_wait(re, req))) {
        if (!held_push(sh, req, nl_loop_now_ms(re->loop))) {
            re_count(&re->stats.busy, 1);
            pub_fail(req, -EBUSY);
        }
        return;
    }
    publish_send(re, sh, req);
}
