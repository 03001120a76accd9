/*
 * gw_sub: the per-loop subscription index. See gw_fanout.h for the states and the contract.
 *
 * Memory is what this file is about: at 100k connections each subscribed to its own channel,
 * the entry of a personal channel is paid once per connection. An entry is one allocation
 * with the name inline; a single member lives inline too (the member array is allocated only
 * from the second member on); the epoch shares its word with the JOINING-only pending list.
 * The table (gw_chantab) holds pointers only.
 */
#include "gw_fanout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"

/* Members of a JOINING entry waiting for their SubscribeOk. */
typedef struct gw_sub_pending_item_s {
    gw_sub_set_t *set;
    uint64_t req_id;
} gw_sub_pending_item_t;

typedef struct gw_sub_pending_s {
    uint32_t count;
    uint32_t cap;
    gw_sub_pending_item_t items[];
} gw_sub_pending_t;

/* gw_chantab finds the name right after the key. */
_Static_assert(offsetof(gw_sub_entry_t, name) ==
                   offsetof(gw_sub_entry_t, key) + sizeof(gw_chankey_t),
               "the name must follow the key");

static gw_sub_entry_t *entry_of(gw_chankey_t *k)
{
    return k ? (gw_sub_entry_t *)((char *)k - offsetof(gw_sub_entry_t, key)) : NULL;
}

gw_sub_entry_t *gw_sub_find(const gw_sub_index_t *ix, const char *name, size_t len, uint32_t hash)
{
    return entry_of(gw_chantab_find(&ix->tab, name, len, hash));
}

int gw_sub_index_init(gw_sub_index_t *ix, const gw_sub_index_cbs_t *cbs, void *arg)
{
    memset(ix, 0, sizeof(*ix));
    int err = gw_chantab_init(&ix->tab);
    if (err < 0)
        return err;
    ix->cbs = cbs;
    ix->arg = arg;
    return 0;
}

static void entry_free(gw_sub_entry_t *e)
{
    if (e->cap > 1)
        free(e->m.many);
    if (e->key.user == GW_SUB_JOINING)
        free(e->u.pending);
    free(e);
}

void gw_sub_index_deinit(gw_sub_index_t *ix)
{
    if (!ix->tab.slots)
        return;
    for (uint32_t i = 0; i <= ix->tab.mask; i++) {
        gw_chankey_t *k = gw_chantab_slot(&ix->tab, i);
        if (k)
            entry_free(entry_of(k));
    }
    gw_chantab_deinit(&ix->tab);
    memset(ix, 0, sizeof(*ix));
}

/* --- sets --------------------------------------------------------------------------------- */

static gw_sub_entry_t **set_entries(gw_sub_set_t *set)
{
    return set->cap == 0 ? set->u.inl : set->u.heap;
}

static uint32_t *set_pos(gw_sub_set_t *set)
{
    return set->cap == 0 ? set->inl_pos : (uint32_t *)(set->u.heap + set->cap);
}

static const uint32_t *set_pos_const(const gw_sub_set_t *set)
{
    return set->cap == 0 ? set->inl_pos : (const uint32_t *)(set->u.heap + set->cap);
}

static gw_sub_entry_t *const *set_entries_const(const gw_sub_set_t *set)
{
    return set->cap == 0 ? set->u.inl : set->u.heap;
}

/* Makes room for one more slot: the heap block holds cap entry pointers, then cap positions. */
static int set_reserve(gw_sub_set_t *set)
{
    uint32_t cap = set->cap == 0 ? GW_SUB_INLINE : set->cap;
    if (set->count < cap)
        return 0;
    if (cap >= GW_SUB_SET_MAX)
        return -ENOMEM;
    uint32_t ncap = cap * 2;
    gw_sub_entry_t **heap = malloc((sizeof(*heap) + sizeof(uint32_t)) * ncap);
    if (!heap)
        return -ENOMEM;
    memcpy(heap, set_entries(set), sizeof(*heap) * set->count);
    memcpy(heap + ncap, set_pos(set), sizeof(uint32_t) * set->count);
    if (set->cap != 0)
        free(set->u.heap);
    set->u.heap = heap;
    set->cap = (uint16_t)ncap;
    return 0;
}

