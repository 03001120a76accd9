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
#ifndef HERALD_GATEWAY_GW_SUB_H
#define HERALD_GATEWAY_GW_SUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_chantab.h"
#include "netlib/nl_conn.h"

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

#endif
