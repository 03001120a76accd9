/*
 * gw_fanout.h: the room's public header.
 *
 * fanout: messages, and how they reach subscribers: the encoded message, the node's IO
 * loops as fan-out sees them (the hub, each loop's part, posts between loops), the batches
 * between loops (outboxes), a loop's subscription index (who is subscribed to what), and the
 * delivery loop with its slow-consumer policy. It knows a subscriber only as a gw_sub_set_t.
 *
 * Sections, one per module: gw_sub (the subscription index), gw_fanout (gw_fanout.c and
 * gw_fanout_deliver.c).
 */
#ifndef HERALD_GATEWAY_FANOUT_GW_FANOUT_H
#define HERALD_GATEWAY_FANOUT_GW_FANOUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"
#include "gw_transport.h"
#include "netlib/nl_block.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_hist.h"
#include "netlib/nl_loop.h"

/* --- gw_sub ----------------------------------------------------------------------------------- */

/*
 * gw_sub: one IO loop's subscription index: channel name -> the subscribers of that channel on
 * this loop (DESIGN.md, "Threads and ownership": each loop owns its slice of the index).
 *
 * An entry exists while the loop has at least one subscriber of its channel, and is in one of
 * two states:
 *   - JOINING: the first local subscriber arrived and the index asked the engine (cbs->join) to
 *     add this loop to the channel's audience. Every member is waiting for its SubscribeOk, so
 *     the entry keeps (member, request id) pairs. Messages that arrive now predate the join and
 *     are not delivered (gw_sub_entry_is_active is false).
 *   - ACTIVE: the engine answered (gw_sub_joined) with the channel's offset and epoch. Members
 *     added later get their SubscribeOk at once, with the offset of the last message this loop
 *     saw (gw_sub_entry_advance), because every later message reaches them too.
 * A member may also be RECOVERING (gw_sub_add_recovering): it asked for the messages it
 * missed, and waits for the engine's history answer rather than the join's. It is in the entry
 * (it keeps the entry alive, and counts as subscribed) but must not be delivered to, since the
 * history answer covers everything up to the moment it arrives: gw_sub_set_is_recovering tells,
 * and gw_sub_recovered makes it an ordinary member once the answer has been sent. The flag is
 * the top bit of the member's position in its set slot, so it costs no memory.
 * The last member leaving an ACTIVE entry frees it and asks the engine to drop the loop
 * (cbs->leave). A JOINING entry that loses its last member stays until the engine answers, and
 * is then freed with a leave: a leave overtaking its own join could otherwise strand the
 * audience bit or deliver a gap to a later subscriber.
 *
 * A subscriber is a gw_sub_set_t embedded in its session: the connection deliveries go to, the
 * channels it is in (two inline and more on the heap) and its delivery flags. Each slot
 * remembers the subscriber's position in the entry's member array, so leaving a channel of
 * 100k subscribers is O(1). The set is all fan-out knows of a subscriber (gw_fanout.h): it
 * never reaches into the session around it.
 *
 * Thread: an index and its sets belong to one loop; nothing locks.
 * Ownership: the caller owns the index value and each set; the index owns its entries.
 * Callbacks: cbs->join and cbs->leave run inside gw_sub_add/remove/joined; cbs->joined and
 * cbs->recover_failed run inside gw_sub_joined and must not add to or remove from the entry
 * they report.
 * Usage: gw_sub_index_init(&ix, &cbs, arg); on Subscribe: rc = gw_sub_add(&ix, &s->subs, ...)
 *        (1: answer now, 0: cbs->joined answers later); on a message: e = gw_sub_find(...),
 *        if active, deliver to gw_sub_entry_members(e, &n); on close: gw_sub_remove_all.
 */
/* Slots held inside a set before it moves them to the heap: a personal and a shared channel. */
#define GW_SUB_INLINE 2
/* The most channels one set (one connection) can be in: its slot count is a uint16_t that
 * doubles from GW_SUB_INLINE. [limits] max_subscriptions stops here. */
