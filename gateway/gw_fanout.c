/*
 * gw_fanout: messages, batches and delivery. See gw_fanout.h.
 *
 * The per-delivery path is gw_fanout_deliver's inner loop: no allocation, no syscall, no
 * lock, no atomic except the block's reference count inside nl_conn_send_block. Everything
 * that happens once per message (lookup, offset bookkeeping, the latency sample) stays
 * outside it.
 *
 * Latency, two histograms per loop: publish-to-enqueue, from the moment the engine accepted
 * the message to the moment the last subscriber on this loop had it queued; and
 * publish-to-flush, to the moment the loop had written it to every subscriber's socket that had
 * room. For the second, the gateway's before-sleep hook asks netlib to flush at once
 * (nl_conn_flush_loop) rather than later in netlib's own hook, then takes one sample per
 * message delivered in the iteration.
 */
#include "gw_fanout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gw_node.h"
#include "gw_session.h"
#include "gw_sub.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* First capacity of a batch; it doubles from there. */
#define FANOUT_BATCH_MIN 16

struct gw_fanout_batch_s {
    gw_loop_t *target;
    uint32_t count;
    uint32_t cap;
    gw_msg_t *msgs[];
};

/* --- messages ----------------------------------------------------------------------------- */

gw_msg_t *gw_msg_new(const char *chan, size_t chan_len, uint32_t hash, uint64_t offset,
                     uint64_t epoch, const void *payload, size_t len, uint64_t publish_time_ms)
{
    if (chan_len > UINT16_MAX)
        return NULL;
    gw_msg_t *m = malloc(sizeof(*m) + chan_len + 1);
    if (!m)
        return NULL;
    memcpy(m->chan, chan, chan_len);
    m->chan[chan_len] = '\0';
    char epoch_hex[17];
    gw_engine_epoch_str(epoch, epoch_hex);
    Herald__Push push = HERALD__PUSH__INIT;
    push.channel = m->chan;
    push.offset = offset;
    push.epoch = epoch_hex;
    push.payload.data = (uint8_t *)(uintptr_t)payload; /* packing only reads it */
    push.payload.len = len;
    push.publish_time_ms = publish_time_ms;
    m->block = proto_push_block(&push);
    if (!m->block) {
        free(m);
        return NULL;
    }
    atomic_init(&m->refs, 1);
    m->hash = hash;
    m->offset = offset;
    m->epoch = epoch;
    m->publish_ns = nl_now_ns();
    m->chan_len = (uint16_t)chan_len;
    return m;
}

