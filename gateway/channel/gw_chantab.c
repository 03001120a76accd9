/*
 * gw_chantab: open addressing over pointers to intrusive channel keys. See gw_channel.h.
 *
 * Why not chaining: a chain link is 8 bytes in every object for the table's whole life, and
 * at 100k personal channels per loop that is the same memory as the pointer array here, with
 * worse locality. Linear probing with backward-shift deletion keeps lookups short without
 * tombstones, so a table that churns (connections come and go) never degrades.
 *
 * Tags: at 3/4 load a hit takes about 2.5 probes and a miss about 7, and each probe that reads
 * its key is a cache miss once the keys outgrow the cache. A slot carries 7 bits of its key's
 * hash beside the address (gw_channel.h), so only a probe whose tag matches reads the key:
 * one read per hit and almost none per miss, in the same 8 bytes a slot always took.
 */
#include "gw_channel.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CHANTAB_MIN_SLOTS 16

/* The tag bits a key with this hash carries in its slot (none where tags are off). */
static inline uintptr_t chantab_tag(uint32_t hash)
{
#ifdef GW_CHANTAB_TAG_SHIFT
    return (uintptr_t)(hash >> 25) << GW_CHANTAB_TAG_SHIFT;
#else
    (void)hash;
    return 0;
#endif
}

static inline gw_chankey_t *slot_key(uintptr_t v)
{
    return (gw_chankey_t *)(v & GW_CHANTAB_PTR_MASK);
}

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

/* Files slot value v (a tagged address) at the first free slot from its key's home. */
static void chantab_place(uintptr_t *slots, uint32_t mask, uintptr_t v)
{
    uint32_t i = slot_key(v)->hash & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = v;
}

static int chantab_resize(gw_chantab_t *t, uint32_t n)
{
    uintptr_t *slots = calloc(n, sizeof(*slots));
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
    uintptr_t tag = chantab_tag(hash);
    uint32_t i = hash & t->mask;
    for (uintptr_t v; (v = t->slots[i]) != 0; i = (i + 1) & t->mask) {
        if ((v & ~GW_CHANTAB_PTR_MASK) != tag)
            continue;
        gw_chankey_t *k = slot_key(v);
        if (k->hash == hash && k->name_len == len && memcmp(k + 1, name, len) == 0)
            return k;
    }
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
    /* The address must leave the tag bits free; x86-64 user space guarantees it. */
    if ((uintptr_t)k & ~GW_CHANTAB_PTR_MASK)
        return -EINVAL;
    chantab_place(t->slots, t->mask, (uintptr_t)k | chantab_tag(k->hash));
    t->count++;
    return 0;
}

/* Backward-shift deletion (Knuth 6.4, algorithm R): entries after the hole that could not be
 * found from their home slot any more move into it, so lookups never need tombstones. */
void gw_chantab_remove(gw_chantab_t *t, const gw_chankey_t *k)
{
    uint32_t mask = t->mask;
    uint32_t i = k->hash & mask;
    while (slot_key(t->slots[i]) != k)
        i = (i + 1) & mask;
    uint32_t hole = i;
    for (uint32_t j = (hole + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
        uint32_t home = slot_key(t->slots[j])->hash & mask;
        /* Stays when its home lies cyclically in (hole, j]: the hole does not cut its path. */
        bool is_reachable = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!is_reachable) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole] = 0;
    t->count--;
    if (mask + 1 > CHANTAB_MIN_SLOTS && (uint64_t)t->count * 8 < (uint64_t)mask + 1)
        (void)chantab_resize(t, (mask + 1) / 2); /* failing to shrink costs only memory */
}
