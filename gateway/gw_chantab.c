/*
 * gw_chantab: open addressing over pointers to intrusive channel keys. See gw_chantab.h.
 *
 * Why not chaining: a chain link is 8 bytes in every object for the table's whole life, and
 * at 100k personal channels per loop that is the same memory as the pointer array here, with
 * worse locality. Linear probing with backward-shift deletion keeps lookups short without
 * tombstones, so a table that churns (connections come and go) never degrades.
 */
#include "gw_chantab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CHANTAB_MIN_SLOTS 16

uint32_t gw_chantab_hash(const char *name, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)name[i];
        h *= 16777619u;
    }
    return h;
}

int gw_chantab_init(gw_chantab_t *t)
{
    t->slots = calloc(CHANTAB_MIN_SLOTS, sizeof(*t->slots));
    if (!t->slots)
        return -ENOMEM;
    t->mask = CHANTAB_MIN_SLOTS - 1;
    t->count = 0;
    return 0;
}

void gw_chantab_deinit(gw_chantab_t *t)
{
    free(t->slots);
    t->slots = NULL;
    t->mask = 0;
    t->count = 0;
}

static void chantab_place(gw_chankey_t **slots, uint32_t mask, gw_chankey_t *k)
{
    uint32_t i = k->hash & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = k;
}

static int chantab_resize(gw_chantab_t *t, uint32_t n)
{
    gw_chankey_t **slots = calloc(n, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (uint32_t i = 0; i <= t->mask; i++)
        if (t->slots[i])
            chantab_place(slots, n - 1, t->slots[i]);
    free(t->slots);
    t->slots = slots;
    t->mask = n - 1;
    return 0;
}

gw_chankey_t *gw_chantab_find(const gw_chantab_t *t, const char *name, size_t len, uint32_t hash)
{
    uint32_t i = hash & t->mask;
    for (gw_chankey_t *k; (k = t->slots[i]) != NULL; i = (i + 1) & t->mask)
        if (k->hash == hash && k->name_len == len && memcmp(k + 1, name, len) == 0)
            return k;
    return NULL;
}

int gw_chantab_insert(gw_chantab_t *t, gw_chankey_t *k)
{
    /* Up to 3/4 full: linear probing still averages about 2.5 probes for a hit there, and
     * the table is paid per connection (a personal channel each). */
    if ((uint64_t)(t->count + 1) * 4 > ((uint64_t)t->mask + 1) * 3) {
        int err = chantab_resize(t, (t->mask + 1) * 2);
        if (err < 0)
            return err;
    }
    chantab_place(t->slots, t->mask, k);
    t->count++;
    return 0;
}

/* Backward-shift deletion (Knuth 6.4, algorithm R): entries after the hole that could not be
 * found from their home slot any more move into it, so lookups never need tombstones. */
void gw_chantab_remove(gw_chantab_t *t, const gw_chankey_t *k)
{
    uint32_t mask = t->mask;
    uint32_t i = k->hash & mask;
    while (t->slots[i] != k)
        i = (i + 1) & mask;
    uint32_t hole = i;
    for (uint32_t j = (hole + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
        uint32_t home = t->slots[j]->hash & mask;
        /* Stays when its home lies cyclically in (hole, j]: the hole does not cut its path. */
        bool is_reachable = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!is_reachable) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole] = NULL;
    t->count--;
    if (mask + 1 > CHANTAB_MIN_SLOTS && (uint64_t)t->count * 8 < (uint64_t)mask + 1)
        (void)chantab_resize(t, (mask + 1) / 2); /* failing to shrink costs only memory */
}
