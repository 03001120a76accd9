/*
 * gw_session_presence: a session's side of online status and presence (gw_state.h): it
 * joins its loop's online table at authentication and leaves it when it starts closing; its
 * subscriptions become visible at their SubscribeOk and stop being so at Unsubscribe or when
 * it goes offline, each change a join or leave event when the node has listeners; it answers
 * PresenceRequest; and it gives each loop's share of queries and refresh batches.
 *
 * Counting, always while the session is online (nothing counts once gw_session_offline cleared
 * IS_ONLINE, which uncounts what the session still holds):
 *   - Visible subscriptions (gw_stats' presence_entries) go up at a SubscribeOk and down when
 *     a subscription past its SubscribeOk goes. The ACTIVE slots of a session going offline
 *     are exactly the counted ones: a slot becomes ACTIVE only at a SubscribeOk (gw_sub answers
 *     every member of a JOINING entry, and an add to an ACTIVE one answers at once).
 *   - Listener subscriptions (presence_listener_subs and the node's presence_listeners, the
 *     gate) count from the moment the slot is added, joining or not, until it goes. Counting
 *     them only once the engine answered their join would let the Subscribe's SubscribeOk go
 *     out while the node still counts no listener, and a join right after it would build no
 *     event. A joining slot's route is on its way to the engine before that SubscribeOk, so
 *     every event built after it reaches the loop after the join's answer.
 *
 * A listener subscription is the session's slot in the listener channel's entry, added with
 * request id 0, which no request carries (PROTOCOL.md: ids are nonzero): a failed join of a
 * listener channel is told apart by it (for a session that ever listened) and answered to
 * nobody (the Subscribe's own channel answers the request). A client that sends a Subscribe
 * with id 0 anyway, and whose join then fails for want of memory, gets no answer to it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_engine.h"
#include "gw_node_int.h"
#include "gw_state.h"
#include "gw_session.h"
#include "gw_session_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* The request id of listener subscriptions in the index (see the header comment). */
#define LISTENER_REQ_ID 0u

static int client_id_of(const gw_loop_t *lp, const gw_session_t *s, char *out, size_t cap)
{
    return snprintf(out, cap, "%s-%" PRIu64, lp->node->node_id, nl_conn_id(s->member.conn));
}

/* --- online ------------------------------------------------------------------------------- */

void gw_session_online(gw_loop_t *lp, gw_session_t *s)
{
    s->user_hash = gw_online_hash(s->data, s->user_len);
    s->user_seen = gw_online_stamp(nl_loop_now_ms(lp->fo.loop));
    int rc = gw_online_add(&lp->presence.online, &s->user_key);
    if (rc < 0) {
        char q[NL_LOG_QUOTE_MAX];
        NL_LOG(NL_WARN, "online_add_failed", "conn=%" PRIu64 " user=%s err=%s",
               nl_conn_id(s->member.conn), gw_session_user_quoted(s, q), nl_strerror(rc));
        return;
    }
    s->flags |= GW_SESSION_IS_ONLINE;
    if (rc == 1)
        lp->node->engine->ops->user_online(lp->node->engine, lp->fo.index, s->data, s->user_len);
}

/* Hands an event that goes out to the engine, which takes its own reference. */
static void presence_publish(gw_loop_t *lp, gw_event_t *ev, bool is_join)
{
    if (is_join)
        lp->stats.presence_joins++;
    else
        lp->stats.presence_leaves++;
    lp->node->engine->ops->event(lp->node->engine, ev);
}

static void gate_emit(gw_event_t *ev, bool is_join, void *arg)
{
    presence_publish(arg, ev, is_join);
    gw_event_unref(ev);
}

/* Every [presence] event_window while the gate holds records: what it held goes out. */
static void gate_on_tick(nl_timer_t *t, void *arg)
{
    gw_loop_t *lp = arg;
    gw_evgate_tick(&lp->evgate, gate_emit, lp);
    if (gw_evgate_count(&lp->evgate) == 0)
        nl_timer_stop(t);
}

/* The gate's window runs while it holds records (an idle loop does not wake for it). The
 * timer is made once, at the loop's first event, and closed with the loop. */
