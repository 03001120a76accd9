/*
 * gw_session_flow: what a session's requests may cost and in which order they take effect
 * (PROTOCOL.md sections 2 and 5): the request budget, the PresenceRequests in progress, and
 * input that waits for an earlier request.
 *
 * Order. Requests of one connection take effect in the order sent. Most do so by themselves:
 * they are handled one after the other as they are read. A Subscribe may not be complete when
 * the next frame is read: its channel's join (or its history, for a recovery) is on its way to
 * the engine. A Publish or PresenceRequest of that channel read meanwhile would overtake it (a
 * publish from the channel's owner loop runs at once while the join is still posted, and with
 * the Redis engine the two travel on different links), so such a frame waits, with every frame
 * behind it, until the Subscribe is answered. Waiting costs nothing: the bytes stay in the
 * connection's input buffer and reading pauses, so a client that keeps sending is held back by
 * TCP, as it is while its Connect is verified.
 *
 * Presence. A PresenceRequest walks every IO loop's subscribers of the channel and builds an
 * answer of up to [presence] max_clients clients: a connection may have at most
 * [presence] max_inflight of them in progress; one more waits like the frames above until an
 * answer is out. When the connection goes, its queries in progress are flagged (gw_cancel_t),
 * and the memory engine skips the walks it has not started.
 *
 * Budget. Publish, Subscribe and PresenceRequest take a token from one bucket per connection
 * ([limits] publish_rate per second, publish_burst deep); without one they are answered
 * RATE_LIMITED. Unsubscribe and Ping cost nothing.
 *
 * State. A session that waits or has queries in progress gets a side record in its loop's table
 * (keyed by its connection id), so the session itself stays as small as an idle connection
 * needs (gw_session_int.h); GW_SESSION_HAS_SIDE says there is one. Sessions whose waiting may
 * end are collected when the event that ends it happens (often inside an index or engine
 * callback, where input must not be handled) and resumed before the loop sleeps.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gw_engine.h"
#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_session_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* The side record of a session, keyed by its connection id's 8 bytes. */
typedef struct flow_side_s {
    nl_buf_t *held_in;   /* input that waits (the buffer on_message was given); NULL: none */
    gw_cancel_t *cancel; /* the flag of its presence queries; NULL before the first */
    uint32_t presence_inflight;
    bool is_queued; /* in the loop's wake list */
    gw_chankey_t key;
    char name[sizeof(uint64_t)];
} flow_side_t;

static flow_side_t *side_of(gw_chankey_t *k)
{
    return k ? (flow_side_t *)((char *)k - offsetof(flow_side_t, key)) : NULL;
}

static flow_side_t *side_find(gw_loop_t *lp, const gw_session_t *s)
{
    if (!(s->flags & GW_SESSION_HAS_SIDE))
        return NULL;
    uint64_t id = nl_conn_id(s->member.conn);
    return side_of(gw_chantab_find(&lp->sides, (const char *)&id, sizeof(id),
                                   gw_chantab_hash((const char *)&id, sizeof(id))));
}

/* The side record of s, created if needed. Returns NULL without memory. */
static flow_side_t *side_need(gw_loop_t *lp, gw_session_t *s)
{
    flow_side_t *side = side_find(lp, s);
    if (side)
        return side;
    side = calloc(1, sizeof(*side));
    if (!side)
        return NULL;
    uint64_t id = nl_conn_id(s->member.conn);
    memcpy(side->name, &id, sizeof(id));
    side->key.hash = gw_chantab_hash(side->name, sizeof(id));
    side->key.name_len = sizeof(id);
    if (gw_chantab_insert(&lp->sides, &side->key) < 0) {
        free(side);
        return NULL;
    }
    s->flags |= GW_SESSION_HAS_SIDE;
    return side;
}

static void side_free(gw_loop_t *lp, flow_side_t *side)
{
    gw_chantab_remove(&lp->sides, &side->key);
    gw_cancel_unref(side->cancel);
    free(side);
}

/* Drops the record once it holds nothing (no input waiting, no query, not in the wake list). */
static void side_trim(gw_loop_t *lp, gw_session_t *s, flow_side_t *side)
{
    if (side->held_in || side->presence_inflight > 0 || side->is_queued)
        return;
    side_free(lp, side);
    s->flags &= (uint8_t)~GW_SESSION_HAS_SIDE;
}

void gw_session_flow_deinit(gw_loop_t *lp)
{
    gw_chantab_t *t = &lp->sides;
    for (uint32_t k = 0; t->slots && k <= t->mask; k++) {
        flow_side_t *side = side_of(gw_chantab_slot(t, k));
        if (side) {
            gw_cancel_unref(side->cancel);
            free(side);
        }
    }
    gw_chantab_deinit(t);
    free(lp->wake_ids);
    lp->wake_ids = NULL;
    lp->n_wake = lp->cap_wake = 0;
}

void gw_session_flow_close(gw_loop_t *lp, gw_session_t *s)
{
    flow_side_t *side = side_find(lp, s);
    if (!side)
        return;
    if (side->cancel)
        gw_cancel_set(side->cancel);
    side_free(lp, side);
    s->flags &= (uint8_t)~GW_SESSION_HAS_SIDE;
}

/* --- the request budget -------------------------------------------------------------------- */

