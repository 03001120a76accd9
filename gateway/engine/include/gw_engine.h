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
 *     some IO loop, or to an outbox of its own (gw_fanout_outbox_t), which takes it to every
 *     loop that joined the channel. Each loop sees a channel's messages in offset order.
 *   - Join/leave: gw_sub asks, per loop, to join a channel when the loop's first subscriber
 *     arrives and to leave when its last goes. The engine answers a join on the joining loop
 *     with gw_sub_joined(status, offset, epoch) (gw_engine_join_answer), ordered after every
 *     message it delivered to that loop before the join took effect and before every message
 *     after it, so a new subscriber sees neither a gap nor a duplicate. Joins and leaves of one
 *     loop are handled in the order they were asked.
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
 *   - Online status and presence (gw_state.h has the types): each IO loop keeps its own
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
#ifndef HERALD_GATEWAY_ENGINE_GW_ENGINE_H
#define HERALD_GATEWAY_ENGINE_GW_ENGINE_H

#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_config.h"
#include "gw_fanout.h"
#include "gw_metrics.h"
#include "gw_state.h"
#include "netlib/nl_loop.h"

typedef struct gw_engine_s gw_engine_t;
typedef struct gw_engine_reply_s gw_engine_reply_t;

/* What a request produced: status 0 or a negative errno (-ENOMEM, -ESHUTDOWN, ...); for a
 * publish the message's offset and epoch; data is the answer of a query (presence: a
 * gw_presence_result_t, online: a gw_online_result_t, online_counts: a gw_online_counts_t),
 * owned by the engine and valid during the callback only.
 *
 * A publish's status says whether it was applied: 0 applied (is_duplicate: an earlier publish
 * with the same idempotency key was, and offset/epoch are its; nothing was published again);
 * GW_ENGINE_OUTCOME_UNKNOWN: the request reached the engine's server but no answer came back
 * (a stalled or lost Redis), so it may have been applied; any other negative errno: not
 * applied. */
typedef struct gw_engine_result_s {
    int status;
    bool is_duplicate;
    uint64_t offset;
    uint64_t epoch;
    const void *data;
} gw_engine_result_t;

#define GW_ENGINE_OUTCOME_UNKNOWN (-ETIMEDOUT)

/* The longest idempotency key a publish may carry (bytes). */
#define GW_ENGINE_KEY_MAX 64

/* A message to publish: payload[0..len) to channel chan[0..chan_len) (already validated),
 * with the publisher's idempotency key key[0..key_len) (key_len 0: none; at most
 * GW_ENGINE_KEY_MAX). Within [limits] idempotency_window of a publish that was applied, a
 * publish to the same channel with the same key is answered with the first one's offset and
 * epoch (is_duplicate) and not delivered again, on this node and (Redis engine) on every node
 * sharing the engine. */
typedef struct gw_engine_msg_s {
    const char *chan;
    size_t chan_len;
    const void *payload;
    size_t len;
    const char *key;
    size_t key_len;
} gw_engine_msg_t;

/* A request finished. r is the caller's reply record, cookies included. */
typedef void (*gw_engine_reply_cb)(const gw_engine_reply_t *r, const gw_engine_result_t *res);

/* Set by a requester nobody waits for any more (a client connection that went): an engine may
 * skip the work of a request that carries it (the memory engine's presence parts do); the
 * reply callback still runs, once. The requester keeps one reference per request until that
 * request's callback ran, so an engine reads it without taking its own. */
typedef struct gw_cancel_s {
    _Atomic uint32_t refs;
    _Atomic bool is_cancelled;
} gw_cancel_t;

/* A new flag, not set, with one reference. Returns NULL (ENOMEM). Thread: any. */
gw_cancel_t *gw_cancel_new(void);
/* Adds / drops a reference (NULL is fine); the last frees it. Thread: any. */
gw_cancel_t *gw_cancel_ref(gw_cancel_t *c);
void gw_cancel_unref(gw_cancel_t *c);


static inline void gw_cancel_set(gw_cancel_t *c)
{
    atomic_store_explicit(&c->is_cancelled, true, memory_order_relaxed);
}

