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
#ifndef HERALD_GATEWAY_GW_PRESENCE_H
#define HERALD_GATEWAY_GW_PRESENCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_fanout.h"
#include "gw_online.h"
#include "netlib/nl_block.h"

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
    uint32_t hash;         /* gw_sub_hash of chan */
    nl_block_t *block;     /* Frame{presence_event}, delimited: what every listener receives */
    uint64_t subject_conn; /* the connection it is about, which does not receive it */
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
void gw_presence_event_deliver(gw_fanout_loop_t *fl, const gw_event_t *ev);

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

#endif
