/*
 * gw_engine: the engine interface: where channel state lives and how a publish reaches every
 * IO loop that has subscribers (DESIGN.md, "Engines"). Sessions, the admin API and fan-out talk
 * to an engine only through this vtable, so the Redis engine slots in beside the memory one.
 *
 * Contract every engine keeps:
 *   - Offsets: each message of a channel gets the next offset of the channel's current epoch
 *     (offsets start at 1; SubscribeOk's offset 0 means "nothing published yet"). An epoch is a
 *     64-bit value, shown on the wire as 16 lower-case hex digits (gw_engine_epoch_str), that
 *     changes whenever the channel's offsets restart.
 *   - Delivery: the engine encodes the Push once (gw_msg_new) and hands it to gw_fanout on
 *     some IO loop, which takes it to every loop that joined the channel. Each loop sees a
 *     channel's messages in offset order.
 *   - Join/leave: gw_sub asks, per loop, to join a channel when the loop's first subscriber
 *     arrives and to leave when its last goes. The engine answers a join on the joining loop
 *     with gw_sub_joined(status, offset, epoch), ordered after every message it delivered to
 *     that loop before the join took effect and before every message after it, so a new
 *     subscriber sees neither a gap nor a duplicate. Joins and leaves of one loop are handled
 *     in the order they were asked.
 *   - Replies: publish, presence and the online queries answer through a gw_engine_reply_t,
 *     exactly once. With a reply loop the callback runs on that loop (posted); without one it
 *     runs on whichever engine thread finished the work, and must then only do thread-safe
 *     things (answer an HTTP request, post).
 *   - History: a channel keeps its latest messages when the node's history rules say so
 *     ([history] rules). Its state (offset, epoch, history) then outlives its subscribers until
 *     the history has aged out, so a client that comes back can recover. A history request
 *     from loop L is answered on L like a join: after every message delivered to L up to the
 *     answer's latest offset and before every later one, so the loop can hand the missed
 *     messages to a recovering subscriber and then go on live, with no gap and no duplicate.
 *   - Online status and presence (gw_presence.h has the types): each IO loop keeps its own
 *     users and subscribers (gw_online, gw_sub) and tells the engine what the rest of the
 *     cluster needs: a user's first connection on the loop (user_online), its last one
 *     closing (user_offline), and once per refresh interval the users it saw active
 *     (refresh: one call per loop per interval whatever the number of pings, which an engine
 *     backed by a server turns into one pipelined round of expiry refreshes). Join and leave
 *     events travel as encoded frames on a channel's listener channel (event), in the
 *     channel's order like Pushes.
 *
 * Thread: publish and presence may be called from any thread (IO loops, the HTTP thread);
 * join and leave only from the IO loop they are for. An engine's own state is touched only by
 * the threads it chooses (the memory engine: each channel by the IO loop that owns it).
 * Ownership: the node creates the engine after its IO loops and frees it after they stopped.
 * The engine copies channel names and payloads it keeps.
 */
#ifndef HERALD_GATEWAY_GW_ENGINE_H
#define HERALD_GATEWAY_GW_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_history.h"
#include "netlib/nl_loop.h"

typedef struct gw_engine_s gw_engine_t;
typedef struct gw_node_s gw_node_t;
typedef struct gw_engine_reply_s gw_engine_reply_t;
typedef struct gw_config_s gw_config_t;
typedef struct gw_event_s gw_event_t;
typedef struct gw_presence_client_s gw_presence_client_t;
typedef struct gw_presence_batch_s gw_presence_batch_t;

/* What a request produced: status 0 or a negative errno (-ENOMEM, -ESHUTDOWN, ...); for a
 * publish the message's offset and epoch; data is the answer of a query (presence: a
 * gw_presence_result_t, online: a gw_online_result_t, online_counts: a gw_online_counts_t),
 * owned by the engine and valid during the callback only. */
typedef struct gw_engine_result_s {
    int status;
    uint64_t offset;
    uint64_t epoch;
    const void *data;
} gw_engine_result_t;