static void gate_start(gw_loop_t *lp)
{
    if (lp->evgate_timer && nl_timer_is_active(lp->evgate_timer))
        return;
    if (!lp->evgate_timer && nl_timer_new(&lp->evgate_timer, lp->fo.loop, gate_on_tick, lp) < 0) {
        lp->evgate_timer = NULL;
        return;
    }
    uint64_t window_ms = gw_loop_cfg(lp)->presence_event_window_ms;
    (void)nl_timer_start(lp->evgate_timer, window_ms, window_ms);
}

/* Publishes "s joined / left name[0..len)" to the channel's listeners through the engine,
 * through the loop's gate (gw_evgate): a burst of one client's changes in a channel goes out
 * as its first event and the net change per window. */
static void presence_emit(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len,
                          bool is_join)
{
    char client_id[GW_CONFIG_NAME_MAX + 24];
    client_id_of(lp, s, client_id, sizeof(client_id));
    gw_event_client_t who = {
        .user = gw_session_user(s),
        .client_id = client_id,
        .connected_at_ms = (uint64_t)s->auth_s * 1000u,
    };
    gw_event_t *ev =
        gw_event_new(name, len, is_join, &who, lp->fo.index, nl_conn_id(s->member.conn));
    if (!ev) {
        lp->stats.presence_event_failures++;
        return;
    }
    ev = gw_evgate_offer(&lp->evgate, ev, is_join);
    lp->stats.presence_events_coalesced = lp->evgate.coalesced;
    if (gw_evgate_count(&lp->evgate) > 0)
        gate_start(lp);
    if (!ev)
        return;
    presence_publish(lp, ev, is_join);
    gw_event_unref(ev);
}

/* Tells an engine shared by nodes that s is (or is no longer) in name[0..len). */
static void presence_record(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len,
                            bool is_in)
{
    gw_engine_t *engine = lp->node->engine;
    if (is_in ? !engine->ops->presence_add : !engine->ops->presence_remove)
        return;
    char client_id[GW_CONFIG_NAME_MAX + 24];
    client_id_of(lp, s, client_id, sizeof(client_id));
    if (!is_in) {
        engine->ops->presence_remove(engine, lp->fo.index, name, len, client_id);
        return;
    }
    gw_presence_client_t who = {
        .user = gw_session_user(s),
        .client_id = client_id,
        .connected_at_ms = (uint64_t)s->auth_s * 1000u,
    };
    engine->ops->presence_add(engine, lp->fo.index, name, len, &who);
}

static void listener_count(gw_loop_t *lp, int delta)
{
    lp->stats.presence_listener_subs += (uint64_t)(int64_t)delta;
    if (delta > 0)
        atomic_fetch_add_explicit(&lp->node->presence_listeners, 1, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&lp->node->presence_listeners, 1, memory_order_relaxed);
}

/* Whether presence sees s in e: its SubscribeOk went out (the entry is live here and s is not
 * still waiting for its history answer). */
static bool session_is_visible_in(const gw_session_t *s, const gw_sub_entry_t *e)
{
    return gw_sub_entry_is_active(e) && !gw_sub_set_is_recovering(&s->member, e);
}

/* Whether join/leave events may have an audience anywhere: an engine shared by nodes may have
 * listeners on another node; otherwise the node's own count says. */
static bool presence_has_listeners(const gw_loop_t *lp)
{
    return lp->node->engine->ops->is_shared ||
           atomic_load_explicit(&lp->node->presence_listeners, memory_order_relaxed) > 0;
}

void gw_session_offline(gw_loop_t *lp, gw_session_t *s)
{
    if (!(s->flags & GW_SESSION_IS_ONLINE))
        return;
    s->flags &= (uint8_t) ~(GW_SESSION_IS_ONLINE | GW_SESSION_IS_SEEN);
    if (gw_online_remove(&lp->presence.online, &s->user_key) == 1)
        lp->node->engine->ops->user_offline(lp->node->engine, lp->fo.index, s->data, s->user_len,
                                            nl_wall_ms());
    /* Listener slots first: a session that was the node's only listener sends no leave event
     * that nobody could hear. */
    uint32_t n = gw_sub_set_count(&s->member);
    uint32_t visible = 0;
    for (uint32_t i = 0; i < n; i++) {
        const gw_sub_entry_t *e = gw_sub_set_entry(&s->member, i);
        size_t len;
        const char *name = gw_sub_entry_name(e, &len);
        if (gw_presence_is_listener(name, len))
            listener_count(lp, -1);
        else
            visible += session_is_visible_in(s, e);
    }
    lp->stats.presence_entries -= visible;
    if (visible == 0)
        return;
    bool has_listeners = presence_has_listeners(lp);
    for (uint32_t i = 0; i < n; i++) {
        const gw_sub_entry_t *e = gw_sub_set_entry(&s->member, i);
        size_t len;
        const char *name = gw_sub_entry_name(e, &len);
        if (!session_is_visible_in(s, e) || gw_presence_is_listener(name, len))
            continue;
        presence_record(lp, s, name, len, false);
        if (has_listeners)
            presence_emit(lp, s, name, len, false);
    }
}

