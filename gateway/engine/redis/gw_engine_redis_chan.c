/*
 * gw_engine_redis_chan: what a node knows of each channel its loops subscribe to, on the
 * engine thread (E). See gw_engine_redis.c for the threads.
 *
 * Joining without a gap or a duplicate. A loop's first subscriber makes E subscribe to
 * herald:C (SUBSCRIBING). Once Redis confirms the SUBSCRIBE, every later message reaches E;
 * only then does E ask for C's latest offset R (FCALL herald_join: JOINING), since asked
 * earlier a message could fall between the two. Messages that arrive meanwhile wait in the
 * channel's pending list. With R, the channel is ACTIVE: the waiting loops are answered with
 * R, then the pending messages go out, those at or below R dropped as already counted. A loop
 * joining an ACTIVE channel is answered at once with the latest offset E handed out, after
 * the batch E has for it.
 *
 * Joins are paced by Redis's replies: while half of redis_max_pending commands are in flight
 * on the server's link, herald_joins wait their turn in order (re_joins_s), sent from E's
 * before-sleep hook as replies make room, so a burst of subscriptions is never refused while
 * Redis is alive. A join is given up (the client is told BUSY, retry) only when it waited
 * past [engine] redis_timeout with its server down or its pub/sub connection down, and in
 * any case after RE_JOIN_MAX_MS.
 *
 * Messages. A sequenced message (gw_redis_schema.h) carries its offset and epoch: one past
 * the next leaves a gap (lost while a connection was down, the at-most-once promise of
 * pub/sub) that is counted; a new epoch means Redis lost the channel's state (a restart
 * without persistence, a fence) and starts the channel's history over. A plain PUBLISH from a
 * backend goes out as it is, with offset 0. After a reconnect the sub subscribes again; an
 * ACTIVE channel asks nothing (the fence settled its epoch when the server came back), this
 * node's own publishes to it wait for the confirmation (gw_engine_redis_publish.c), and what
 * other nodes published meanwhile shows as a gap at its next message. So pub/sub never delivers an
 * offset at or below the last one handed out: such a message means Redis gave the offset out
 * again, and it is dropped and forces a fence (gw_engine_redis_fence.c).
 *
 * History. Channels that keep history keep their latest messages here too (gw_history, fed by
 * what arrives), so a recovery on the node where the client was is answered from memory;
 * gw_engine_redis_recover.c answers recoveries, this file queues them until the channel is
 * ACTIVE. Publishing is gw_engine_redis_publish.c.
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
#include "netlib/nl_log.h"

/* Messages a channel keeps while it is not ACTIVE; past it the oldest go (counted lost). */
#define RE_PENDING_MAX 4096

struct re_pending_s {
    gw_msg_t **msgs;
    uint32_t n_msgs;
    uint32_t cap_msgs;
    re_hist_req_t *hist_head; /* history requests waiting for ACTIVE */
    re_hist_req_t *hist_tail;
};

re_chan_t *re_chan_find(redis_engine_t *re, const char *name, size_t len, uint32_t hash)
{
    return re_chan_of(gw_chantab_find(&re->chans, name, len, hash));
}

int re_chans_init(redis_engine_t *re)
{
    return gw_chantab_init(&re->chans);
}

/* --- the wait list: channels not ACTIVE ----------------------------------------------------- */

static void wait_add(redis_engine_t *re, re_chan_t *c)
{
    if (c->is_waiting)
        return;
    c->is_waiting = true;
    c->since_ms = nl_loop_now_ms(re->loop);
    c->wait_prev = re->wait_tail;
    c->wait_next = NULL;
    if (re->wait_tail)
        re->wait_tail->wait_next = c;
    else
        re->wait_head = c;
    re->wait_tail = c;
}

static void wait_remove(redis_engine_t *re, re_chan_t *c)
{
    if (!c->is_waiting)
        return;
    c->is_waiting = false;
    if (c->wait_prev)
        c->wait_prev->wait_next = c->wait_next;
    else
        re->wait_head = c->wait_next;
    if (c->wait_next)
        c->wait_next->wait_prev = c->wait_prev;
    else
        re->wait_tail = c->wait_prev;
    c->wait_prev = c->wait_next = NULL;
}

/* --- channels ------------------------------------------------------------------------------- */

static int chan_pubsub_name(char *out, const re_chan_t *c)
{
    return gw_redis_key(out, RE_KEY_MAX, GW_REDIS_PREFIX, c->name, c->key.name_len);
}

