/*
 * gw_online: the per-loop user table and name lists. See gw_state.h.
 *
 * Two tables rather than one with a flag per slot: gw_chantab's slots carry only the key's
 * address (and hash bits), and a key cannot say what it belongs to without a spare bit that the
 * connection's key does not have (its 16 spare bits hold the last-seen stamp). A lookup for a
 * user with several connections therefore misses in `singles` before it finds the group; that
 * is one extra probe on the paths that look users up (authentication, close, queries), never on
 * the delivery path.
 */
#include "gw_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"

/* A user with several connections on the loop. The key and a copy of the user id come last,
 * as gw_chantab expects. */
typedef struct online_group_s {
    gw_chankey_t **conns;
    uint32_t count;
    uint32_t cap;
    gw_chankey_t key;
    char name[];
} online_group_t;

_Static_assert(offsetof(online_group_t, name) ==
                   offsetof(online_group_t, key) + sizeof(gw_chankey_t),
               "the name must follow the key");

static online_group_t *group_of(gw_chankey_t *k)
{
    return k ? (online_group_t *)((char *)k - offsetof(online_group_t, key)) : NULL;
}

static const char *key_name(const gw_chankey_t *k)
{
    return (const char *)(k + 1);
}

int gw_online_init(gw_online_t *t)
{
    memset(t, 0, sizeof(*t));
    int err = gw_chantab_init(&t->singles);
    if (err < 0)
        return err;
    err = gw_chantab_init(&t->groups);
    if (err < 0)
        gw_chantab_deinit(&t->singles);
    return err;
}

static void group_free(online_group_t *g)
{
    free(g->conns);
    free(g);
}

void gw_online_deinit(gw_online_t *t)
{
    for (uint32_t i = 0; t->groups.slots && i <= t->groups.mask; i++) {
        gw_chankey_t *k = gw_chantab_slot(&t->groups, i);
        if (k)
            group_free(group_of(k));
    }
    gw_chantab_deinit(&t->groups);
    gw_chantab_deinit(&t->singles);
    t->conns = 0;
}

