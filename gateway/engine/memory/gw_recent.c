/*
 * gw_recent: recent records. See gw_recent.h.
 *
 * Ordering by write time rather than by anything in the value: the memory engine writes a
 * last-seen record when a loop reports that the user left it, and reports from different
 * loops can arrive in a different order than they happened. The list order then is the order
 * of writing, which only ever grows, so the head is always the record that expires first and
 * trimming never searches.
 */
#include "gw_recent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct gw_recent_rec_s {
    gw_recent_rec_t *prev;
    gw_recent_rec_t *next;
    gw_recent_val_t val;
    uint64_t written; /* when the record was last written: its age */
    gw_chankey_t key;
    char name[];
};

_Static_assert(offsetof(gw_recent_rec_t, name) ==
                   offsetof(gw_recent_rec_t, key) + sizeof(gw_chankey_t),
               "the name must follow the key");

static gw_recent_rec_t *rec_of(gw_chankey_t *k)
{
    return k ? (gw_recent_rec_t *)((char *)k - offsetof(gw_recent_rec_t, key)) : NULL;
}

int gw_recent_init(gw_recent_t *t, uint32_t max_records, uint64_t ttl)
{
    memset(t, 0, sizeof(*t));
    t->max_records = max_records;
    t->ttl = ttl;
    return gw_chantab_init(&t->tab);
}

void gw_recent_set_limits(gw_recent_t *t, uint32_t max_records, uint64_t ttl)
{
    t->max_records = max_records;
    t->ttl = ttl;
}

void gw_recent_deinit(gw_recent_t *t)
{
    for (gw_recent_rec_t *r = t->head; r;) {
        gw_recent_rec_t *next = r->next;
        free(r);
        r = next;
    }
    gw_chantab_deinit(&t->tab);
    t->head = t->tail = NULL;
}

static void list_unlink(gw_recent_t *t, gw_recent_rec_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        t->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        t->tail = r->prev;
    r->prev = r->next = NULL;
}

static void list_append(gw_recent_t *t, gw_recent_rec_t *r)
{
    r->prev = t->tail;
    r->next = NULL;
    if (t->tail)
        t->tail->next = r;
    else
        t->head = r;
    t->tail = r;
}

static void rec_drop(gw_recent_t *t, gw_recent_rec_t *r)
{
    list_unlink(t, r);
    gw_chantab_remove(&t->tab, &r->key);
    free(r);
}

static bool rec_is_expired(const gw_recent_t *t, const gw_recent_rec_t *r, uint64_t now)
{
    return now >= r->written && now - r->written >= t->ttl;
}

void gw_recent_trim(gw_recent_t *t, uint64_t now)
{
    while (t->head && rec_is_expired(t, t->head, now))
        rec_drop(t, t->head);
}

int gw_recent_put(gw_recent_t *t, const char *name, size_t len, uint32_t hash,
                  const gw_recent_val_t *v, uint64_t now)
{
    if (len > UINT16_MAX)
        return -EINVAL;
    gw_recent_trim(t, now);
    if (t->max_records == 0)
        return 0;
    gw_recent_rec_t *r = rec_of(gw_chantab_find(&t->tab, name, len, hash));
    if (r) {
        list_unlink(t, r);
    } else {
        r = malloc(sizeof(*r) + len + 1);
        if (!r)
            return -ENOMEM;
        memcpy(r->name, name, len);
        r->name[len] = '\0';
        r->key.hash = hash;
        r->key.name_len = (uint16_t)len;
        r->key.user = 0;
        if (gw_chantab_insert(&t->tab, &r->key) < 0) {
            free(r);
            return -ENOMEM;
        }
    }
    r->val = *v;
    r->written = now;
    list_append(t, r);
    while (t->tab.count > t->max_records) {
        rec_drop(t, t->head);
        t->evicted++;
    }
    return 0;
}

bool gw_recent_get(const gw_recent_t *t, const char *name, size_t len, uint32_t hash, uint64_t now,
                   gw_recent_val_t *v)
{
    const gw_recent_rec_t *r = rec_of(gw_chantab_find(&t->tab, name, len, hash));
    if (!r || rec_is_expired(t, r, now))
        return false;
    *v = r->val;
    return true;
}