/* A request finished. r is the caller's reply record, cookies included. */
typedef void (*gw_engine_reply_cb)(const gw_engine_reply_t *r, const gw_engine_result_t *res);

/* Where and how an answer goes. Copied by value into the engine's request, so the caller
 * keeps nothing alive: ptr/u64 are cookies for the callback ((conn id, request id), or an
 * HTTP request). */
struct gw_engine_reply_s {
    nl_loop_t *loop; /* run cb here (posted); NULL: on the engine thread that finished */
    gw_engine_reply_cb cb;
    void *ptr;
    uint64_t u64[2];
};

/* How a history request turned out (herald_recoveries_total{result}). */
typedef enum gw_recovery_e {
    GW_RECOVERY_RECOVERED = 0, /* every missed message follows (maybe none) */
    GW_RECOVERY_EPOCH_CHANGED, /* the client's epoch is not the channel's */
    GW_RECOVERY_NOT_COVERED,   /* the history no longer reaches back to the client's offset */
    GW_RECOVERY_NO_HISTORY,    /* the channel keeps no history */
    GW_RECOVERY_TOO_LARGE,     /* the missed messages pass the output limit */
    GW_RECOVERY_RESULTS
} gw_recovery_t;

/* A history request's answer (gw_engine_result_t.data). The messages are the engine's
 * references: valid during the callback; a caller that queues them takes its own. */
typedef struct gw_engine_history_s {
    const char *chan; /* the channel, chan_len bytes and a NUL */
    size_t chan_len;
    uint64_t since;       /* the offset asked for */
    uint64_t latest;      /* the channel's latest offset at the answer */
    uint64_t epoch;       /* the channel's current epoch */
    gw_recovery_t result; /* RECOVERED: msgs hold every message after since */
    bool is_recoverable;  /* the channel keeps history */
    uint32_t n_msgs;
    gw_msg_t *const *msgs; /* oldest first: offsets since + 1 .. latest */
} gw_engine_history_t;

/* The Redis engine's own figures (zero for the memory engine). */
#define GW_ENGINE_REDIS_SERVERS_MAX 16
typedef struct gw_engine_redis_stats_s {
    uint32_t n_servers;
    struct {
        const char *name; /* "host:port", alive as long as the engine */
        bool is_up;       /* connected, functions loaded */
        uint64_t pending; /* commands in flight */
        uint64_t refused; /* commands refused: max_pending in flight already */
        uint64_t reconnects;
    } servers[GW_ENGINE_REDIS_SERVERS_MAX];
    uint64_t delivered;        /* messages from Redis handed to the loops */
    uint64_t lost;             /* offsets that never arrived */
    uint64_t duplicates;       /* offsets that arrived twice */
    uint64_t unsequenced;      /* plain PUBLISHes delivered (offset 0) */
    uint64_t local_only;       /* publishes delivered here only, Redis down */
    uint64_t busy;             /* publishes refused, too many commands in flight */
    uint64_t join_timeouts;    /* subscriptions refused for want of Redis */
    uint64_t epoch_changes;    /* channel epochs that changed under subscribers */
    uint64_t history_fetches;  /* recoveries read from Redis streams */
    uint64_t presence_dropped; /* presence and online-status writes dropped (held back too many) */
} gw_engine_redis_stats_t;

/* Engine counters, summed over its threads at scrape time. */
typedef struct gw_engine_stats_s {
    uint64_t channels;          /* channels with state (subscribed somewhere, or history; listener
                                 * channels not) */
    uint64_t published;         /* messages given an offset */
    uint64_t last_seen_records; /* users gone offline whose last-seen time is kept */
    uint64_t history_channels;  /* channels keeping history */
    uint64_t history_messages;  /* messages kept */
    uint64_t history_bytes;     /* their memory, estimated (gw_history.h) */
    uint64_t history_max_bytes; /* the cap on history_bytes */
    uint64_t history_evicted[GW_HISTORY_EVICT_REASONS];
    gw_engine_redis_stats_t redis;
} gw_engine_stats_t;

