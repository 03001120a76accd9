/*
 * gw_history: channel histories and their store. See gw_state.h.
 *
 * The store keeps two lists. `live` holds the histories with messages, least recently
 * published first, so that the memory cap evicts from the front without passing over empty
 * ones; `empty` holds the rest, which the sweep reports to their owner (the engine frees a
 * channel that also has no subscriber). A history moves to the back of `live` at each publish
 * and to `empty` when its last message goes.
 */
#include "gw_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"

/* What a message costs beyond its block's bytes: the gw_msg_t and the block header (16 bytes
 * each, see nl_block_int.h) and two malloc chunk headers. An estimate, so the cap errs on the
 * side of counting a little more than the heap holds. */
#define HISTORY_MSG_OVERHEAD (sizeof(gw_msg_t) + 16 + 2 * 16)

/* The two lists live in the store; which one a history is on follows from its count. */
static gw_history_t **list_head(gw_history_store_t *st, bool is_live)
{
    return is_live ? &st->oldest : &st->empty_oldest;
}

static gw_history_t **list_tail(gw_history_store_t *st, bool is_live)
{
    return is_live ? &st->newest : &st->empty_newest;
}

static void list_unlink(gw_history_store_t *st, gw_history_t *h, bool is_live)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        *list_head(st, is_live) = h->next;
    if (h->next)
        h->next->prev = h->prev;
    else
        *list_tail(st, is_live) = h->prev;
    h->prev = h->next = NULL;
}

static void list_append(gw_history_store_t *st, gw_history_t *h, bool is_live)
{
    gw_history_t **tail = list_tail(st, is_live);
    h->prev = *tail;
    h->next = NULL;
    if (*tail)
        (*tail)->next = h;
    else
        *list_head(st, is_live) = h;
    *tail = h;
}

size_t gw_history_msg_bytes(const gw_msg_t *m)
{
    return HISTORY_MSG_OVERHEAD + m->chan_len + 1 + nl_block_len(m->blocks.tcp);
}

void gw_history_store_init(gw_history_store_t *st, uint64_t max_bytes)
{
    memset(st, 0, sizeof(*st));
    st->max_bytes = max_bytes;
}

