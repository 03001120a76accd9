/*
 * gw_engine_memory: the embedded engine for a single node. See gw_engine.h for the contract.
 *
 * Per-channel ordering without locks: every channel is owned by one IO loop, owner =
 * gw_sub_hash(channel) % loop count. The owner's shard holds the channel's last offset, its
 * epoch, and the bitmask of loops that have subscribers. Every operation on a channel is a
 * closure posted to its owner (or run there directly when the caller already is the owner),
 * so a channel's offsets are assigned by one thread, in one order, with no lock and no atomic.
 *
 * A publish: the owner assigns the next offset, stamps the wall-clock publish time, encodes
 * the Push once (gw_msg_new) and hands it to gw_fanout with the audience mask. The publisher's
 * answer goes back to its loop by post (or straight from the owner for the HTTP thread).
 *
 * A join from loop L: the owner sets L's bit, then answers L with the current offset and
 * epoch. Before posting the answer it flushes its pending batch for L, so the answer arrives
 * after every message published before the join and before every message published after it
 * (one poster's posts run in order). L's index drops what arrives while it is JOINING; those
 * messages predate the subscriber's SubscribeOk offset.
 *
 * Channel state lives while some loop is in the audience, or while the channel keeps history
 * ([history] rules) and that history holds messages. A publish to a channel that nobody
 * subscribes to and that keeps no history is answered with offset 1 in a fresh epoch and
 * leaves nothing behind: memory stays bounded by live subscriptions plus [history] max_bytes,
 * and the epoch tells a client the offsets restarted.
 *
 * History: the owner keeps the channel's messages (gw_history, references to the very messages
 * fan-out delivered) and answers a history request exactly like a join: it flushes its batch
 * for the asking loop, then posts the answer, so the answer lands after every message up to
 * its latest offset. Each shard has its own history store (cap = max_bytes / loops) and rules
 * copy, swapped by reconfigure on the shard's own loop; tick ages histories out about once a
 * second and forgets channels left with neither history nor subscribers.
 *
 * Presence and online status are the loops' own tables, gathered by gw_presence_mem, which
 * also keeps the last-seen times of users gone offline. A join/leave event travels like a
 * message, on its channel's listener channel: to the owner, which posts it to each loop of
 * the audience (events are few: no batching), so each loop sees a channel's events in one
 * order. Listener channels are engine channels like any other, but not counted as channels.
 */
#include "gw_engine_memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_recent.h"
#include "gw_presence_mem.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* 40 bytes before the name, like a gw_sub_entry_t and a gw_engine_join_t (see there). */
typedef struct mem_chan_s {
    uint64_t last_offset; /* 0: nothing published in this epoch yet */
    uint64_t epoch;
    uint64_t loop_mask; /* loops with subscribers */
    gw_history_t *hist; /* NULL: the channel keeps no history */
    gw_chankey_t key;
    char name[];
} mem_chan_t;

_Static_assert(offsetof(mem_chan_t, name) == offsetof(mem_chan_t, key) + sizeof(gw_chankey_t),
               "the name must follow the key");

/* One loop's channels. Only that loop's thread touches it. */
typedef struct mem_shard_s {
    gw_chantab_t tab;
    uint64_t published;
    uint64_t epoch_seq;
    gw_history_store_t store;
    gw_history_rules_t rules;
    uint64_t next_sweep_ns;
    uint64_t listener_channels; /* of tab.count, listener channels (not counted as channels) */
    uint64_t event_failures;    /* events lost to a failed post */
    /* Idempotency keys of the shard's channels: "channel NUL key" -> (offset, epoch), on the
     * loop's monotonic clock (ns), for [limits] idempotency_window; at most the shard's share
     * of idempotency_keys, the oldest going first. */
    gw_recent_t idem;
    uint64_t idem_duplicates;
} mem_shard_t;

/* How often tick ages histories out. */
#define MEM_SWEEP_INTERVAL_NS 1000000000ull

typedef struct mem_engine_s {
    gw_engine_t base;
    gw_engine_host_t host;
    gw_fanout_t *hub;
    uint32_t n_loops;
    uint64_t epoch_seed; /* random per node start */
    mem_shard_t *shards;
    gw_presence_mem_t *presence;
} mem_engine_t;

