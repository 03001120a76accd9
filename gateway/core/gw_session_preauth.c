/*
 * gw_session_preauth: the pre-authentication budget. A connection that has not authenticated
 * yet (no Connect, or one still being verified) costs a descriptor and a session but proves
 * nothing, so such connections are capped: [limits] max_unauthenticated for the node (and
 * never more than a quarter of the descriptors clients may have, so that they cannot take
 * them all) and max_unauthenticated_per_address for one source address. At either cap the
 * connection accepted is not refused: an older unauthenticated one gives way to it, closed at
 * once with Disconnect{SERVER_FULL, reconnect}. At an address's cap that is the address's
 * oldest; at the node's cap the oldest of the address that holds the most (the node's oldest
 * when every address holds one). So a flood only ever displaces itself: a client from another
 * address is never what gives way while a flooding address holds more, however fast the flood
 * reconnects what was closed.
 *
 * Each IO loop keeps its share of the caps (the cap divided by the loops, rounded up; the
 * accept loop deals connections round robin, so a source's connections spread evenly) and
 * needs no lock: a slab of records in accept order, linked twice, once in the loop's list and
 * once in its address's list, so that the oldest of either is at the head; and the addresses
 * in lists by how many they hold (by_count[n]), so that the heaviest is found at once. An
 * unauthenticated session keeps its record's index in the bytes that will hold its user id
 * once it authenticates (gw_session_t.data, unused before), so the budget costs an idle
 * authenticated connection nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_session_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define PA_NONE UINT32_MAX

/* A source address's unauthenticated connections on the loop. */
typedef struct gw_preauth_addr_s {
    uint32_t count;
    uint32_t head; /* oldest record */
    uint32_t tail;
    bool is_counted;                  /* in by_count[count] */
    struct gw_preauth_addr_s *c_prev; /* by_count[count]'s list */
    struct gw_preauth_addr_s *c_next;
    gw_chankey_t key;
    char name[]; /* the address as nl_conn_peer writes it, without the port */
} pa_addr_t;

/* One unauthenticated connection. A free record uses next as the free list's link. The
 * session pointer is safe to hold: a session leaves the budget (on_close, or authentication,
 * before its only reallocation) before it is freed or moved, and a connection being closed
 * (nl_conn_close called, on_close still to come) is no longer found by its id, while its
 * session is still there. */
typedef struct gw_preauth_rec_s {
    gw_session_t *s;
    uint32_t prev;
    uint32_t next;
    uint32_t addr_prev;
    uint32_t addr_next;
    pa_addr_t *addr;
} pa_rec_t;

_Static_assert(GW_SESSION_PREAUTH_BYTES >= offsetof(gw_session_t, data) + sizeof(uint32_t),
               "a pre-Connect session holds its budget record's index in data");

/* --- addresses by how many they hold ------------------------------------------------------- */

static void count_unlink(gw_preauth_t *pa, pa_addr_t *a)
{
    if (!a->is_counted)
        return;
    if (a->c_prev)
        a->c_prev->c_next = a->c_next;
    else
        pa->by_count[a->count] = a->c_next;
    if (a->c_next)
        a->c_next->c_prev = a->c_prev;
    a->is_counted = false;
    while (pa->max_count > 0 && !pa->by_count[pa->max_count])
        pa->max_count--;
}

/* Files a under its count (0: nowhere). Without memory for a longer array it stays out, and
 * is only ever evicted as the node's or its address's oldest. */
static void count_link(gw_preauth_t *pa, pa_addr_t *a)
{
    if (a->count == 0)
        return;
    if (a->count >= pa->by_count_cap) {
        uint32_t cap = pa->by_count_cap ? pa->by_count_cap : 16;
        while (cap <= a->count)
            cap *= 2;
        pa_addr_t **v = realloc(pa->by_count, (size_t)cap * sizeof(*v));
        if (!v)
            return;
        memset(v + pa->by_count_cap, 0, (size_t)(cap - pa->by_count_cap) * sizeof(*v));
        pa->by_count = v;
        pa->by_count_cap = cap;
    }
    a->c_prev = NULL;
    a->c_next = pa->by_count[a->count];
    if (a->c_next)
        a->c_next->c_prev = a;
    pa->by_count[a->count] = a;
    a->is_counted = true;
    if (a->count > pa->max_count)
        pa->max_count = a->count;
}

/* a->count += delta, keeping by_count in step. */
static void count_move(gw_preauth_t *pa, pa_addr_t *a, int delta)
{
    count_unlink(pa, a);
    a->count = (uint32_t)((int64_t)a->count + delta);
    count_link(pa, a);
}

