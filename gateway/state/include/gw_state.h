/*
 * gw_state.h: the room's public header.
 *
 * state: what herald knows besides who is subscribed: who is online on a loop (the online
 * table), presence (events, refresh batches, query answers), and history (the kept messages
 * of the channels whose rules keep them).
 *
 * Sections, one per module (each .c of the room): gw_online, gw_presence, gw_history. Which
 * channels keep history is a setting: its rules are config's (gw_config.h, gw_history_rules).
 */
#ifndef HERALD_GATEWAY_STATE_GW_STATE_H
#define HERALD_GATEWAY_STATE_GW_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"
#include "gw_config.h"
#include "gw_fanout.h"
#include "netlib/nl_block.h"

/* --- gw_online -------------------------------------------------------------------------------- */

/*
 * gw_online: one IO loop's table of the users connected through it (DESIGN.md, "Online
 * status"), and lists of user names for counting distinct users across loops.
 *
 * Memory is the point, as in gw_sub: at 100k connections of 100k different users the table is
 * paid once per connection. A connection is keyed by a gw_chankey_t that it embeds right before
 * its user id (the gw_chantab convention: the name follows the key), so the table stores one
 * pointer per user and nothing is allocated for a user with one connection on the loop. Such a
 * user sits in `singles`, keyed by its connection's own key. A user with more connections here
 * gets a group (one allocation with a copy of the name and an array of the connections) in
 * `groups`; a user is in exactly one of the two tables. Taking a connection out of a group scans
 * the group's array from its end, O(connections of that user here), which a user with tens of
 * thousands of connections on one loop would feel and nobody else does.
 *
 * The key's spare 16 bits (key.user) belong to the connection: gw_online_stamp() records there,
 * in units of GW_ONLINE_STAMP_MS of the loop clock, when the connection was last seen active.
 * 16 bits of 2 s span 36 hours, more than the longest idle timeout (24 h) after which a silent
 * connection is closed, so a live connection's stamp is never ambiguous (gw_online_stamp_ms).
 *
 * A list (gw_online_list_t) is a buffer of (key, name) records, the names of users from one
 * loop; gw_online_list_distinct counts the distinct names over several lists, which is how a
 * node counts a user connected through several loops once.
 *
 * Thread: a table belongs to one loop; nothing locks. A list is built by one thread and may be
 * handed to another (after a post, which orders the accesses).
 * Ownership: the caller owns the table value and the connections' keys; the table owns its
 * slot arrays and the groups. A list owns its buffer.
 * Usage: gw_online_init(&t); after authentication k->hash = gw_online_hash(user, len),
 *        k->name_len = len, gw_online_add(&t, k); on close gw_online_remove(&t, k);
 *        gw_online_find(&t, user, len, hash, &u) for one user, gw_online_foreach for all.
 */
/* The unit of a connection's last-seen stamp (key.user), in loop milliseconds. */
#define GW_ONLINE_STAMP_MS 2000u

typedef struct gw_online_s {
    gw_chantab_t singles; /* users with one connection here: that connection's key */
    gw_chantab_t groups;  /* users with more: a group's key */
    uint64_t conns;       /* connections in the table */
} gw_online_t;

/* One user's connections on the loop, as gw_online_find and gw_online_foreach hand them out:
 * conns[0..n) are the connections' keys, the user id follows each (key + 1). Valid until the
 * next add or remove; conns may point into the view itself, so do not copy the view. */
typedef struct gw_online_user_s {
    gw_chankey_t *const *conns;
    uint32_t n;
    gw_chankey_t *one; /* storage for conns when n == 1 */
} gw_online_user_t;

typedef void (*gw_online_user_cb)(const gw_online_user_t *u, void *arg);

/* The hash of a user id, as the keys carry it. Thread: any. */
static inline uint32_t gw_online_hash(const char *user, size_t len)
{
    return gw_chantab_hash(user, len);
}

/* Sets up an empty table. Returns: 0; -ENOMEM. Thread: the owner. */
int gw_online_init(gw_online_t *t);