/* A fresh epoch: unique per (shard, sequence), unpredictable across node starts. */
static uint64_t mem_new_epoch(mem_engine_t *me, uint32_t shard)
{
    uint64_t seq = me->shards[shard].epoch_seq++;
    return gw_engine_epoch_mix(me->epoch_seed ^ ((uint64_t)shard << 56) ^ seq);
}

static mem_chan_t *chan_of(gw_chankey_t *k)
{
    return k ? (mem_chan_t *)((char *)k - offsetof(mem_chan_t, key)) : NULL;
}

static mem_chan_t *mem_find(mem_shard_t *sh, const char *name, size_t len, uint32_t hash)
{
    return chan_of(gw_chantab_find(&sh->tab, name, len, hash));
}

static uint32_t mem_owner(const mem_engine_t *me, uint32_t hash)
{
    return hash % me->n_loops;
}

/* A channel's state, with a history when the shard's rules give it one. Returns NULL without
 * memory. Thread: the shard's loop. */
static mem_chan_t *mem_chan_new(mem_engine_t *me, uint32_t shard, const char *name, size_t len,
                                uint32_t hash)
{
    mem_shard_t *sh = &me->shards[shard];
    mem_chan_t *c = calloc(1, sizeof(*c) + len + 1);
    if (!c)
        return NULL;
    memcpy(c->name, name, len);
    c->key.hash = hash;
    c->key.name_len = (uint16_t)len;
    c->epoch = mem_new_epoch(me, shard);
    const gw_history_rule_t *r = gw_history_rules_match(&sh->rules, name, len);
    if (gw_history_rule_keeps(r) && gw_history_new(&sh->store, &c->hist, r, c) < 0) {
        free(c);
        return NULL;
    }
    if (gw_chantab_insert(&sh->tab, &c->key) < 0) {
        gw_history_free(&sh->store, c->hist);
        free(c);
        return NULL;
    }
    sh->listener_channels += gw_presence_is_listener(name, len);
    return c;
}

/* Whether nothing needs c: no loop subscribes and its history (if any) is empty. */
static bool mem_chan_is_idle(const mem_chan_t *c)
{
    return c->loop_mask == 0 && (!c->hist || gw_history_is_empty(c->hist));
}

static void mem_chan_free(mem_shard_t *sh, mem_chan_t *c)
{
    sh->listener_channels -= gw_presence_is_listener(c->name, c->key.name_len);
    gw_chantab_remove(&sh->tab, &c->key);
    gw_history_free(&sh->store, c->hist);
    free(c);
}

/* --- publish ------------------------------------------------------------------------------ */

/* On the owner: a publish whose key has a record in its window is answered with the record,
 * and goes no further. */
/* "channel NUL key" of msg (a key, at most GW_ENGINE_KEY_MAX bytes) into buf; its length. */
#define MEM_IDEM_NAME_MAX (GW_CHANNEL_NAME_MAX_LIMIT + 1 + GW_ENGINE_KEY_MAX)

static size_t mem_idem_name(char buf[MEM_IDEM_NAME_MAX], const gw_engine_msg_t *msg)
{
    memcpy(buf, msg->chan, msg->chan_len);
    buf[msg->chan_len] = '\0';
    memcpy(buf + msg->chan_len + 1, msg->key, msg->key_len);
    return msg->chan_len + 1 + msg->key_len;
}

static bool mem_publish_is_duplicate(mem_shard_t *sh, const gw_engine_msg_t *msg,
                                     gw_engine_result_t *res)
{
    if (msg->key_len == 0 || gw_recent_count(&sh->idem) == 0)
        return false;
    char name[MEM_IDEM_NAME_MAX];
    size_t len = mem_idem_name(name, msg);
    gw_recent_val_t v;
    if (!gw_recent_get(&sh->idem, name, len, gw_chantab_hash(name, len), nl_now_ns(), &v))
        return false;
    res->offset = v.a;
    res->epoch = v.b;
    res->status = 0;
    res->is_duplicate = true;
    sh->idem_duplicates++;
    return true;
}

/* On the owner: an applied publish with a key leaves its record. Without memory for it the
 * publish stands (it went out) and a retry would go out again: logged. */
