/*
 * gw_presence_mem: the memory engine's online status and presence (gw_engine.h's presence,
 * online, online_counts, user_offline and refresh on one node).
 *
 * The loops' own tables are the state: who is online is each loop's gw_online table, who is in
 * a channel each loop's subscription index. A query posts one closure to every IO loop; each
 * copies its share into its own slot (the host's presence_part, online_part and counts_part
 * hooks), and the loop that finishes last (an atomic count, as in
 * gw_stats_collect) merges them: sums, the distinct users over all loops' name lists (a user
 * connected through two loops counts once), the client list up to [presence] max_clients. The
 * answer then goes where the reply asks (posted to the requester's loop, or given on the
 * merging thread for an HTTP request).
 *
 * Besides the loops, this keeps the last-seen times of users who went offline
 * (gw_recent), one table per loop for the users whose hash it owns (hash % loops, like the
 * engine's channels), [presence] last_seen_max records in all, each for last_seen_ttl. A loop
 * reports a user that lost its last connection there (user_offline) by a post to the owner;
 * the owner keeps the latest time. A query reads the owner's table only when the user has no
 * connection left.
 *
 * Thread: the query functions from any thread (IO loops, the HTTP thread); offline and refresh
 * on the loop they are about. Ownership: the memory engine creates and frees it.
 */
#ifndef HERALD_GATEWAY_GW_PRESENCE_MEM_H
#define HERALD_GATEWAY_GW_PRESENCE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "gw_engine.h"

typedef struct gw_presence_mem_s gw_presence_mem_t;

/* Creates the last-seen tables for node's loops from its [presence] settings.
 * Returns: 0; -ENOMEM. Thread: the node's, before the loops carry traffic. */
int gw_presence_mem_new(gw_presence_mem_t **out, const gw_engine_host_t *host);

/* Frees it. NULL is fine. Thread: the node's, after every IO loop stopped. */
void gw_presence_mem_free(gw_presence_mem_t *pm);

/* The engine queries (see gw_engine.h). Returns: 0 (reply->cb runs once); -ENOMEM;
 * -ESHUTDOWN (the node stops; the callback will not run). Thread: any. */
int gw_presence_mem_channel(gw_presence_mem_t *pm, const char *chan, size_t len,
                            const gw_engine_reply_t *reply);
int gw_presence_mem_user(gw_presence_mem_t *pm, const char *user, size_t len,
                         const gw_engine_reply_t *reply);
int gw_presence_mem_counts(gw_presence_mem_t *pm, const gw_engine_reply_t *reply);

/* A user lost its last connection on loop loop_index at at_ms. Thread: that loop. */
void gw_presence_mem_offline(gw_presence_mem_t *pm, uint32_t loop_index, const char *user,
                             size_t len, uint64_t at_ms);

/* A loop's refresh batch: the loop's share of last-seen records is trimmed of expired ones.
 * Thread: the batch's loop. */
void gw_presence_mem_refresh(gw_presence_mem_t *pm, const gw_presence_batch_t *batch);

/* Last-seen records held by loop loop_index's table. Thread: that loop. */
uint64_t gw_presence_mem_records(const gw_presence_mem_t *pm, uint32_t loop_index);

#endif