/* Whether the request's requester gave up (c may be NULL: never). Thread: any. */
static inline bool gw_cancel_is_set(const gw_cancel_t *c)
{
    return c && atomic_load_explicit(&c->is_cancelled, memory_order_relaxed);
}

/* Where and how an answer goes. Copied by value into the engine's request, so the caller
 * keeps nothing alive: ptr/u64 are cookies for the callback ((conn id, request id), or an
 * HTTP request); cancel (may be NULL) is the requester's gw_cancel_t. */
struct gw_engine_reply_s {
    nl_loop_t *loop; /* run cb here (posted); NULL: on the engine thread that finished */
    gw_engine_reply_cb cb;
    void *ptr;
    uint64_t u64[2];
    gw_cancel_t *cancel;
};

/* A reply whose callback will never run: the node is stopping and has detached the engine, so
 * its IO loops (where the callback would run) are going. Releases the requester's cancel
 * reference, which the callback would have. Thread: the engine's. */
static inline void gw_engine_reply_drop(const gw_engine_reply_t *r)
{
    gw_cancel_unref(r->cancel);
}

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

/* Engine counters, summed over its threads at scrape time. */
typedef struct gw_engine_stats_s {
    uint64_t channels;          /* channels with state (subscribed somewhere, or history; listener
                                 * channels not) */
    uint64_t published;         /* messages given an offset */
    uint64_t last_seen_records; /* users gone offline whose last-seen time is kept */
    uint64_t history_channels;  /* channels keeping history */
    uint64_t history_messages;  /* messages kept */
    uint64_t history_bytes;     /* their memory, estimated (gw_state.h) */
    uint64_t history_max_bytes; /* the cap on history_bytes */
    uint64_t history_evicted[GW_HISTORY_EVICT_REASONS];
    uint64_t event_failures; /* join/leave events lost to a failed allocation or post */
    uint64_t idempotency_keys;       /* publish keys remembered (memory engine) */
    uint64_t idempotency_duplicates; /* publishes answered from a key's record */
    uint64_t idempotency_evicted;    /* keys forgotten early at [limits] idempotency_keys */
} gw_engine_stats_t;

/* A server an engine talks to (the Redis engine's), as the admin console shows it. */
#define GW_ENGINE_SERVER_NAME_MAX 272 /* "host:port" and a NUL */
typedef struct gw_engine_server_s {
    char name[GW_ENGINE_SERVER_NAME_MAX];
    bool is_up;           /* connected and ready */
    uint64_t pending;     /* commands in flight now (herald_redis_pending_commands) */
    uint64_t max_pending; /* past it, commands are refused as busy */
} gw_engine_server_t;

/* One node of a cluster as the engine's shared state lists it (nodes' res->data holds a
 * gw_engine_nodes_t). */
typedef struct gw_engine_node_s {
    const char *node;     /* its node id */
    uint64_t connections; /* its open client connections at its latest heartbeat */
    uint64_t expires_ms;  /* Unix ms: it leaves the list unless it heartbeats before */
} gw_engine_node_t;

typedef struct gw_engine_nodes_s {
    const char *self; /* the asking node's own id */
    uint32_t n_nodes;
    const gw_engine_node_t *nodes; /* sorted by node id */
} gw_engine_nodes_t;

