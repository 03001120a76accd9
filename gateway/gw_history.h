/*
 * gw_history: the messages a channel keeps for recovery, and the per-loop store that bounds
 * them all (DESIGN.md, "History and recovery").
 *
 * A channel's history (gw_history_t) is a ring of references to its latest messages, the very
 * gw_msg_t that fan-out delivered: keeping a message costs a pointer and a reference, never a
 * copy, and a recovered message goes out as the same shared Push block. The ring holds
 * consecutive offsets (first .. first + count - 1): a message enters at its publish, in offset
 * order, and leaves from the old end only, by count (the rule's), by age (the rule's, on the
 * monotonic clock) or by memory (the store's cap). So "does the history still cover offset o"
 * is one comparison, and the messages after o are one slice of the ring.
 *
 * A store (gw_history_store_t) is one engine shard's histories: their byte total, capped at
 * max_bytes, and a list in least-recently-published order. Past the cap the oldest messages of
 * the least recently published channel go first. gw_history_store_sweep, run about once a
 * second, drops what has aged out everywhere and reports each history that became empty, so
 * the engine can forget channels nobody subscribes to.
 *
 * Thread: a store and its histories belong to one thread (the engine shard's IO loop).
 * Ownership: the store's owner allocates histories with gw_history_new and frees them with
 * gw_history_free; a history holds one reference to each message in it.
 */
#ifndef HERALD_GATEWAY_GW_HISTORY_H
#define HERALD_GATEWAY_GW_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_fanout.h"
#include "gw_history_rules.h"

/* Why messages left a history (herald_history_evicted_total{reason}). */
typedef enum gw_history_evict_e {
    GW_HISTORY_EVICT_COUNT = 0, /* the rule's count */
    GW_HISTORY_EVICT_AGE,       /* the rule's age */
    GW_HISTORY_EVICT_MEMORY,    /* the store's max_bytes */
    GW_HISTORY_EVICT_REASONS
} gw_history_evict_t;

typedef struct gw_history_s gw_history_t;

struct gw_history_s {
    gw_msg_t **ring;
    uint32_t cap; /* ring slots, a power of two, at most the rule's count rounded up */
    uint32_t head;
    uint32_t count;
    uint32_t max_count;
    uint64_t age_ns;    /* 0: no age bound */
    uint64_t bytes;     /* gw_history_msg_bytes of the messages held */
    gw_history_t *prev; /* the store's list, least recently published first */
    gw_history_t *next;
    void *owner; /* the engine's channel */
};

typedef struct gw_history_store_s {
    gw_history_t *oldest; /* histories with messages, least recently published first */
    gw_history_t *newest;
    gw_history_t *empty_oldest; /* histories without messages */
    gw_history_t *empty_newest;
    uint64_t max_bytes;
    uint64_t bytes; /* messages (gw_history_msg_bytes), rings and histories */
    uint64_t messages;
    uint64_t histories;
    uint64_t evicted[GW_HISTORY_EVICT_REASONS];
} gw_history_store_t;

/* What one message costs a history: the message, its name and its encoded block. */
size_t gw_history_msg_bytes(const gw_msg_t *m);

/* Sets up an empty store capped at max_bytes. Thread: the owner. */
void gw_history_store_init(gw_history_store_t *st, uint64_t max_bytes);

/* Sets st's cap; a smaller one evicts at once (least recently published first).
 * Thread: st's. */
void gw_history_store_set_max(gw_history_store_t *st, uint64_t max_bytes);

/* A history for a channel under rule r (count > 0), linked into st; owner is the caller's
 * (the channel). Returns: 0; -ENOMEM. Thread: st's. */
int gw_history_new(gw_history_store_t *st, gw_history_t **out, const gw_history_rule_t *r,
                   void *owner);

/* Drops every message of h, unlinks and frees it. NULL is fine. Thread: st's. */
void gw_history_free(gw_history_store_t *st, gw_history_t *h);

/* Applies a changed rule (count > 0) to h: a smaller count or age drops what no longer fits.
 * Thread: st's. */
void gw_history_set_rule(gw_history_store_t *st, gw_history_t *h, const gw_history_rule_t *r);

/* Keeps m (takes a reference) as h's newest message: its offset must follow the newest one's
 * (or h is empty). Drops what the count, the age and the store's cap then push out, from h or
 * from other histories. Never fails: without memory to grow the ring, the oldest message makes
 * room. now_ns is nl_now_ns(). Thread: st's. */
void gw_history_add(gw_history_store_t *st, gw_history_t *h, gw_msg_t *m, uint64_t now_ns);

/* Drops h's messages older than its age bound. Thread: st's. */
void gw_history_trim_age(gw_history_store_t *st, gw_history_t *h, uint64_t now_ns);

/* Whether h holds every message after offset since up to its newest (latest), given the
 * channel's latest offset: true when since == latest (nothing missed). */
bool gw_history_covers(const gw_history_t *h, uint64_t since, uint64_t latest);

/* The messages with offsets after since, oldest first: *n of them at *msgs (a view into the
 * ring in at most two pieces: msgs[0..n0) then msgs2[0..n - n0)). Only valid when
 * gw_history_covers(h, since, latest). Their bytes (gw_history_msg_bytes) are summed into
 * *bytes. Thread: st's. */
void gw_history_since(const gw_history_t *h, uint64_t since, gw_msg_t *const **msgs, uint32_t *n0,
                      gw_msg_t *const **msgs2, uint32_t *n, uint64_t *bytes);

static inline bool gw_history_is_empty(const gw_history_t *h)
{
    return h->count == 0;
}

/* Called by gw_history_store_sweep for each history it emptied or found empty. */
typedef void (*gw_history_empty_cb)(gw_history_t *h, void *arg);

/* Drops every aged-out message of every history in st; calls on_empty(h, arg) for each history
 * that is empty afterwards (it may free h). Thread: st's. */
void gw_history_store_sweep(gw_history_store_t *st, uint64_t now_ns, gw_history_empty_cb on_empty,
                            void *arg);

#endif
