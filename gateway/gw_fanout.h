/*
 * gw_fanout: how a published message travels from the loop that accepted it to the sockets of
 * every subscriber (DESIGN.md, "One message, end to end").
 *
 * A message (gw_msg_t) is the Push frame encoded once into a reference-counted nl_block, plus
 * what a loop needs to route it: channel name, hash, offset, epoch and the publish time. The
 * engine hands it to gw_fanout_publish on one IO loop (for the memory engine, the channel's
 * owner) with the set of loops that have subscribers. The source loop delivers to itself at
 * once and appends the message to one batch per other target loop; a before-sleep hook posts
 * each non-empty batch with ONE nl_loop_post per target per iteration. A poster's posts run in
 * order, so every loop sees a channel's messages in offset order.
 *
 * On a loop, delivery is one index lookup per message, then per subscriber a slow-consumer
 * check and nl_conn_send_block (a reference, no copy, no syscall: the connection's single
 * writev happens in netlib's before-sleep flush). A message for a channel without local
 * subscribers (a leave crossed it) is dropped and counted.
 *
 * Thread: gw_msg_ref/unref from any thread (C11 atomics); everything else on the IO loop it
 * names. Ownership: gw_msg_new returns one reference; batches and deliveries take their own.
 */
#ifndef HERALD_GATEWAY_GW_FANOUT_H
#define HERALD_GATEWAY_GW_FANOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_block.h"

typedef struct gw_loop_s gw_loop_t;

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

typedef struct gw_fanout_batch_s gw_fanout_batch_t;

/* One source loop's outgoing batches. */
typedef struct gw_fanout_s {
    uint32_t n_targets;
    gw_fanout_batch_t **batches; /* per target loop; NULL while empty */
    uint64_t pending_mask;       /* targets with a batch */
} gw_fanout_t;

/* Sets up batches toward n_loops loops. Returns: 0; -ENOMEM. Thread: the source loop. */
int gw_fanout_init(gw_fanout_t *fo, uint32_t n_loops);

/* Drops unsent batches (unrefs their messages). Thread: the source loop. */
void gw_fanout_deinit(gw_fanout_t *fo);

/* Delivers m to every loop whose bit is set in loop_mask: this loop at once, the others
 * through batches. The caller keeps its reference. Thread: src's loop. */
void gw_fanout_publish(gw_loop_t *src, gw_msg_t *m, uint64_t loop_mask);

/* Posts every pending batch (the before-sleep hook calls this). Thread: src's loop. */
void gw_fanout_flush(gw_loop_t *src);

/* Posts the batch for one target now, so that a post made right after it (a join answer)
 * arrives after the messages already batched. Thread: src's loop. */
void gw_fanout_flush_target(gw_loop_t *src, uint32_t target);

/* Delivers m to this loop's subscribers of its channel. Thread: lp's loop. */
void gw_fanout_deliver(gw_loop_t *lp, gw_msg_t *m);

/* At the end of an iteration (the loop's before-sleep hook): writes what the iteration queued
 * (nl_conn_flush_loop) and records publish-to-flush for each message delivered in it.
 * Thread: lp's loop. */
void gw_fanout_flush_done(gw_loop_t *lp);

#endif
