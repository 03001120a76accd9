/*
 * gw_evgate: a loop's gate for join/leave events. See gw_state.h.
 *
 * A record lives from a key's first event until a whole window passed in which the key sent
 * nothing: then a new event of it goes out at once again. "Fresh" marks a record that sent
 * an event during the window that is ending; a tick keeps it one more window (unfresh), the
 * next one drops it if it still holds nothing. So the leading event of a burst goes out at
 * once, what follows within the next one or two windows is coalesced to its net change.
 */
#include "gw_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"

/* Key: the connection id's 8 bytes, then the listener channel's name. */
typedef struct evgate_rec_s {
    gw_event_t *held; /* the net change not sent yet; NULL: none */
    bool is_held_join;
    bool is_fresh;                   /* an event of the key went out in the current window */
    struct evgate_rec_s *next_stale; /* gw_evgate_tick's list of records to drop */
    gw_chankey_t key;
    char name[];
} evgate_rec_t;

#define EVGATE_ID_BYTES sizeof(uint64_t)

static evgate_rec_t *rec_of(gw_chankey_t *k)
{
    return k ? (evgate_rec_t *)((char *)k - offsetof(evgate_rec_t, key)) : NULL;
}

int gw_evgate_init(gw_evgate_t *g)
{
    memset(g, 0, sizeof(*g));
    return gw_chantab_init(&g->keys);
}

void gw_evgate_deinit(gw_evgate_t *g)
{
    gw_chantab_t *t = &g->keys;
    for (uint32_t k = 0; t->slots && k <= t->mask; k++) {
        evgate_rec_t *r = rec_of(gw_chantab_slot(t, k));
        if (!r)
            continue;
        if (r->held)
            gw_event_unref(r->held);
        free(r);
    }
    gw_chantab_deinit(t);
    g->held = 0;
}

gw_event_t *gw_evgate_offer(gw_evgate_t *g, gw_event_t *ev, bool is_join)
{
    /* A listener channel is a channel name and its prefix byte. */
    char key[EVGATE_ID_BYTES + GW_CHANNEL_NAME_MAX_LIMIT + 1];
    if (ev->chan_len > GW_CHANNEL_NAME_MAX_LIMIT + 1)
        return ev;
    size_t klen = EVGATE_ID_BYTES + ev->chan_len;
    memcpy(key, &ev->subject_conn, EVGATE_ID_BYTES);
    memcpy(key + EVGATE_ID_BYTES, ev->chan, ev->chan_len);
    uint32_t hash = gw_chantab_hash(key, klen);
    evgate_rec_t *r = rec_of(gw_chantab_find(&g->keys, key, klen, hash));
    if (!r) {
        /* The key's first event in a while: it goes out now, and the record remembers that. */
        r = malloc(sizeof(*r) + klen);
        if (!r)
            return ev;
        memcpy(r->name, key, klen);
        r->key.hash = hash;
        r->key.name_len = (uint16_t)klen;
        r->key.user = 0;
        r->held = NULL;
        r->is_held_join = false;
        r->is_fresh = true;
        r->next_stale = NULL;
        if (gw_chantab_insert(&g->keys, &r->key) < 0) {
            free(r);
            return ev;
        }
        return ev;
    }
    if (!r->held) {
        r->held = ev;
        r->is_held_join = is_join;
        g->held++;
        return NULL;
    }
    if (r->is_held_join != is_join) {
        /* This undoes the held change: the listeners are where they were, neither is sent. */
        gw_event_unref(r->held);
        gw_event_unref(ev);
        r->held = NULL;
        g->held--;
        g->coalesced += 2;
        return NULL;
    }
    /* The same change twice (the session never sends that): the newer one stands. */
    gw_event_unref(r->held);
    r->held = ev;
    g->coalesced++;
    return NULL;
}

void gw_evgate_tick(gw_evgate_t *g, gw_evgate_emit_cb emit, void *arg)
{
    gw_chantab_t *t = &g->keys;
    /* Records go after the walk: removing one moves others within the table (and may shrink
     * it), under the walk. */
    evgate_rec_t *stale = NULL;
    for (uint32_t k = 0; t->slots && k <= t->mask; k++) {
        evgate_rec_t *r = rec_of(gw_chantab_slot(t, k));
        if (!r)
            continue;
        if (r->held) {
            gw_event_t *ev = r->held;
            r->held = NULL;
            g->held--;
            r->is_fresh = true;
            emit(ev, r->is_held_join, arg);
        } else if (r->is_fresh) {
            r->is_fresh = false;
        } else {
            r->next_stale = stale;
            stale = r;
        }
    }
    while (stale) {
        evgate_rec_t *r = stale;
        stale = r->next_stale;
        gw_chantab_remove(t, &r->key);
        free(r);
    }
}
