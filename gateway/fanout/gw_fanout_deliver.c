/*
 * gw_fanout_deliver: a message's last hop, from its loop to the output queues of the loop's
 * subscribers, and the slow-consumer policy. See gw_fanout.h.
 *
 * The per-delivery path is gw_fanout_deliver's inner loop: no allocation, no syscall, no
 * lock, no atomic except the block's reference count inside nl_conn_send_block. Everything
 * that happens once per message (lookup, offset bookkeeping, the latency sample) stays
 * outside it. It reads the subscriber's set and connection only: what the session around the
 * set holds is none of its business.
 *
 * Latency, two histograms per loop: publish-to-enqueue, from the moment the engine accepted
 * the message to the moment the last subscriber on this loop had it queued; and
 * publish-to-flush, to the moment the loop had written it to every subscriber's socket that had
 * room. For the second, the gateway's before-sleep hook asks netlib to flush at once
 * (nl_conn_flush_loop) rather than later in netlib's own hook, then takes one sample per
 * message delivered in the iteration.
 */
#include "gw_fanout.h"

#include <inttypes.h>
#include <stdlib.h>

#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_log.h"

/* How far ahead the delivery loop prefetches: sets at +8, their connections at +4, so each
 * line is requested a few deliveries before it is read (10k subscribers do not fit in L1/L2). */
#define DELIVER_AHEAD_SET 8
#define DELIVER_AHEAD_CONN 4

/* Keeps the message's publish time for the publish-to-flush sample that gw_fanout_flush_done
 * takes once the loop has written this iteration's output. Without memory the sample is
 * skipped; the delivery is not affected. */
static void fanout_note_flush(gw_fanout_loop_t *fl, uint64_t publish_ns)
{
    if (fl->n_flush_pub == fl->cap_flush_pub) {
        uint32_t cap = fl->cap_flush_pub ? fl->cap_flush_pub * 2 : 64;
        uint64_t *p = realloc(fl->flush_pub_ns, cap * sizeof(*p));
        if (!p)
            return;
        fl->flush_pub_ns = p;
        fl->cap_flush_pub = cap;
    }
    fl->flush_pub_ns[fl->n_flush_pub++] = publish_ns;
}

void gw_fanout_flush_done(gw_fanout_loop_t *fl)
{
    if (fl->n_flush_pub == 0)
        return;
    nl_conn_flush_loop(fl->loop);
    uint64_t now_ns = nl_now_ns();
    for (uint32_t i = 0; i < fl->n_flush_pub; i++)
        nl_hist_record_local(&fl->stats.flush_ns, now_ns - fl->flush_pub_ns[i]);
    fl->n_flush_pub = 0;
    /* A burst's array is not kept: a quiet loop holds 1,024 entries (8 KiB) at most. */
    if (fl->cap_flush_pub > 1024) {
        free(fl->flush_pub_ns);
        fl->flush_pub_ns = NULL;
        fl->cap_flush_pub = 0;
    }
}

/* Past the high-water mark: drop (counted; the client sees the offset gap) or disconnect. */
static void fanout_slow(gw_fanout_loop_t *fl, gw_sub_set_t *set)
{
    if (fl->slow_policy == GW_SLOW_DROP) {
        fl->stats.slow_drops++;
        if (!(set->flags & GW_SUB_SET_DROPPING)) {
            set->flags |= GW_SUB_SET_DROPPING;
            NL_LOG(NL_DEBUG, "slow_consumer_dropping", "conn=%" PRIu64, nl_conn_id(set->conn));
        }
        return;
    }
    /* Closed by an error in this iteration: its close callback, not a Disconnect, ends it. */
    if (nl_conn_state(set->conn) == NL_CONN_DISCONNECTED)
        return;
    fl->stats.slow_drops++;
    /* Remembered first, told second: a set that cannot be remembered is told all the same (the
     * hook stops its deliveries), and leaves its channels when its connection closes. */
    if (fl->n_leaving == fl->cap_leaving) {
        uint32_t cap = fl->cap_leaving ? fl->cap_leaving * 2 : 8;
        gw_sub_set_t **v = realloc(fl->leaving, cap * sizeof(*v));
        if (v) {
            fl->leaving = v;
            fl->cap_leaving = cap;
        }
    }
    if (fl->n_leaving < fl->cap_leaving)
        fl->leaving[fl->n_leaving++] = set;
    fl->on_slow(set, fl->slow_arg);
    set->flags |= GW_SUB_SET_OFF;
}

/* The WebSocket block of fb for the members from i on, with a reference for each of them taken
 * at once (the ones not used go back at the end): NULL without memory, in which case those
 * members get nothing of this message. */
static nl_block_t *fanout_ws_refs(gw_frame_blocks_t *fb, uint32_t remaining)
{
    nl_block_t *ws = gw_frame_blocks_ws(fb);
    if (ws)
        nl_block_ref_n(ws, remaining);
    return ws;
}