/* --- telling a shared engine everything again ----------------------------------------------- */

static void resync_session(nl_wheel_entry_t *we, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = (gw_session_t *)((char *)we - offsetof(gw_session_t, deadline));
    if (!(s->flags & GW_SESSION_IS_ONLINE))
        return;
    gw_engine_t *engine = lp->node->engine;
    /* Once per session: a user on several connections is told about more than once, which a
     * write that sets its own fields does not mind. */
    engine->ops->user_online(engine, lp->fo.index, s->data, s->user_len);
    uint32_t n = gw_sub_set_count(&s->member);
    for (uint32_t i = 0; i < n; i++) {
        const gw_sub_entry_t *e = gw_sub_set_entry(&s->member, i);
        size_t len;
        const char *name = gw_sub_entry_name(e, &len);
        if (session_is_visible_in(s, e) && !gw_presence_is_listener(name, len))
            presence_record(lp, s, name, len, true);
    }
}

void gw_session_presence_resync(gw_loop_t *lp)
{
    gw_heartbeat_foreach(&lp->hb, resync_session, lp);
}

/* --- subscriptions ------------------------------------------------------------------------ */

void gw_session_presence_joined(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len)
{
    if (!(s->flags & GW_SESSION_IS_ONLINE))
        return;
    lp->stats.presence_entries++;
    presence_record(lp, s, name, len, true);
    if (presence_has_listeners(lp))
        presence_emit(lp, s, name, len, true);
}

void gw_session_presence_left(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len)
{
    if (!(s->flags & GW_SESSION_IS_ONLINE))
        return;
    lp->stats.presence_entries--;
    presence_record(lp, s, name, len, false);
    if (presence_has_listeners(lp))
        presence_emit(lp, s, name, len, false);
}

int gw_session_presence_listen(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len)
{
    char lname[GW_CHANNEL_NAME_MAX_LIMIT + 1];
    if (len > GW_CHANNEL_NAME_MAX_LIMIT)
        return -EINVAL; /* callers pass checked names: never more than lname holds */
    size_t llen = gw_presence_listen_name(lname, name, len);
    bool is_counted = (s->flags & GW_SESSION_IS_ONLINE) != 0;
    /* Counted and flagged before the add: a join that fails at once is answered inside it
     * (gw_session_presence_listener_failed), and must find both. */
    s->flags |= GW_SESSION_IS_LISTENER;
    if (is_counted)
        listener_count(lp, +1);
    int rc = gw_sub_add(&lp->fo.subs, &s->member, lname, llen, gw_sub_hash(lname, llen),
                        LISTENER_REQ_ID, NULL);
    if (rc >= 0)
        return 0;
    if (is_counted)
        listener_count(lp, -1);
    return rc == -EEXIST ? 0 : rc;
}

void gw_session_presence_unlisten(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len)
{
    char lname[GW_CHANNEL_NAME_MAX_LIMIT + 1];
    if (!(s->flags & GW_SESSION_IS_LISTENER) || len > GW_CHANNEL_NAME_MAX_LIMIT)
        return;
    size_t llen = gw_presence_listen_name(lname, name, len);
    uint64_t unused;
    int rc =
        gw_sub_remove(&lp->fo.subs, &s->member, lname, llen, gw_sub_hash(lname, llen), &unused);
    if (rc >= 0 && (s->flags & GW_SESSION_IS_ONLINE))
        listener_count(lp, -1);
}

void gw_session_presence_listener_failed(gw_loop_t *lp, gw_session_t *s)
{
    if (s->flags & GW_SESSION_IS_ONLINE)
        listener_count(lp, -1);
}

