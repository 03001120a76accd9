/*
 * gw_session: one client connection's protocol state, hung off its nl_conn (nl_conn_data).
 *
 * States:
 *   AWAIT_CONNECT   accepted; the first frame must be Connect. Handshake deadline running.
 *                   Counted in the loop's pre-authentication budget until authenticated: at
 *                   its cap an older unauthenticated session is closed for a new one
 *                   (gw_session_preauth.c).
 *   AUTHENTICATING  Connect's token is being verified on the worker pool. Reading is paused;
 *                   frames the client already sent wait in the input buffer and are handled
 *                   once the verdict is in. The verdict comes back to this loop through its
 *                   post queue, addressed by (loop, connection id): a connection that closed
 *                   meanwhile is simply not found.
 *   AUTHENTICATED   Subscribe, Unsubscribe, Publish, Ping, PresenceRequest, in the order sent:
 *                   a frame that would overtake an unanswered request waits in the input
 *                   buffer, reading paused, until that request is answered
 *                   (gw_session_flow.c). Idle deadline pushed back by every frame.
 *   CLOSING         a fatal error was answered (Error + Disconnect), output is draining and the
 *                   write side half-closed; input is discarded; a short linger deadline forces
 *                   the close if the client does not hang up.
 *
 * Protocol errors are one enum (gw_proto_err_t), mapped to Error and Disconnect codes, metric
 * labels and close reasons in one table in gw_session.c.
 *
 * Memory: a session is one allocation: its subscriber record (the connection, two inline
 * channel slots, delivery flags), its wheel entry, the publish token bucket, and after Connect the
 * user id and the token's channel patterns packed inline. See gw_session_sizeof.
 *
 * Thread: everything runs on the connection's IO loop. Ownership: created in on_connected,
 * freed in on_close (after leaving every channel).
 */
#ifndef HERALD_GATEWAY_GW_SESSION_H
#define HERALD_GATEWAY_GW_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_state.h"
#include "gw_fanout.h"
#include "netlib/nl_block.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_wheel.h"

typedef struct gw_loop_s gw_loop_t;

/* The reconnect_delay_ms of every Disconnect that asks the client to come back. */
#define GW_RECONNECT_HINT_MS 1000

/* Protocol errors a session answers. */
typedef enum gw_proto_err_e {
    GW_PERR_BAD_REQUEST = 0, /* fatal: out-of-order or server-only frame */
    GW_PERR_UNDECODABLE,     /* fatal: not a Frame */
    GW_PERR_FRAME_TOO_LARGE, /* fatal: over max_frame_bytes */
    GW_PERR_UNAUTHORIZED,    /* fatal: token missing, malformed, forged */
    GW_PERR_TOKEN_EXPIRED,   /* fatal */
    GW_PERR_FORBIDDEN,       /* channel not in the token's patterns */
    GW_PERR_BUSY,            /* worker pool full: retry Connect */
    GW_PERR_RATE_LIMITED,    /* publish rate exceeded */
    GW_PERR_TOO_MANY_SUBSCRIPTIONS,
    GW_PERR_BAD_CHANNEL,
    GW_PERR_NOT_SUBSCRIBED,
    GW_PERR_ALREADY_SUBSCRIBED,
    GW_PERR_ALREADY_CONNECTED, /* a second Connect */
    GW_PERR_NOT_SUPPORTED,     /* a request this node's engine cannot serve */
    GW_PERR_INTERNAL,          /* ENOMEM and the like */
    GW_PERR_CANCELLED,         /* a Subscribe withdrawn by Unsubscribe before it completed */
    GW_PERR_OUTCOME_UNKNOWN,   /* a Publish the engine may or may not have applied */
    GW_PERR_BAD_KEY,           /* fatal: an idempotency key over GW_ENGINE_KEY_MAX bytes */
    GW_PERR_COUNT
} gw_proto_err_t;

/* The callbacks every client connection gets (nl_server_opts_t.cbs). */
extern const nl_conn_cbs_t gw_session_conn_cbs;

/* The subscription index callbacks (join/leave go to the engine, joined answers
 * SubscribeOk); arg is the gw_loop_t. */
extern const gw_sub_index_cbs_t gw_session_sub_cbs;