#define GW_SUB_SET_MAX 32768u
/* In a set slot's position: the member is RECOVERING (positions stay below 2^31). */
#define GW_SUB_POS_RECOVERING 0x80000000u

/* A set's delivery flags (gw_sub_set_t.flags). */
#define GW_SUB_SET_OFF 0x01u        /* closing: nothing more is delivered (its owner sets it) */
#define GW_SUB_SET_DROPPING 0x02u   /* a slow consumer whose Pushes are dropped (gw_fanout) */
#define GW_SUB_SET_RECOVERING 0x04u /* RECOVERING in some channel (kept by gw_sub) */
#define GW_SUB_SET_WS 0x08u         /* a WebSocket connection: frames in WebSocket framing */

typedef struct gw_sub_entry_s gw_sub_entry_t;

/* One subscriber: its connection, the channels it is in, its delivery flags. Zero-filled is a
 * valid empty set (conn set by the owner before the first add). Slot i is (entry[i], pos[i]):
 * the channel's entry and the set's index in that entry's member array. Two parallel arrays
 * rather than an array of pairs, so that two inline slots take 24 bytes, not 32; the flags sit
 * in what would be padding (40 bytes in all). Read the slots through gw_sub_set_count /
 * gw_sub_set_has; only gw_sub.c writes them. */
typedef struct gw_sub_set_s {
    nl_conn_t *conn; /* deliveries go here */
    union {
        gw_sub_entry_t *inl[GW_SUB_INLINE]; /* cap == 0 */
        gw_sub_entry_t **heap;              /* cap entries, then cap uint32_t positions */
    } u;
    uint32_t inl_pos[GW_SUB_INLINE];
    uint16_t count;
    uint16_t cap;  /* 0 while the inline slots are used */
    uint8_t flags; /* GW_SUB_SET_* */
} gw_sub_set_t;

typedef enum gw_sub_state_e {
    GW_SUB_JOINING = 0,
    GW_SUB_ACTIVE = 1,
} gw_sub_state_t;

struct gw_sub_pending_s;

/* Read the fields through the accessors below; only gw_sub.c writes them. */
struct gw_sub_entry_s {
    union {
        gw_sub_set_t *one;   /* cap <= 1: the only member, inline */
        gw_sub_set_t **many; /* cap > 1 */
    } m;
    uint32_t count;
    uint32_t cap;
    uint64_t offset; /* ACTIVE: the latest offset this loop has seen */
    union {
        uint64_t epoch;                   /* ACTIVE */
        struct gw_sub_pending_s *pending; /* JOINING: who waits for SubscribeOk */
    } u;
    gw_chankey_t key; /* key.user is the gw_sub_state_t */
    char name[];      /* key.name_len bytes and a NUL */
};

/* Asks the engine to add (join) or remove (leave) this loop for a channel. */
typedef void (*gw_sub_engine_cb)(const char *name, size_t len, uint32_t hash, void *arg);
/* A pending subscription completed: status 0 with e ACTIVE, or a negative errno with e NULL
 * (the subscription is already undone). */
typedef void (*gw_sub_joined_cb)(gw_sub_set_t *set, uint64_t req_id, int status,
                                 const gw_sub_entry_t *e, void *arg);
/* The join of a channel failed while set was RECOVERING in it: set is already out of the
 * channel (whose entry is gone from the index; name is valid during the call). */
typedef void (*gw_sub_recover_failed_cb)(gw_sub_set_t *set, const char *name, size_t len,
                                         uint32_t hash, int status, void *arg);

typedef struct gw_sub_index_cbs_s {
    gw_sub_engine_cb join;
    gw_sub_engine_cb leave;
    gw_sub_joined_cb joined;
    gw_sub_recover_failed_cb recover_failed;
} gw_sub_index_cbs_t;

typedef struct gw_sub_index_s {
    gw_chantab_t tab;       /* the entries: tab.count channels with local subscribers */
    uint64_t subscriptions; /* (set, channel) pairs */
    const gw_sub_index_cbs_t *cbs;
    void *arg;
} gw_sub_index_t;