/* Frees the groups and the slot arrays; the connections' keys are the caller's and are just
 * forgotten. Thread: the owner. */
void gw_online_deinit(gw_online_t *t);

/* Adds the connection keyed k (hash and name_len set, the user id after the key).
 * Returns: 1 when its user had no connection here before; 0 when it had; -ENOMEM (nothing
 * changed). Thread: the owner. */
int gw_online_add(gw_online_t *t, gw_chankey_t *k);

/* Takes the connection keyed k out. Returns: 1 when it was its user's last connection here;
 * 0 when others remain; -ENOENT when k is not in the table. Thread: the owner. */
int gw_online_remove(gw_online_t *t, gw_chankey_t *k);

/* Fills *u with the connections here of user[0..len) (hash = gw_online_hash of it).
 * Returns: how many (0: none, *u then empty). Thread: the owner. */
uint32_t gw_online_find(const gw_online_t *t, const char *user, size_t len, uint32_t hash,
                        gw_online_user_t *u);

/* Calls fn once per user of the table. fn must not add or remove. Thread: the owner. */
void gw_online_foreach(const gw_online_t *t, gw_online_user_cb fn, void *arg);

/* Users with a connection here. */
static inline uint64_t gw_online_users(const gw_online_t *t)
{
    return (uint64_t)t->singles.count + t->groups.count;
}

/* The stamp of loop time now_ms (the value a key.user holds). */
static inline uint16_t gw_online_stamp(uint64_t now_ms)
{
    return (uint16_t)(now_ms / GW_ONLINE_STAMP_MS);
}

/* The time (same clock as now_ms) at which the 2 s unit of a stamp began, for a stamp taken
 * at most 36 h before now_ms: the latest time the stamp is known not to be later than. */
static inline uint64_t gw_online_stamp_ms(uint16_t stamp, uint64_t now_ms)
{
    uint64_t unit = now_ms / GW_ONLINE_STAMP_MS;
    uint16_t age = (uint16_t)((uint16_t)unit - stamp);
    return unit >= age ? (unit - age) * GW_ONLINE_STAMP_MS : 0;
}

/* --- lists of user names ------------------------------------------------------------------ */

/* (key, name) records, 4-byte aligned, one after the other. Zero-filled is an empty list. */
typedef struct gw_online_list_s {
    char *buf;
    size_t len;
    size_t cap;
    uint32_t count;
} gw_online_list_t;

/* Appends user[0..len) (hash = gw_online_hash of it). Returns: the record's offset in the
 * buffer (>= 0); -ENOMEM; -EINVAL (a name over 65535 bytes). Thread: the list's. */
long gw_online_list_add(gw_online_list_t *l, const char *user, size_t len, uint32_t hash);

/* The name of the record at offset off (as gw_online_list_add returned it), and its length. */
static inline const char *gw_online_list_name(const gw_online_list_t *l, long off, size_t *len)
{
    const gw_chankey_t *k = (const gw_chankey_t *)(l->buf + off);
    *len = k->name_len;
    return (const char *)(k + 1);
}

/* Frees the buffer and empties the list. */
void gw_online_list_free(gw_online_list_t *l);

/* Counts the distinct names over lists[0..n) (a name in several lists, or twice in one, counts
 * once). Returns: the count, or a negative errno (-ENOMEM). Thread: any, with the lists no
 * longer written. */
int64_t gw_online_list_distinct(gw_online_list_t *const *lists, size_t n);

/* --- gw_presence ------------------------------------------------------------------------------ */