static void mem_publish_remember(mem_shard_t *sh, const gw_engine_msg_t *msg,
                                 const gw_engine_result_t *res)
{
    if (msg->key_len == 0 || sh->idem.max_records == 0 || res->status < 0)
        return;
    char name[MEM_IDEM_NAME_MAX];
    size_t len = mem_idem_name(name, msg);
    gw_recent_val_t v = {.a = res->offset, .b = res->epoch};
    int err = gw_recent_put(&sh->idem, name, len, gw_chantab_hash(name, len), &v, nl_now_ns());
    if (err < 0)
        NL_LOG(NL_WARN, "idempotency_key_lost", "err=%s", nl_strerror(err));
}

/* On the owner: assigns the offset and hands the message to the audience. */
static void mem_publish_apply(mem_engine_t *me, gw_fanout_loop_t *fl, const char *chan,
                              size_t chan_len, uint32_t hash, const void *payload, size_t len,
                              gw_engine_result_t *res)
{
    mem_shard_t *sh = &me->shards[fl->index];
    mem_chan_t *c = mem_find(sh, chan, chan_len, hash);
    /* A channel that keeps history gets its state at its first message, subscribed or not
     * (without memory for it, the message goes out as to any channel without state). */
    if (!c && gw_history_rule_keeps(gw_history_rules_match(&sh->rules, chan, chan_len)))
        c = mem_chan_new(me, fl->index, chan, chan_len, hash);
    uint64_t mask = 0;
    if (c) {
        res->offset = ++c->last_offset;
        res->epoch = c->epoch;
        mask = c->loop_mask;
    } else {
        res->offset = 1;
        res->epoch = mem_new_epoch(me, fl->index);
    }
    res->status = 0;
    sh->published++;
    bool is_kept = c && c->hist;
    if (mask == 0 && !is_kept)
        return;
    gw_msg_t *m =
        gw_msg_new(chan, chan_len, hash, res->offset, res->epoch, payload, len, nl_wall_ms());
    if (!m) {
        c->last_offset--; /* the offset was never seen by anyone: give it back */
        sh->published--;
        res->status = -ENOMEM;
        return;
    }
    if (is_kept)
        gw_history_add(&sh->store, c->hist, m, m->publish_ns);
    if (mask)
        gw_fanout_publish(fl, m, mask);
    gw_msg_unref(m);
}

static void mem_publish_here(mem_engine_t *me, gw_fanout_loop_t *fl, const gw_engine_msg_t *msg,
                             uint32_t hash, gw_engine_result_t *res)
{
    mem_shard_t *sh = &me->shards[fl->index];
    if (mem_publish_is_duplicate(sh, msg, res))
        return;
    mem_publish_apply(me, fl, msg->chan, msg->chan_len, hash, msg->payload, msg->len, res);
    mem_publish_remember(sh, msg, res);
}

/* On the owner loop: runs the publish, then answers where the publisher asked. */
static void mem_publish_run(void *arg)
{
    gw_engine_pub_t *req = arg;
    mem_engine_t *me = req->engine;
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    gw_engine_msg_t msg = gw_engine_pub_msg(req);
    mem_publish_here(me, fl, &msg, req->hash, &req->result);
    if (req->reply.loop == NULL || req->reply.loop == fl->loop) {
        gw_engine_pub_reply_run(req);
        return;
    }
    if (gw_fanout_post_to(me->hub, req->reply.loop, gw_engine_pub_reply_run, req) < 0) {
        /* The answer cannot travel; the publisher's loop would never hear. Answer here is not
         * allowed (wrong thread), so the reply is lost and logged. */
        NL_LOG(NL_ERROR, "publish_reply_lost", "err=%s", nl_strerror(-ENOMEM));
        free(req);
    }
}

static int mem_publish(gw_engine_t *e, const gw_engine_msg_t *msg, const gw_engine_reply_t *reply)
{
    mem_engine_t *me = (mem_engine_t *)e;
    uint32_t hash = gw_sub_hash(msg->chan, msg->chan_len);
    uint32_t owner = mem_owner(me, hash);
    gw_fanout_loop_t *cur = gw_fanout_here(me->hub);
    if (cur && cur->index == owner && (reply->loop == NULL || reply->loop == cur->loop)) {
        /* Already on the owner: no copy, no post; the answer runs before this returns. */
        gw_engine_result_t res = {0};
        mem_publish_here(me, cur, msg, hash, &res);
        reply->cb(reply, &res);
        return 0;
    }
    if (!cur && me->host.ops->is_stopping(me->host.arg))
        return -ESHUTDOWN;
    gw_engine_pub_t *req = gw_engine_pub_new(me, msg, hash, reply);
    if (!req)
        return -ENOMEM;
    int err = gw_fanout_post(me->hub, owner, mem_publish_run, req);
    if (err < 0)
        free(req);
    return err;
}