uint32_t gw_session_presence_sub_count(const gw_loop_t *lp, const gw_session_t *s)
{
    NL_UNUSED(lp);
    uint32_t n = gw_sub_set_count(&s->member);
    if (!(s->flags & GW_SESSION_IS_LISTENER))
        return n;
    uint32_t real = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *name = gw_sub_entry_name(gw_sub_set_entry(&s->member, i), &len);
        real += !gw_presence_is_listener(name, len);
    }
    return real;
}

/* --- PresenceRequest ---------------------------------------------------------------------- */

/* The engine's answer, on the requester's loop: r->u64 = (connection id, request id). */
static void presence_on_answer(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_loop_t *lp = gw_loop_current();
    gw_cancel_unref(r->cancel); /* the request's reference (gw_session_presence_begin) */
    gw_session_t *s = gw_session_lookup(lp->fo.loop, r->u64[0], GW_SESSION_AUTHENTICATED);
    if (!s)
        return; /* gone or closing meanwhile */
    gw_session_presence_end(lp, s);
    if (res->status == -EBUSY || res->status == -EAGAIN) {
        gw_session_error(lp, s, r->u64[1], GW_PERR_BUSY, 1000); /* Redis busy or away */
        return;
    }
    if (res->status < 0) {
        gw_session_error(lp, s, r->u64[1], GW_PERR_INTERNAL, 0);
        return;
    }
    const gw_presence_result_t *p = res->data;
    Herald__ClientInfo *infos = calloc(p->n_clients ? p->n_clients : 1, sizeof(*infos));
    Herald__ClientInfo **ptrs = calloc(p->n_clients ? p->n_clients : 1, sizeof(*ptrs));
    if (!infos || !ptrs) {
        free(infos);
        free(ptrs);
        gw_session_error(lp, s, r->u64[1], GW_PERR_INTERNAL, 0);
        return;
    }
    for (uint32_t i = 0; i < p->n_clients; i++) {
        herald__client_info__init(&infos[i]);
        /* Packing only reads the strings. */
        infos[i].user_id = (char *)(uintptr_t)p->clients[i].user;
        infos[i].client_id = (char *)(uintptr_t)p->clients[i].client_id;
        infos[i].connected_at_ms = p->clients[i].connected_at_ms;
        ptrs[i] = &infos[i];
    }
    Herald__PresenceResponse pr = HERALD__PRESENCE_RESPONSE__INIT;
    pr.channel = (char *)(uintptr_t)p->chan;
    pr.n_clients = p->n_clients;
    pr.clients = ptrs;
    pr.num_clients = p->num_clients > UINT32_MAX ? UINT32_MAX : (uint32_t)p->num_clients;
    pr.num_users = p->num_users > UINT32_MAX ? UINT32_MAX : (uint32_t)p->num_users;
    pr.truncated = p->is_truncated;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = r->u64[1];
    f.body_case = HERALD__FRAME__BODY_PRESENCE_RESPONSE;
    f.presence_response = &pr;
    (void)gw_session_send(lp, s, &f);
    free(infos);
    free(ptrs);
}

void gw_session_presence_request(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    const char *name =
        f->presence_request && f->presence_request->channel ? f->presence_request->channel : "";
    size_t len = strlen(name);
    if (gw_channel_name_check(name, len, gw_loop_cfg(lp)->max_channel_bytes) != GW_CHANNEL_OK) {
        gw_session_error(lp, s, f->id, GW_PERR_BAD_CHANNEL, 0);
        return;
    }
    if (!gw_session_allows(s, name, len)) {
        gw_session_error(lp, s, f->id, GW_PERR_FORBIDDEN, 0);
        return;
    }
    /* An answer lists up to [presence] max_clients clients: tens of KiB built from a walk of
     * every loop's subscribers. Each takes from the request budget, and a client that does not
     * read its answers gets no more of them (BUSY) rather than a queue that grows to the cap
     * on its unread output and a close. At most max_inflight run at once per connection
     * (gw_session_must_wait held the rest back). */
    uint32_t retry_after_ms = 0;
    if (!gw_session_take_token(lp, s, &retry_after_ms)) {
        gw_session_error(lp, s, f->id, GW_PERR_RATE_LIMITED, retry_after_ms);
        return;
    }
    if (lp->fo.high_water_bytes &&
        nl_conn_output_bytes(s->member.conn) >= lp->fo.high_water_bytes) {
        gw_session_error(lp, s, f->id, GW_PERR_BUSY, 1000);
        return;
    }
    gw_cancel_t *cancel = gw_session_presence_begin(lp, s);
    if (!cancel) {
        gw_session_error(lp, s, f->id, GW_PERR_INTERNAL, 0);
        return;
    }
    gw_engine_reply_t reply = {.loop = lp->fo.loop,
                               .cb = presence_on_answer,
                               .u64 = {nl_conn_id(s->member.conn), f->id},
                               .cancel = cancel};
    gw_engine_t *e = lp->node->engine;
    int err = e->ops->presence(e, name, len, &reply);
    if (err < 0) {
        gw_cancel_unref(cancel);
        gw_session_presence_end(lp, s);
    }
    if (err == -ENOTSUP)
        gw_session_error(lp, s, f->id, GW_PERR_NOT_SUPPORTED, 0);
    else if (err < 0)
        gw_session_error(lp, s, f->id, err == -ESHUTDOWN ? GW_PERR_BUSY : GW_PERR_INTERNAL, 0);
}