/* The hash every loop and the engine use for a channel name. Thread: any. */
static inline uint32_t gw_sub_hash(const char *name, size_t len)
{
    return gw_chantab_hash(name, len);
}

/* Sets up an empty index. cbs must outlive it. Returns: 0; -ENOMEM. Thread: the owner. */
int gw_sub_index_init(gw_sub_index_t *ix, const gw_sub_index_cbs_t *cbs, void *arg);

/* Frees every entry without callbacks. Sets still pointing at them must not be used again
 * (free them with gw_sub_set_deinit). Thread: the owner. */
void gw_sub_index_deinit(gw_sub_index_t *ix);

/* Adds set to channel name[0..len) (hash = gw_sub_hash of it), creating the entry (and
 * calling cbs->join) if the loop had no subscriber of it. req_id is kept for the SubscribeOk
 * while the entry is JOINING. *out (may be NULL) gets the entry.
 * Returns: 1 when the entry is ACTIVE (answer now from *out); 0 when cbs->joined will answer;
 * -EEXIST when set is already in the channel; -ENOMEM (nothing changed).
 * Thread: the owner. */
int gw_sub_add(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len, uint32_t hash,
               uint64_t req_id, gw_sub_entry_t **out);

/* Adds set to channel name[0..len) as a RECOVERING member (see above), creating the entry and
 * calling cbs->join if needed. The caller asks the engine for the history and answers the
 * Subscribe itself; the joined callback never reports this member.
 * Returns: 0; -EEXIST; -ENOMEM (nothing changed). Thread: the owner. */
int gw_sub_add_recovering(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len,
                          uint32_t hash, gw_sub_entry_t **out);

/* Whether set is a RECOVERING member of e. O(channels of set), O(1) for a set recovering in
 * no channel (GW_SUB_SET_RECOVERING clear). */
bool gw_sub_set_is_recovering(const gw_sub_set_t *set, const gw_sub_entry_t *e);

/* Whether set is RECOVERING in any channel. O(channels of set). */
bool gw_sub_set_has_recovering(const gw_sub_set_t *set);

/* Makes set, RECOVERING in e, an ordinary member. Returns: 0; -ENOENT (not recovering there).
 * Thread: the owner. */
int gw_sub_recovered(gw_sub_set_t *set, const gw_sub_entry_t *e);

/* Takes set out of channel name[0..len). Returns: 0; 1 when set was still waiting for the
 * engine's answer, its Subscribe unanswered: *pending_req gets that request's id, which
 * cbs->joined will now never see; 2 when set was RECOVERING (its Subscribe unanswered too; the
 * caller knows the request); -ENOENT when set was not in the channel.
 * Thread: the owner. Callbacks: cbs->leave when the entry goes. */
int gw_sub_remove(gw_sub_index_t *ix, gw_sub_set_t *set, const char *name, size_t len,
                  uint32_t hash, uint64_t *pending_req);

/* Takes set out of every channel and frees its heap slots (a closing session).
 * Thread: the owner. Callbacks: cbs->leave for each entry that goes. */
void gw_sub_remove_all(gw_sub_index_t *ix, gw_sub_set_t *set);

/* The engine's answer to cbs->join: status 0 activates the entry with offset and epoch and
 * answers every waiting member; a negative status undoes their subscriptions. An answer for
 * an entry that is not JOINING is ignored. Thread: the owner.
 * Callbacks: cbs->joined once per waiting member; cbs->leave if nobody is left. */
void gw_sub_joined(gw_sub_index_t *ix, const char *name, size_t len, uint32_t hash, int status,
                   uint64_t offset, uint64_t epoch);

/* The entry for a channel, or NULL. Thread: the owner. */
gw_sub_entry_t *gw_sub_find(const gw_sub_index_t *ix, const char *name, size_t len, uint32_t hash);

