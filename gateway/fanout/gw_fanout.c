/*
 * gw_fanout: messages, the hub and its loop parts, posts between loops, outboxes. Delivery to
 * subscribers is gw_fanout_deliver.c. See gw_fanout.h.
 *
 * The calling thread's loop part is a thread-local pointer, set once by gw_fanout_loop_init on
 * the loop's own thread: "am I on loop i of this hub?" is then one load and one compare, with
 * no table to search and nothing for other threads to see.
 */
#include "gw_fanout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* First capacity of a batch; it doubles from there. */
#define FANOUT_BATCH_MIN 16

struct gw_fanout_batch_s {
    gw_fanout_loop_t *target;
    uint32_t count;
    uint32_t cap;
    gw_msg_t *msgs[];
};

static _Thread_local gw_fanout_loop_t *fanout_current;

/* --- frames in two framings ------------------------------------------------------------------ */

nl_block_t *gw_frame_blocks_ws(gw_frame_blocks_t *fb)
{
    nl_block_t *ws = atomic_load_explicit(&fb->ws, memory_order_acquire);
    if (ws)
        return ws;
    /* The body follows the varint prefix: bytes with the top bit set, then one without. */
    const uint8_t *p = nl_block_data(fb->tcp);
    size_t len = nl_block_len(fb->tcp);
    size_t prefix = 0;
    while (prefix < len && (p[prefix] & 0x80))
        prefix++;
    prefix++;
    size_t body = len - prefix;
    uint8_t hdr[GW_WS_HEADER_MAX];
    size_t hdr_len = gw_ws_header(hdr, body);
    nl_block_t *b = nl_block_new(hdr_len + body);
    if (!b)
        return NULL;
    memcpy(nl_block_data(b), hdr, hdr_len);
    memcpy(nl_block_data(b) + hdr_len, p + prefix, body);
    nl_block_t *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&fb->ws, &expected, b, memory_order_acq_rel,
                                                memory_order_acquire))
        return b;
    nl_block_unref(b); /* another loop built it first */
    return expected;
}

void gw_frame_blocks_deinit(gw_frame_blocks_t *fb)
{
    nl_block_unref(fb->tcp);
    nl_block_t *ws = atomic_load_explicit(&fb->ws, memory_order_acquire);
    if (ws)
        nl_block_unref(ws);
}

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
    proto_epoch_str(epoch, epoch_hex);
    Herald__Push push = HERALD__PUSH__INIT;
    push.channel = m->chan;
    push.offset = offset;
    push.epoch = epoch_hex;
    push.payload.data = (uint8_t *)(uintptr_t)payload; /* packing only reads it */
    push.payload.len = len;
    push.publish_time_ms = publish_time_ms;
    m->blocks.tcp = proto_push_block(&push);
    if (!m->blocks.tcp) {
        free(m);
        return NULL;
    }
    atomic_init(&m->blocks.ws, NULL);
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
    gw_frame_blocks_deinit(&m->blocks);
    free(m);
}

/* --- the hub and its loops ---------------------------------------------------------------- */

int gw_fanout_hub_init(gw_fanout_t *hub, uint32_t n_loops)
{
    if (n_loops == 0 || n_loops > GW_FANOUT_MAX_LOOPS)
        return -EINVAL;
    memset(hub, 0, sizeof(*hub));
    hub->n_loops = n_loops;
    return 0;
}

int gw_fanout_loop_init(gw_fanout_loop_t *fl, gw_fanout_t *hub, uint32_t index, nl_loop_t *loop,
                        const gw_sub_index_cbs_t *cbs, void *sub_arg, gw_fanout_slow_cb on_slow,
                        void *slow_arg)
{
    NL_ASSERT(index < hub->n_loops);
    memset(fl, 0, sizeof(*fl));
    fl->hub = hub;
    fl->loop = loop;
    fl->index = index;
    fl->on_slow = on_slow;
    fl->slow_arg = slow_arg;
    int err = gw_sub_index_init(&fl->subs, cbs, sub_arg);
    if (err < 0)
        return err;
    err = gw_fanout_outbox_init(&fl->out, hub);
    if (err < 0) {
        gw_sub_index_deinit(&fl->subs);
        return err;
    }
    hub->loops[index] = fl;
    fanout_current = fl;
    return 0;
}