static void pending_free(re_pending_t *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_msgs; i++)
        gw_msg_unref(p->msgs[i]);
    free(p->msgs);
    free(p);
}

static re_chan_t *chan_new(redis_engine_t *re, const char *name, size_t len, uint32_t hash)
{
    re_chan_t *c = calloc(1, sizeof(*c) + len + 1);
    if (!c)
        return NULL;
    memcpy(c->name, name, len);
    c->key.hash = hash;
    c->key.name_len = (uint16_t)len;
    c->shard = gw_hashring_lookup(&re->ring, name, len);
    c->state = RE_SUBSCRIBING;
    const gw_history_rule_t *r = gw_history_rules_match(&re->rules, name, len);
    if (gw_history_rule_keeps(r) && gw_history_new(&re->store, &c->hist, r, c) < 0)
        goto fail;
    if (gw_chantab_insert(&re->chans, &c->key) < 0)
        goto fail;
    char pubsub[RE_KEY_MAX];
    int plen = chan_pubsub_name(pubsub, c);
    if (plen < 0 || gw_redis_sub_add(re_chan_shard(re, c)->sub, pubsub, (size_t)plen) < 0) {
        gw_chantab_remove(&re->chans, &c->key);
        goto fail;
    }
    wait_add(re, c);
    re_count(&re->stats.channels, 1);
    return c;
fail:
    gw_history_free(&re->store, c->hist);
    free(c);
    return NULL;
}

/* Fails the history requests waiting on c (the channel is going, or its join failed). */
static void chan_fail_waiting(redis_engine_t *re, re_chan_t *c, int status)
{
    re_pending_t *p = c->pending;
    while (p && p->hist_head) {
        re_hist_req_t *req = p->hist_head;
        p->hist_head = req->next;
        req->status = status;
        re_hist_answer(re, req);
    }
    if (p)
        p->hist_tail = NULL;
}

static void chan_free(redis_engine_t *re, re_chan_t *c)
{
    char pubsub[RE_KEY_MAX];
    int plen = chan_pubsub_name(pubsub, c);
    if (plen > 0)
        (void)gw_redis_sub_remove(re_chan_shard(re, c)->sub, pubsub, (size_t)plen);
    wait_remove(re, c);
    chan_fail_waiting(re, c, -ENOENT);
    pending_free(c->pending);
    gw_history_free(&re->store, c->hist);
    gw_chantab_remove(&re->chans, &c->key);
    atomic_fetch_sub_explicit(&re->stats.channels, 1, memory_order_relaxed);
    free(c);
}

void re_chans_deinit(redis_engine_t *re)
{
    gw_chantab_t *t = &re->chans;
    while (t->slots && t->count > 0) {
        for (uint32_t i = 0; i <= t->mask; i++) {
            re_chan_t *c = re_chan_of(gw_chantab_slot(t, i));
            if (c) {
                chan_free(re, c); /* the table may move entries: scan again */
                break;
            }
        }
    }
    gw_chantab_deinit(t);
}

static re_pending_t *chan_pending(re_chan_t *c)
{
    if (!c->pending)
        c->pending = calloc(1, sizeof(*c->pending));
    return c->pending;
}

/* --- delivery ------------------------------------------------------------------------------- */

bool re_chan_deliver(redis_engine_t *re, re_chan_t *c, gw_msg_t *m)
{
    if (m->offset != 0) {
        if (m->epoch == c->epoch) {
            if (m->offset <= c->last_offset) {
                re_count(&re->stats.duplicates, 1);
                return false;
            }
            if (m->offset > c->last_offset + 1)
                re_count(&re->stats.lost, m->offset - c->last_offset - 1);
        } else {
            /* Redis lost the channel (restarted empty) or its state expired: the offsets
             * started over. Kept messages belong to the old epoch. */
            re_count(&re->stats.epoch_changes, 1);
            NL_LOG(NL_INFO, "redis_epoch_changed", "chan=%s", c->name);
            c->epoch = m->epoch;
            c->acked_offset = 0;
            if (c->hist) {
                const gw_history_rule_t *r =
                    gw_history_rules_match(&re->rules, c->name, c->key.name_len);
                gw_history_free(&re->store, c->hist);
                c->hist = NULL;
                if (gw_history_rule_keeps(r))
                    (void)gw_history_new(&re->store, &c->hist, r, c);
            }
        }
        c->last_offset = m->offset;
        if (c->hist)
            gw_history_add(&re->store, c->hist, m, m->publish_ns);
    } else {
        re_count(&re->stats.unsequenced, 1);
    }
    re_count(&re->stats.delivered, 1);
    re_send(re, m, c->loop_mask);
    return true;
}