/* Whether set is in channel name[0..len). O(channels of set). */
bool gw_sub_set_has(const gw_sub_set_t *set, const char *name, size_t len);

static inline uint32_t gw_sub_set_count(const gw_sub_set_t *set)
{
    return set->count;
}

/* Slot i (< gw_sub_set_count) of set: the entry of one of its channels. */
static inline const gw_sub_entry_t *gw_sub_set_entry(const gw_sub_set_t *set, uint32_t i)
{
    return set->cap == 0 ? set->u.inl[i] : set->u.heap[i];
}

/* Frees a set's heap slots and empties it, keeping its connection and the flags its owner set;
 * for a set already removed from every channel (or whose index was deinit'ed). */
void gw_sub_set_deinit(gw_sub_set_t *set);

static inline bool gw_sub_entry_is_active(const gw_sub_entry_t *e)
{
    return e->key.user == GW_SUB_ACTIVE;
}

/* The members, for delivery: valid until the next add or remove on this entry. */
static inline gw_sub_set_t *const *gw_sub_entry_members(const gw_sub_entry_t *e, uint32_t *n)
{
    *n = e->count;
    return e->cap <= 1 ? &e->m.one : e->m.many;
}

static inline uint64_t gw_sub_entry_offset(const gw_sub_entry_t *e)
{
    return e->offset;
}

/* The epoch of an ACTIVE entry (0 while JOINING). */
static inline uint64_t gw_sub_entry_epoch(const gw_sub_entry_t *e)
{
    return e->key.user == GW_SUB_ACTIVE ? e->u.epoch : 0;
}

/* Channels with subscribers on this loop. */
static inline uint32_t gw_sub_index_channels(const gw_sub_index_t *ix)
{
    return ix->tab.count;
}

/* Records that a message with this offset and epoch reached the loop (delivery order is offset
 * order, so later subscribers are answered with it). */
static inline void gw_sub_entry_advance(gw_sub_entry_t *e, uint64_t offset, uint64_t epoch)
{
    e->offset = offset;
    e->u.epoch = epoch;
}

static inline const char *gw_sub_entry_name(const gw_sub_entry_t *e, size_t *len)
{
    *len = e->key.name_len;
    return e->name;
}

/* --- gw_fanout -------------------------------------------------------------------------------- */

/*
 * gw_fanout: how a published message travels from the thread that accepted it to the sockets
 * of every subscriber (DESIGN.md, "One message, end to end"), and how the IO loops post to each
 * other.
 *
 * A message (gw_msg_t) is the Push frame encoded once into a reference-counted nl_block, plus
 * what a loop needs to route it: channel name, hash, offset, epoch and the publish time. An
 * engine hands it to gw_fanout_publish on one IO loop (for the memory engine, the channel's
 * owner) with the set of loops that have subscribers, or queues it in an outbox of its own (the
 * Redis engine's thread). The source delivers to its own loop at once and appends the message
 * to one batch per other target loop; each non-empty batch goes out with ONE nl_loop_post per
 * target per iteration (gw_fanout_flush, from the source's before-sleep). A poster's posts run
 * in order, so every loop sees a channel's messages in offset order.
 *
 * On a loop, delivery is one index lookup per message, then per subscriber a slow-consumer
 * check and nl_conn_send_block (a reference, no copy, no syscall: the connection's single
 * writev happens in netlib's before-sleep flush). A message for a channel without local
 * subscribers (a leave crossed it) is dropped and counted.
 *
 * The delivery interface: fan-out knows a subscriber only as its gw_sub_set_t (gw_fanout.h): the
 * connection, the channels, the flags. A subscriber past the high-water mark is a slow consumer:
 * under GW_SLOW_DROP its Pushes are dropped and counted; under GW_SLOW_DISCONNECT fan-out calls
 * the loop's on_slow hook (the session closes itself politely, keeping its subscriptions) and
 * takes the set out of every channel once the delivery loop is done.
 *
 * The hub (gw_fanout_t) is the node's IO loops as fan-out sees them; each loop registers its
 * part (gw_fanout_loop_t: subscription index, batches, delivery policy, counters) from its own
 * thread. Every post from one IO loop to another goes through gw_fanout_post, which counts it
 * (gw_fanout_loop_t.posts): a node shutting down waits for a round in which nobody posted.
 *
 * Thread: gw_msg_ref/unref and gw_fanout_post from any thread (C11 atomics; the count is kept
 * only for a poster that is one of the hub's loops); a loop part on its own loop; an outbox on
 * the thread that owns it. Ownership: gw_msg_new returns one reference; batches and deliveries
 * take their own. The caller owns the hub and the parts.
 */
