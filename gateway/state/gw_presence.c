/*
 * gw_presence: a loop's presence state, events and refresh batches. See gw_state.h.
 *
 * A refresh batch is the only periodic work, made by the loop's refresh timer (the node's):
 * every [presence] refresh_interval it walks the loop's users once, stamps the sessions that
 * read a frame since the last walk, and if any did, makes the one engine call of the interval
 * with gw_presence_batch_make's batch. A ping costs a flag store, whatever the number of pings;
 * a walk costs one key read per user of the loop, prefetched (gw_online_foreach).
 */
#include "gw_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_fanout.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

size_t gw_presence_listen_name(char *out, const char *chan, size_t len)
{
    out[0] = GW_PRESENCE_LISTEN_PREFIX;
    memcpy(out + 1, chan, len);
    return len + 1;
}

uint64_t gw_presence_stamp_wall_ms(const gw_presence_loop_t *pl, uint16_t stamp)
{
    int64_t ms = (int64_t)gw_online_stamp_ms(stamp, nl_now_ms()) + pl->wall_offset_ms;
    return ms > 0 ? (uint64_t)ms : 0;
}

typedef struct users_walk_s {
    gw_online_list_t *out;
    int err;
} users_walk_t;

static void users_add(const gw_online_user_t *u, void *arg)
{
    users_walk_t *w = arg;
    const gw_chankey_t *k = u->conns[0];
    long off = w->err < 0
                   ? 0
                   : gw_online_list_add(w->out, gw_chankey_name(u->conns[0]), k->name_len, k->hash);
    if (off < 0)
        w->err = (int)off;
}

int gw_presence_loop_users(const gw_presence_loop_t *pl, gw_online_list_t *out)
{
    users_walk_t w = {.out = out, .err = 0};
    gw_online_foreach(&pl->online, users_add, &w);
    return w.err;
}

/* --- refresh batches ---------------------------------------------------------------------- */

gw_presence_batch_t gw_presence_batch_make(const gw_presence_loop_t *pl, uint32_t loop_index,
                                           uint16_t stamp, uint32_t n_users)
{
    return (gw_presence_batch_t){
        .loop_index = loop_index,
        .n_users = n_users,
        .now_ms = gw_presence_stamp_wall_ms(pl, stamp),
        .online = &pl->online,
        .stamp = stamp,
    };
}

typedef struct batch_walk_s {
    const gw_presence_batch_t *b;
    void (*fn)(const gw_presence_batch_item_t *it, void *arg);
    void *arg;
} batch_walk_t;

/* A user is in the batch when one of its connections carries the batch's stamp. */
static void batch_user(const gw_online_user_t *u, void *arg)
{
    batch_walk_t *w = arg;
    for (uint32_t i = 0; i < u->n; i++) {
        if (u->conns[i]->user != w->b->stamp)
            continue;
        gw_presence_batch_item_t it = {
            .user = gw_chankey_name(u->conns[0]),
            .user_len = u->conns[0]->name_len,
            .last_seen_ms = w->b->now_ms,
            .connections = u->n,
        };
        w->fn(&it, w->arg);
        return;
    }
}

void gw_presence_batch_foreach(const gw_presence_batch_t *b,
                               void (*fn)(const gw_presence_batch_item_t *it, void *arg), void *arg)
{
    batch_walk_t w = {.b = b, .fn = fn, .arg = arg};
    gw_online_foreach(b->online, batch_user, &w);
}

int gw_presence_loop_init(gw_presence_loop_t *pl)
{
    /* Listener channels are told from channels by their first byte alone. */
    char prefix = GW_PRESENCE_LISTEN_PREFIX;
    NL_ASSERT(gw_channel_name_check(&prefix, 1, 0) != GW_CHANNEL_OK);
    pl->last_stamp = 0;
    pl->wall_offset_ms = (int64_t)nl_wall_ms() - (int64_t)nl_now_ms();
    return gw_online_init(&pl->online);
}

void gw_presence_loop_deinit(gw_presence_loop_t *pl)
{
    gw_online_deinit(&pl->online);
}

/* --- events ------------------------------------------------------------------------------- */

gw_event_t *gw_event_new(const char *chan, size_t len, bool is_join, const gw_event_client_t *who,
                         uint32_t subject_loop, uint64_t subject_conn)
{
    if (len + 1 > UINT16_MAX)
        return NULL;
    gw_event_t *ev = malloc(sizeof(*ev) + len + 2);
    if (!ev)
        return NULL;
    ev->chan_len = (uint16_t)gw_presence_listen_name(ev->chan, chan, len);
    ev->chan[ev->chan_len] = '\0';
    ev->hash = gw_sub_hash(ev->chan, ev->chan_len);
    ev->subject_conn = subject_conn;
    ev->subject_loop = subject_loop;
    /* Packing only reads the strings; the channel is the listener name without its prefix. */
    Herald__ClientInfo info = HERALD__CLIENT_INFO__INIT;
    info.user_id = (char *)(uintptr_t)who->user;
    info.client_id = (char *)(uintptr_t)who->client_id;
    info.connected_at_ms = who->connected_at_ms;
    Herald__ClientInfo *list[1] = {&info};
    Herald__PresenceEvent pe = HERALD__PRESENCE_EVENT__INIT;
    pe.channel = ev->chan + 1;
    if (is_join) {
        pe.n_joined = 1;
        pe.joined = list;
    } else {
        pe.n_left = 1;
        pe.left = list;
    }
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_PRESENCE_EVENT;
    f.presence_event = &pe;
    ev->blocks.tcp = proto_frame_block(&f);
    atomic_init(&ev->blocks.ws, NULL);
    if (!ev->blocks.tcp) {
        free(ev);
        return NULL;
    }
    atomic_init(&ev->refs, 1);
    return ev;
}

gw_event_t *gw_event_from_frame(const char *chan, size_t len, const void *frame, size_t n,
                                uint32_t subject_loop, uint64_t subject_conn)
{
    if (len > UINT16_MAX - 1)
        return NULL;
    gw_event_t *ev = malloc(sizeof(*ev) + len + 1);
    if (!ev)
        return NULL;
    memcpy(ev->chan, chan, len);
    ev->chan[len] = '\0';
    ev->chan_len = (uint16_t)len;
    ev->hash = gw_sub_hash(chan, len);
    ev->subject_conn = subject_conn;
    ev->subject_loop = subject_loop;
    ev->blocks.tcp = nl_block_new(n);
    atomic_init(&ev->blocks.ws, NULL);
    if (!ev->blocks.tcp) {
        free(ev);
        return NULL;
    }
    memcpy(nl_block_data(ev->blocks.tcp), frame, n);
    atomic_init(&ev->refs, 1);
    return ev;
}

gw_event_t *gw_event_ref(gw_event_t *ev)
{
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    return ev;
}

void gw_event_unref(gw_event_t *ev)
{
    /* acq_rel, as gw_msg_unref: the last holder sees every other holder's reads done. */
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
        return;
    gw_frame_blocks_deinit(&ev->blocks);
    free(ev);
}

void gw_presence_event_deliver(gw_fanout_loop_t *fl, gw_event_t *ev)
{
    uint64_t skip = ev->subject_loop == fl->index ? ev->subject_conn : 0;
    (void)gw_fanout_deliver_event(fl, ev->chan, ev->chan_len, ev->hash, &ev->blocks, skip);
}

void gw_presence_event_run(void *arg)
{
    gw_event_t *ev = arg;
    gw_presence_event_deliver(gw_fanout_loop_current(), ev);
    gw_event_unref(ev);
}