void re_chan_on_message(gw_redis_sub_t *s, const char *pubsub, size_t pubsub_len, const char *data,
                        size_t len, void *arg)
{
    NL_UNUSED(s);
    re_shard_t *sh = arg;
    redis_engine_t *re = sh->re;
    size_t name_len;
    const char *name = gw_redis_channel_of(pubsub, pubsub_len, &name_len);
    if (!name)
        return;
    uint32_t hash = gw_sub_hash(name, name_len);
    re_chan_t *c = re_chan_find(re, name, name_len, hash);
    if (!c)
        return; /* nobody here subscribes any more (an UNSUBSCRIBE on its way) */
    if (gw_presence_is_listener(name, name_len)) {
        if (c->state == RE_ACTIVE)
            (void)re_presence_on_event(re, c, data, len);
        return;
    }
    gw_redis_msg_t msg;
    gw_redis_msg_parse(data, len, &msg);
    uint64_t time_ms = msg.is_sequenced ? msg.time_ms : nl_wall_ms();
    gw_msg_t *m =
        gw_msg_new(name, name_len, hash, msg.offset, msg.epoch, msg.payload, msg.len, time_ms);
    if (!m) {
        re_count(&re->stats.lost, 1);
        return;
    }
    if (c->state == RE_ACTIVE) {
        /* Live, a message at or below the last offset is no duplicate of pub/sub (which
         * delivers once): Redis has given an offset out again. */
        if (!re_chan_deliver(re, c, m))
            re_chan_fence(re, c, true);
        gw_msg_unref(m);
        return;
    }
    re_pending_t *p = chan_pending(c);
    if (p && p->n_msgs == p->cap_msgs && p->cap_msgs < RE_PENDING_MAX) {
        uint32_t cap = p->cap_msgs ? p->cap_msgs * 2 : 16;
        gw_msg_t **v = realloc(p->msgs, sizeof(*v) * cap);
        if (v) {
            p->msgs = v;
            p->cap_msgs = cap;
        }
    }
    if (!p || p->n_msgs == p->cap_msgs) {
        re_count(&re->stats.lost, 1);
        gw_msg_unref(m);
        return;
    }
    p->msgs[p->n_msgs++] = m;
}

/* --- joining -------------------------------------------------------------------------------- */

/* herald_join's answer travels with the channel's name: the channel may be gone by then. */
typedef struct join_cmd_s {
    redis_engine_t *re;
    uint32_t len;
    char name[];
} join_cmd_t;

static void chan_became_active(redis_engine_t *re, re_chan_t *c)
{
    c->state = RE_ACTIVE;
    wait_remove(re, c);
    for (uint64_t mask = c->joining_mask; mask; mask &= mask - 1)
        re_answer_join(re, (uint32_t)__builtin_ctzll(mask), c->name, c->key.name_len, c->key.hash,
                       0, c->last_offset, c->epoch);
    c->joining_mask = 0;
    re_pending_t *p = c->pending;
    c->pending = NULL;
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_msgs; i++) {
        re_chan_deliver(re, c, p->msgs[i]);
        gw_msg_unref(p->msgs[i]);
    }
    p->n_msgs = 0;
    while (p->hist_head) {
        re_hist_req_t *req = p->hist_head;
        p->hist_head = req->next;
        re_chan_history(re, req);
    }
    pending_free(p);
}

static void chan_on_joined(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    join_cmd_t *cmd = arg;
    redis_engine_t *re = cmd->re;
    re_chan_t *c = re_chan_find(re, cmd->name, cmd->len, gw_sub_hash(cmd->name, cmd->len));
    free(cmd);
    if (!c)
        return;
    uint64_t epoch = 0;
    bool is_ok = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
                 reply->element[0]->type == REDIS_REPLY_INTEGER &&
                 reply->element[1]->type == REDIS_REPLY_STRING &&
                 proto_epoch_parse(reply->element[1]->str, &epoch) == 0;
    if (!is_ok) {
        /* Redis went away (or answered nonsense): a SUBSCRIBING channel waits for the next
         * confirmation, after the reconnect; the join timeout bounds the wait. */
        if (c->state == RE_JOINING)
            c->state = RE_SUBSCRIBING;
        return;
    }
    uint64_t latest = (uint64_t)reply->element[0]->integer;
    if (c->state == RE_JOINING) {
        c->epoch = epoch;
        c->last_offset = latest;
        chan_became_active(re, c);
    }
}