/* --- a loop's share of batches and queries ------------------------------------------------ */

typedef struct sweep_s {
    uint16_t stamp;
    uint32_t users;
} sweep_t;

static void sweep_user(const gw_online_user_t *u, void *arg)
{
    sweep_t *w = arg;
    bool is_in_batch = false;
    for (uint32_t i = 0; i < u->n; i++) {
        gw_session_t *s = gw_session_of_key(u->conns[i]);
        if (s->flags & GW_SESSION_IS_SEEN) {
            s->flags &= (uint8_t)~GW_SESSION_IS_SEEN;
            s->user_seen = w->stamp;
        }
        is_in_batch |= s->user_seen == w->stamp;
    }
    w->users += is_in_batch;
}

uint32_t gw_session_presence_sweep(gw_loop_t *lp, uint16_t stamp)
{
    sweep_t w = {.stamp = stamp, .users = 0};
    gw_online_foreach(&lp->presence.online, sweep_user, &w);
    return w.users;
}

int gw_session_presence_collect(gw_loop_t *lp, const char *chan, size_t len,
                                gw_presence_part_t *out)
{
    memset(out, 0, sizeof(*out));
    uint32_t limit = (uint32_t)gw_loop_cfg(lp)->presence_max_clients;
    out->limit = limit;
    gw_sub_entry_t *e = gw_sub_find(&lp->fo.subs, chan, len, gw_sub_hash(chan, len));
    if (!e || !gw_sub_entry_is_active(e))
        return 0;
    uint32_t n;
    gw_sub_set_t *const *members = gw_sub_entry_members(e, &n);
    uint32_t cap = n < limit ? n : limit;
    if (cap > 0 && (out->clients = calloc(cap, sizeof(*out->clients))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        gw_session_t *s = gw_session_of_set(members[i]);
        if (!(s->flags & GW_SESSION_IS_ONLINE))
            continue; /* closing: it has left the channel for presence */
        if (gw_sub_set_is_recovering(&s->member, e))
            continue; /* no SubscribeOk yet */
        long off = gw_online_list_add(&out->users, s->data, s->user_len, s->user_hash);
        if (off < 0)
            return (int)off;
        out->num_clients++;
        if (out->n_clients < cap)
            out->clients[out->n_clients++] = (gw_presence_part_client_t){
                .user_off = off,
                .conn_id = nl_conn_id(s->member.conn),
                .connected_at_ms = (uint64_t)s->auth_s * 1000u,
            };
    }
    return 0;
}

void gw_session_online_collect(gw_loop_t *lp, const char *user, size_t len, gw_online_part_t *out)
{
    memset(out, 0, sizeof(*out));
    gw_online_user_t u;
    if (gw_online_find(&lp->presence.online, user, len, gw_online_hash(user, len), &u) == 0)
        return;
    out->connections = u.n;
    out->since_ms = UINT64_MAX;
    for (uint32_t i = 0; i < u.n; i++) {
        const gw_session_t *s = gw_session_of_key(u.conns[i]);
        uint64_t since_ms = (uint64_t)s->auth_s * 1000u;
        uint64_t seen_ms = gw_presence_stamp_wall_ms(&lp->presence, s->user_seen);
        if (since_ms < out->since_ms)
            out->since_ms = since_ms;
        if (seen_ms > out->last_seen_ms)
            out->last_seen_ms = seen_ms;
    }
}