typedef struct gw_engine_ops_s {
    const char *name;
    /* Shared by several nodes: a join or leave on one node may have listeners on another, so
     * events are always published (the node-wide listener count says nothing). */
    bool is_shared;
    /* Publishes payload[0..len) to channel chan[0..chan_len) (already validated).
     * Returns: 0 (reply->cb will run once); -ENOMEM; -ESHUTDOWN (the callback will not run).
     * Callbacks: reply->cb may run before this returns when the caller already is where the
     * answer goes (the memory engine: called on the channel's owner loop). */
    int (*publish)(gw_engine_t *e, const char *chan, size_t chan_len, const void *payload,
                   size_t len, const gw_engine_reply_t *reply);
    /* Adds / removes IO loop loop_index to / from the channel's audience. The join's answer is
     * gw_sub_joined on that loop; a leave has none. hash is gw_sub_hash(chan). */
    void (*join)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                 uint32_t hash);
    void (*leave)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                  uint32_t hash);
    /* Who is in a channel: res->data is a gw_presence_result_t listing at most [presence]
     * max_clients clients. Returns: 0 (reply->cb will run once); -ENOMEM; -ESHUTDOWN;
     * -ENOTSUP (an engine without presence). */
    int (*presence)(gw_engine_t *e, const char *chan, size_t chan_len,
                    const gw_engine_reply_t *reply);
    /* One user's online status (gw_online_result_t), and the counts of users online and
     * their connections (gw_online_counts_t). Returns: as presence. */
    int (*online)(gw_engine_t *e, const char *user, size_t len, const gw_engine_reply_t *reply);
    int (*online_counts)(gw_engine_t *e, const gw_engine_reply_t *reply);
    /* User user[0..len) got its first connection on loop loop_index / lost its last one
     * there at at_ms (Unix ms). Thread: that loop. */
    void (*user_online)(gw_engine_t *e, uint32_t loop_index, const char *user, size_t len);
    void (*user_offline)(gw_engine_t *e, uint32_t loop_index, const char *user, size_t len,
                         uint64_t at_ms);
    /* The users a loop saw active since its last batch (gw_presence_batch_foreach walks them,
     * each with its last-seen time and connection count); never empty. Thread: that loop;
     * batch is valid during the call. */
    void (*refresh)(gw_engine_t *e, const gw_presence_batch_t *batch);
    /* Delivers an encoded join/leave event to every subscriber of ev->chan (a listener
     * channel) except the connection it is about, after every event the engine handled for
     * that channel before. Takes its own reference; never delivers before returning (the
     * caller may be inside a delivery). Thread: an IO loop. */
    void (*event)(gw_engine_t *e, gw_event_t *ev);
    /* Subscriber who became visible in channel chan (its SubscribeOk went out) / left it
     * (unsubscribed, or its session began closing). An engine shared by nodes records these
     * for presence; the memory engine reads its loops instead (both may be NULL).
     * Thread: loop loop_index; who is valid during the call. */
    void (*presence_add)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t len,
                         const gw_presence_client_t *who);
    void (*presence_remove)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t len,
                            const char *client_id);
    /* Asks for chan's messages after offset since in epoch, for a subscriber on loop
     * loop_index (hash = gw_sub_hash(chan)); reply->loop must be that loop, where reply->cb
     * gets a gw_engine_history_t in res->data, ordered as the header says. An answer whose
     * messages would pass max_bytes is GW_RECOVERY_TOO_LARGE.
     * Returns: 0 (reply->cb will run once, never before this returns); -ENOMEM; -ESHUTDOWN.
     * Thread: loop loop_index. */
    int (*history)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len,
                   uint32_t hash, uint64_t since, uint64_t epoch, uint64_t max_bytes,
                   const gw_engine_reply_t *reply);
    /* Whether chan keeps history (SubscribeOk.recoverable). Thread: loop loop_index. */
    bool (*is_recoverable)(gw_engine_t *e, uint32_t loop_index, const char *chan, size_t chan_len);
    /* Housekeeping (history ageing); every IO loop calls it once per iteration, so it must be
     * cheap when there is nothing to do. Thread: loop loop_index. */
    void (*tick)(gw_engine_t *e, uint32_t loop_index);
    /* A reloaded config reached loop loop_index (history rules and cap). Thread: that loop. */
    void (*reconfigure)(gw_engine_t *e, uint32_t loop_index, const gw_config_t *cfg);
    /* Adds loop loop_index's share of the engine counters into out. Thread: that loop. */
    void (*loop_stats)(gw_engine_t *e, uint32_t loop_index, gw_engine_stats_t *out);
    /* Readiness (the memory engine is always ready; Redis is not while disconnected). */
    bool (*is_ready)(const gw_engine_t *e);
    /* The node is about to stop the IO loops: the engine must post nothing to them from now
     * on. May be NULL (nothing to do). Thread: the node's. */
    void (*detach)(gw_engine_t *e);
    /* Frees the engine. Thread: the node's, after every IO loop stopped. */
    void (*free)(gw_engine_t *e);
} gw_engine_ops_t;

