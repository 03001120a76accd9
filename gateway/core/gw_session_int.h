/*
 * gw_session_int.h: the session's layout and what gw_session.c (lifecycle, input, requests),
 * gw_session_auth.c (Connect and token verification), gw_session_presence.c (online status,
 * presence, join/leave events), gw_session_recover.c (Subscribe{recover}),
 * gw_session_flow.c (the request budget, requests that wait for an earlier one, presence in
 * progress) and gw_session_preauth.c (the budget of unauthenticated connections) share.
 * Private to those files.
 *
 * Layout (92 bytes before the user id on x86-64, see gw_session_sizeof): the subscriber as
 * fan-out sees it (gw_sub_set_t: the connection, two inline channel slots, the delivery flags),
 * the deadline wheel entry, the publish token bucket, the token's expiry, the authentication time,
 * state bytes, the user's key in the loop's online table (gw_online: hash, length, last-seen
 * stamp), then after Connect the user id and the token's channel patterns packed inline
 * ("user\0pattern1\0pattern2\0"). The struct is reallocated once, at authentication, when nothing
 * points into it but the wheel entry (re-filed around the realloc) and the connection's data
 * pointer; it joins the online table after that. Before Connect the first bytes of data hold
 * the session's record in the pre-authentication budget (gw_session_preauth.c); transient
 * state (input that waits, presence queries in progress) lives in a side table of the loop
 * (gw_session_flow.c), so none of it costs an idle connection a byte.
 */
#ifndef HERALD_GATEWAY_GW_SESSION_INT_H
#define HERALD_GATEWAY_GW_SESSION_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"
#include "gw_engine.h"
#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_fanout.h"
#include "herald.pb-c.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_log.h"
#include "netlib/nl_wheel.h"

typedef enum gw_session_state_e {
    GW_SESSION_AWAIT_CONNECT = 0,
    GW_SESSION_AUTHENTICATING,
    GW_SESSION_AUTHENTICATED,
    GW_SESSION_CLOSING,
} gw_session_state_t;

/* s->flags */
#define GW_SESSION_IS_AUTHED 0x01u    /* counted in stats.authenticated */
#define GW_SESSION_ALL_CHANNELS 0x02u /* insecure mode: every channel allowed */
/* A side record in the loop's table (gw_session_flow.c): input waiting, or presence queries in
 * progress. */
#define GW_SESSION_HAS_SIDE 0x04u
#define GW_SESSION_DEADLINE_EXP 0x08u /* the wheel deadline is the token's exp, not idleness */
/* A Connect was answered BUSY (or INTERNAL): the server, not the client, failed it, so the
 * requests pipelined behind it are answered BUSY until the client sends Connect again. */
#define GW_SESSION_CONNECT_DEFERRED 0x10u
#define GW_SESSION_IS_ONLINE 0x20u /* in the loop's online table, visible to presence */
#define GW_SESSION_IS_SEEN 0x40u   /* read a frame since the last refresh batch */
/* Subscribed with join_leave at some time: only such sessions may hold listener channels, so
 * only they look for them. */
#define GW_SESSION_IS_LISTENER 0x80u

/*
 * The size of a session before Connect. It is reallocated at Connect to hold the user id and
 * patterns; within this size that is in place. Sized so that the block is a whole 128-byte
 * malloc chunk (120 + 8 bytes of header): a freed pre-Connect block then splits into two of
 * the 64-byte chunks every subscription allocates (index entry, engine channel), where the
 * struct's own 80 bytes (a 96-byte chunk) left a 32-byte remnant behind each of them that
 * nothing could use. Measured with 19,000 connections authenticating in bulk (bench_gw_idle):
 * 22,000 such remnants, 37 bytes of RSS per connection; with 120 a grant of up to 28 bytes
 * (user id, patterns and their NULs) stays in place (38 before the online table's 10 bytes:
 * bench_gw_idle's grants are 25).
 */
#define GW_SESSION_PREAUTH_BYTES 120u

/* s->close_reason before the session decided one. */
#define GW_SESSION_NO_REASON 0xffu

/* How long a closing connection may take to hang up after Disconnect. */
#define GW_SESSION_LINGER_MS 2000u

typedef struct gw_session_s {
    gw_sub_set_t member;       /* as fan-out sees it: the connection, channels, delivery flags */
    nl_wheel_entry_t deadline; /* handshake, idle or linger deadline */
    uint32_t rl_milli;         /* publish tokens, in thousandths */
    uint32_t rl_ms;            /* low 32 bits of the loop clock at the last refill */
    uint32_t exp_s;            /* the token's exp claim, Unix seconds; 0: none (insecure mode) */
    uint32_t auth_s;           /* when Connect succeeded, Unix seconds ("connected since") */
    uint8_t state;             /* gw_session_state_t */
    uint8_t close_reason;
    uint8_t flags;
    uint8_t n_patterns;
    /* The key the online table files the session under (gw_chantab: the user id follows it);
     * its spare 16 bits are the last-seen stamp. user_len is the key's name_len. */
    union {
        gw_chankey_t user_key;
        struct {
            uint32_t user_hash;
            uint16_t user_len;
            uint16_t user_seen;
        };
    };
    char data[]; /* user id, NUL, patterns (each NUL-terminated) */
} gw_session_t;