bool gw_session_take_token(gw_loop_t *lp, gw_session_t *s, uint32_t *retry_after_ms)
{
    const gw_config_t *cfg = gw_loop_cfg(lp);
    uint64_t rate = cfg->publish_rate_per_s;
    if (rate == 0)
        return true;
    /* Thousandths of a token, so that a refill of a few milliseconds is not lost to rounding. */
    uint64_t burst_milli = (uint64_t)(cfg->publish_burst ? cfg->publish_burst : 1) * 1000;
    if (burst_milli > UINT32_MAX)
        burst_milli = UINT32_MAX;
    uint32_t now = (uint32_t)nl_loop_now_ms(lp->fo.loop);
    uint64_t tokens = s->rl_milli + (uint64_t)(uint32_t)(now - s->rl_ms) * rate;
    s->rl_ms = now;
    if (tokens > burst_milli)
        tokens = burst_milli;
    if (tokens < 1000) {
        s->rl_milli = (uint32_t)tokens;
        *retry_after_ms = (uint32_t)((1000 - tokens + rate - 1) / rate);
        return false;
    }
    s->rl_milli = (uint32_t)(tokens - 1000);
    return true;
}

/* --- order: what must wait ------------------------------------------------------------------ */

/* Whether s's Subscribe of name[0..len) is still unanswered: s is in the channel's entry, and
 * the entry waits for the engine's join or s for its history. */
static bool flow_is_joining(gw_loop_t *lp, const gw_session_t *s, const char *name, size_t len)
{
    gw_sub_entry_t *e = gw_sub_find(&lp->fo.subs, name, len, gw_sub_hash(name, len));
    if (!e || !gw_sub_set_has(&s->member, name, len))
        return false;
    return !gw_sub_entry_is_active(e) || gw_sub_set_is_recovering(&s->member, e);
}

bool gw_session_must_wait(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    const char *name = NULL;
    if (f->body_case == HERALD__FRAME__BODY_PUBLISH && f->publish)
        name = f->publish->channel;
    else if (f->body_case == HERALD__FRAME__BODY_PRESENCE_REQUEST && f->presence_request)
        name = f->presence_request->channel;
    else
        return false;
    if (f->body_case == HERALD__FRAME__BODY_PRESENCE_REQUEST) {
        flow_side_t *side = side_find(lp, s);
        if (side && side->presence_inflight >= gw_loop_cfg(lp)->presence_max_inflight)
            return true;
    }
    return name && name[0] && flow_is_joining(lp, s, name, strlen(name));
}

bool gw_session_hold(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in)
{
    flow_side_t *side = side_need(lp, s);
    if (!side)
        return false;
    side->held_in = in;
    nl_conn_pause_read(s->member.conn);
    lp->stats.held_inputs++;
    return true;
}

bool gw_session_is_holding(gw_loop_t *lp, const gw_session_t *s)
{
    const flow_side_t *side = side_find(lp, s);
    return side && side->held_in;
}

void gw_session_wake(gw_loop_t *lp, gw_session_t *s)
{
    flow_side_t *side = side_find(lp, s);
    if (!side || !side->held_in || side->is_queued)
        return;
    if (lp->n_wake == lp->cap_wake) {
        uint32_t cap = lp->cap_wake ? lp->cap_wake * 2 : 16;
        uint64_t *ids = realloc(lp->wake_ids, cap * sizeof(*ids));
        if (!ids) {
            /* The session stays held: its idle deadline ends it, since nothing it sent after
             * the held frame was read. Said once per event, in the log. */
            NL_LOG(NL_WARN, "session_wake_lost", "conn=%" PRIu64 " err=%s",
                   nl_conn_id(s->member.conn), nl_strerror(-ENOMEM));
            return;
        }
        lp->wake_ids = ids;
        lp->cap_wake = cap;
    }
    lp->wake_ids[lp->n_wake++] = nl_conn_id(s->member.conn);
    side->is_queued = true;
}

/* Handles s's waiting input again: what waited may go now, or wait again. */
static void flow_resume(gw_loop_t *lp, gw_session_t *s, flow_side_t *side)
{
    nl_buf_t *in = side->held_in;
    side->held_in = NULL;
    side->is_queued = false;
    side_trim(lp, s, side);
    nl_conn_t *c = s->member.conn;
    nl_conn_resume_read(c);
    gw_session_input(lp, s, in);
}

void gw_session_flow_run(gw_loop_t *lp)
{
    /* Resuming may wake others (an answer sent at once): they join the list and run in this
     * same pass, which ends since each held session is queued at most once per wait. */
    for (uint32_t i = 0; i < lp->n_wake; i++) {
        nl_conn_t *c = nl_conn_lookup(lp->fo.loop, lp->wake_ids[i]);
        gw_session_t *s = c ? nl_conn_data(c) : NULL;
        flow_side_t *side = s ? side_find(lp, s) : NULL;
        if (!side || !side->is_queued)
            continue;
        if (s->state != GW_SESSION_AUTHENTICATED || nl_conn_state(c) != NL_CONN_CONNECTED) {
            side->held_in = NULL;
            side->is_queued = false;
            side_trim(lp, s, side);
            continue;
        }
        flow_resume(lp, s, side);
    }
    lp->n_wake = 0;
}

/* --- presence in progress ----------------------------------------------------------------------
 */

gw_cancel_t *gw_session_presence_begin(gw_loop_t *lp, gw_session_t *s)
{
    flow_side_t *side = side_need(lp, s);
    if (!side)
        return NULL;
    if (!side->cancel && !(side->cancel = gw_cancel_new())) {
        side_trim(lp, s, side);
        return NULL;
    }
    side->presence_inflight++;
    return gw_cancel_ref(side->cancel);
}

void gw_session_presence_end(gw_loop_t *lp, gw_session_t *s)
{
    flow_side_t *side = side_find(lp, s);
    if (!side || side->presence_inflight == 0)
        return;
    side->presence_inflight--;
    gw_session_wake(lp, s);
    side_trim(lp, s, side);
}
