/*
 * gw_recent: a table of recent records, kept for a bounded time and up to a bounded count.
 * The memory engine keeps two: when users that went offline were last seen (a user with no
 * connection left has no other trace on the node), and which publish each idempotency key
 * was given to ([limits] idempotency_window).
 *
 * A record is one allocation holding its name (any bytes but NUL) and a value of two 64-bit
 * words; the records form a list in the order they were last written, so the oldest is at
 * the head: it goes first when the table is full (max_records), and records older than ttl
 * go from the head whenever the table is written or trimmed. Records are found through a
 * gw_chantab keyed by name. Times are whatever clock the caller runs the table on (one clock
 * per table).
 *
 * Thread: a table belongs to one thread (the memory engine: one per IO loop, for the names
 * whose hash it owns); nothing locks.
 * Ownership: the caller owns the table value; the table owns its records.
 * Usage: gw_recent_init(&t, max, ttl); gw_recent_put(&t, name, len, hash, &v, now);
 *        gw_recent_get(...); now and then gw_recent_trim(&t, now).
 */
#ifndef HERALD_GATEWAY_GW_RECENT_H
#define HERALD_GATEWAY_GW_RECENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"

typedef struct gw_recent_rec_s gw_recent_rec_t;

/* A record's value; what the words mean is the caller's. */
typedef struct gw_recent_val_s {
    uint64_t a;
    uint64_t b;
} gw_recent_val_t;

typedef struct gw_recent_s {
    gw_chantab_t tab;
    gw_recent_rec_t *head; /* written longest ago */
    gw_recent_rec_t *tail; /* written last */
    uint32_t max_records;  /* 0: keep nothing */
    uint64_t ttl;
    uint64_t evicted; /* records dropped for the count limit (not for age) */
} gw_recent_t;

/* Sets up an empty table keeping at most max_records records, each for ttl after it was
 * written. Returns: 0; -ENOMEM. */
int gw_recent_init(gw_recent_t *t, uint32_t max_records, uint64_t ttl);

/* Frees every record. */
void gw_recent_deinit(gw_recent_t *t);

/* New limits (a reload): records already kept expire by the new ttl; a lower count limit
 * drops the oldest at the next put. */
void gw_recent_set_limits(gw_recent_t *t, uint32_t max_records, uint64_t ttl);

/* Sets name[0..len)'s record (hash = gw_chantab_hash of it) to *v, making it the newest, at
 * time now. Drops the oldest record when over the limit.
 * Returns: 0; -ENOMEM (nothing recorded); -EINVAL (a name over 65535 bytes). */
int gw_recent_put(gw_recent_t *t, const char *name, size_t len, uint32_t hash,
                  const gw_recent_val_t *v, uint64_t now);

/* The value of name[0..len) into *v. Returns: whether there is a record that is still within
 * its ttl at now. */
bool gw_recent_get(const gw_recent_t *t, const char *name, size_t len, uint32_t hash, uint64_t now,
                   gw_recent_val_t *v);

/* Drops the records older than the ttl at now. */
void gw_recent_trim(gw_recent_t *t, uint64_t now);

/* Records held. */
static inline uint32_t gw_recent_count(const gw_recent_t *t)
{
    return t->tab.count;
}

#endif