static int set_find(const gw_sub_set_t *set, const gw_sub_entry_t *e)
{
    gw_sub_entry_t *const *entries = set_entries_const(set);
    for (uint32_t i = 0; i < set->count; i++)
        if (entries[i] == e)
            return (int)i;
    return -1;
}

bool gw_sub_set_has(const gw_sub_set_t *set, const char *name, size_t len)
{
    gw_sub_entry_t *const *entries = set_entries_const(set);
    for (uint32_t i = 0; i < set->count; i++) {
        const gw_sub_entry_t *e = entries[i];
        if (e->key.name_len == len && memcmp(e->name, name, len) == 0)
            return true;
    }
    return false;
}

/* Moves the last slot of set into slot k (k is being removed). */
static void set_drop_slot(gw_sub_set_t *set, uint32_t k)
{
    uint32_t last = --set->count;
    set_entries(set)[k] = set_entries(set)[last];
    set_pos(set)[k] = set_pos(set)[last];
}

void gw_sub_set_deinit(gw_sub_set_t *set)
{
    if (set->cap != 0)
        free(set->u.heap);
    /* The subscriber stays what it is: its connection and the flags its owner set. */
    nl_conn_t *conn = set->conn;
    uint8_t flags = set->flags & (uint8_t)~GW_SUB_SET_RECOVERING;
    memset(set, 0, sizeof(*set));
    set->conn = conn;
    set->flags = flags;
}

/* --- entries ------------------------------------------------------------------------------ */

static gw_sub_set_t **entry_members(gw_sub_entry_t *e)
{
    return e->cap <= 1 ? &e->m.one : e->m.many;
}

static int entry_reserve(gw_sub_entry_t *e)
{
    uint32_t cap = e->cap == 0 ? 1 : e->cap;
    if (e->count < cap)
        return 0;
    if (cap >= UINT32_MAX / 2)
        return -ENOMEM;
    gw_sub_set_t **many = malloc(sizeof(*many) * cap * 2);
    if (!many)
        return -ENOMEM;
    memcpy(many, entry_members(e), sizeof(*many) * e->count);
    if (e->cap > 1)
        free(e->m.many);
    e->m.many = many;
    e->cap = cap * 2;
    return 0;
}

static int pending_reserve(gw_sub_entry_t *e)
{
    gw_sub_pending_t *p = e->u.pending;
    if (p && p->count < p->cap)
        return 0;
    uint32_t cap = p ? p->cap * 2 : 2;
    gw_sub_pending_t *np = realloc(p, sizeof(*np) + sizeof(np->items[0]) * cap);
    if (!np)
        return -ENOMEM;
    if (!p)
        np->count = 0;
    np->cap = cap;
    e->u.pending = np;
    return 0;
}

/* Drops set's waiting item from a JOINING entry. Returns whether there was one, with the
 * request it waited for in *req_id. */
static bool pending_remove(gw_sub_entry_t *e, const gw_sub_set_t *set, uint64_t *req_id)
{
    gw_sub_pending_t *p = e->u.pending;
    for (uint32_t i = 0; p && i < p->count; i++) {
        if (p->items[i].set == set) {
            *req_id = p->items[i].req_id;
            p->items[i] = p->items[--p->count];
            return true;
        }
    }
    return false;
}

static gw_sub_entry_t *entry_new(const char *name, size_t len, uint32_t hash)
{
    gw_sub_entry_t *e = calloc(1, offsetof(gw_sub_entry_t, name) + len + 1);
    if (!e)
        return NULL;
    memcpy(e->name, name, len);
    e->key.hash = hash;
    e->key.name_len = (uint16_t)len;
    e->key.user = GW_SUB_JOINING;
    return e;
}

/* Takes member slot i of set out of its entry: the last member moves into its place and its
 * own slot learns the new position. Returns whether set was still waiting for the join, with
 * its request in *req_id. */