/* --- join and leave ----------------------------------------------------------------------- */

/* On the owner: adds the loop to the audience and answers it. */
static void mem_join_run(void *arg)
{
    gw_engine_join_t *req = arg;
    mem_engine_t *me = req->engine;
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    mem_shard_t *sh = &me->shards[fl->index];
    mem_chan_t *c = mem_find(sh, req->chan, req->chan_len, req->hash);
    if (!c)
        c = mem_chan_new(me, fl->index, req->chan, req->chan_len, req->hash);
    if (c) {
        c->loop_mask |= UINT64_C(1) << req->loop_index;
        req->offset = c->last_offset;
        req->epoch = c->epoch;
    } else {
        req->status = -ENOMEM;
    }
    gw_engine_join_answer(me->hub, &fl->out, req);
}

/* On the owner: takes the loop out of the audience; the last one out frees the channel,
 * unless its history still holds messages (then the sweep frees it once they age out). */
static void mem_leave_run(void *arg)
{
    gw_engine_join_t *req = arg;
    mem_engine_t *me = req->engine;
    mem_shard_t *sh = &me->shards[gw_fanout_loop_current()->index];
    mem_chan_t *c = mem_find(sh, req->chan, req->chan_len, req->hash);
    if (c) {
        c->loop_mask &= ~(UINT64_C(1) << req->loop_index);
        if (mem_chan_is_idle(c))
            mem_chan_free(sh, c);
    }
    free(req);
}

static void mem_post_join_leave(gw_engine_t *e, uint32_t loop_index, const char *chan,
                                size_t chan_len, uint32_t hash, nl_loop_post_cb fn)
{
    mem_engine_t *me = (mem_engine_t *)e;
    gw_engine_join_t *req = gw_engine_join_new(me, loop_index, chan, chan_len, hash);
    if (req && gw_fanout_post(me->hub, mem_owner(me, hash), fn, req) == 0)
        return;
    free(req);
    NL_LOG(NL_ERROR, "engine_post_failed", "op=%s err=%s", fn == mem_join_run ? "join" : "leave",
           nl_strerror(-ENOMEM));
    /* A join must be answered, or its subscribers wait forever. */
    if (fn == mem_join_run)
        gw_sub_joined(&me->hub->loops[loop_index]->subs, chan, chan_len, hash, -ENOMEM, 0, 0);
}

static void mem_join(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                     uint32_t hash)
{
    mem_post_join_leave(e, loop_index, chan, chan_len, hash, mem_join_run);
}

static void mem_leave(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                      uint32_t hash)
{
    mem_post_join_leave(e, loop_index, chan, chan_len, hash, mem_leave_run);
}

/* --- presence and online status (gw_presence_mem) ---------------------------------------- */

static int mem_presence(gw_engine_t *e, const char *chan, size_t chan_len,
                        const gw_engine_reply_t *reply)
{
    return gw_presence_mem_channel(((mem_engine_t *)e)->presence, chan, chan_len, reply);
}

static int mem_online(gw_engine_t *e, const char *user, size_t len, const gw_engine_reply_t *reply)
{
    return gw_presence_mem_user(((mem_engine_t *)e)->presence, user, len, reply);
}

static int mem_online_counts(gw_engine_t *e, const gw_engine_reply_t *reply)
{
    return gw_presence_mem_counts(((mem_engine_t *)e)->presence, reply);
}

/* Nothing to record: the loop's own table has the user (gw_presence_mem reads it there). */
static void mem_user_online(gw_engine_t *e, uint32_t loop_index, const char *user, size_t len)
{
    NL_UNUSED(e);
    NL_UNUSED(loop_index);
    NL_UNUSED(user);
    NL_UNUSED(len);
}

static void mem_user_offline(gw_engine_t *e, uint32_t loop_index, const char *user, size_t len,
                             uint64_t at_ms)
{
    gw_presence_mem_offline(((mem_engine_t *)e)->presence, loop_index, user, len, at_ms);
}

/* The batch's users were stamped in their sessions as it was made (gw_presence), which is
 * where this engine reads last seen; what is left here is ageing the last-seen records. */
static void mem_refresh(gw_engine_t *e, const gw_presence_batch_t *batch)
{
    gw_presence_mem_refresh(((mem_engine_t *)e)->presence, batch);
}