_Static_assert(offsetof(gw_session_t, data) ==
                   offsetof(gw_session_t, user_key) + sizeof(gw_chankey_t),
               "the user id must follow its key");
_Static_assert(offsetof(gw_session_t, user_len) ==
                   offsetof(gw_session_t, user_key) + offsetof(gw_chankey_t, name_len),
               "user_len is the key's name_len");

static inline gw_session_t *gw_session_of_set(gw_sub_set_t *set)
{
    return (gw_session_t *)((char *)set - offsetof(gw_session_t, member));
}

static inline gw_session_t *gw_session_of_key(gw_chankey_t *k)
{
    return (gw_session_t *)((char *)k - offsetof(gw_session_t, user_key));
}

/* The session of connection conn_id on loop when it is still in state (an answer coming back
 * from the engine or the worker pool), or NULL: closed, or moved on meanwhile. */
static inline gw_session_t *gw_session_lookup(nl_loop_t *loop, uint64_t conn_id, uint8_t state)
{
    nl_conn_t *c = nl_conn_lookup(loop, conn_id);
    gw_session_t *s = c ? nl_conn_data(c) : NULL;
    return s && s->state == state ? s : NULL;
}

/* Sends f on s's connection, counted in frames_out. Returns 0 or a negative errno (the
 * connection then closes by itself on a write error). -ENOBUFS, the output at its hard cap
 * because the client does not read, closes it as a slow consumer. */
int gw_session_send(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f);

/* Answers request id with the Error for err; a fatal err also sends Disconnect and starts
 * closing. retry_after_ms is for BUSY and RATE_LIMITED (0 otherwise). */
void gw_session_error(gw_loop_t *lp, gw_session_t *s, uint64_t id, gw_proto_err_t err,
                      uint32_t retry_after_ms);

/* Sends Disconnect{code}, leaves every channel, half-closes once output drains and lingers
 * GW_SESSION_LINGER_MS for the client to hang up. reason goes to the closes metric. */
void gw_session_begin_close(gw_loop_t *lp, gw_session_t *s, gw_close_reason_t reason,
                            Herald__Disconnect__Code code, const char *text, bool reconnect);

/* An authenticated session's next wheel deadline (loop ms): the idle timeout from now or the
 * token's exp, whichever is first, given the wall clock wall_ms (read only when s->exp_s is
 * set; 0 otherwise). Sets or clears GW_SESSION_DEADLINE_EXP to say which. */
uint64_t gw_session_deadline_ms(gw_loop_t *lp, gw_session_t *s, uint64_t wall_ms);

/* A wheel deadline of s that is its token's exp came (it comes a little early, see
 * gw_session_deadline_ms), or the session just authenticated with one: ends s if the token has
 * expired, else times the rest exactly (gw_heartbeat_at) when exp is near, or files the
 * deadline again when it is not (the wall clock was set back). */
void gw_session_check_exp(gw_loop_t *lp, gw_session_t *s);

/* Decodes and handles every complete frame in in (stops while AUTHENTICATING, and before a
 * frame that must wait: gw_session_must_wait). Returns how many frames it handled. */
size_t gw_session_process(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in);

/* What on_message does with the input of s: the token's expiry, the frames, the idle deadline
 * pushed back for each read that held a whole frame. Also resumes input that waited. */
void gw_session_input(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in);

/* Connect: verifies the token (on the worker pool, or at once in insecure mode).
 * May reallocate s: re-read nl_conn_data afterwards. */
void gw_session_connect(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f, nl_buf_t *in);

/* Sends SubscribeOk{offset, epoch, recovered, recoverable} answering request id. */
void gw_session_send_subscribe_ok(gw_loop_t *lp, gw_session_t *s, uint64_t id, uint64_t offset,
                                  uint64_t epoch, bool is_recovered, bool is_recoverable);

/* Subscribe{recover} for channel name[0..len), already checked (name, token, limits, not yet
 * subscribed): answered now, or after the engine's history answer (gw_session_recover.c). */
void gw_session_subscribe_recover(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f,
                                  const char *name, size_t len);

/* An Unsubscribe took s out of a channel it was recovering (gw_sub_remove returned 2): its
 * Subscribe is answered CANCELLED and the engine's answer will be dropped. */
void gw_session_recover_withdrawn(gw_loop_t *lp, gw_session_t *s, const char *chan, size_t len);

/* The channel's join failed with status while s was recovering in it (already out of it): its
 * Subscribe is answered BUSY (the engine could not reach its store: retry) or INTERNAL. */
void gw_session_recover_failed(gw_loop_t *lp, gw_session_t *s, const char *chan, size_t len,
                               int status);

/* Whether s's token allows channel name[0..len). */
bool gw_session_allows(const gw_session_t *s, const char *name, size_t len);