static bool entry_drop_member(gw_sub_entry_t *e, gw_sub_set_t *set, uint32_t pos, uint64_t *req_id)
{
    gw_sub_set_t **members = entry_members(e);
    NL_ASSERT(pos < e->count && members[pos] == set);
    uint32_t last = --e->count;
    if (pos != last) {
        gw_sub_set_t *moved = members[last];
        members[pos] = moved;
        int k = set_find(moved, e);
        NL_ASSERT(k >= 0);
        set_pos(moved)[k] = pos | (set_pos(moved)[k] & GW_SUB_POS_RECOVERING);
    }
    return e->key.user == GW_SUB_JOINING && pending_remove(e, set, req_id);
}

/* The entry lost its last member: an ACTIVE one goes now, a JOINING one when answered. */
static void entry_maybe_release(gw_sub_index_t *ix, gw_sub_entry_t *e)
{
    if (e->count > 0 || e->key.user != GW_SUB_ACTIVE)
        return;
    gw_chantab_remove(&ix->tab, &e->key);
    ix->cbs->leave(e->name, e->key.name_len, e->key.hash, ix->arg);
    entry_free(e);
}

/* gw_sub_add and gw_sub_add_recovering: a recovering member is in the entry (it keeps the
 * entry alive and counts as subscribed) but waits for the history answer, not for the join. */
static int sub_add(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len,
                   uint32_t hash, uint64_t req_id, gw_sub_entry_t **out, bool is_recovering)
{
    if (len > UINT16_MAX)
        return -EINVAL;
    gw_sub_entry_t *e = gw_sub_find(ix, name, len, hash);
    bool is_new = e == NULL;
    if (!is_new && set_find(set, e) >= 0)
        return -EEXIST;
    if (is_new && (e = entry_new(name, len, hash)) == NULL)
        return -ENOMEM;
    /* Reserve everything before changing anything, so a failure leaves no trace. */
    int err = set_reserve(set);
    if (err == 0)
        err = entry_reserve(e);
    if (err == 0 && e->key.user == GW_SUB_JOINING && !is_recovering)
        err = pending_reserve(e);
    if (err == 0 && is_new)
        err = gw_chantab_insert(&ix->tab, &e->key);
    if (err < 0) {
        if (is_new)
            entry_free(e);
        return err;
    }
    entry_members(e)[e->count] = set;
    set_entries(set)[set->count] = e;
    set_pos(set)[set->count] = e->count | (is_recovering ? GW_SUB_POS_RECOVERING : 0);
    if (is_recovering)
        set->flags |= GW_SUB_SET_RECOVERING;
    e->count++;
    set->count++;
    ix->subscriptions++;
    if (out)
        *out = e;
    if (e->key.user == GW_SUB_ACTIVE && !is_recovering)
        return 1;
    if (!is_recovering) {
        gw_sub_pending_t *p = e->u.pending;
        p->items[p->count++] = (gw_sub_pending_item_t){.set = set, .req_id = req_id};
    }
    if (is_new)
        ix->cbs->join(e->name, e->key.name_len, e->key.hash, ix->arg);
    return 0;
}

int gw_sub_add(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len, uint32_t hash,
               uint64_t req_id, gw_sub_entry_t **out)
{
    return sub_add(ix, set, name, len, hash, req_id, out, false);
}

int gw_sub_add_recovering(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len,
                          uint32_t hash, gw_sub_entry_t **out)
{
    return sub_add(ix, set, name, len, hash, 0, out, true);
}

bool gw_sub_set_is_recovering(const gw_sub_set_t *set, const gw_sub_entry_t *e)
{
    if (!(set->flags & GW_SUB_SET_RECOVERING))
        return false;
    int k = set_find(set, e);
    return k >= 0 && (set_pos_const(set)[k] & GW_SUB_POS_RECOVERING);
}

bool gw_sub_set_has_recovering(const gw_sub_set_t *set)
{
    return (set->flags & GW_SUB_SET_RECOVERING) != 0;
}

/* A recovering slot went: the flag stays only while another one is left. */
static void set_update_recovering(gw_sub_set_t *set)
{
    const uint32_t *pos = set_pos_const(set);
    for (uint32_t i = 0; i < set->count; i++)
        if (pos[i] & GW_SUB_POS_RECOVERING)
            return;
    set->flags &= (uint8_t)~GW_SUB_SET_RECOVERING;
}