/*
 * gw_presence: online status and channel presence on an IO loop, and the pieces that travel
 * between loops: join/leave events, refresh batches, query answers (DESIGN.md, "Online
 * status").
 *
 * What lives where:
 *   - Who is online: each loop's gw_online table (gw_presence_loop_t.online) holds its
 *     authenticated sessions by user, intrusively. A session carries its authentication time
 *     and, in its key, a last-seen stamp. The engine hears of a user's first and last
 *     connection on a loop (user_online, user_offline) and, once per refresh interval, of the
 *     users the loop saw active: a session marks itself seen on every read (a flag), and the
 *     loop's refresh timer stamps the seen sessions and hands the engine one batch
 *     (gw_presence_batch_t). Last seen therefore moves in steps of the refresh interval.
 *   - Who is in a channel: the loops' subscription indexes themselves (gw_sub). A subscriber
 *     is visible from its SubscribeOk until it unsubscribes or its session starts closing.
 *     Queries gather every loop's part (the memory engine: gw_presence_mem).
 *   - Join and leave events: a subscriber that asked for them (Subscribe.join_leave) is also
 *     a member of the channel's listener channel, the name with GW_PRESENCE_LISTEN_PREFIX
 *     before it, a byte no channel name may hold: listeners are ordinary index entries, and the
 *     engine routes events to the loops that have listeners as it routes messages to loops
 *     that have subscribers. An event frame is encoded once (gw_event_t) and its block shared
 *     by every listener; the connection it is about is skipped. A node-wide count of listeners
 *     (gw_node_t.presence_listeners, relaxed loads) gates it all, so that a node without
 *     listeners builds no event.
 *
 * Thread: a gw_presence_loop_t belongs to its loop. Events and query parts cross threads by
 * post; an event is immutable once built and reference counted with C11 atomics.
 * Ownership: gw_event_new returns one reference; whoever posts an event takes one for it.
 */
typedef struct gw_event_s gw_event_t;
typedef struct gw_presence_batch_s gw_presence_batch_t;

/* The first byte of a listener channel's name. gw_channel_name refuses it in a name. */
#define GW_PRESENCE_LISTEN_PREFIX '!'

/* One loop's presence state. */
typedef struct gw_presence_loop_s {
    gw_online_t online;     /* the loop's authenticated sessions, by user */
    uint16_t last_stamp;    /* the stamp of the last refresh batch */
    int64_t wall_offset_ms; /* Unix ms minus monotonic ms, taken when the loop started */
} gw_presence_loop_t;

/* Whether name[0..len) is a listener channel. Thread: any. */
static inline bool gw_presence_is_listener(const char *name, size_t len)
{
    return len > 0 && name[0] == GW_PRESENCE_LISTEN_PREFIX;
}

/* Writes the listener channel of chan[0..len) into out (len + 1 bytes, no NUL) and returns its
 * length. Thread: any. */
size_t gw_presence_listen_name(char *out, const char *chan, size_t len);

/* Sets up a loop's presence state on its own thread: its user table and its clock offset.
 * Returns: 0; -ENOMEM. Thread: the loop's. */
int gw_presence_loop_init(gw_presence_loop_t *pl);

/* Frees what gw_presence_loop_init made (the sessions are gone). Thread: the loop's. */
void gw_presence_loop_deinit(gw_presence_loop_t *pl);

/* The Unix ms time a last-seen stamp of pl's loop (gw_online_stamp of the monotonic clock)
 * stands for: the start of its 2 s unit, on the wall clock as it was when the loop started (so
 * that one stamp always reads the same; a later step of the wall clock shifts last-seen times
 * by that step). Thread: the loop's. */
uint64_t gw_presence_stamp_wall_ms(const gw_presence_loop_t *pl, uint16_t stamp);

/* Appends the name of every user of pl's table to out (a loop's share of a count of distinct
 * users). Returns: 0; -ENOMEM. Thread: the loop's. */
int gw_presence_loop_users(const gw_presence_loop_t *pl, gw_online_list_t *out);

/* --- join/leave events -------------------------------------------------------------------- */

/* A join or leave, encoded once. Immutable after gw_event_new. */
struct gw_event_s {
    _Atomic uint32_t refs;
    uint32_t hash;            /* gw_sub_hash of chan */
    gw_frame_blocks_t blocks; /* Frame{presence_event}: what every listener receives */
    uint64_t subject_conn;    /* the connection it is about, which does not receive it */
    uint32_t subject_loop;
    uint16_t chan_len;
    char chan[]; /* the listener channel and a NUL */
};