/* --- gw_session_flow.c: the request budget, order, presence in progress ------------------ */

/* Takes one token from s's request budget ([limits] publish_rate / publish_burst). Returns
 * false, with *retry_after_ms set, when there is none (the request is answered RATE_LIMITED). */
bool gw_session_take_token(gw_loop_t *lp, gw_session_t *s, uint32_t *retry_after_ms);

/* Whether frame f of authenticated session s must wait: a Publish or PresenceRequest of a
 * channel whose Subscribe is still unanswered, or a PresenceRequest past
 * [presence] max_inflight. */
bool gw_session_must_wait(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f);

/* Leaves in's bytes (the frame that must wait first) for later and pauses reading. Returns
 * false without memory for the record (the frame is then handled at once). */
bool gw_session_hold(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in);

/* Whether s's input waits. */
bool gw_session_is_holding(gw_loop_t *lp, const gw_session_t *s);

/* Something s's waiting input may depend on completed (a Subscribe answered, a presence
 * answer sent): the input is looked at again before the loop sleeps. Safe inside index and
 * engine callbacks. */
void gw_session_wake(gw_loop_t *lp, gw_session_t *s);

/* A PresenceRequest of s starts: counted in progress. Returns its cancel flag, one reference
 * for the request (dropped by gw_cancel_unref once its answer came), or NULL without memory. */
gw_cancel_t *gw_session_presence_begin(gw_loop_t *lp, gw_session_t *s);

/* A PresenceRequest of s was answered: one fewer in progress (waiting input is woken). */
void gw_session_presence_end(gw_loop_t *lp, gw_session_t *s);

/* s closes: its presence queries are flagged cancelled and its side record goes. */
void gw_session_flow_close(gw_loop_t *lp, gw_session_t *s);

/* --- gw_session_preauth.c: the pre-authentication budget ---------------------------------- */

/* A connection was accepted: s counts as unauthenticated from now on, and if that takes the
 * loop's share of max_unauthenticated (or its address's of max_unauthenticated_per_address)
 * past the cap, the oldest unauthenticated connection (of the address) is closed
 * (gw_session_close_now). Without memory s goes uncounted. */
void gw_session_preauth_admit(gw_loop_t *lp, gw_session_t *s);

/* s stops counting: it authenticated (called before its data holds the user id) or closes.
 * Idempotent; nothing for a session that never counted. */
void gw_session_preauth_leave(gw_loop_t *lp, gw_session_t *s);

/* Sends Disconnect{code, text, reconnect} if it can go out at once and closes s's connection
 * now (its descriptor is free at the end of the iteration), without the linger of
 * gw_session_begin_close. For a session with no subscriptions. */
void gw_session_close_now(gw_loop_t *lp, gw_session_t *s, gw_close_reason_t reason,
                          Herald__Disconnect__Code code, const char *text, bool reconnect);

/* --- gw_session_presence.c ---------------------------------------------------------------- */

/* s authenticated: it joins the loop's online table (and the engine hears of a new user).
 * A session that cannot join (ENOMEM) works on, invisible to presence. */
void gw_session_online(gw_loop_t *lp, gw_session_t *s);

/* s stops being visible, because it starts closing or is closed: it leaves the online table,
 * its subscriptions stop counting for presence and, with listeners on the node, each sends a
 * leave event. Its subscriptions stay in the index (the caller removes them, now or after a
 * delivery). Idempotent. Safe inside a delivery (events never deliver before it returns). */
void gw_session_offline(gw_loop_t *lp, gw_session_t *s);

/* The SubscribeOk of channel name[0..len) went to s: it is now visible there (a join event). */
void gw_session_presence_joined(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len);

/* s unsubscribed from name[0..len) after its SubscribeOk (a leave event). */
void gw_session_presence_left(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len);

/* Makes s a listener of name[0..len)'s join/leave events. Returns: 0; -ENOMEM. */
int gw_session_presence_listen(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len);

/* Undoes gw_session_presence_listen (nothing when s does not listen). */
void gw_session_presence_unlisten(gw_loop_t *lp, gw_session_t *s, const char *name, size_t len);

/* The engine could not join a listener channel for s: gw_sub undid the subscription. */
void gw_session_presence_listener_failed(gw_loop_t *lp, gw_session_t *s);

/* The channels s is subscribed to, listener channels not counted. */
uint32_t gw_session_presence_sub_count(const gw_loop_t *lp, const gw_session_t *s);

/* Answers a PresenceRequest. */
void gw_session_presence_request(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f);

/* The user id (NUL-terminated; "" before Connect). */
static inline const char *gw_session_user(const gw_session_t *s)
{
    return s->user_len ? s->data : "";
}

/* The user id as a quoted log value (a token's sub may hold any character) in buf, which
 * holds NL_LOG_QUOTE_MAX bytes. */
static inline const char *gw_session_user_quoted(const gw_session_t *s, char *buf)
{
    return nl_log_quote(buf, NL_LOG_QUOTE_MAX, gw_session_user(s), s->user_len);
}

#endif