int gw_sub_recovered(gw_sub_set_t *set, const gw_sub_entry_t *e)
{
    int k = set_find(set, e);
    if (k < 0 || !(set_pos(set)[k] & GW_SUB_POS_RECOVERING))
        return -ENOENT;
    set_pos(set)[k] &= ~GW_SUB_POS_RECOVERING;
    set_update_recovering(set);
    return 0;
}

/* Removes slot k of set (its entry may then go). Returns whether it was still joining, with
 * the Subscribe's request in *req_id. */
static int set_remove_slot(gw_sub_index_t *ix, gw_sub_set_t *set, uint32_t k, uint64_t *req_id)
{
    gw_sub_entry_t *e = set_entries(set)[k];
    uint32_t pos = set_pos(set)[k];
    bool was_joining = entry_drop_member(e, set, pos & ~GW_SUB_POS_RECOVERING, req_id);
    set_drop_slot(set, k);
    if (pos & GW_SUB_POS_RECOVERING)
        set_update_recovering(set);
    ix->subscriptions--;
    entry_maybe_release(ix, e);
    return (pos & GW_SUB_POS_RECOVERING) ? 2 : was_joining ? 1 : 0;
}

int gw_sub_remove(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len,
                  uint32_t hash, uint64_t *pending_req)
{
    gw_sub_entry_t *e = gw_sub_find(ix, name, len, hash);
    int k = e ? set_find(set, e) : -1;
    if (k < 0)
        return -ENOENT;
    return set_remove_slot(ix, set, (uint32_t)k, pending_req);
}

void gw_sub_remove_all(gw_sub_index_t *ix, gw_sub_set_t *set)
{
    uint64_t unused;
    while (set->count > 0)
        (void)set_remove_slot(ix, set, set->count - 1u, &unused);
    gw_sub_set_deinit(set);
}

/* The join failed: every member was waiting, so each one's subscription is undone before it
 * hears about it. */
static void joined_failed(gw_sub_index_t *ix, gw_sub_entry_t *e, gw_sub_pending_t *p, int status)
{
    /* The recovering members are gathered at the front of the member array as it is read
     * (slot n_recovering <= i is written after slot i was read), to be told once the entry is
     * out of the index. */
    gw_sub_set_t **members = entry_members(e);
    uint32_t n_recovering = 0;
    for (uint32_t i = 0; i < e->count; i++) {
        gw_sub_set_t *set = members[i];
        int k = set_find(set, e);
        NL_ASSERT(k >= 0);
        bool is_recovering = set_pos(set)[k] & GW_SUB_POS_RECOVERING;
        set_drop_slot(set, (uint32_t)k);
        if (is_recovering) {
            set_update_recovering(set);
            members[n_recovering++] = set;
        }
    }
    ix->subscriptions -= e->count;
    e->count = 0;
    gw_chantab_remove(&ix->tab, &e->key);
    for (uint32_t i = 0; p && i < p->count; i++)
        ix->cbs->joined(p->items[i].set, p->items[i].req_id, status, NULL, ix->arg);
    free(p);
    for (uint32_t i = 0; i < n_recovering; i++)
        ix->cbs->recover_failed(members[i], e->name, e->key.name_len, e->key.hash, status, ix->arg);
    entry_free(e);
}

void gw_sub_joined(gw_sub_index_t *ix, const char *name, size_t len, uint32_t hash, int status,
                   uint64_t offset, uint64_t epoch)
{
    gw_sub_entry_t *e = gw_sub_find(ix, name, len, hash);
    if (!e || e->key.user != GW_SUB_JOINING)
        return;
    gw_sub_pending_t *p = e->u.pending;
    e->u.pending = NULL;
    if (status < 0) {
        joined_failed(ix, e, p, status);
        return;
    }
    e->key.user = GW_SUB_ACTIVE;
    e->offset = offset;
    e->u.epoch = epoch;
    for (uint32_t i = 0; p && i < p->count; i++)
        ix->cbs->joined(p->items[i].set, p->items[i].req_id, 0, e, ix->arg);
    free(p);
    entry_maybe_release(ix, e);
}