/* At most this many IO loops: audiences are 64-bit masks. */
#define GW_FANOUT_MAX_LOOPS 64

/* What happens to a subscriber whose queued output reached the high-water mark. */
typedef enum gw_slow_policy_e {
    GW_SLOW_DROP = 0,       /* drop messages for the slow subscriber and count them */
    GW_SLOW_DISCONNECT = 1, /* close the slow subscriber's connection */
} gw_slow_policy_t;

/* --- frames in two framings ----------------------------------------------------------------- */

/* One encoded frame as every subscriber gets it: varint-prefixed for the TCP stream, and in a
 * WebSocket binary frame (gw_ws_header) for WebSocket connections. The second is built from
 * the first at the first WebSocket subscriber's delivery (once: a race between loops keeps one
 * and drops the other), so a node without WebSocket clients never builds it. Immutable once
 * built; shared across loops. */
typedef struct gw_frame_blocks_s {
    nl_block_t *tcp;
    _Atomic(nl_block_t *) ws;
} gw_frame_blocks_t;

/* The WebSocket framing of fb (built now if it was not), or NULL on ENOMEM. Thread: any. */
nl_block_t *gw_frame_blocks_ws(gw_frame_blocks_t *fb);

/* Drops both blocks. Thread: the last holder's. */
void gw_frame_blocks_deinit(gw_frame_blocks_t *fb);

/* --- messages ----------------------------------------------------------------------------- */

typedef struct gw_msg_s {
    _Atomic uint32_t refs;
    uint32_t hash;            /* gw_sub_hash(chan) */
    gw_frame_blocks_t blocks; /* the Push frame, shared by every subscriber */
    uint64_t offset;
    uint64_t epoch;
    uint64_t publish_ns; /* nl_now_ns() when the engine accepted it */
    uint16_t chan_len;
    char chan[]; /* chan_len bytes and a NUL */
} gw_msg_t;

/* Encodes Push{chan, offset, epoch, payload, publish_time_ms} once and wraps it.
 * Returns the message with one reference, or NULL on ENOMEM. Thread: any.
 * Ownership: chan and payload are copied (the payload into the block). */
gw_msg_t *gw_msg_new(const char *chan, size_t chan_len, uint32_t hash, uint64_t offset,
                     uint64_t epoch, const void *payload, size_t len, uint64_t publish_time_ms);

/* Adds a reference. Thread: any. */
gw_msg_t *gw_msg_ref(gw_msg_t *m);

/* Drops a reference; the last frees the message and its block reference. Thread: any. */
void gw_msg_unref(gw_msg_t *m);

/* --- the hub and its loops ---------------------------------------------------------------- */

typedef struct gw_fanout_loop_s gw_fanout_loop_t;
typedef struct gw_fanout_batch_s gw_fanout_batch_t;

/* The node's IO loops. loops[i] is set by loop i's gw_fanout_loop_init, on its thread, before
 * that loop runs anything: readers on other threads see it through the thread start or a post. */
typedef struct gw_fanout_s {
    uint32_t n_loops;
    gw_fanout_loop_t *loops[GW_FANOUT_MAX_LOOPS];
} gw_fanout_t;

/* Messages on their way from one source (an IO loop, or an engine's own thread) to the other
 * loops: one batch per target, posted whole. */