static uint32_t pow2_at_least(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static void history_apply_rule(gw_history_t *h, const gw_history_rule_t *r)
{
    h->max_count = r->count;
    h->age_ns = r->age_ms * 1000000ull;
}

int gw_history_new(gw_history_store_t *st, gw_history_t **out, const gw_history_rule_t *r,
                   void *owner)
{
    NL_ASSERT(r->count > 0);
    gw_history_t *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    history_apply_rule(h, r);
    h->owner = owner;
    list_append(st, h, false);
    st->histories++;
    st->bytes += sizeof(*h);
    *out = h;
    return 0;
}

/* Drops h's oldest message, counted under why. */
static void history_drop_oldest(gw_history_store_t *st, gw_history_t *h, gw_history_evict_t why)
{
    gw_msg_t *m = h->ring[h->head];
    h->ring[h->head] = NULL;
    h->head = (h->head + 1) & (h->cap - 1);
    h->count--;
    size_t bytes = gw_history_msg_bytes(m);
    h->bytes -= bytes;
    st->bytes -= bytes;
    st->messages--;
    st->evicted[why]++;
    gw_msg_unref(m);
    if (h->count == 0) {
        list_unlink(st, h, true);
        list_append(st, h, false);
    }
}

void gw_history_free(gw_history_store_t *st, gw_history_t *h)
{
    if (!h)
        return;
    list_unlink(st, h, h->count > 0);
    for (; h->count > 0; h->count--) {
        gw_msg_t *m = h->ring[h->head];
        h->head = (h->head + 1) & (h->cap - 1);
        st->bytes -= gw_history_msg_bytes(m);
        st->messages--;
        gw_msg_unref(m);
    }
    st->histories--;
    st->bytes -= sizeof(*h) + sizeof(*h->ring) * h->cap;
    free(h->ring);
    free(h);
}

void gw_history_trim_age(gw_history_store_t *st, gw_history_t *h, uint64_t now_ns)
{
    if (h->age_ns == 0 || now_ns < h->age_ns)
        return;
    uint64_t oldest_ok_ns = now_ns - h->age_ns;
    while (h->count > 0 && h->ring[h->head]->publish_ns < oldest_ok_ns)
        history_drop_oldest(st, h, GW_HISTORY_EVICT_AGE);
}

void gw_history_set_rule(gw_history_store_t *st, gw_history_t *h, const gw_history_rule_t *r)
{
    NL_ASSERT(r->count > 0);
    history_apply_rule(h, r);
    while (h->count > h->max_count)
        history_drop_oldest(st, h, GW_HISTORY_EVICT_COUNT);
    gw_history_trim_age(st, h, nl_now_ns());
}

/* Doubles the ring (up to the rule's count rounded to a power of two). Returns false without
 * memory, or when it may not grow further. */
static bool history_grow(gw_history_store_t *st, gw_history_t *h)
{
    uint32_t limit = pow2_at_least(h->max_count);
    if (h->cap >= limit)
        return false;
    uint32_t ncap = h->cap ? h->cap * 2 : 4;
    if (ncap > limit)
        ncap = limit;
    gw_msg_t **ring = malloc(sizeof(*ring) * ncap);
    if (!ring)
        return false;
    for (uint32_t i = 0; i < h->count; i++)
        ring[i] = h->ring[(h->head + i) & (h->cap - 1)];
    free(h->ring);
    st->bytes += sizeof(*ring) * (ncap - h->cap);
    h->ring = ring;
    h->cap = ncap;
    h->head = 0;
    return true;
}

/* Evicts the least recently published channels' oldest messages until st fits its cap. h (the
 * history just published to, at the back of the list) goes last. */
static void store_enforce_cap(gw_history_store_t *st)
{
    while (st->bytes > st->max_bytes && st->oldest)
        history_drop_oldest(st, st->oldest, GW_HISTORY_EVICT_MEMORY);
}

void gw_history_store_set_max(gw_history_store_t *st, uint64_t max_bytes)
{
    st->max_bytes = max_bytes;
    store_enforce_cap(st);
}

void gw_history_add(gw_history_store_t *st, gw_history_t *h, gw_msg_t *m, uint64_t now_ns)
{
    if (h->count > 0 && h->count >= h->max_count)
        history_drop_oldest(st, h, GW_HISTORY_EVICT_COUNT);
    if (h->count == h->cap && !history_grow(st, h)) {
        /* The ring is as large as it may get (or cannot grow): the oldest message makes room,
         * so the history stays a run of consecutive offsets. */
        if (h->count == 0)
            return; /* not even one slot: the message is delivered, just not kept */
        history_drop_oldest(st, h, GW_HISTORY_EVICT_MEMORY);
    }
    bool was_empty = h->count == 0;
    h->ring[(h->head + h->count) & (h->cap - 1)] = gw_msg_ref(m);
    h->count++;
    size_t bytes = gw_history_msg_bytes(m);
    h->bytes += bytes;
    st->bytes += bytes;
    st->messages++;
    list_unlink(st, h, !was_empty);
    list_append(st, h, true);
    gw_history_trim_age(st, h, now_ns);
    store_enforce_cap(st);
}

bool gw_history_covers(const gw_history_t *h, uint64_t since, uint64_t latest)
{
    if (since == latest)
        return true;
    if (since > latest || h->count == 0)
        return false;
    uint64_t first = h->ring[h->head]->offset;
    uint64_t newest = first + h->count - 1;
    return newest == latest && since + 1 >= first;
}

void gw_history_since(const gw_history_t *h, uint64_t since, gw_msg_t *const **msgs, uint32_t *n0,
                      gw_msg_t *const **msgs2, uint32_t *n, uint64_t *bytes)
{
    *n = 0;
    *n0 = 0;
    *msgs = *msgs2 = NULL;
    *bytes = 0;
    if (h->count == 0)
        return;
    uint64_t first = h->ring[h->head]->offset;
    uint32_t skip = since + 1 > first ? (uint32_t)(since + 1 - first) : 0;
    if (skip >= h->count)
        return;
    uint32_t total = h->count - skip;
    uint32_t start = (h->head + skip) & (h->cap - 1);
    uint32_t first_run = h->cap - start < total ? h->cap - start : total;
    *msgs = h->ring + start;
    *n0 = first_run;
    *msgs2 = h->ring;
    *n = total;
    for (uint32_t i = 0; i < total; i++)
        *bytes += gw_history_msg_bytes(h->ring[(start + i) & (h->cap - 1)]);
}

void gw_history_store_sweep(gw_history_store_t *st, uint64_t now_ns, gw_history_empty_cb on_empty,
                            void *arg)
{
    for (gw_history_t *h = st->oldest, *next; h; h = next) {
        next = h->next;
        gw_history_trim_age(st, h, now_ns); /* may move h to the empty list */
    }
    for (gw_history_t *h = st->empty_oldest, *next; h; h = next) {
        next = h->next;
        on_empty(h, arg);
    }
}