void gw_fanout_loop_deinit(gw_fanout_loop_t *fl)
{
    gw_fanout_outbox_deinit(&fl->out);
    gw_sub_index_deinit(&fl->subs);
    free(fl->leaving);
    fl->leaving = NULL;
    fl->n_leaving = 0;
    fl->cap_leaving = 0;
    free(fl->flush_pub_ns);
    fl->flush_pub_ns = NULL;
    fl->n_flush_pub = 0;
    fl->cap_flush_pub = 0;
    if (fanout_current == fl)
        fanout_current = NULL;
}

void gw_fanout_loop_set_policy(gw_fanout_loop_t *fl, gw_slow_policy_t policy,
                               uint64_t high_water_bytes)
{
    fl->slow_policy = (uint8_t)policy;
    fl->high_water_bytes = high_water_bytes;
}

gw_fanout_loop_t *gw_fanout_loop_current(void)
{
    return fanout_current;
}

int gw_fanout_post_to(gw_fanout_t *hub, nl_loop_t *target, nl_loop_post_cb fn, void *arg)
{
    gw_fanout_loop_t *from = gw_fanout_here(hub);
    if (from)
        from->posts++;
    return nl_loop_post(target, fn, arg);
}

int gw_fanout_post(gw_fanout_t *hub, uint32_t target, nl_loop_post_cb fn, void *arg)
{
    return gw_fanout_post_to(hub, hub->loops[target]->loop, fn, arg);
}

/* --- outboxes ----------------------------------------------------------------------------- */

int gw_fanout_outbox_init(gw_fanout_outbox_t *out, gw_fanout_t *hub)
{
    memset(out, 0, sizeof(*out));
    out->hub = hub;
    out->batches = calloc(hub->n_loops, sizeof(*out->batches));
    return out->batches ? 0 : -ENOMEM;
}

static void batch_free(gw_fanout_batch_t *b)
{
    for (uint32_t i = 0; i < b->count; i++)
        gw_msg_unref(b->msgs[i]);
    free(b);
}

void gw_fanout_outbox_deinit(gw_fanout_outbox_t *out)
{
    for (uint32_t i = 0; out->batches && i < out->hub->n_loops; i++)
        if (out->batches[i])
            batch_free(out->batches[i]);
    free(out->batches);
    out->batches = NULL;
    out->pending_mask = 0;
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

void gw_fanout_outbox_add(gw_fanout_outbox_t *out, uint32_t target, gw_msg_t *m)
{
    gw_fanout_batch_t *b = out->batches[target];
    if (!b || b->count == b->cap) {
        uint32_t cap = b ? b->cap * 2 : FANOUT_BATCH_MIN;
        gw_fanout_batch_t *nb = realloc(b, sizeof(*nb) + sizeof(nb->msgs[0]) * cap);
        if (!nb) {
            out->failures++;
            return;
        }
        if (!b) {
            nb->target = out->hub->loops[target];
            nb->count = 0;
        }
        nb->cap = cap;
        out->batches[target] = b = nb;
        out->pending_mask |= UINT64_C(1) << target;
    }
    b->msgs[b->count++] = gw_msg_ref(m);
}

void gw_fanout_outbox_add_mask(gw_fanout_outbox_t *out, uint64_t loop_mask, gw_msg_t *m)
{
    for (; loop_mask; loop_mask &= loop_mask - 1)
        gw_fanout_outbox_add(out, (uint32_t)__builtin_ctzll(loop_mask), m);
}

void gw_fanout_outbox_flush_target(gw_fanout_outbox_t *out, uint32_t target)
{
    gw_fanout_batch_t *b = out->batches[target];
    if (!b)
        return;
    out->batches[target] = NULL;
    out->pending_mask &= ~(UINT64_C(1) << target);
    if (gw_fanout_post(out->hub, target, fanout_run_batch, b) < 0) {
        out->failures += b->count;
        batch_free(b);
        return;
    }
    out->batches_posted++;
}

void gw_fanout_outbox_flush(gw_fanout_outbox_t *out)
{
    uint64_t mask = out->pending_mask;
    while (mask) {
        uint32_t target = (uint32_t)__builtin_ctzll(mask);
        mask &= mask - 1;
        gw_fanout_outbox_flush_target(out, target);
    }
}

void gw_fanout_publish(gw_fanout_loop_t *fl, gw_msg_t *m, uint64_t loop_mask)
{
    uint64_t self = UINT64_C(1) << fl->index;
    gw_fanout_outbox_add_mask(&fl->out, loop_mask & ~self, m);
    if (loop_mask & self)
        gw_fanout_deliver(fl, m);
}