/* The heartbeat expiry hook (gw_heartbeat_init's on_expire, arg = the gw_loop_t): a deadline
 * passed: handshake (Disconnect{IDLE_TIMEOUT} "handshake timeout"), idle
 * (Disconnect{IDLE_TIMEOUT}), or the linger of a closing connection (forced close).
 * Thread: the loop's. */
void gw_session_on_deadline(nl_wheel_entry_t *e, void *arg);

/* The heartbeat's exact-deadline hook (gw_heartbeat_init's on_exact, arg = the gw_loop_t): a
 * token's exp came for connection conn_id (gw_session_check_exp). Thread: the loop's. */
void gw_session_on_exact(uint64_t conn_id, void *arg);

/* The slow-consumer hook (gw_fanout_loop_init's on_slow, arg = the gw_loop_t): the session
 * of set went past the high-water mark under GW_SLOW_DISCONNECT. Disconnect{SLOW_CONSUMER} is
 * queued behind its backlog, nothing more is queued for it, and it is closed once that drains
 * (or when slow_consumer_linger ends); fan-out takes it out of its channels after the delivery.
 * Thread: the loop's. */
void gw_session_on_slow(gw_sub_set_t *set, void *arg);

/* Tells the engine again about every online user of the loop and every subscription presence
 * sees (user_online, presence_add): a shared engine whose server lost them (a restart, an
 * outage past their expiry) calls for it when the server is back. Thread: lp's loop. */
void gw_session_presence_resync(gw_loop_t *lp);

/* Before the loop sleeps: resumes the input of the sessions whose waiting request completed
 * this iteration (gw_session_flow.c). Thread: lp's loop. */
void gw_session_flow_run(gw_loop_t *lp);

/* Frees the loop's session side records and wake list (lp->sides, lp->wake_ids; the loop
 * initialises the table with gw_chantab_init). Thread: lp's loop, at its stop. */
void gw_session_flow_deinit(gw_loop_t *lp);

/* Sets up / frees lp's pre-authentication budget (lp->preauth, gw_session_preauth.c).
 * Returns: 0; -ENOMEM. Thread: lp's loop, at its start / stop. */
int gw_session_preauth_init(gw_loop_t *lp);
void gw_session_preauth_deinit(gw_loop_t *lp);

/* Frees the loop's table of Subscribe{recover} requests waiting for history (lp->recovering;
 * the loop initialises it with gw_chantab_init). Thread: lp's loop, at its stop. */
void gw_session_recover_deinit(gw_loop_t *lp);

/* The refresh walk: stamps every session of the loop that read a frame since the last walk
 * with stamp, and returns how many users have a session with that stamp (the batch).
 * Thread: lp's loop. */
uint32_t gw_session_presence_sweep(gw_loop_t *lp, uint16_t stamp);

/* lp's share of a presence query for channel chan[0..len): its visible subscribers, at most
 * [presence] max_clients of them listed (out->limit). Returns: 0; -ENOMEM (out then holds what
 * fit). Thread: lp's loop. Ownership: out's buffers are the caller's (gw_online_list_free,
 * free(clients)). */
int gw_session_presence_collect(gw_loop_t *lp, const char *chan, size_t len,
                                gw_presence_part_t *out);

/* lp's share of user[0..len)'s online status. Thread: lp's loop. */
void gw_session_online_collect(gw_loop_t *lp, const char *user, size_t len, gw_online_part_t *out);

/* Sends Disconnect{SHUTDOWN, reconnect} to every session of the loop and closes them.
 * Thread: lp's loop. */
void gw_session_close_all(gw_loop_t *lp);

/* Writes the connection ids of lp's sessions that are not closing into ids (at most cap) and
 * returns how many: the list a drain works through. Thread: lp's loop. */
size_t gw_session_list(gw_loop_t *lp, uint64_t *ids, size_t cap);

/* Tells the session of connection conn_id to go, for a drain: Disconnect{SHUTDOWN,
 * reconnect} queued behind its pending output, then the graceful close (half-close once the
 * output is written, a short linger for the client to hang up). Counted as drained.
 * Returns: true; false when the connection is gone or its session already closing.
 * Thread: lp's loop. */
bool gw_session_drain(gw_loop_t *lp, uint64_t conn_id);

/* Bytes of a session before Connect (its fixed part); the user id and patterns add theirs. */
size_t gw_session_sizeof(void);

/* Static snake_case name of a protocol error ("rate_limited"). Thread: any. */
const char *gw_proto_err_str(gw_proto_err_t err);

#endif