/* An event on its way to its listener channel's owner. */
typedef struct mem_event_s {
    mem_engine_t *me;
    gw_event_t *ev; /* the post's reference */
} mem_event_t;

/* On the listener channel's owner: to every loop of its audience, in the owner's order. */
static void mem_event_run(void *arg)
{
    mem_event_t *me_ev = arg;
    mem_engine_t *me = me_ev->me;
    gw_event_t *ev = me_ev->ev;
    free(me_ev);
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    mem_shard_t *sh = &me->shards[fl->index];
    mem_chan_t *c = mem_find(sh, ev->chan, ev->chan_len, ev->hash);
    uint64_t others = c ? c->loop_mask & ~(UINT64_C(1) << fl->index) : 0;
    while (others) {
        uint32_t target = (uint32_t)__builtin_ctzll(others);
        others &= others - 1;
        if (gw_fanout_post(me->hub, target, gw_presence_event_run, gw_event_ref(ev)) < 0) {
            gw_event_unref(ev);
            sh->event_failures++;
        }
    }
    if (c && (c->loop_mask & (UINT64_C(1) << fl->index)))
        gw_presence_event_deliver(fl, ev);
    gw_event_unref(ev);
}

/* Always posted, to the owner even when that is this loop: the caller may be inside a
 * delivery, which an event delivered here and now would change under it. */
static void mem_event(gw_engine_t *e, gw_event_t *ev)
{
    mem_engine_t *me = (mem_engine_t *)e;
    mem_event_t *me_ev = malloc(sizeof(*me_ev));
    if (me_ev) {
        *me_ev = (mem_event_t){.me = me, .ev = gw_event_ref(ev)};
        if (gw_fanout_post(me->hub, mem_owner(me, ev->hash), mem_event_run, me_ev) == 0)
            return;
        gw_event_unref(ev);
        free(me_ev);
    }
    me->shards[gw_fanout_loop_current()->index].event_failures++;
}

/* --- history ----------------------------------------------------------------------------- */

/* Takes references to h's messages after since into req (RECOVERED), or says TOO_LARGE. */
static void mem_history_take(gw_engine_hist_t *req, const gw_history_t *h)
{
    gw_engine_history_t *a = &req->answer;
    gw_msg_t *const *part1;
    gw_msg_t *const *part2;
    uint32_t n1;
    uint32_t n;
    uint64_t bytes;
    gw_history_since(h, a->since, &part1, &n1, &part2, &n, &bytes);
    if (bytes > req->max_bytes) {
        a->result = GW_RECOVERY_TOO_LARGE;
        return;
    }
    req->msgs = malloc(sizeof(*req->msgs) * (n ? n : 1));
    if (!req->msgs) {
        req->status = -ENOMEM;
        return;
    }
    req->cap_msgs = n ? n : 1;
    for (uint32_t i = 0; i < n; i++)
        req->msgs[req->n_msgs++] = gw_msg_ref(i < n1 ? part1[i] : part2[i - n1]);
    a->result = GW_RECOVERY_RECOVERED;
}

/* On the owner: what the history holds after the client's offset. */
static void mem_history_answer(gw_engine_hist_t *req, mem_shard_t *sh, mem_chan_t *c)
{
    gw_engine_history_t *a = &req->answer;
    a->latest = c->last_offset;
    a->epoch = c->epoch;
    a->is_recoverable = c->hist != NULL;
    if (req->epoch != c->epoch) {
        a->result = c->hist ? GW_RECOVERY_EPOCH_CHANGED : GW_RECOVERY_NO_HISTORY;
    } else if (a->since == a->latest) {
        a->result = GW_RECOVERY_RECOVERED; /* nothing missed */
    } else if (!c->hist) {
        a->result = GW_RECOVERY_NO_HISTORY;
    } else {
        gw_history_trim_age(&sh->store, c->hist, nl_now_ns());
        if (a->since > a->latest || !gw_history_covers(c->hist, a->since, a->latest))
            a->result = GW_RECOVERY_NOT_COVERED;
        else
            mem_history_take(req, c->hist);
    }
}