typedef struct gw_fanout_outbox_s {
    gw_fanout_t *hub;
    uint64_t pending_mask;       /* targets with a batch */
    gw_fanout_batch_t **batches; /* per target loop; NULL while empty */
    uint64_t batches_posted;
    uint64_t failures; /* messages lost because a batch could not be made or posted (ENOMEM) */
} gw_fanout_outbox_t;

/* One loop's counters: written by that loop only, read by a closure posted to it. */
typedef struct gw_fanout_stats_s {
    uint64_t deliveries;  /* Push frames queued to a connection */
    uint64_t events;      /* join/leave event frames queued to a connection */
    uint64_t slow_drops;  /* Push and event frames dropped for a slow consumer */
    uint64_t unrouted;    /* messages that reached the loop with no local subscriber */
    nl_hist_t latency_ns; /* publish (engine accepted) to queued on this loop's sockets */
    nl_hist_t flush_ns;   /* publish to written to this loop's subscribers' sockets */
} gw_fanout_stats_t;

/* A subscriber went past the high-water mark under GW_SLOW_DISCONNECT. The hook must stop
 * deliveries to it (set GW_SUB_SET_OFF) and must not add to or remove from any channel: it
 * runs inside a delivery loop, after which fan-out takes the set out of every channel itself.
 * arg is gw_fanout_loop_init's slow_arg. */
typedef void (*gw_fanout_slow_cb)(gw_sub_set_t *set, void *arg);

/* One loop's part. Owner thread only; read the fields, change them through the functions. */
struct gw_fanout_loop_s {
    gw_fanout_t *hub;
    nl_loop_t *loop;
    uint32_t index;
    gw_sub_index_t subs;       /* channel -> subscribers on this loop */
    gw_fanout_outbox_t out;    /* batches toward the other loops */
    uint8_t slow_policy;       /* gw_slow_policy_t */
    uint64_t high_water_bytes; /* queued output that makes a subscriber slow; 0: no limit */
    gw_fanout_slow_cb on_slow;
    void *slow_arg;
    uint64_t posts; /* posts this loop made to the other loops (and to the engine's thread) */
    /* Slow consumers told to go during one delivery, taken out of their channels after it. */
    gw_sub_set_t **leaving;
    uint32_t n_leaving;
    uint32_t cap_leaving;
    /* Publish times of messages delivered this iteration (the publish-to-flush samples). */
    uint64_t *flush_pub_ns;
    uint32_t n_flush_pub;
    uint32_t cap_flush_pub;
    gw_fanout_stats_t stats;
};

/* Sets up an empty hub for n_loops loops (1..GW_FANOUT_MAX_LOOPS). Returns: 0; -EINVAL.
 * Thread: any, before the loops start. */
int gw_fanout_hub_init(gw_fanout_t *hub, uint32_t n_loops);

/* Sets up loop `index`'s part on its own thread and registers it in the hub; the thread's
 * current part from now on (gw_fanout_loop_current). cbs and sub_arg go to the subscription
 * index (gw_sub_index_init); on_slow(set, slow_arg) is the slow-consumer hook.
 * Returns: 0; -ENOMEM. Thread: loop's, before it runs. */
int gw_fanout_loop_init(gw_fanout_loop_t *fl, gw_fanout_t *hub, uint32_t index, nl_loop_t *loop,
                        const gw_sub_index_cbs_t *cbs, void *sub_arg, gw_fanout_slow_cb on_slow,
                        void *slow_arg);

/* Drops unsent batches and frees the part (its sessions are gone). Thread: the loop's. */
void gw_fanout_loop_deinit(gw_fanout_loop_t *fl);

/* Sets the slow-consumer policy and the high-water mark (startup, reload). Thread: the loop's. */
void gw_fanout_loop_set_policy(gw_fanout_loop_t *fl, gw_slow_policy_t policy,
                               uint64_t high_water_bytes);

/* The part of the IO loop the calling thread runs, or NULL (not an IO loop). Thread: any. */
gw_fanout_loop_t *gw_fanout_loop_current(void);

