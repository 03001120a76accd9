/*
 * gw_lastseen: recently offline users. See gw_lastseen.h.
 *
 * Ordering by write time rather than by the recorded time: the memory engine writes a record
 * when a loop reports that the user left it, and reports from different loops can arrive in a
 * different order than they happened. The list order then is the order of arrival, which only
 * ever grows, so the head is always the record that expires first and trimming never searches.
 */
#include "gw_lastseen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct gw_lastseen_rec_s {
    gw_lastseen_rec_t *prev;
    gw_lastseen_rec_t *next;
    uint64_t at_ms;      /* the value: when the user was last seen */
    uint64_t written_ms; /* when the record was last written: its age */
    gw_chankey_t key;
    char name[];
};

_Static_assert(offsetof(gw_lastseen_rec_t, name) ==
                   offsetof(gw_lastseen_rec_t, key) + sizeof(gw_chankey_t),
               "the name must follow the key");

static gw_lastseen_rec_t *rec_of(gw_chankey_t *k)
{
    return k ? (gw_lastseen_rec_t *)((char *)k - offsetof(gw_lastseen_rec_t, key)) : NULL;
}

int gw_lastseen_init(gw_lastseen_t *ls, uint32_t max_records, uint64_t ttl_ms)
{
    memset(ls, 0, sizeof(*ls));
    ls->max_records = max_records;
    ls->ttl_ms = ttl_ms;
    return gw_chantab_init(&ls->tab);
}

void gw_lastseen_deinit(gw_lastseen_t *ls)
{
    for (gw_lastseen_rec_t *r = ls->head; r;) {
        gw_lastseen_rec_t *next = r->next;
        free(r);
        r = next;
    }
    gw_chantab_deinit(&ls->tab);
    ls->head = ls->tail = NULL;
}

static void list_unlink(gw_lastseen_t *ls, gw_lastseen_rec_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        ls->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        ls->tail = r->prev;
    r->prev = r->next = NULL;
}

static void list_append(gw_lastseen_t *ls, gw_lastseen_rec_t *r)
{
    r->prev = ls->tail;
    r->next = NULL;
    if (ls->tail)
        ls->tail->next = r;
    else
        ls->head = r;
    ls->tail = r;
}

static void rec_drop(gw_lastseen_t *ls, gw_lastseen_rec_t *r)
{
    list_unlink(ls, r);
    gw_chantab_remove(&ls->tab, &r->key);
    free(r);
}

static bool rec_is_expired(const gw_lastseen_t *ls, const gw_lastseen_rec_t *r, uint64_t now_ms)
{
    return now_ms >= r->written_ms && now_ms - r->written_ms >= ls->ttl_ms;
}

void gw_lastseen_trim(gw_lastseen_t *ls, uint64_t now_ms)
{
    while (ls->head && rec_is_expired(ls, ls->head, now_ms))
        rec_drop(ls, ls->head);
}

int gw_lastseen_put(gw_lastseen_t *ls, const char *user, size_t len, uint32_t hash, uint64_t at_ms,
                    uint64_t now_ms)
{
    if (len > UINT16_MAX)
        return -EINVAL;
    gw_lastseen_trim(ls, now_ms);
    if (ls->max_records == 0)
        return 0;
    gw_lastseen_rec_t *r = rec_of(gw_chantab_find(&ls->tab, user, len, hash));
    if (r) {
        list_unlink(ls, r);
        if (at_ms > r->at_ms)
            r->at_ms = at_ms;
    } else {
        r = malloc(sizeof(*r) + len + 1);
        if (!r)
            return -ENOMEM;
        memcpy(r->name, user, len);
        r->name[len] = '\0';
        r->key.hash = hash;
        r->key.name_len = (uint16_t)len;
        r->key.user = 0;
        r->at_ms = at_ms;
        if (gw_chantab_insert(&ls->tab, &r->key) < 0) {
            free(r);
            return -ENOMEM;
        }
    }
    r->written_ms = now_ms;
    list_append(ls, r);
    while (ls->tab.count > ls->max_records) {
        rec_drop(ls, ls->head);
        ls->evicted++;
    }
    return 0;
}

bool gw_lastseen_get(const gw_lastseen_t *ls, const char *user, size_t len, uint32_t hash,
                     uint64_t now_ms, uint64_t *at_ms)
{
    const gw_lastseen_rec_t *r = rec_of(gw_chantab_find(&ls->tab, user, len, hash));
    if (!r || rec_is_expired(ls, r, now_ms))
        return false;
    *at_ms = r->at_ms;
    return true;
}
