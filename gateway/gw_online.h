/*
 * gw_online: one IO loop's table of the users connected through it (DESIGN.md, "Online
 * status"), and lists of user names for counting distinct users across loops.
 *
 * Memory is the point, as in gw_sub: at 100k connections of 100k different users the table is
 * paid once per connection. A connection is keyed by a gw_chankey_t that it embeds right before
 * its user id (the gw_chantab convention: the name follows the key), so the table stores one
 * pointer per user and nothing is allocated for a user with one connection on the loop. Such a
 * user sits in `singles`, keyed by its connection's own key. A user with more connections here
 * gets a group (one allocation with a copy of the name and an array of the connections) in
 * `groups`; a user is in exactly one of the two tables. Taking a connection out of a group scans
 * the group's array from its end, O(connections of that user here), which a user with tens of
 * thousands of connections on one loop would feel and nobody else does.
 *
 * The key's spare 16 bits (key.user) belong to the connection: gw_online_stamp() records there,
 * in units of GW_ONLINE_STAMP_MS of the loop clock, when the connection was last seen active.
 * 16 bits of 2 s span 36 hours, more than the longest idle timeout (24 h) after which a silent
 * connection is closed, so a live connection's stamp is never ambiguous (gw_online_stamp_ms).
 *
 * A list (gw_online_list_t) is a buffer of (key, name) records, the names of users from one
 * loop; gw_online_list_distinct counts the distinct names over several lists, which is how a
 * node counts a user connected through several loops once.
 *
 * Thread: a table belongs to one loop; nothing locks. A list is built by one thread and may be
 * handed to another (after a post, which orders the accesses).
 * Ownership: the caller owns the table value and the connections' keys; the table owns its
 * slot arrays and the groups. A list owns its buffer.
 * Usage: gw_online_init(&t); after authentication k->hash = gw_online_hash(user, len),
 *        k->name_len = len, gw_online_add(&t, k); on close gw_online_remove(&t, k);
 *        gw_online_find(&t, user, len, hash, &u) for one user, gw_online_foreach for all.
 */
#ifndef HERALD_GATEWAY_GW_ONLINE_H
#define HERALD_GATEWAY_GW_ONLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_chantab.h"

/* The unit of a connection's last-seen stamp (key.user), in loop milliseconds. */
#define GW_ONLINE_STAMP_MS 2000u

typedef struct gw_online_s {
    gw_chantab_t singles; /* users with one connection here: that connection's key */
    gw_chantab_t groups;  /* users with more: a group's key */
    uint64_t conns;       /* connections in the table */
} gw_online_t;

/* One user's connections on the loop, as gw_online_find and gw_online_foreach hand them out:
 * conns[0..n) are the connections' keys, the user id follows each (key + 1). Valid until the
 * next add or remove; conns may point into the view itself, so do not copy the view. */
typedef struct gw_online_user_s {
    gw_chankey_t *const *conns;
    uint32_t n;
    gw_chankey_t *one; /* storage for conns when n == 1 */
} gw_online_user_t;

typedef void (*gw_online_user_cb)(const gw_online_user_t *u, void *arg);

/* The hash of a user id, as the keys carry it. Thread: any. */
static inline uint32_t gw_online_hash(const char *user, size_t len)
{
    return gw_chantab_hash(user, len);
}

/* Sets up an empty table. Returns: 0; -ENOMEM. Thread: the owner. */
int gw_online_init(gw_online_t *t);

/* Frees the groups and the slot arrays; the connections' keys are the caller's and are just
 * forgotten. Thread: the owner. */
void gw_online_deinit(gw_online_t *t);

/* Adds the connection keyed k (hash and name_len set, the user id after the key).
 * Returns: 1 when its user had no connection here before; 0 when it had; -ENOMEM (nothing
 * changed). Thread: the owner. */
int gw_online_add(gw_online_t *t, gw_chankey_t *k);

/* Takes the connection keyed k out. Returns: 1 when it was its user's last connection here;
 * 0 when others remain; -ENOENT when k is not in the table. Thread: the owner. */
int gw_online_remove(gw_online_t *t, gw_chankey_t *k);

/* Fills *u with the connections here of user[0..len) (hash = gw_online_hash of it).
 * Returns: how many (0: none, *u then empty). Thread: the owner. */
uint32_t gw_online_find(const gw_online_t *t, const char *user, size_t len, uint32_t hash,
                        gw_online_user_t *u);

/* Calls fn once per user of the table. fn must not add or remove. Thread: the owner. */
void gw_online_foreach(const gw_online_t *t, gw_online_user_cb fn, void *arg);

/* Users with a connection here. */
static inline uint64_t gw_online_users(const gw_online_t *t)
{
    return (uint64_t)t->singles.count + t->groups.count;
}

/* The stamp of loop time now_ms (the value a key.user holds). */
static inline uint16_t gw_online_stamp(uint64_t now_ms)
{
    return (uint16_t)(now_ms / GW_ONLINE_STAMP_MS);
}

/* The time (same clock as now_ms) at which the 2 s unit of a stamp began, for a stamp taken
 * at most 36 h before now_ms: the latest time the stamp is known not to be later than. */
static inline uint64_t gw_online_stamp_ms(uint16_t stamp, uint64_t now_ms)
{
    uint64_t unit = now_ms / GW_ONLINE_STAMP_MS;
    uint16_t age = (uint16_t)((uint16_t)unit - stamp);
    return unit >= age ? (unit - age) * GW_ONLINE_STAMP_MS : 0;
}

/* --- lists of user names ------------------------------------------------------------------ */

/* (key, name) records, 4-byte aligned, one after the other. Zero-filled is an empty list. */
typedef struct gw_online_list_s {
    char *buf;
    size_t len;
    size_t cap;
    uint32_t count;
} gw_online_list_t;

/* Appends user[0..len) (hash = gw_online_hash of it). Returns: the record's offset in the
 * buffer (>= 0); -ENOMEM; -EINVAL (a name over 65535 bytes). Thread: the list's. */
long gw_online_list_add(gw_online_list_t *l, const char *user, size_t len, uint32_t hash);

/* The name of the record at offset off (as gw_online_list_add returned it), and its length. */
static inline const char *gw_online_list_name(const gw_online_list_t *l, long off, size_t *len)
{
    const gw_chankey_t *k = (const gw_chankey_t *)(l->buf + off);
    *len = k->name_len;
    return (const char *)(k + 1);
}

/* Frees the buffer and empties the list. */
void gw_online_list_free(gw_online_list_t *l);

/* Counts the distinct names over lists[0..n) (a name in several lists, or twice in one, counts
 * once). Returns: the count, or a negative errno (-ENOMEM). Thread: any, with the lists no
 * longer written. */
int64_t gw_online_list_distinct(gw_online_list_t *const *lists, size_t n);

#endif