/* What one event says about one client. */
typedef struct gw_event_client_s {
    const char *user;
    const char *client_id;
    uint64_t connected_at_ms;
} gw_event_client_t;

/* Builds the event "who joined (is_join) or left channel chan[0..len)", for the connection
 * subject_conn of loop subject_loop. Returns it with one reference, or NULL (ENOMEM).
 * Thread: any. */
gw_event_t *gw_event_new(const char *chan, size_t len, bool is_join, const gw_event_client_t *who,
                         uint32_t subject_loop, uint64_t subject_conn);

/* Adds / drops a reference; the last frees the event. Thread: any. */
/* An event from its encoded frame (delimited, as gw_event_new makes it), received from another
 * node; chan[0..len) is the listener channel. Returns NULL on ENOMEM. Thread: any. */
gw_event_t *gw_event_from_frame(const char *chan, size_t len, const void *frame, size_t n,
                                uint32_t subject_loop, uint64_t subject_conn);

gw_event_t *gw_event_ref(gw_event_t *ev);
void gw_event_unref(gw_event_t *ev);

/* Queues ev's frame to fl's listeners of its channel (not to its subject). Thread: fl's. */
void gw_presence_event_deliver(gw_fanout_loop_t *fl, gw_event_t *ev);

/* A posted delivery: gw_presence_event_deliver on the current loop, then drops the reference
 * the poster took. For nl_loop_post. */
void gw_presence_event_run(void *ev);

/* --- refresh batches ---------------------------------------------------------------------- */

/* One user of a refresh batch. */
typedef struct gw_presence_batch_item_s {
    const char *user; /* not NUL-terminated */
    size_t user_len;
    uint64_t last_seen_ms; /* Unix ms */
    uint32_t connections;  /* the user's connections on the batch's loop */
} gw_presence_batch_item_t;

/* The users a loop saw active since its previous batch. Read it with the functions below. */
struct gw_presence_batch_s {
    uint32_t loop_index;
    uint32_t n_users;
    uint64_t now_ms; /* Unix ms: the last-seen time of every user in it */
    const gw_online_t *online;
    uint16_t stamp;
};

/* The batch of users that pl's loop saw active: the sessions stamped with stamp (the caller
 * stamped them and counted n_users). Thread: the loop's. */
gw_presence_batch_t gw_presence_batch_make(const gw_presence_loop_t *pl, uint32_t loop_index,
                                           uint16_t stamp, uint32_t n_users);

/* Calls fn for every user of the batch. Thread: the batch's loop, during the engine call. */
void gw_presence_batch_foreach(const gw_presence_batch_t *b,
                               void (*fn)(const gw_presence_batch_item_t *it, void *arg),
                               void *arg);

/* --- one loop's share of a query (filled by gw_session_presence_collect and friends) ------- */

typedef struct gw_presence_part_client_s {
    long user_off; /* the user's record in the part's users list */
    uint64_t conn_id;
    uint64_t connected_at_ms;
} gw_presence_part_client_t;

/* A loop's visible subscribers of a channel. */
typedef struct gw_presence_part_s {
    gw_online_list_t users;             /* the user of each visible subscriber, repeats kept */
    gw_presence_part_client_t *clients; /* the first n_clients of them, at most the limit */
    uint32_t n_clients;
    uint32_t limit;       /* the most clients a presence answer lists ([presence] max_clients) */
    uint64_t num_clients; /* visible subscribers on the loop */
} gw_presence_part_t;

/* A loop's connections of one user. */
typedef struct gw_online_part_s {
    uint64_t connections;
    uint64_t since_ms;     /* the earliest authentication, Unix ms (with connections) */
    uint64_t last_seen_ms; /* the latest stamp, Unix ms (with connections) */
} gw_online_part_t;

/* --- query answers (gw_engine_result_t.data) ---------------------------------------------- */

typedef struct gw_presence_client_s {
    const char *user;      /* NUL-terminated */
    const char *client_id; /* "<node id>-<connection id>", as in ConnectOk */
    uint64_t connected_at_ms;
} gw_presence_client_t;

