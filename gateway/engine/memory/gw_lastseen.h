/*
 * gw_lastseen: when users that went offline were last seen, kept for a bounded time and up to
 * a bounded count (the memory engine's share of "online status": a user with no connection
 * left has no other trace on the node).
 *
 * A record is one allocation holding the user id and the time; the records form a list in the
 * order they were last written, so the oldest is at the head: it goes first when the table
 * is full (max_records), and records older than ttl_ms go from the head whenever the table is
 * written or trimmed. Records are found through a gw_chantab keyed by user id.
 *
 * Thread: a table belongs to one thread (the memory engine: one per IO loop, for the users
 * whose hash it owns); nothing locks.
 * Ownership: the caller owns the table value; the table owns its records.
 * Usage: gw_lastseen_init(&ls, max, ttl); when a user goes offline gw_lastseen_put(&ls, user,
 *        len, hash, at_ms, now_ms); to answer a query gw_lastseen_get(...); now and then
 *        gw_lastseen_trim(&ls, now_ms).
 */
#ifndef HERALD_GATEWAY_GW_LASTSEEN_H
#define HERALD_GATEWAY_GW_LASTSEEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"

typedef struct gw_lastseen_rec_s gw_lastseen_rec_t;

typedef struct gw_lastseen_s {
    gw_chantab_t tab;
    gw_lastseen_rec_t *head; /* written longest ago */
    gw_lastseen_rec_t *tail; /* written last */
    uint32_t max_records;    /* 0: keep nothing */
    uint64_t ttl_ms;
    uint64_t evicted; /* records dropped for the count limit (not for age) */
} gw_lastseen_t;

/* Sets up an empty table keeping at most max_records records, each for ttl_ms after it was
 * written. Returns: 0; -ENOMEM. */
int gw_lastseen_init(gw_lastseen_t *ls, uint32_t max_records, uint64_t ttl_ms);

/* Frees every record. */
void gw_lastseen_deinit(gw_lastseen_t *ls);

/* Records that user[0..len) (hash = gw_chantab_hash of it) was last seen at at_ms, unless it
 * already has a later time; either way its record becomes the newest. now_ms is the clock
 * the ttl runs on (the same as at_ms: Unix ms). Drops the oldest record when over the limit.
 * Returns: 0; -ENOMEM (nothing recorded); -EINVAL (a name over 65535 bytes). */
int gw_lastseen_put(gw_lastseen_t *ls, const char *user, size_t len, uint32_t hash, uint64_t at_ms,
                    uint64_t now_ms);

/* The last-seen time of user[0..len) into *at_ms. Returns: whether there is a record that is
 * still within its ttl at now_ms. */
bool gw_lastseen_get(const gw_lastseen_t *ls, const char *user, size_t len, uint32_t hash,
                     uint64_t now_ms, uint64_t *at_ms);

/* Drops the records older than the ttl at now_ms. */
void gw_lastseen_trim(gw_lastseen_t *ls, uint64_t now_ms);

/* Records held. */
static inline uint32_t gw_lastseen_count(const gw_lastseen_t *ls)
{
    return ls->tab.count;
}

#endif