/* Joins wait here, in order, while the link has re_budget() commands in flight: a burst of
 * subscriptions (a reconnect storm, a node's 16,000 clients arriving at once) is paced by
 * Redis's replies instead of refused, and leaves the other half of the link to publishes.
 * Each entry is the herald_join's own argument, the channel's name: a channel gone or no
 * longer SUBSCRIBING by its turn is skipped. Emptied while the server is down: when it is
 * ready again, every channel whose SUBSCRIBE was confirmed asks again (re_chans_rejoin), and
 * the others at their confirmation. */
struct re_joins_s {
    join_cmd_t **q; /* a ring */
    uint32_t head;
    uint32_t n;
    uint32_t cap;
};

/* Sends herald_join for c: both keys (the stream is dropped with an epoch that expired). */
static int chan_send_join(redis_engine_t *re, re_chan_t *c, join_cmd_t *cmd)
{
    char meta[RE_KEY_MAX];
    char hist[RE_KEY_MAX];
    char candidate[17];
    if (gw_redis_key(meta, sizeof(meta), GW_REDIS_META_PREFIX, c->name, c->key.name_len) < 0 ||
        gw_redis_key(hist, sizeof(hist), GW_REDIS_HIST_PREFIX, c->name, c->key.name_len) < 0)
        return -EINVAL;
    proto_epoch_str(re_epoch_candidate(re, c->key.hash), candidate);
    const char *argv[] = {"FCALL", "herald_join", "2", meta, hist, candidate};
    int err = gw_redis_link_command(re_chan_shard(re, c)->link, chan_on_joined, cmd, 6, argv, NULL);
    if (err == 0)
        c->state = RE_JOINING;
    return err;
}

static bool joins_push(re_shard_t *sh, join_cmd_t *cmd)
{
    struct re_joins_s *j = sh->joins;
    if (!j && !(j = sh->joins = calloc(1, sizeof(*j))))
        return false;
    if (j->n == j->cap) {
        uint32_t cap = j->cap ? j->cap * 2 : 64;
        join_cmd_t **q = malloc(cap * sizeof(*q));
        if (!q)
            return false;
        for (uint32_t i = 0; i < j->n; i++)
            q[i] = j->q[(j->head + i) % j->cap];
        free(j->q);
        j->q = q;
        j->head = 0;
        j->cap = cap;
    }
    j->q[(j->head + j->n) % j->cap] = cmd;
    j->n++;
    return true;
}

static join_cmd_t *joins_pop(struct re_joins_s *j)
{
    join_cmd_t *cmd = j->q[j->head];
    j->head = (j->head + 1) % j->cap;
    j->n--;
    return cmd;
}

/* Asks the channel's server for its latest offset (herald_join), now or in its turn. */
static void chan_ask_latest(redis_engine_t *re, re_chan_t *c)
{
    join_cmd_t *cmd = malloc(sizeof(*cmd) + c->key.name_len + 1);
    if (!cmd)
        return; /* the join timeout bounds the wait */
    cmd->re = re;
    cmd->len = c->key.name_len;
    memcpy(cmd->name, c->name, c->key.name_len + 1);
    re_shard_t *sh = re_chan_shard(re, c);
    bool is_queue_empty = !sh->joins || sh->joins->n == 0;
    if (is_queue_empty && gw_redis_link_pending(sh->link) < re_budget(re) &&
        chan_send_join(re, c, cmd) == 0)
        return;
    if (!sh->is_ready || !joins_push(sh, cmd))
        free(cmd); /* the next confirmation asks again; the join timeout bounds the wait */
}

void re_chan_on_sub_state(gw_redis_sub_t *s, int err, void *arg)
{
    NL_UNUSED(s);
    re_shard_t *sh = arg;
    if (err == 0)
        return;
    /* Down: every channel of the server must see a confirmation again, those still joining
     * before they ask, the active ones before this node's publishes to them go out. */
    gw_chantab_t *t = &sh->re->chans;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
        re_chan_t *c = re_chan_of(gw_chantab_slot(t, i));
        if (c && c->shard == sh->index)
            c->is_subscribed = false;
    }
}

