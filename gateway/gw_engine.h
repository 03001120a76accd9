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
 *   - Replies: publish and presence answer through a gw_engine_reply_t, exactly once. With a
 *     reply loop the callback runs on that loop (posted); without one it runs on whichever
 *     engine thread finished the work, and must then only do thread-safe things (answer an
 *     HTTP request, post).
 *   - presence and history are hooks for later issues; an engine without them returns
 *     -ENOTSUP.
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

#include "netlib/nl_loop.h"

typedef struct gw_engine_s gw_engine_t;
typedef struct gw_node_s gw_node_t;
typedef struct gw_engine_reply_s gw_engine_reply_t;

/* What a request produced: status 0 or a negative errno (-ENOMEM, -ESHUTDOWN, ...); for a
 * publish the message's offset and epoch; data is for later answers (presence, history), owned
 * by the engine and valid during the callback only. */
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

/* Engine counters, summed over its threads at scrape time. */
typedef struct gw_engine_stats_s {
    uint64_t channels;  /* channels with state (subscribed somewhere) */
    uint64_t published; /* messages given an offset */
} gw_engine_stats_t;

typedef struct gw_engine_ops_s {
    const char *name;
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
    /* Later issues: presence (who is in a channel) and history (recover missed messages).
     * Returns -ENOTSUP until implemented. */
    int (*presence)(gw_engine_t *e, const char *chan, size_t chan_len,
                    const gw_engine_reply_t *reply);
    int (*history)(gw_engine_t *e, const char *chan, size_t chan_len, uint64_t since_offset,
                   uint64_t epoch, const gw_engine_reply_t *reply);
    /* Adds loop loop_index's share of the engine counters into out. Thread: that loop. */
    void (*loop_stats)(gw_engine_t *e, uint32_t loop_index, gw_engine_stats_t *out);
    /* Readiness (the memory engine is always ready; Redis is not while disconnected). */
    bool (*is_ready)(const gw_engine_t *e);
    /* Frees the engine. Thread: the node's, after every IO loop stopped. */
    void (*free)(gw_engine_t *e);
} gw_engine_ops_t;

/* Every engine starts with this header. */
struct gw_engine_s {
    const gw_engine_ops_t *ops;
};

/* Creates the embedded memory engine over node's IO loops: each channel is owned by loop
 * gw_sub_hash(channel) % loop count, which holds its offset, epoch and audience bitmask (up to
 * 64 loops).
 * Returns: 0; -EINVAL (more than 64 IO loops); -ENOMEM. Thread: the node's, before the loops
 * carry traffic. Ownership: free with gw_engine_free. */
int gw_engine_memory_new(gw_engine_t **out, gw_node_t *node);

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

static inline void gw_engine_free(gw_engine_t *e)
{
    if (e)
        e->ops->free(e);
}

#endif
