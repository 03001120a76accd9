/*
 * gw_chantab: a table of channel-keyed objects, the one hash table under both the per-loop
 * subscription index (gw_sub) and the memory engine's channel shards.
 *
 * Objects are intrusive: each ends with a gw_chankey_t immediately followed by the name bytes
 * (`gw_chankey_t key; char name[];`), so a name costs no extra allocation, and the table stores
 * only a pointer per object. Open addressing with linear probing and backward-shift deletion
 * (no tombstones), load factor kept between 1/8 and 3/4, so an entry costs 11-64 bytes of table
 * (about 15 in a table that grew to its size).
 *
 * Thread: a table belongs to one thread; nothing locks.
 * Ownership: the caller owns the table value and the objects; the table owns its slot array.
 * Usage: gw_chantab_init(&t); k = gw_chantab_find(&t, name, len, hash); gw_chantab_insert(&t,
 *        &obj->key); gw_chantab_remove(&t, &obj->key); gw_chantab_deinit(&t).
 */
#ifndef HERALD_GATEWAY_GW_CHANTAB_H
#define HERALD_GATEWAY_GW_CHANTAB_H

#include <stddef.h>
#include <stdint.h>

/* The key an object embeds last, right before its name bytes. */
typedef struct gw_chankey_s {
    uint32_t hash;     /* gw_chantab_hash(name) */
    uint16_t name_len; /* bytes of name, NUL excluded */
    uint16_t user;     /* spare bits for the object (gw_sub keeps its state here) */
} gw_chankey_t;

/* A slot holds a key's address, with 7 bits of its hash in the top bits where the platform
 * leaves them free (x86-64: user addresses fit in 57 bits even with 5-level paging), so a
 * probe can pass over another channel's slot without reading its key. 0: empty. */
#if defined(__x86_64__)
#define GW_CHANTAB_TAG_SHIFT 57
#define GW_CHANTAB_PTR_MASK (((uintptr_t)1 << GW_CHANTAB_TAG_SHIFT) - 1)
#else
#define GW_CHANTAB_PTR_MASK UINTPTR_MAX /* no tag: every probe reads its key */
#endif

typedef struct gw_chantab_s {
    uintptr_t *slots; /* tagged key addresses, see above */
    uint32_t mask;
    uint32_t count;
} gw_chantab_t;

/* The channel hash every loop and engine use (FNV-1a, 32 bits). Thread: any. */
uint32_t gw_chantab_hash(const char *name, size_t len);

/* The name bytes that follow a key. */
static inline char *gw_chankey_name(gw_chankey_t *k)
{
    return (char *)(k + 1);
}

/* Sets up an empty table (16 slots). Returns: 0; -ENOMEM. */
int gw_chantab_init(gw_chantab_t *t);

/* Frees the slot array (not the objects). */
void gw_chantab_deinit(gw_chantab_t *t);

/* The object keyed name[0..len) with hash, or NULL. */
gw_chankey_t *gw_chantab_find(const gw_chantab_t *t, const char *name, size_t len, uint32_t hash);

/* Adds k (not in the table; its name not present). Returns: 0; -ENOMEM (nothing added). */
int gw_chantab_insert(gw_chantab_t *t, gw_chankey_t *k);

/* Removes k, which must be in the table; may shrink the slot array. */
void gw_chantab_remove(gw_chantab_t *t, const gw_chankey_t *k);

/* Slot i (0..mask) for walking every object; NULL for an empty slot. Do not insert or remove
 * while walking. */
static inline gw_chankey_t *gw_chantab_slot(const gw_chantab_t *t, uint32_t i)
{
    return (gw_chankey_t *)(t->slots[i] & GW_CHANTAB_PTR_MASK);
}

#endif