gw_msg_t *gw_msg_ref(gw_msg_t *m)
{
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void gw_msg_unref(gw_msg_t *m)
{
    /* acq_rel: each holder's release pairs with the last holder's acquire before the free
     * (a separate acquire fence would do, but ThreadSanitizer does not model fences). */
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    nl_block_unref(m->block);
    free(m);
}

/* --- batches ------------------------------------------------------------------------------ */

int gw_fanout_init(gw_fanout_t *fo, uint32_t n_loops)
{
    fo->n_targets = n_loops;
    fo->pending_mask = 0;
    fo->batches = calloc(n_loops, sizeof(*fo->batches));
    return fo->batches ? 0 : -ENOMEM;
}

static void batch_free(gw_fanout_batch_t *b)
{
    for (uint32_t i = 0; i < b->count; i++)
        gw_msg_unref(b->msgs[i]);
    free(b);
}

void gw_fanout_deinit(gw_fanout_t *fo)
{
    for (uint32_t i = 0; fo->batches && i < fo->n_targets; i++)
        if (fo->batches[i])
            batch_free(fo->batches[i]);
    free(fo->batches);
    fo->batches = NULL;
    fo->pending_mask = 0;
}

/* Runs on the target loop: the batch arrives whole, in the order it was filled. */
static void fanout_run_batch(void *arg)
{
    gw_fanout_batch_t *b = arg;
    for (uint32_t i = 0; i < b->count; i++) {
        gw_fanout_deliver(b->target, b->msgs[i]);
        gw_msg_unref(b->msgs[i]);
    }
    free(b);
}

static void fanout_append(gw_loop_t *src, uint32_t target, gw_msg_t *m)
{
    gw_fanout_t *fo = &src->fanout;
    gw_fanout_batch_t *b = fo->batches[target];
    if (!b || b->count == b->cap) {
        uint32_t cap = b ? b->cap * 2 : FANOUT_BATCH_MIN;
        gw_fanout_batch_t *nb = realloc(b, sizeof(*nb) + sizeof(nb->msgs[0]) * cap);
        if (!nb) {
            src->stats.fanout_failures++;
            return;
        }
        if (!b) {
            nb->target = &src->node->loops[target];
            nb->count = 0;
        }
        nb->cap = cap;
        fo->batches[target] = b = nb;
        fo->pending_mask |= UINT64_C(1) << target;
    }
    b->msgs[b->count++] = gw_msg_ref(m);
}

void gw_fanout_flush_target(gw_loop_t *src, uint32_t target)
{
    gw_fanout_t *fo = &src->fanout;
    gw_fanout_batch_t *b = fo->batches[target];
    if (!b)
        return;
    fo->batches[target] = NULL;
    fo->pending_mask &= ~(UINT64_C(1) << target);
    if (gw_loop_post(src, target, fanout_run_batch, b) < 0) {
        src->stats.fanout_failures += b->count;
        batch_free(b);
        return;
    }
    src->stats.fanout_batches++;
}

void gw_fanout_flush(gw_loop_t *src)
{
    uint64_t mask = src->fanout.pending_mask;
    while (mask) {
        uint32_t target = (uint32_t)__builtin_ctzll(mask);
        mask &= mask - 1;
        gw_fanout_flush_target(src, target);
    }
}

void gw_fanout_publish(gw_loop_t *src, gw_msg_t *m, uint64_t loop_mask)
{
    uint64_t self = UINT64_C(1) << src->index;
    uint64_t others = loop_mask & ~self;
    while (others) {
        uint32_t target = (uint32_t)__builtin_ctzll(others);
        others &= others - 1;
        fanout_append(src, target, m);
    }
    if (loop_mask & self)
        gw_fanout_deliver(src, m);
}

/* --- delivery ----------------------------------------------------------------------------- */

/* Keeps the message's publish time for the publish-to-flush sample that gw_fanout_flush_done
 * takes once the loop has written this iteration's output. Without memory the sample is
 * skipped; the delivery is not affected. */
static void fanout_note_flush(gw_loop_t *lp, uint64_t publish_ns)
{
    if (lp->n_flush_pub == lp->cap_flush_pub) {
        uint32_t cap = lp->cap_flush_pub ? lp->cap_flush_pub * 2 : 64;
        uint64_t *p = realloc(lp->flush_pub_ns, cap * sizeof(*p));
        if (!p)
            return;
        lp->flush_pub_ns = p;
        lp->cap_flush_pub = cap;
    }
    lp->flush_pub_ns[lp->n_flush_pub++] = publish_ns;
}

void gw_fanout_flush_done(gw_loop_t *lp)
{
    if (lp->n_flush_pub == 0)
        return;
    nl_conn_flush_loop(lp->loop);
    uint64_t now_ns = nl_now_ns();
    for (uint32_t i = 0; i < lp->n_flush_pub; i++)
        nl_hist_record_local(&lp->stats.flush_ns, now_ns - lp->flush_pub_ns[i]);
    lp->n_flush_pub = 0;
    /* A burst's array is not kept: a quiet loop holds 1,024 entries (8 KiB) at most. */
    if (lp->cap_flush_pub > 1024) {
        free(lp->flush_pub_ns);
        lp->flush_pub_ns = NULL;
        lp->cap_flush_pub = 0;
    }
}

void gw_fanout_deliver(gw_loop_t *lp, gw_msg_t *m)
{
    gw_sub_entry_t *e = gw_sub_find(&lp->subs, m->chan, m->chan_len, m->hash);
    if (!e || !gw_sub_entry_is_active(e)) {
        /* A leave crossed the message, or the join is not answered yet (the message predates
         * it): nobody here may see it. */
        lp->stats.unrouted++;
        return;
    }
    /* A message outside the channel's sequence (offset 0: a plain Redis PUBLISH, or one
     * delivered locally while Redis was away) does not move where subscribers stand. */
    if (m->offset != 0)
        gw_sub_entry_advance(e, m->offset, m->epoch);
    uint32_t n;
    gw_sub_set_t *const *members = gw_sub_entry_members(e, &n);
    uint64_t queued = gw_session_deliver(lp, e, members, n, m->block);
    lp->stats.deliveries += queued;
    nl_hist_record_local(&lp->stats.latency_ns, nl_now_ns() - m->publish_ns);
    if (queued > 0) /* nothing is written for a message every member dropped */
        fanout_note_flush(lp, m->publish_ns);
}