/* On the owner: answers the asking loop, after the messages already batched for it. */
static void mem_history_run(void *arg)
{
    gw_engine_hist_t *req = arg;
    mem_engine_t *me = req->engine;
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    mem_shard_t *sh = &me->shards[fl->index];
    mem_chan_t *c = mem_find(sh, req->chan, req->answer.chan_len, req->hash);
    /* The asking loop joined the channel before it asked, so the state exists unless that
     * join failed (and the subscriber is gone with it). */
    if (c)
        mem_history_answer(req, sh, c);
    else
        req->status = -ENOENT;
    gw_engine_hist_answer(me->hub, &fl->out, req);
}

static int mem_history(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                       uint32_t hash, uint64_t since, uint64_t epoch, uint64_t max_bytes,
                       const gw_engine_reply_t *reply)
{
    mem_engine_t *me = (mem_engine_t *)e;
    gw_fanout_loop_t *fl = gw_fanout_here(me->hub);
    NL_ASSERT(fl && fl->index == loop_index && reply->loop == fl->loop);
    gw_engine_hist_t *req =
        gw_engine_hist_new(me, loop_index, chan, chan_len, hash, since, epoch, max_bytes, reply);
    if (!req)
        return -ENOMEM;
    /* Posted even to this very loop: the join it follows was posted too, and must run first. */
    int err = gw_fanout_post(me->hub, mem_owner(me, hash), mem_history_run, req);
    if (err < 0)
        free(req);
    return err;
}

static bool mem_is_recoverable(gw_engine_t *e, uint32_t loop_index, const char *chan,
                               size_t chan_len)
{
    mem_engine_t *me = (mem_engine_t *)e;
    return gw_history_rule_keeps(
        gw_history_rules_match(&me->shards[loop_index].rules, chan, chan_len));
}

/* The sweep found h empty: its channel goes unless some loop still subscribes. */
static void mem_on_history_empty(gw_history_t *h, void *arg)
{
    mem_chan_t *c = h->owner;
    if (c->loop_mask == 0)
        mem_chan_free(arg, c);
}

static void mem_tick(gw_engine_t *e, uint32_t loop_index)
{
    mem_engine_t *me = (mem_engine_t *)e;
    mem_shard_t *sh = &me->shards[loop_index];
    uint64_t now_ns = nl_now_ns();
    gw_recent_trim(&sh->idem, now_ns);
    if (sh->store.histories == 0)
        return;
    if (now_ns < sh->next_sweep_ns)
        return;
    sh->next_sweep_ns = now_ns + MEM_SWEEP_INTERVAL_NS;
    gw_history_store_sweep(&sh->store, now_ns, mem_on_history_empty, sh);
}

/* Gives c the history its rule now asks for (a new one, a changed one, or none). Returns
 * whether c is left idle (the caller frees it after the walk). */
static bool mem_chan_apply_rules(mem_shard_t *sh, mem_chan_t *c)
{
    const gw_history_rule_t *r = gw_history_rules_match(&sh->rules, c->name, c->key.name_len);
    if (!gw_history_rule_keeps(r)) {
        gw_history_free(&sh->store, c->hist);
        c->hist = NULL;
    } else if (c->hist) {
        gw_history_set_rule(&sh->store, c->hist, r);
    } else if (gw_history_new(&sh->store, &c->hist, r, c) < 0) {
        NL_LOG(NL_WARN, "history_reconfigure_failed", "err=%s", nl_strerror(-ENOMEM));
    }
    return mem_chan_is_idle(c);
}

static void mem_shard_configure(mem_engine_t *me, mem_shard_t *sh, const gw_config_t *cfg)
{
    /* gw_config_validate parsed the same text already; a failure here leaves no rules. */
    (void)gw_history_rules_parse(cfg->history_rules, &sh->rules, NULL, 0);
    gw_history_store_set_max(&sh->store, cfg->history_max_bytes / me->n_loops);
    uint32_t keys = (uint32_t)((cfg->idempotency_keys + me->n_loops - 1) / me->n_loops);
    gw_recent_set_limits(&sh->idem, keys, cfg->idempotency_window_ms * 1000000ull);
}