static pa_addr_t *addr_of(gw_chankey_t *k)
{
    return k ? (pa_addr_t *)((char *)k - offsetof(pa_addr_t, key)) : NULL;
}

/* The record index + 1 kept in s's data (0: none). memcpy: data is not aligned for it. */
static uint32_t pa_slot(const gw_session_t *s)
{
    uint32_t v;
    memcpy(&v, s->data, sizeof(v));
    return v;
}

static void pa_set_slot(gw_session_t *s, uint32_t v)
{
    memcpy(s->data, &v, sizeof(v));
}

int gw_session_preauth_init(gw_loop_t *lp)
{
    gw_preauth_t *pa = &lp->preauth;
    memset(pa, 0, sizeof(*pa));
    pa->head = pa->tail = pa->free_head = PA_NONE;
    return gw_chantab_init(&pa->addrs);
}

void gw_session_preauth_deinit(gw_loop_t *lp)
{
    gw_preauth_t *pa = &lp->preauth;
    gw_chantab_t *t = &pa->addrs;
    for (uint32_t k = 0; t->slots && k <= t->mask; k++)
        free(addr_of(gw_chantab_slot(t, k)));
    gw_chantab_deinit(t);
    free(pa->recs);
    pa->recs = NULL;
    pa->cap = 0;
    free(pa->by_count);
    pa->by_count = NULL;
    pa->by_count_cap = pa->max_count = 0;
}

/* The caps of this loop: its share of the node's, rounded up. The node-wide cap is held to a
 * quarter of the descriptors clients may use, so that a flood of them always leaves
 * descriptors for clients that do authenticate. Why not half: a flood that reconnects
 * whatever is closed keeps descriptors of its own in flight besides the capped ones (accepted
 * and not yet on their IO loop; closed for a newer one and not yet released, which happens at
 * the end of the loop's iteration), in bursts of thousands under load: with herald at 8,192
 * descriptors and 3,000 capped, up to 4,100 more were seen (test_gw_hostile). */
static uint32_t pa_share(const gw_loop_t *lp, uint64_t cap)
{
    uint64_t n = lp->node->n_loops ? lp->node->n_loops : 1;
    uint64_t share = (cap + n - 1) / n;
    return share == 0 ? 1 : share > UINT32_MAX ? UINT32_MAX : (uint32_t)share;
}

static uint32_t pa_loop_cap(const gw_loop_t *lp)
{
    uint64_t cap = gw_loop_cfg(lp)->max_unauthenticated;
    uint64_t fd_share = lp->node->client_fd_line > 0 ? (uint64_t)lp->node->client_fd_line / 4 : 0;
    if (fd_share > 0 && fd_share < cap)
        cap = fd_share;
    return pa_share(lp, cap);
}

/* Takes record i out of both lists and frees it; its address goes with its last record. */
static void pa_release(gw_preauth_t *pa, uint32_t i)
{
    pa_rec_t *r = &pa->recs[i];
    if (r->prev != PA_NONE)
        pa->recs[r->prev].next = r->next;
    else
        pa->head = r->next;
    if (r->next != PA_NONE)
        pa->recs[r->next].prev = r->prev;
    else
        pa->tail = r->prev;
    pa_addr_t *a = r->addr;
    if (r->addr_prev != PA_NONE)
        pa->recs[r->addr_prev].addr_next = r->addr_next;
    else
        a->head = r->addr_next;
    if (r->addr_next != PA_NONE)
        pa->recs[r->addr_next].addr_prev = r->addr_prev;
    else
        a->tail = r->addr_prev;
    count_move(pa, a, -1);
    if (a->count == 0) {
        gw_chantab_remove(&pa->addrs, &a->key);
        free(a);
    }
    r->addr = NULL;
    r->next = pa->free_head;
    pa->free_head = i;
    pa->count--;
}

/* A free record's index (the slab grows by doubling), or PA_NONE without memory. */
static uint32_t pa_alloc(gw_preauth_t *pa)
{
    if (pa->free_head == PA_NONE) {
        uint32_t cap = pa->cap ? pa->cap * 2 : 64;
        if (cap <= pa->cap)
            return PA_NONE;
        pa_rec_t *recs = realloc(pa->recs, (size_t)cap * sizeof(*recs));
        if (!recs)
            return PA_NONE;
        for (uint32_t i = cap; i-- > pa->cap;) {
            recs[i].next = pa->free_head;
            pa->free_head = i;
        }
        pa->recs = recs;
        pa->cap = cap;
    }
    uint32_t i = pa->free_head;
    pa->free_head = pa->recs[i].next;
    return i;
}