/* Every engine starts with this header. */
struct gw_engine_s {
    const gw_engine_ops_t *ops;
};

/* Creates the embedded memory engine over node's IO loops: each channel is owned by loop
 * gw_sub_hash(channel) % loop count, which holds its offset, epoch, audience bitmask (up to
 * 64 loops) and history. History rules and cap come from the node's config (later from
 * reconfigure). Returns: 0; -EINVAL (more than 64 IO loops); -ENOMEM. Thread: the node's, before
 * the loops carry traffic. Ownership: free with gw_engine_free. */
int gw_engine_memory_new(gw_engine_t **out, gw_node_t *node);

/* Creates the Redis engine (gw_engine_redis.c) over node's IO loops and the servers of the
 * node's [engine] redis; it starts its own thread and connects at once (a Redis that is not
 * there yet is retried with backoff; meanwhile the engine is not ready).
 * Returns: 0; -EINVAL (no servers, bad list); -ENOMEM; a thread start error. Thread: the
 * node's, before the IO loops start. Ownership: free with gw_engine_free. */
int gw_engine_redis_new(gw_engine_t **out, gw_node_t *node);

/* Writes epoch as 16 lower-case hex digits and a NUL into out (17 bytes). Thread: any. */
void gw_engine_epoch_str(uint64_t epoch, char out[17]);

static inline int gw_engine_publish(gw_engine_t *e, const char *chan, size_t chan_len,
                                    const void *payload, size_t len, const gw_engine_reply_t *reply)
{
    return e->ops->publish(e, chan, chan_len, payload, len, reply);
}

static inline void gw_engine_join(gw_engine_t *e, uint32_t loop_index, const char *chan,
                                  size_t chan_len, uint32_t hash)
{
    e->ops->join(e, loop_index, chan, chan_len, hash);
}

static inline void gw_engine_leave(gw_engine_t *e, uint32_t loop_index, const char *chan,
                                   size_t chan_len, uint32_t hash)
{
    e->ops->leave(e, loop_index, chan, chan_len, hash);
}

static inline int gw_engine_history(gw_engine_t *e, uint32_t loop_index, const char *chan,
                                    size_t chan_len, uint32_t hash, uint64_t since, uint64_t epoch,
                                    uint64_t max_bytes, const gw_engine_reply_t *reply)
{
    return e->ops->history(e, loop_index, chan, chan_len, hash, since, epoch, max_bytes, reply);
}

/* Parses 16 lower-case hex digits (gw_engine_epoch_str's form) into *epoch.
 * Returns: 0; -EINVAL for anything else. Thread: any. */
int gw_engine_epoch_parse(const char *text, uint64_t *epoch);

/* Static snake_case label of a recovery result ("recovered", "not_covered"). Thread: any. */
const char *gw_recovery_str(gw_recovery_t r);

static inline void gw_engine_free(gw_engine_t *e)
{
    if (e)
        e->ops->free(e);
}

#endif
