/*
 * gw_channel.h: the room's public header.
 *
 * channel: what every room means by a channel: the rules of a channel name (and of the
 * token patterns that match names), and the table keyed by names that the subscription index,
 * the online table and the engines' channel maps are built on.
 *
 * Sections, one per module (each .c of the room): gw_channel_name, gw_chantab.
 */
#ifndef HERALD_GATEWAY_CHANNEL_GW_CHANNEL_H
#define HERALD_GATEWAY_CHANNEL_GW_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- gw_channel_name -------------------------------------------------------------------------- */

/*
 * gw_channel_name: what a channel name may look like, and how a token's channel patterns match
 * names.
 *
 * A channel name is 1..max_bytes bytes (GW_CHANNEL_NAME_MAX_DEFAULT = 128 unless the config
 * says otherwise), each byte one of
 *
 *     A-Z a-z 0-9 _ - : . @ / =
 *
 * No spaces, no control bytes, no UTF-8, and never '*': the star is reserved for patterns, so a
 * name can never be mistaken for one. ':' is the conventional namespace separator
 * ("chat:room1", "user:42").
 *
 * A pattern is what a token's `channels` claim lists. Three forms:
 *   - "*" alone matches every valid name;
 *   - "prefix*" (one trailing star) matches every name that starts with prefix, the name equal
 *     to prefix included: "chat:*" matches "chat:room1" and "chat:", not "chat";
 *   - anything else must be a valid name and matches only itself.
 * A star anywhere but at the end ("*chat", "a*b", "**") makes the pattern invalid. The prefix of
 * a star pattern may be empty only in "*" itself, and is at most max_bytes bytes.
 *
 * Thread: every function is pure and safe from any thread.
 * Ownership: nothing is allocated; strings are borrowed for the duration of the call.
 * Usage: gw_channel_name_check(name, len, cfg->max_channel_bytes) on every Subscribe and
 * Publish, then gw_channel_pattern_match(pattern, plen, name, len) per pattern of the token
 * (gw_token_claims_allow() does that loop).
 */
/* The default and the ceiling for the configurable name length. */
#define GW_CHANNEL_NAME_MAX_DEFAULT 128
#define GW_CHANNEL_NAME_MAX_LIMIT 1024

/* Why a name or a pattern was refused. 0 is "valid"; every error is negative. */
typedef enum gw_channel_err_e {
    GW_CHANNEL_OK = 0,
    GW_CHANNEL_ERR_EMPTY = -1,    /* zero bytes */
    GW_CHANNEL_ERR_TOO_LONG = -2, /* more than max_bytes */
    GW_CHANNEL_ERR_BAD_CHAR = -3, /* a byte outside the allowed set (in a pattern: a misplaced *) */
} gw_channel_err_t;

/* Checks that name[0..len) is a valid channel name of at most max_bytes bytes.
 * Returns: GW_CHANNEL_OK, GW_CHANNEL_ERR_EMPTY, GW_CHANNEL_ERR_TOO_LONG (checked before the
 *          characters), GW_CHANNEL_ERR_BAD_CHAR. max_bytes 0 means GW_CHANNEL_NAME_MAX_DEFAULT.
 * Thread: any. */
gw_channel_err_t gw_channel_name_check(const char *name, size_t len, size_t max_bytes);

/* Checks that pattern[0..len) is a valid pattern (see the header comment) whose prefix is at
 * most max_bytes bytes (a star pattern may thus be max_bytes + 1 bytes long).
 * Returns: as gw_channel_name_check(); a misplaced star is GW_CHANNEL_ERR_BAD_CHAR.
 * Thread: any. */
gw_channel_err_t gw_channel_pattern_check(const char *pattern, size_t len, size_t max_bytes);

/* Tells whether pattern[0..plen) matches name[0..nlen). Neither is validated here: validate
 * patterns when the token is accepted and names when the request arrives.
 * Returns: true on a match.
 * Thread: any. */
bool gw_channel_pattern_match(const char *pattern, size_t plen, const char *name, size_t nlen);

/* Returns a static snake_case text for an error ("empty", "too_long", "bad_char", "ok").
 * Thread: any. Ownership: static string. */
const char *gw_channel_err_str(gw_channel_err_t err);

/* --- gw_chantab ------------------------------------------------------------------------------- */

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