/* Who is in a channel. */
typedef struct gw_presence_result_s {
    const char *chan;                    /* the channel asked about, NUL-terminated */
    const gw_presence_client_t *clients; /* the first n_clients, at most the list limit */
    uint32_t n_clients;
    uint64_t num_clients; /* all subscribed connections */
    uint64_t num_users;   /* distinct users among them */
    bool is_truncated;    /* n_clients < num_clients */
} gw_presence_result_t;

/* One user's online status. */
typedef struct gw_online_result_s {
    const char *user; /* the user asked about (user_len bytes, NUL-terminated) */
    size_t user_len;
    uint64_t connections;     /* 0: offline */
    const char *const *nodes; /* the nodes its connections are on */
    uint32_t n_nodes;
    uint64_t since_ms;     /* online: the earliest authentication of its connections */
    uint64_t last_seen_ms; /* online: its latest refreshed activity; offline: when its last
                            * connection closed; 0 when not known (never seen, or forgotten) */
} gw_online_result_t;

/* Users online (each counted once, whatever its connections) and their connections. */
typedef struct gw_online_counts_s {
    uint64_t users;
    uint64_t connections;
} gw_online_counts_t;

/* --- gw_evgate ------------------------------------------------------------------------------- */

/*
 * gw_evgate: one IO loop's gate for the join/leave events of its own sessions: what a client's
 * subscribe/unsubscribe churn costs the listeners of a channel is bounded, whatever the churn.
 *
 * Events are keyed by (the connection they are about, the listener channel). The first event
 * of a key goes out at once (gw_evgate_offer returns it). Later ones within a window are held:
 * the key keeps at most one, the net change since the last event that went out: an event
 * opposite to the held one (a leave after a held join, a join after a held leave) undoes it,
 * and both are dropped, since listeners that apply events as set operations end where they
 * were. Every window (gw_evgate_tick) the held events go out, and keys that sent nothing for a
 * whole window are forgotten. So a connection costs each listener of a channel at most one
 * event at once and one per window after that, and a burst of subscribe/unsubscribe pairs
 * read together costs nothing past its first event.
 *
 * Thread: a gate belongs to its loop; nothing locks. Ownership: the gate holds a reference to
 * each held event and frees its records.
 * Usage: gw_evgate_init(&g); ev = gw_evgate_offer(&g, ev, is_join); if (ev) publish it; every
 *        window while gw_evgate_count(&g) > 0, gw_evgate_tick(&g, emit, arg).
 */
typedef struct gw_evgate_s {
    gw_chantab_t keys;  /* (connection id, listener channel) -> record */
    uint64_t held;      /* records holding an event */
    uint64_t coalesced; /* events dropped because a later one undid them (counter) */
} gw_evgate_t;

/* An event that goes out at a window's end: is_join tells its kind. The callback takes over
 * the reference. */
typedef void (*gw_evgate_emit_cb)(gw_event_t *ev, bool is_join, void *arg);

/* Sets up an empty gate. Returns: 0; -ENOMEM. Thread: the loop's. */
int gw_evgate_init(gw_evgate_t *g);

/* Drops every held event and record. Thread: the loop's. */
void gw_evgate_deinit(gw_evgate_t *g);

/* Offers the event ev (is_join: a join, else a leave), taking over the caller's reference.
 * Returns ev when it goes out now (the caller publishes it and drops the reference), NULL when
 * the gate held it or it undid a held one. Without memory for a record it returns ev.
 * Thread: the loop's. */
gw_event_t *gw_evgate_offer(gw_evgate_t *g, gw_event_t *ev, bool is_join);

/* A window ended: each held event goes to emit, records idle for a whole window go.
 * Thread: the loop's. */
void gw_evgate_tick(gw_evgate_t *g, gw_evgate_emit_cb emit, void *arg);

/* Records in the gate (0: nothing to tick for). */
static inline uint32_t gw_evgate_count(const gw_evgate_t *g)
{
    return g->keys.count;
}

/* --- gw_history ------------------------------------------------------------------------------- */

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