void re_chans_rejoin(redis_engine_t *re, uint32_t shard)
{
    for (re_chan_t *c = re->wait_head; c; c = c->wait_next)
        if (c->shard == shard && c->state == RE_SUBSCRIBING && c->is_subscribed &&
            !gw_presence_is_listener(c->name, c->key.name_len))
            chan_ask_latest(re, c);
}

void re_chans_flush_joins(redis_engine_t *re, uint32_t shard)
{
    re_shard_t *sh = &re->shards[shard];
    struct re_joins_s *j = sh->joins;
    while (j && j->n > 0) {
        if (!sh->is_ready) {
            free(joins_pop(j)); /* down: asked again at the next confirmation */
            continue;
        }
        if (gw_redis_link_pending(sh->link) >= re_budget(re))
            return;
        join_cmd_t *cmd = joins_pop(j);
        re_chan_t *c = re_chan_find(re, cmd->name, cmd->len, gw_sub_hash(cmd->name, cmd->len));
        if (!c || c->state != RE_SUBSCRIBING || chan_send_join(re, c, cmd) < 0)
            free(cmd);
    }
}

void re_chans_deinit_joins(redis_engine_t *re)
{
    for (uint32_t i = 0; i < re->n_shards; i++) {
        struct re_joins_s *j = re->shards[i].joins;
        while (j && j->n > 0)
            free(joins_pop(j));
        if (j)
            free(j->q);
        free(j);
        re->shards[i].joins = NULL;
    }
}

void re_chan_on_subscribed(gw_redis_sub_t *s, const char *pubsub, size_t pubsub_len, void *arg)
{
    NL_UNUSED(s);
    re_shard_t *sh = arg;
    redis_engine_t *re = sh->re;
    size_t len;
    const char *name = gw_redis_channel_of(pubsub, pubsub_len, &len);
    if (!name)
        return;
    re_chan_t *c = re_chan_find(re, name, len, gw_sub_hash(name, len));
    if (!c)
        return;
    c->is_subscribed = true;
    re_publish_release(re, sh->index);
    /* A listener channel carries events only: no offsets to ask for. */
    if (gw_presence_is_listener(name, len)) {
        if (c->state != RE_ACTIVE)
            chan_became_active(re, c);
        return;
    }
    /* An ACTIVE channel resubscribed after a reconnect has nothing to ask: the fence sent
     * when the server came back settled its epoch, and what went by unseen shows as a gap at
     * the next message (counted lost; its clients may recover it). */
    if (c->state == RE_SUBSCRIBING)
        chan_ask_latest(re, c);
}

void re_chan_join(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash)
{
    re_chan_t *c = re_chan_find(re, name, len, hash);
    if (!c)
        c = chan_new(re, name, len, hash);
    if (!c) {
        NL_LOG(NL_ERROR, "redis_join_failed", "err=%s", nl_strerror(-ENOMEM));
        re_answer_join(re, loop, name, len, hash, -ENOMEM, 0, 0);
        return;
    }
    c->loop_mask |= UINT64_C(1) << loop;
    if (c->state == RE_ACTIVE)
        re_answer_join(re, loop, c->name, c->key.name_len, c->key.hash, 0, c->last_offset,
                       c->epoch);
    else
        c->joining_mask |= UINT64_C(1) << loop;
}

void re_chan_leave(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash)
{
    re_chan_t *c = re_chan_find(re, name, len, hash);
    if (!c)
        return;
    c->loop_mask &= ~(UINT64_C(1) << loop);
    c->joining_mask &= ~(UINT64_C(1) << loop);
    if (c->loop_mask == 0)
        chan_free(re, c);
}

/* --- recovery requests (gw_engine_redis_recover.c answers them) ------------------------------ */

void re_chan_history(redis_engine_t *re, re_hist_req_t *req)
{
    re_chan_t *c = re_chan_find(re, req->chan, req->answer.chan_len, req->hash);
    if (!c || !(c->loop_mask & (UINT64_C(1) << req->loop_index))) {
        req->status = -ENOENT; /* the join failed, and its subscriber is gone with it */
        re_hist_answer(re, req);
        return;
    }
    if (c->state != RE_ACTIVE) {
        re_pending_t *p = chan_pending(c);
        if (!p) {
            req->status = -ENOMEM;
            re_hist_answer(re, req);
            return;
        }
        req->next = NULL;
        if (p->hist_tail)
            p->hist_tail->next = req;
        else
            p->hist_head = req;
        p->hist_tail = req;
        return;
    }
    re_recover(re, c, req);
}

