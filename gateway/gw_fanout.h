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
 * The delivery interface: fan-out knows a subscriber only as its gw_sub_set_t (gw_sub.h): the
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
#ifndef HERALD_GATEWAY_GW_FANOUT_H
#define HERALD_GATEWAY_GW_FANOUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_sub.h"
#include "netlib/nl_block.h"
#include "netlib/nl_hist.h"
#include "netlib/nl_loop.h"

/* At most this many IO loops: audiences are 64-bit masks. */
#define GW_FANOUT_MAX_LOOPS 64

/* What happens to a subscriber whose queued output reached the high-water mark. */
typedef enum gw_slow_policy_e {
    GW_SLOW_DROP = 0,       /* drop messages for the slow subscriber and count them */
    GW_SLOW_DISCONNECT = 1, /* close the slow subscriber's connection */
} gw_slow_policy_t;

/* --- messages ----------------------------------------------------------------------------- */

typedef struct gw_msg_s {
    _Atomic uint32_t refs;
    uint32_t hash;     /* gw_sub_hash(chan) */
    nl_block_t *block; /* the delimited Push frame, shared by every subscriber */
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
    uint64_t deliveries;       /* Push frames queued to a connection */
    uint64_t events;           /* join/leave event frames queued to a connection */
    uint64_t slow_drops;       /* Push and event frames dropped for a slow consumer */
    uint64_t unrouted;         /* messages that reached the loop with no local subscriber */
    nl_hist_t latency_ns;      /* publish (engine accepted) to queued on this loop's sockets */
    nl_hist_t flush_ns;        /* publish to written to this loop's subscribers' sockets */
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
    gw_sub_index_t subs;    /* channel -> subscribers on this loop */
    gw_fanout_outbox_t out; /* batches toward the other loops */
    uint8_t slow_policy;    /* gw_slow_policy_t */
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
uint64_t gw_fanout_deliver_event(gw_fanout_loop_t *fl, const char *name, size_t len,
                                 uint32_t hash, nl_block_t *b, uint64_t skip_conn);

/* At the end of an iteration (the loop's before-sleep hook): writes what the iteration queued
 * (nl_conn_flush_loop) and records publish-to-flush for each message delivered in it.
 * Thread: fl's loop. */
void gw_fanout_flush_done(gw_fanout_loop_t *fl);

#endif