/* The calling thread's part when it is one of hub's loops, else NULL. Thread: any. */
static inline gw_fanout_loop_t *gw_fanout_here(const gw_fanout_t *hub)
{
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    return fl && fl->hub == hub ? fl : NULL;
}

/* Posts fn(arg) to loop target of hub, counted in the caller's posts when the caller is one
 * of hub's loops. Returns: 0; -ENOMEM (fn will not run). Thread: any. */
int gw_fanout_post(gw_fanout_t *hub, uint32_t target, nl_loop_post_cb fn, void *arg);

/* As gw_fanout_post, to a loop named by its nl_loop_t (a reply address). Thread: any. */
int gw_fanout_post_to(gw_fanout_t *hub, nl_loop_t *target, nl_loop_post_cb fn, void *arg);

/* --- outboxes ----------------------------------------------------------------------------- */

/* Sets up an empty outbox toward hub's loops. Returns: 0; -ENOMEM. Thread: its owner. */
int gw_fanout_outbox_init(gw_fanout_outbox_t *out, gw_fanout_t *hub);

/* Drops unsent batches (unrefs their messages) and frees the outbox. Thread: its owner. */
void gw_fanout_outbox_deinit(gw_fanout_outbox_t *out);

/* Appends m (a reference is taken) to the batch for loop target. Thread: the owner. */
void gw_fanout_outbox_add(gw_fanout_outbox_t *out, uint32_t target, gw_msg_t *m);

/* Appends m to the batch of every loop in loop_mask. Thread: the owner. */
void gw_fanout_outbox_add_mask(gw_fanout_outbox_t *out, uint64_t loop_mask, gw_msg_t *m);

/* Posts the batch for target now, so that a post made right after it (a join answer) arrives
 * after the messages already batched. A post that fails drops the batch (counted).
 * Thread: the owner. */
void gw_fanout_outbox_flush_target(gw_fanout_outbox_t *out, uint32_t target);

/* Posts every pending batch. Thread: the owner. */
void gw_fanout_outbox_flush(gw_fanout_outbox_t *out);

/* --- publishing and delivery -------------------------------------------------------------- */

/* Delivers m to every loop whose bit is set in loop_mask: this loop at once, the others
 * through its outbox. The caller keeps its reference. Thread: fl's loop. */
void gw_fanout_publish(gw_fanout_loop_t *fl, gw_msg_t *m, uint64_t loop_mask);

/* Posts every pending batch of fl's outbox (the before-sleep hook calls this). */
static inline void gw_fanout_flush(gw_fanout_loop_t *fl)
{
    gw_fanout_outbox_flush(&fl->out);
}

/* Delivers m to this loop's subscribers of its channel. Thread: fl's loop. */
void gw_fanout_deliver(gw_fanout_loop_t *fl, gw_msg_t *m);

/* Queues m to one subscriber of this loop as a delivery does (the slow-consumer policy
 * included), for a recovering subscriber's missed messages. Returns whether it was queued.
 * The caller must not be inside a delivery. Thread: fl's loop. */
bool gw_fanout_deliver_one(gw_fanout_loop_t *fl, gw_sub_set_t *set, gw_msg_t *m);

/* Queues an event frame (a join/leave) to this loop's subscribers of listener channel
 * name[0..len), except the connection skip_conn (0: none), subscribers that are off, and slow
 * consumers (the event is dropped and counted; never a reason to disconnect). Changes no
 * subscription. Returns: how many were queued. Thread: fl's loop. */
uint64_t gw_fanout_deliver_event(gw_fanout_loop_t *fl, const char *name, size_t len, uint32_t hash,
                                 gw_frame_blocks_t *fb, uint64_t skip_conn);

/* At the end of an iteration (the loop's before-sleep hook): writes what the iteration queued
 * (nl_conn_flush_loop) and records publish-to-flush for each message delivered in it.
 * Thread: fl's loop. */
void gw_fanout_flush_done(gw_fanout_loop_t *fl);

#endif