/* --- housekeeping --------------------------------------------------------------------------- */

/* A join is given up (the clients get BUSY and retry) only when Redis cannot answer it: the
 * channel waited past redis_timeout while its server was down or its pub/sub connection was
 * (neither SUBSCRIBE nor herald_join can go through). While both are up Redis is alive by
 * the link's liveness rule, however slow, and the join waits its turn, up to RE_JOIN_MAX_MS
 * in all. */
#define RE_JOIN_MAX_MS 60000

static bool chan_can_join(redis_engine_t *re, const re_chan_t *c)
{
    const re_shard_t *sh = re_chan_shard(re, c);
    return sh->is_ready && gw_redis_link_state(gw_redis_sub_link(sh->sub)) == GW_REDIS_UP;
}

/* Fails c's waiting joins (-EAGAIN). Returns true when c was freed (no loop left in it). */
static bool chan_fail_joins(redis_engine_t *re, re_chan_t *c)
{
    re_count(&re->stats.join_timeouts, 1);
    NL_LOG(NL_WARN, "redis_join_timeout", "chan=%s server=%s", c->name, re_chan_shard(re, c)->name);
    for (uint64_t mask = c->joining_mask; mask; mask &= mask - 1)
        re_answer_join(re, (uint32_t)__builtin_ctzll(mask), c->name, c->key.name_len, c->key.hash,
                       -EAGAIN, 0, 0);
    c->loop_mask &= ~c->joining_mask;
    c->joining_mask = 0;
    chan_fail_waiting(re, c, -EAGAIN);
    if (c->loop_mask != 0)
        return false;
    chan_free(re, c);
    return true;
}

static void chans_expire_joins(redis_engine_t *re)
{
    uint64_t now_ms = nl_loop_now_ms(re->loop);
    uint64_t max_ms = re->timeout_ms * 10 > RE_JOIN_MAX_MS ? re->timeout_ms * 10 : RE_JOIN_MAX_MS;
    re_chan_t *next = NULL;
    for (re_chan_t *c = re->wait_head; c; c = next) {
        next = c->wait_next;
        uint64_t waited_ms = now_ms - c->since_ms;
        if (waited_ms <= re->timeout_ms)
            break; /* oldest first: the rest waited less */
        if (c->joining_mask == 0 || (chan_can_join(re, c) && waited_ms <= max_ms))
            continue;
        wait_remove(re, c);
        if (!chan_fail_joins(re, c))
            wait_add(re, c); /* other loops still in it: it waits again */
    }
}

static void chan_on_history_empty(gw_history_t *h, void *arg)
{
    NL_UNUSED(h);
    NL_UNUSED(arg);
    /* A channel here lives as long as its subscribers; an empty history waits for more. */
}

void re_chans_tick(redis_engine_t *re)
{
    chans_expire_joins(re);
    gw_history_store_sweep(&re->store, nl_now_ns(), chan_on_history_empty, re);
    atomic_store_explicit(&re->stats.history_channels, re->store.histories, memory_order_relaxed);
    atomic_store_explicit(&re->stats.history_messages, re->store.messages, memory_order_relaxed);
    atomic_store_explicit(&re->stats.history_bytes, re->store.bytes, memory_order_relaxed);
    atomic_store_explicit(&re->stats.history_max_bytes, re->store.max_bytes, memory_order_relaxed);
}

void re_chans_reconfigure(redis_engine_t *re, const gw_config_t *cfg)
{
    re->idem_window_ms = cfg->idempotency_window_ms;
    (void)gw_history_rules_parse(cfg->history_rules, &re->rules, NULL, 0);
    gw_history_store_set_max(&re->store, cfg->history_max_bytes);
    gw_chantab_t *t = &re->chans;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
        re_chan_t *c = re_chan_of(gw_chantab_slot(t, i));
        if (!c)
            continue;
        const gw_history_rule_t *r = gw_history_rules_match(&re->rules, c->name, c->key.name_len);
        if (!gw_history_rule_keeps(r)) {
            gw_history_free(&re->store, c->hist);
            c->hist = NULL;
        } else if (c->hist) {
            gw_history_set_rule(&re->store, c->hist, r);
        } else {
            (void)gw_history_new(&re->store, &c->hist, r, c);
        }
    }
}
