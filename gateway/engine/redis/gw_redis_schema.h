/*
 * gw_redis_schema: how herald's channels look in Redis, the one place the key names, the
 * pub/sub message format and the server-side functions are written down. Backends that
 * publish without herald follow it too (README, "Publishing through Redis").
 *
 * For a channel C (herald's name, e.g. "chat:room1"):
 *   herald:C        the pub/sub channel every node with subscribers of C subscribes to
 *   herald:m:C      a hash: e = C's epoch (16 hex digits), o = its latest offset
 *   herald:h:C      a stream of C's kept messages (history channels only): entry id
 *                   "<offset>-0", fields p (payload) and t (publish time, Unix ms)
 *
 * A message published through herald (or FCALL herald_publish) travels on herald:C as
 *     "\0H1 <offset> <epoch> <time_ms>\n" <payload bytes>
 * The leading NUL keeps it apart from a plain `PUBLISH herald:C <payload>` by a backend,
 * which herald delivers as it comes, outside the channel's sequence (offset 0, not kept). A
 * plain payload must therefore not start with "\0H1 ".
 *
 * The functions (a Redis 7 library named "herald", loaded by every node when it connects):
 *   FCALL herald_publish 2 herald:m:C herald:h:C C <payload> [keep [age_ms [epoch]]]
 *       gives the message C's next offset (creating C's epoch if it has none), keeps it in
 *       the stream when keep > 0 (MAXLEN ~ keep; the stream expires age_ms after its last
 *       message), publishes the envelope on herald:C and returns {offset, epoch, time_ms, 0}.
 *   FCALL herald_publish 3 herald:m:C herald:h:C "herald:i:C K" C <payload> keep age_ms epoch
 *         window_ms
 *       the same for a publish with idempotency key K: when "herald:i:C K" exists (a publish
 *       with that key was applied less than window_ms ago) nothing is published and the
 *       answer is {offset, epoch, time_ms, 1} of that publish; else the publish leaves the
 *       record "<offset> <epoch> <time_ms>" there, expiring after window_ms.
 *   FCALL herald_join 1 herald:m:C [epoch]  (or 2 herald:m:C herald:h:C [epoch])
 *       returns {latest offset, epoch}, creating the epoch if C has none (and then dropping
 *       a stream left from an epoch that expired, when its key is given).
 *   FCALL herald_fence 2N herald:m:C1 herald:h:C1 .. herald:m:CN herald:h:CN
 *         epoch1 seen_epoch1 seen_offset1 .. epochN seen_epochN seen_offsetN
 *       for each channel a node has delivered up to (seen_epoch, seen_offset): when Redis
 *       holds that epoch with a lower offset (a failover to a replica that had not received
 *       the last messages, or a restart from an older disk image), the channel starts a new
 *       epoch (epoch_i, or one derived from the time) at offset 0 and its stream is dropped,
 *       so that no (epoch, offset) is given to two messages; returns N integers, 1 for each
 *       channel reset so, else 0.
 *   FCALL herald_refresh N herald:u:U1 .. herald:u:UN F field1 .. fieldF ttl_ms
 *         value1_1 .. value1_F .. valueN_1 .. valueN_F
 *       a node's write of N users' online status in one command: sets the F fields of each
 *       user's hash (gw_engine_redis_presence.c) and its expiry; returns N.
 * herald_publish and herald_join refresh herald:m:C's expiry (GW_REDIS_META_TTL_MS): a
 * channel nobody publishes to for that long starts over with a new epoch, which tells its
 * clients so.
 *
 * Presence, online status and join/leave events live under herald:nodes, herald:nc,
 * herald:users, herald:u:U, herald:ls:U, herald:p:C and the pub/sub channel herald:!C (an event
 * there is "\0E1 <node> <loop> <connection>\n" + a PresenceEvent frame); see
 * gw_engine_redis_presence.c.
 *
 * Thread: pure functions, any thread.
 */
#ifndef HERALD_GATEWAY_GW_REDIS_SCHEMA_H
#define HERALD_GATEWAY_GW_REDIS_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_REDIS_PREFIX "herald:"
#define GW_REDIS_META_PREFIX "herald:m:"
#define GW_REDIS_HIST_PREFIX "herald:h:"
#define GW_REDIS_IDEM_PREFIX "herald:i:"
#define GW_REDIS_META_TTL_MS 86400000 /* no suffix: it is pasted into Lua too */
/* Presence and online status (gw_engine_redis_presence.c has what each holds). */
#define GW_REDIS_NODES "herald:nodes"
#define GW_REDIS_NODE_CONNS "herald:nc"
#define GW_REDIS_USERS "herald:users"
#define GW_REDIS_USER_PREFIX "herald:u:"
#define GW_REDIS_LAST_SEEN_PREFIX "herald:ls:"
#define GW_REDIS_PRESENCE_PREFIX "herald:p:"

/* The function library's source (FUNCTION LOAD REPLACE). */
extern const char gw_redis_functions[];

/* A message as it came off herald:C. */
typedef struct gw_redis_msg_s {
    bool is_sequenced; /* false: a plain PUBLISH (offset and epoch 0, time unknown) */
    uint64_t offset;
    uint64_t epoch;
    uint64_t time_ms;
    const char *payload; /* into the data parsed */
    size_t len;
} gw_redis_msg_t;

/* Parses data[0..len) from herald:C. Never fails: what is not a well-formed envelope is a
 * plain payload. */
void gw_redis_msg_parse(const char *data, size_t len, gw_redis_msg_t *out);

/* Writes prefix + name into out (cap bytes, NUL-terminated). Returns the length, or -1 when
 * it does not fit. */
int gw_redis_key(char *out, size_t cap, const char *prefix, const char *name, size_t len);

/* The herald channel in a pub/sub channel name ("herald:C" -> "C"), or NULL if it is not one. */
const char *gw_redis_channel_of(const char *pubsub, size_t len, size_t *chan_len);

#endif