/* Queues fb to the n members of e. Returns how many were queued. */
static uint64_t fanout_members(gw_fanout_loop_t *fl, const gw_sub_entry_t *e,
                               gw_sub_set_t *const *members, uint32_t n, gw_frame_blocks_t *fb)
{
    uint64_t queued = 0;
    size_t high_water = fl->high_water_bytes;
    nl_block_t *b = fb->tcp;
    /* One atomic add for every member's reference instead of one per member (perf: the
     * per-member increment was 4.7% of a broadcasting loop); the unused ones go back below.
     * The WebSocket block likewise, from its first member on. */
    nl_block_ref_n(b, n);
    uint32_t refs_used = 0;
    nl_block_t *ws = NULL;
    uint32_t ws_refs = 0;
    uint32_t ws_used = 0;
    bool is_ws_tried = false;
    for (uint32_t i = 0; i < n; i++) {
        if (i + DELIVER_AHEAD_SET < n)
            __builtin_prefetch(members[i + DELIVER_AHEAD_SET]);
        if (i + DELIVER_AHEAD_CONN < n)
            __builtin_prefetch(members[i + DELIVER_AHEAD_CONN]->conn);
        gw_sub_set_t *set = members[i];
        uint8_t flags = set->flags;
        if (__builtin_expect(flags & (GW_SUB_SET_OFF | GW_SUB_SET_RECOVERING), 0)) {
            if (flags & GW_SUB_SET_OFF)
                continue; /* closing: its last frame, the Disconnect, is queued */
            if (gw_sub_set_is_recovering(set, e))
                continue; /* waiting for its history answer, which covers this message too */
        }
        nl_conn_t *c = set->conn;
        if (high_water && nl_conn_output_bytes(c) >= high_water) {
            fanout_slow(fl, set);
            continue;
        }
        if (__builtin_expect(flags & GW_SUB_SET_DROPPING, 0))
            set->flags = flags & (uint8_t)~GW_SUB_SET_DROPPING;
        if (__builtin_expect(flags & GW_SUB_SET_WS, 0)) {
            if (!is_ws_tried) {
                is_ws_tried = true;
                ws_refs = n - i;
                ws = fanout_ws_refs(fb, ws_refs);
            }
            if (ws && nl_conn_send_block_ref(c, ws) == 0) {
                ws_used++;
                queued++;
            }
            continue;
        }
        if (nl_conn_send_block_ref(c, b) == 0) {
            refs_used++;
            queued++;
        }
    }
    nl_block_unref_n(b, n - refs_used);
    if (ws)
        nl_block_unref_n(ws, ws_refs - ws_used);
    /* members is not used past here: the index may change. A closed connection is still
     * allocated until the iteration ends, and so is the session holding the set. */
    for (uint32_t i = 0; i < fl->n_leaving; i++)
        gw_sub_remove_all(&fl->subs, fl->leaving[i]);
    fl->n_leaving = 0;
    return queued;
}

void gw_fanout_deliver(gw_fanout_loop_t *fl, gw_msg_t *m)
{
    gw_sub_entry_t *e = gw_sub_find(&fl->subs, m->chan, m->chan_len, m->hash);
    if (!e || !gw_sub_entry_is_active(e)) {
        /* A leave crossed the message, or the join is not answered yet (the message predates
         * it): nobody here may see it. */
        fl->stats.unrouted++;
        return;
    }
    /* A message outside the channel's sequence (offset 0: a plain Redis PUBLISH, or one
     * delivered locally while Redis was away) does not move where subscribers stand. */
    if (m->offset != 0)
        gw_sub_entry_advance(e, m->offset, m->epoch);
    uint32_t n;
    gw_sub_set_t *const *members = gw_sub_entry_members(e, &n);
    uint64_t queued = fanout_members(fl, e, members, n, &m->blocks);
    fl->stats.deliveries += queued;
    nl_hist_record_local(&fl->stats.latency_ns, nl_now_ns() - m->publish_ns);
    if (queued > 0) /* nothing is written for a message every member dropped */
        fanout_note_flush(fl, m->publish_ns);
}

bool gw_fanout_deliver_one(gw_fanout_loop_t *fl, gw_sub_set_t *set, gw_msg_t *m)
{
    if ((set->flags & GW_SUB_SET_OFF) || nl_conn_state(set->conn) != NL_CONN_CONNECTED)
        return false;
    nl_block_t *b = set->flags & GW_SUB_SET_WS ? gw_frame_blocks_ws(&m->blocks) : m->blocks.tcp;
    if (!b || nl_conn_send_block(set->conn, b) < 0)
        return false;
    fl->stats.deliveries++;
    return true;
}

uint64_t gw_fanout_deliver_event(gw_fanout_loop_t *fl, const char *name, size_t len, uint32_t hash,
                                 gw_frame_blocks_t *fb, uint64_t skip_conn)
{
    gw_sub_entry_t *e = gw_sub_find(&fl->subs, name, len, hash);
    /* No listener here any more (a leave crossed the event), or the loop's join is not
     * answered yet: the event predates every listener this loop has. */
    if (!e || !gw_sub_entry_is_active(e))
        return 0;
    uint32_t n;
    gw_sub_set_t *const *members = gw_sub_entry_members(e, &n);
    uint64_t queued = 0;
    size_t high_water = fl->high_water_bytes;
    for (uint32_t i = 0; i < n; i++) {
        gw_sub_set_t *set = members[i];
        if ((set->flags & GW_SUB_SET_OFF) || nl_conn_id(set->conn) == skip_conn)
            continue;
        /* An event is as droppable as a Push; the slow-consumer policy acts on Pushes. */
        if (high_water && nl_conn_output_bytes(set->conn) >= high_water) {
            fl->stats.slow_drops++;
            continue;
        }
        nl_block_t *b = set->flags & GW_SUB_SET_WS ? gw_frame_blocks_ws(fb) : fb->tcp;
        if (b && nl_conn_send_block(set->conn, b) == 0)
            queued++;
    }
    fl->stats.events += queued;
    return queued;
}