static void mem_reconfigure(gw_engine_t *e, uint32_t loop_index, const gw_config_t *cfg)
{
    mem_engine_t *me = (mem_engine_t *)e;
    mem_shard_t *sh = &me->shards[loop_index];
    mem_shard_configure(me, sh, cfg);
    /* Channels left idle are collected first: removing from the table while walking its slots
     * would move entries under the walk. */
    mem_chan_t **idle = NULL;
    size_t n_idle = 0;
    size_t cap_idle = 0;
    for (uint32_t k = 0; sh->tab.slots && k <= sh->tab.mask; k++) {
        mem_chan_t *c = chan_of(gw_chantab_slot(&sh->tab, k));
        if (!c || !mem_chan_apply_rules(sh, c))
            continue;
        if (n_idle == cap_idle) {
            size_t cap = cap_idle ? cap_idle * 2 : 64;
            mem_chan_t **v = realloc(idle, cap * sizeof(*v));
            if (!v)
                continue; /* kept until its next leave or sweep */
            idle = v;
            cap_idle = cap;
        }
        idle[n_idle++] = c;
    }
    for (size_t i = 0; i < n_idle; i++)
        mem_chan_free(sh, idle[i]);
    free(idle);
}

static void mem_loop_stats(gw_engine_t *e, uint32_t loop_index, gw_engine_stats_t *out)
{
    mem_engine_t *me = (mem_engine_t *)e;
    const mem_shard_t *sh = &me->shards[loop_index];
    out->channels += sh->tab.count - sh->listener_channels;
    out->published += sh->published;
    out->last_seen_records += gw_presence_mem_records(me->presence, loop_index);
    out->history_channels += sh->store.histories;
    out->history_messages += sh->store.messages;
    out->history_bytes += sh->store.bytes;
    out->history_max_bytes += sh->store.max_bytes;
    for (int r = 0; r < GW_HISTORY_EVICT_REASONS; r++)
        out->history_evicted[r] += sh->store.evicted[r];
    out->event_failures += sh->event_failures;
    out->idempotency_keys += gw_recent_count(&sh->idem);
    out->idempotency_duplicates += sh->idem_duplicates;
    out->idempotency_evicted += sh->idem.evicted;
}

static bool mem_is_ready(const gw_engine_t *e)
{
    NL_UNUSED(e);
    return true;
}

static void mem_free(gw_engine_t *e)
{
    mem_engine_t *me = (mem_engine_t *)e;
    for (uint32_t i = 0; i < me->n_loops; i++) {
        gw_chantab_t *t = &me->shards[i].tab;
        for (uint32_t k = 0; t->slots && k <= t->mask; k++) {
            mem_chan_t *c = chan_of(gw_chantab_slot(t, k));
            if (c)
                gw_history_free(&me->shards[i].store, c->hist);
            free(c);
        }
        gw_chantab_deinit(t);
        gw_recent_deinit(&me->shards[i].idem);
    }
    free(me->shards);
    gw_presence_mem_free(me->presence);
    free(me);
}

static const gw_engine_ops_t mem_ops = {
    .name = "memory",
    .publish = mem_publish,
    .join = mem_join,
    .leave = mem_leave,
    .presence = mem_presence,
    .online = mem_online,
    .online_counts = mem_online_counts,
    .user_online = mem_user_online,
    .user_offline = mem_user_offline,
    .refresh = mem_refresh,
    .event = mem_event,
    .history = mem_history,
    .is_recoverable = mem_is_recoverable,
    .tick = mem_tick,
    .reconfigure = mem_reconfigure,
    .loop_stats = mem_loop_stats,
    .is_ready = mem_is_ready,
    .free = mem_free,
};

int gw_engine_memory_new(gw_engine_t **out, const gw_engine_host_t *host)
{
    mem_engine_t *me = calloc(1, sizeof(*me));
    if (!me)
        return -ENOMEM;
    me->base.ops = &mem_ops;
    me->host = *host;
    me->hub = host->fanout;
    me->n_loops = host->fanout->n_loops;
    me->epoch_seed = gw_engine_epoch_seed();
    me->shards = calloc(me->n_loops, sizeof(*me->shards));
    if (!me->shards)
        goto fail;
    for (uint32_t i = 0; i < me->n_loops; i++) {
        if (gw_chantab_init(&me->shards[i].tab) < 0 || gw_recent_init(&me->shards[i].idem, 0, 0) < 0)
            goto fail;
        gw_history_store_init(&me->shards[i].store, 0);
        mem_shard_configure(me, &me->shards[i], host->cfg);
    }
    if (gw_presence_mem_new(&me->presence, &me->host) < 0)
        goto fail;
    *out = &me->base;
    return 0;
fail:
    if (me->shards)
        mem_free(&me->base);
    else
        free(me);
    return -ENOMEM;
}