static int group_reserve(online_group_t *g)
{
    if (g->count < g->cap)
        return 0;
    if (g->cap >= UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t cap = g->cap ? g->cap * 2 : 4;
    gw_chankey_t **conns = realloc(g->conns, sizeof(*conns) * cap);
    if (!conns)
        return -ENOMEM;
    g->conns = conns;
    g->cap = cap;
    return 0;
}

/* The user's second connection arrived: first (alone in `singles` so far) and k move into a
 * new group. Nothing changes on failure. */
static int group_create(gw_online_t *t, gw_chankey_t *first, gw_chankey_t *k)
{
    online_group_t *g = calloc(1, sizeof(*g) + first->name_len + 1u);
    if (!g)
        return -ENOMEM;
    memcpy(g->name, key_name(first), first->name_len);
    g->key.hash = first->hash;
    g->key.name_len = first->name_len;
    int err = group_reserve(g);
    if (err == 0)
        err = gw_chantab_insert(&t->groups, &g->key);
    if (err < 0) {
        group_free(g);
        return err;
    }
    gw_chantab_remove(&t->singles, first);
    g->conns[g->count++] = first;
    g->conns[g->count++] = k;
    return 0;
}

int gw_online_add(gw_online_t *t, gw_chankey_t *k)
{
    const char *name = key_name(k);
    gw_chankey_t *first = gw_chantab_find(&t->singles, name, k->name_len, k->hash);
    int err;
    int rc = 0;
    if (first) {
        err = group_create(t, first, k);
    } else {
        online_group_t *g = group_of(gw_chantab_find(&t->groups, name, k->name_len, k->hash));
        if (g) {
            err = group_reserve(g);
            if (err == 0)
                g->conns[g->count++] = k;
        } else {
            err = gw_chantab_insert(&t->singles, k);
            rc = 1;
        }
    }
    if (err < 0)
        return err;
    t->conns++;
    return rc;
}

int gw_online_remove(gw_online_t *t, gw_chankey_t *k)
{
    const char *name = key_name(k);
    if (gw_chantab_find(&t->singles, name, k->name_len, k->hash) == k) {
        gw_chantab_remove(&t->singles, k);
        t->conns--;
        return 1;
    }
    online_group_t *g = group_of(gw_chantab_find(&t->groups, name, k->name_len, k->hash));
    if (!g)
        return -ENOENT;
    /* From the end: a connection that closes soon after it came is found at once. */
    uint32_t i = g->count;
    while (i > 0 && g->conns[i - 1] != k)
        i--;
    if (i == 0)
        return -ENOENT;
    g->conns[i - 1] = g->conns[--g->count];
    t->conns--;
    bool is_last = g->count == 0;
    /* One connection left: back to `singles`, where it costs nothing. The insert can only fail
     * for memory when the table must grow; the group then stays with one member, which every
     * function here handles (and which goes when that member does). */
    if (is_last || (g->count == 1 && gw_chantab_insert(&t->singles, g->conns[0]) == 0)) {
        gw_chantab_remove(&t->groups, &g->key);
        group_free(g);
    }
    return is_last ? 1 : 0;
}

uint32_t gw_online_find(const gw_online_t *t, const char *user, size_t len, uint32_t hash,
                        gw_online_user_t *u)
{
    u->one = gw_chantab_find(&t->singles, user, len, hash);
    if (u->one) {
        u->conns = &u->one;
        u->n = 1;
        return 1;
    }
    online_group_t *g = group_of(gw_chantab_find(&t->groups, user, len, hash));
    u->conns = g ? g->conns : NULL;
    u->n = g ? g->count : 0;
    return u->n;
}

void gw_online_foreach(const gw_online_t *t, gw_online_user_cb fn, void *arg)
{
    gw_online_user_t u;
    /* A walk reads every user's key, most of them cache misses at this size: ask for the key
     * a few slots ahead, so that several misses overlap. */
    const gw_chantab_t *s = &t->singles;
    for (uint32_t i = 0; s->slots && i <= s->mask; i++) {
        if (i + 8 <= s->mask)
            __builtin_prefetch(gw_chantab_slot(s, i + 8));
        u.one = gw_chantab_slot(s, i);
        if (!u.one)
            continue;
        u.conns = &u.one;
        u.n = 1;
        fn(&u, arg);
    }
    const gw_chantab_t *g = &t->groups;
    for (uint32_t i = 0; g->slots && i <= g->mask; i++) {
        online_group_t *grp = group_of(gw_chantab_slot(g, i));
        if (!grp)
            continue;
        u.one = NULL;
        u.conns = grp->conns;
        u.n = grp->count;
        fn(&u, arg);
    }
}

/* --- lists -------------------------------------------------------------------------------- */

long gw_online_list_add(gw_online_list_t *l, const char *user, size_t len, uint32_t hash)
{
    if (len > UINT16_MAX)
        return -EINVAL;
    /* Records stay 4-byte aligned: the next key starts on a multiple of its alignment. */
    size_t rec = (sizeof(gw_chankey_t) + len + 1 + 3) & ~(size_t)3;
    if (l->len + rec > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        while (cap < l->len + rec)
            cap *= 2;
        char *buf = realloc(l->buf, cap);
        if (!buf)
            return -ENOMEM;
        l->buf = buf;
        l->cap = cap;
    }
    long off = (long)l->len;
    gw_chankey_t *k = (gw_chankey_t *)(l->buf + l->len);
    k->hash = hash;
    k->name_len = (uint16_t)len;
    k->user = 0;
    memcpy(k + 1, user, len);
    ((char *)(k + 1))[len] = '\0';
    l->len += rec;
    l->count++;
    return off;
}

void gw_online_list_free(gw_online_list_t *l)
{
    free(l->buf);
    memset(l, 0, sizeof(*l));
}

int64_t gw_online_list_distinct(gw_online_list_t *const *lists, size_t n)
{
    /* The records themselves are the keys of a scratch table: no copy of any name. */
    gw_chantab_t seen;
    int err = gw_chantab_init(&seen);
    if (err < 0)
        return err;
    int64_t distinct = 0;
    for (size_t i = 0; i < n && err == 0; i++) {
        gw_online_list_t *l = lists[i];
        for (size_t off = 0; l && off < l->len && err == 0;) {
            gw_chankey_t *k = (gw_chankey_t *)(l->buf + off);
            off += (sizeof(*k) + k->name_len + 1u + 3u) & ~(size_t)3;
            if (gw_chantab_find(&seen, key_name(k), k->name_len, k->hash))
                continue;
            err = gw_chantab_insert(&seen, k);
            distinct++;
        }
    }
    gw_chantab_deinit(&seen);
    return err < 0 ? err : distinct;
}