typedef struct gw_engine_ops_s {
    const char *name;
    /* Shared by several nodes: a join or leave on one node may have listeners on another, so
     * events are always published (the node-wide listener count says nothing). */
    bool is_shared;
    /* Publishes m (copied as needed). Returns: 0 (reply->cb will run once); -ENOMEM;
     * -ESHUTDOWN (the callback will not run): neither of those was applied.
     * Callbacks: reply->cb may run before this returns when the caller already is where the
     * answer goes (the memory engine: called on the channel's owner loop). */
    int (*publish)(gw_engine_t *e, const gw_engine_msg_t *m, const gw_engine_reply_t *reply);
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
    /* Writes the engine's own metric families (the Redis engine's herald_redis_*) into w.
     * May be NULL (none). Thread: any (it reads only what is safe to read from anywhere). */
    void (*metrics)(const gw_engine_t *e, gw_metrics_t *w);
    /* The servers the engine talks to: fills out[0..max) and returns how many there are. May
     * be NULL (an engine with no server: memory). Thread: any (atomics only). */
    uint32_t (*servers)(const gw_engine_t *e, gw_engine_server_t *out, uint32_t max);
    /* The live nodes sharing this engine's state, each with its connections: res->data is a
     * gw_engine_nodes_t. May be NULL (an engine not shared by nodes). Returns: as presence. */
    int (*nodes)(gw_engine_t *e, const gw_engine_reply_t *reply);
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

/* --- the host: what a node gives an engine --------------------------------------------------- */

/* The node's side. Loop hooks run on IO loop `loop`'s own thread (the engine posts there
 * first); the others on any thread. */
typedef struct gw_engine_host_ops_s {
    /* Loop `loop`'s share of a presence query: its visible subscribers of chan[0..len), at
     * most the loop's [presence] max_clients listed (out->limit says how many that is).
     * Returns: 0; -ENOMEM (out holds what fit). */
    int (*presence_part)(void *arg, uint32_t loop, const char *chan, size_t len,
                         gw_presence_part_t *out);
    /* Loop `loop`'s share of user[0..len)'s online status. */
    void (*online_part)(void *arg, uint32_t loop, const char *user, size_t len,
                        gw_online_part_t *out);
    /* Loop `loop`'s users online and their connections; with names (not NULL) the users'
     * names too (a share of a count of distinct users). Returns: 0; -ENOMEM. */
    int (*counts_part)(void *arg, uint32_t loop, uint64_t *users, uint64_t *conns,
                       gw_online_list_t *names);
    /* Loop `loop` tells the engine again of every online user and visible subscription
     * (user_online, presence_add): a shared engine's server lost them. */
    void (*resync)(void *arg, uint32_t loop);
    /* The node's open client connections. */
    uint64_t (*connections)(void *arg);
    /* Whether the node takes work (started, not draining or stopping). */
    bool (*is_ready)(void *arg);
    /* Whether the node is stopping: requests from outside the IO loops are refused. */
    bool (*is_stopping)(void *arg);
} gw_engine_host_ops_t;

typedef struct gw_engine_host_s {
    gw_fanout_t *fanout;    /* the node's IO loops */
    const gw_config_t *cfg; /* the config at start; an engine copies what it keeps */
    const char *node_id;    /* lives as long as the node */
    const gw_engine_host_ops_t *ops;
    void *arg;
} gw_engine_host_t;

/* Creates an engine over host's IO loops (copied; what it points to outlives the engine).
 * Returns: 0; -EINVAL (a bad setting); -ENOMEM; a thread start error. Thread: the node's,
 * before the IO loops run. Ownership: free with gw_engine_free. */
typedef int (*gw_engine_new_cb)(gw_engine_t **out, const gw_engine_host_t *host);

/* One kind of engine. */
typedef struct gw_engine_type_s {
    const char *name; /* [engine] type */
    gw_engine_new_cb create;
} gw_engine_type_t;

static inline int gw_engine_publish(gw_engine_t *e, const gw_engine_msg_t *m,
                                    const gw_engine_reply_t *reply)
{
    return e->ops->publish(e, m, reply);
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

/* Static snake_case label of a recovery result ("recovered", "not_covered"). Thread: any. */
const char *gw_recovery_str(gw_recovery_t r);

static inline void gw_engine_free(gw_engine_t *e)
{
    if (e)
        e->ops->free(e);
}

/* --- what every engine shares --------------------------------------------------------------- */

/* A seed for a node's epochs: random per start (getrandom, or the clock and pid without it).
 * Thread: any. */
uint64_t gw_engine_epoch_seed(void);

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct epochs. */
static inline uint64_t gw_engine_epoch_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

/* A publish on its way to the engine, and its answer on its way back. */
typedef struct gw_engine_pub_s {
    void *engine;
    gw_engine_reply_t reply;
    gw_engine_result_t result;
    uint32_t hash;
    uint32_t chan_len;
    uint32_t key_len;
    size_t payload_len;
    char data[]; /* channel, NUL, key, payload */
} gw_engine_pub_t;

/* Copies m into a request (result zeroed). Returns it, or NULL (ENOMEM). Thread: any. */
gw_engine_pub_t *gw_engine_pub_new(void *engine, const gw_engine_msg_t *m, uint32_t hash,
                                   const gw_engine_reply_t *reply);

static inline const char *gw_engine_pub_key(const gw_engine_pub_t *p)
{
    return p->data + p->chan_len + 1;
}

static inline const char *gw_engine_pub_payload(const gw_engine_pub_t *p)
{
    return p->data + p->chan_len + 1 + p->key_len;
}

/* The request's message, pointing into it. */
static inline gw_engine_msg_t gw_engine_pub_msg(const gw_engine_pub_t *p)
{
    return (gw_engine_msg_t){.chan = p->data,
                             .chan_len = p->chan_len,
                             .payload = gw_engine_pub_payload(p),
                             .len = p->payload_len,
                             .key = gw_engine_pub_key(p),
                             .key_len = p->key_len};
}

/* Runs p's reply callback with its result and frees p (for nl_loop_post). */
void gw_engine_pub_reply_run(void *p);

/* A join or leave on its way to the engine, and a join's answer on its way back (status,
 * offset, epoch). No padding: 40 bytes before the name, as in a gw_sub_entry_t, so that at a
 * subscribe storm the freed requests are exactly the malloc size the new index entries and
 * channels ask for. With 8 bytes of padding they were one 16-byte size class larger and,
 * reused for those, wasted 16 bytes each (measured: 12,000 of 19,000 engine channels in
 * 80-byte chunks instead of 64). */
typedef struct gw_engine_join_s {
    void *engine;
    uint32_t loop_index; /* the joining (leaving) loop */
    uint32_t hash;
    int status;
    uint32_t chan_len;
    uint64_t offset;
    uint64_t epoch;
    char chan[];
} gw_engine_join_t;

_Static_assert(sizeof(void *) != 8 || sizeof(gw_engine_join_t) == 40,
               "no padding in a join request (LP64)");

/* A zeroed request for loop_index's join or leave of chan. Returns NULL (ENOMEM). Thread: any. */
gw_engine_join_t *gw_engine_join_new(void *engine, uint32_t loop_index, const char *chan,
                                     size_t chan_len, uint32_t hash);

/* Answers j's join on its loop (gw_sub_joined with j's status, offset and epoch) and frees j:
 * at once when the caller is that loop, else posted right after out's batch for it (out may be
 * NULL: nothing batched), so that the answer lands after every message sent before it. An
 * answer that cannot travel is logged and lost (its subscribers would wait: say so loudly).
 * Thread: out's owner (or an IO loop of hub). */
void gw_engine_join_answer(gw_fanout_t *hub, gw_fanout_outbox_t *out, gw_engine_join_t *j);

/* A history request on its way to the engine, and its answer on its way back. */
typedef struct gw_engine_hist_s {
    void *engine;
    gw_engine_reply_t reply;
    uint32_t loop_index; /* the asking loop */
    uint32_t hash;
    uint64_t epoch; /* the client's */
    uint64_t max_bytes;
    int status;
    gw_engine_history_t answer;
    gw_msg_t **msgs; /* the answer's references */
    uint32_t n_msgs;
    uint32_t cap_msgs;
    struct gw_engine_hist_s *next; /* an engine's list of requests waiting on a channel */
    char chan[];
} gw_engine_hist_t;

/* A request for chan's messages after since in epoch (answer zeroed but for chan and since).
 * Returns NULL (ENOMEM). Thread: any. */
gw_engine_hist_t *gw_engine_hist_new(void *engine, uint32_t loop_index, const char *chan,
                                     size_t chan_len, uint32_t hash, uint64_t since, uint64_t epoch,
                                     uint64_t max_bytes, const gw_engine_reply_t *reply);

/* Appends a reference to m to h's answer. Returns: 0; -ENOMEM. */
int gw_engine_hist_add(gw_engine_hist_t *h, gw_msg_t *m);

/* Frees h and drops its references. */
void gw_engine_hist_free(gw_engine_hist_t *h);

/* Sends h's answer to its loop, as gw_engine_join_answer does (after out's batch), runs the
 * reply there and frees h. Thread: out's owner (or an IO loop of hub). */
void gw_engine_hist_answer(gw_fanout_t *hub, gw_fanout_outbox_t *out, gw_engine_hist_t *h);

#endif