/* The address's record set, created if needed; NULL without memory. */
static pa_addr_t *pa_addr_need(gw_preauth_t *pa, const char *name, size_t len)
{
    uint32_t hash = gw_chantab_hash(name, len);
    pa_addr_t *a = addr_of(gw_chantab_find(&pa->addrs, name, len, hash));
    if (a)
        return a;
    a = malloc(sizeof(*a) + len + 1);
    if (!a)
        return NULL;
    a->count = 0;
    a->head = a->tail = PA_NONE;
    a->is_counted = false;
    a->c_prev = a->c_next = NULL;
    memcpy(a->name, name, len);
    a->name[len] = '\0';
    a->key.hash = hash;
    a->key.name_len = (uint16_t)len;
    a->key.user = 0;
    if (gw_chantab_insert(&pa->addrs, &a->key) < 0) {
        free(a);
        return NULL;
    }
    return a;
}

/* Closes the connection of record i to make room: its record goes now, its session at the end
 * of the iteration. */
static void pa_evict(gw_loop_t *lp, uint32_t i, bool is_per_address)
{
    gw_preauth_t *pa = &lp->preauth;
    gw_session_t *s = pa->recs[i].s;
    pa_release(pa, i);
    pa_set_slot(s, 0);
    /* One being closed already (its peer hung up, say) frees its descriptor at the end of
     * this iteration anyway. */
    if (nl_conn_state(s->member.conn) == NL_CONN_DISCONNECTED)
        return;
    if (is_per_address)
        lp->stats.unauth_evicted_per_address++;
    else
        lp->stats.unauth_evicted++;
    gw_session_close_now(lp, s, GW_CLOSE_UNAUTH_LIMIT, HERALD__DISCONNECT__CODE__SERVER_FULL,
                         "too many unauthenticated connections", true);
}

void gw_session_preauth_admit(gw_loop_t *lp, gw_session_t *s)
{
    gw_preauth_t *pa = &lp->preauth;
    char peer[64];
    size_t len = 0;
    if (nl_conn_peer(s->member.conn, peer, sizeof(peer)) == 0) {
        char *colon = strrchr(peer, ':');
        len = colon ? (size_t)(colon - peer) : strlen(peer);
    }
    pa_addr_t *a = pa_addr_need(pa, peer, len);
    if (!a)
        return; /* uncounted: without memory for its address there is none for much else */
    /* Counted first: the address keeps its set while its own records give way, and counts
     * as the heavier for the one it is about to hold. */
    count_move(pa, a, +1);
    uint32_t per_addr = pa_share(lp, gw_loop_cfg(lp)->max_unauthenticated_per_address);
    while (a->count > per_addr && a->head != PA_NONE)
        pa_evict(lp, a->head, true);
    uint32_t cap = pa_loop_cap(lp);
    while (pa->count >= cap && pa->head != PA_NONE) {
        pa_addr_t *heavy = pa->max_count > 1 ? pa->by_count[pa->max_count] : NULL;
        pa_evict(lp, heavy && heavy->head != PA_NONE ? heavy->head : pa->head, false);
    }
    uint32_t i = pa_alloc(pa);
    if (i == PA_NONE) {
        count_move(pa, a, -1);
        if (a->count == 0) {
            gw_chantab_remove(&pa->addrs, &a->key);
            free(a);
        }
        return;
    }
    pa_rec_t *r = &pa->recs[i];
    r->s = s;
    r->addr = a;
    r->next = PA_NONE;
    r->prev = pa->tail;
    if (pa->tail != PA_NONE)
        pa->recs[pa->tail].next = i;
    else
        pa->head = i;
    pa->tail = i;
    r->addr_next = PA_NONE;
    r->addr_prev = a->tail;
    if (a->tail != PA_NONE)
        pa->recs[a->tail].addr_next = i;
    else
        a->head = i;
    a->tail = i;
    pa->count++;
    pa_set_slot(s, i + 1);
}

void gw_session_preauth_leave(gw_loop_t *lp, gw_session_t *s)
{
    if (s->flags & GW_SESSION_IS_AUTHED)
        return; /* data holds the user id now */
    uint32_t slot = pa_slot(s);
    if (slot == 0)
        return;
    pa_release(&lp->preauth, slot - 1);
    pa_set_slot(s, 0);
}
