/*
 * gw_session: a client connection's life: accept, frames, subscriptions, publishes, pushes,
 * deadlines, errors, close. Connect and token verification live in gw_session_auth.c.
 *
 * Replies are encoded into the loop's scratch buffer and queued with nl_conn_send_later for the
 * loop's flush (a Disconnect is sent at once). Pushes are never encoded here: they arrive as
 * a shared block (gw_fanout) and are queued by reference.
 *
 * Closing politely: a fatal error is answered with Error and Disconnect, then the connection
 * is half-closed once its output drains (nl_conn_shutdown) and kept reading, with input
 * discarded, until the client hangs up or a short linger runs out. Closing at once could make
 * the kernel answer the client's unread bytes with a reset that destroys the Disconnect
 * before the client reads it.
 */
#include "gw_session.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_engine.h"
#include "gw_node_int.h"
#include "gw_session_int.h"
#include "gw_transport.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* The one place protocol errors map to wire codes, metrics and close reasons.
 * disconnect 0 (UNSPECIFIED) marks a non-fatal error: the session goes on. */
static const struct {
    Herald__Error__Code code;
    Herald__Disconnect__Code disconnect;
    gw_close_reason_t close;
    const char *name;
    const char *text;
} perr_table[GW_PERR_COUNT] = {
    [GW_PERR_BAD_REQUEST] = {HERALD__ERROR__CODE__BAD_REQUEST,
                             HERALD__DISCONNECT__CODE__PROTOCOL_ERROR, GW_CLOSE_PROTOCOL_ERROR,
                             "bad_request", "unexpected frame"},
    [GW_PERR_UNDECODABLE] = {HERALD__ERROR__CODE__BAD_REQUEST,
                             HERALD__DISCONNECT__CODE__PROTOCOL_ERROR, GW_CLOSE_PROTOCOL_ERROR,
                             "undecodable", "undecodable frame"},
    [GW_PERR_FRAME_TOO_LARGE] = {HERALD__ERROR__CODE__FRAME_TOO_LARGE,
                                 HERALD__DISCONNECT__CODE__FRAME_TOO_LARGE,
                                 GW_CLOSE_FRAME_TOO_LARGE, "frame_too_large",
                                 "frame exceeds max_frame_bytes"},
    [GW_PERR_UNAUTHORIZED] = {HERALD__ERROR__CODE__UNAUTHORIZED,
                              HERALD__DISCONNECT__CODE__AUTH_FAILED, GW_CLOSE_AUTH_FAILED,
                              "unauthorized", "invalid token"},
    [GW_PERR_TOKEN_EXPIRED] = {HERALD__ERROR__CODE__TOKEN_EXPIRED,
                               HERALD__DISCONNECT__CODE__AUTH_FAILED, GW_CLOSE_AUTH_FAILED,
                               "token_expired", "token expired"},
    [GW_PERR_FORBIDDEN] = {HERALD__ERROR__CODE__FORBIDDEN, 0, 0, "forbidden",
                           "channel not allowed by the token"},
    [GW_PERR_BUSY] = {HERALD__ERROR__CODE__BUSY, 0, 0, "busy", "server busy, retry"},
    [GW_PERR_RATE_LIMITED] = {HERALD__ERROR__CODE__RATE_LIMITED, 0, 0, "rate_limited",
                              "publish rate exceeded"},
    [GW_PERR_TOO_MANY_SUBSCRIPTIONS] = {HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS, 0, 0,
                                        "too_many_subscriptions", "subscription limit reached"},
    [GW_PERR_BAD_CHANNEL] = {HERALD__ERROR__CODE__BAD_CHANNEL, 0, 0, "bad_channel",
                             "invalid channel name"},
    [GW_PERR_NOT_SUBSCRIBED] = {HERALD__ERROR__CODE__NOT_SUBSCRIBED, 0, 0, "not_subscribed",
                                "not subscribed to this channel"},
    [GW_PERR_ALREADY_SUBSCRIBED] = {HERALD__ERROR__CODE__ALREADY_SUBSCRIBED, 0, 0,
                                    "already_subscribed", "already subscribed"},
    [GW_PERR_ALREADY_CONNECTED] = {HERALD__ERROR__CODE__BAD_REQUEST,
                                   HERALD__DISCONNECT__CODE__PROTOCOL_ERROR,
                                   GW_CLOSE_PROTOCOL_ERROR, "already_connected", "second Connect"},
    [GW_PERR_NOT_SUPPORTED] = {HERALD__ERROR__CODE__NOT_SUPPORTED, 0, 0, "not_supported",
                               "not available on this node"},
    [GW_PERR_INTERNAL] = {HERALD__ERROR__CODE__INTERNAL, 0, 0, "internal", "internal error"},
    [GW_PERR_CANCELLED] = {HERALD__ERROR__CODE__CANCELLED, 0, 0, "cancelled",
                           "withdrawn by Unsubscribe before it completed"},
    [GW_PERR_OUTCOME_UNKNOWN] = {HERALD__ERROR__CODE__OUTCOME_UNKNOWN, 0, 0, "outcome_unknown",
                                 "the publish may or may not have been applied: retry it "
                                 "with the same idempotency_key"},
    [GW_PERR_BAD_KEY] = {HERALD__ERROR__CODE__BAD_REQUEST, HERALD__DISCONNECT__CODE__PROTOCOL_ERROR,
                         GW_CLOSE_PROTOCOL_ERROR, "bad_idempotency_key",
                         "idempotency_key over 64 bytes"},
};

const char *gw_proto_err_str(gw_proto_err_t err)
{
    return (unsigned)err < GW_PERR_COUNT ? perr_table[err].name : "unknown";
}

size_t gw_session_sizeof(void)
{
    return offsetof(gw_session_t, data);
}

static uint64_t session_now_ms(const gw_loop_t *lp)
{
    return nl_loop_now_ms(lp->fo.loop);
}

/* --- sending ------------------------------------------------------------------------------ */

/* From now on s is CLOSING: it answers nothing more and fan-out delivers nothing to it. */
static void session_set_closing(gw_session_t *s, gw_close_reason_t reason)
{
    s->state = GW_SESSION_CLOSING;
    s->close_reason = (uint8_t)reason;
    s->member.flags |= GW_SUB_SET_OFF;
}

int gw_session_send(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    nl_buf_t *b = &lp->scratch;
    int err = proto_frame_append_prefixed(b, f, s->member.flags & GW_SUB_SET_WS ? gw_ws_header : NULL);
    /* Answers wait for the loop's flush, which writes them with the iteration's Pushes in one
     * batch: a burst of publishes from many clients then costs one system call for all their
     * PublishOks rather than one each, and each peer is woken once (seed.sh: herald's CPU 10-30%
     * lower, p50 a third lower). A Disconnect goes now when nothing is queued before it: a
     * forced close may follow it (node shutdown flushes the loop first for that reason). */
    if (err == 0 && f->body_case == HERALD__FRAME__BODY_DISCONNECT)
        err = nl_conn_send(s->member.conn, nl_buf_peek(b), nl_buf_readable(b));
    else if (err == 0)
        err = nl_conn_send_later(s->member.conn, nl_buf_peek(b), nl_buf_readable(b));
    nl_buf_retrieve_all(b);
    if (err == 0 && (unsigned)f->body_case < GW_STATS_FRAME_TYPES)
        lp->stats.frames_out[f->body_case]++;
    if (err == -ENOBUFS && s->state != GW_SESSION_CLOSING) {
        /* The output is at its hard cap (twice the high-water mark): the client sends requests
         * but does not read the answers. An answer cannot be dropped like a Push, so the
         * connection goes, as a slow consumer; its subscriptions go in on_close, since this
         * may run inside a delivery loop. */
        char q[NL_LOG_QUOTE_MAX];
        NL_LOG(NL_DEBUG, "slow_consumer_replies", "conn=%" PRIu64 " user=%s",
               nl_conn_id(s->member.conn), gw_session_user_quoted(s, q));
        gw_session_offline(lp, s);
        session_set_closing(s, GW_CLOSE_SLOW_CONSUMER);
        nl_conn_close(s->member.conn, -ENOBUFS);
    }
    return err;
}

/* Sends the session's last frame, Disconnect{code, text}, with a reconnect hint if any. */
static void session_send_disconnect(gw_loop_t *lp, gw_session_t *s, Herald__Disconnect__Code code,
                                    const char *text, bool reconnect)
{
    Herald__Disconnect d = HERALD__DISCONNECT__INIT;
    d.code = code;
    d.reason = (char *)(uintptr_t)text; /* packing only reads it */
    d.reconnect = reconnect;
    d.reconnect_delay_ms = reconnect ? GW_RECONNECT_HINT_MS : 0;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_DISCONNECT;
    f.disconnect = &d;
    (void)gw_session_send(lp, s, &f);
}

/* gw_session_begin_close, for callers inside a delivery loop too: is_keeping_subs leaves the
 * subscriptions in place (the index must not change under a delivery; on_close removes them,
 * and deliveries skip a closing session meanwhile). */
static void session_close_gracefully(gw_loop_t *lp, gw_session_t *s, gw_close_reason_t reason,
                                     Herald__Disconnect__Code code, const char *text,
                                     bool reconnect, bool is_keeping_subs, uint32_t linger_ms)
{
    if (s->state == GW_SESSION_CLOSING)
        return;
    session_send_disconnect(lp, s, code, text, reconnect);
    /* A client that did not read its output is closed by that very send, as slow. */
    if (s->state == GW_SESSION_CLOSING)
        return;
    gw_session_offline(lp, s);
    session_set_closing(s, reason);
    if (!is_keeping_subs)
        gw_sub_remove_all(&lp->fo.subs, &s->member);
    /* On WebSocket the half-close is preceded by a close frame that says the same as the
     * Disconnect (PROTOCOL.md, WebSocket). */
    if (s->member.flags & GW_SUB_SET_WS)
        gw_ws_set_close(s->member.conn, (uint16_t)(GW_WS_CLOSE_HERALD_BASE + code), text);
    /* Keep reading (discarding) so the client's hang-up is seen, even if reading was paused
     * for a token verification. */
    nl_conn_resume_read(s->member.conn);
    nl_conn_shutdown(s->member.conn);
    gw_heartbeat_set(&lp->hb, &s->deadline, session_now_ms(lp) + linger_ms);
}

void gw_session_close_now(gw_loop_t *lp, gw_session_t *s, gw_close_reason_t reason,
                          Herald__Disconnect__Code code, const char *text, bool reconnect)
{
    if (s->state != GW_SESSION_CLOSING) {
        session_send_disconnect(lp, s, code, text, reconnect);
        gw_session_offline(lp, s);
        if (s->state != GW_SESSION_CLOSING)
            session_set_closing(s, reason);
    }
    nl_conn_close(s->member.conn, 0);
}

void gw_session_begin_close(gw_loop_t *lp, gw_session_t *s, gw_close_reason_t reason,
                            Herald__Disconnect__Code code, const char *text, bool reconnect)
{
    session_close_gracefully(lp, s, reason, code, text, reconnect, false, GW_SESSION_LINGER_MS);
}

void gw_session_error(gw_loop_t *lp, gw_session_t *s, uint64_t id, gw_proto_err_t err,
                      uint32_t retry_after_ms)
{
    Herald__Error e = HERALD__ERROR__INIT;
    e.code = perr_table[err].code;
    e.text = (char *)(uintptr_t)perr_table[err].text;
    e.retry_after_ms = retry_after_ms;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = HERALD__FRAME__BODY_ERROR;
    f.error = &e;
    if (gw_session_send(lp, s, &f) == 0 && (unsigned)e.code < GW_STATS_ERROR_CODES)
        lp->stats.errors_out[e.code]++;
    if (perr_table[err].disconnect != HERALD__DISCONNECT__CODE__UNSPECIFIED)
        gw_session_begin_close(lp, s, perr_table[err].close, perr_table[err].disconnect,
                               perr_table[err].text, false);
}

void gw_session_send_subscribe_ok(gw_loop_t *lp, gw_session_t *s, uint64_t id, uint64_t offset,
                                  uint64_t epoch, bool is_recovered, bool is_recoverable)
{
    char epoch_hex[17];
    proto_epoch_str(epoch, epoch_hex);
    Herald__SubscribeOk ok = HERALD__SUBSCRIBE_OK__INIT;
    ok.offset = offset;
    ok.epoch = epoch_hex;
    ok.recovered = is_recovered;
    ok.recoverable = is_recoverable;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = HERALD__FRAME__BODY_SUBSCRIBE_OK;
    f.subscribe_ok = &ok;
    (void)gw_session_send(lp, s, &f);
}

/* SubscribeOk for a plain Subscribe: the live offset of the entry it joined. */
static void session_subscribed(gw_loop_t *lp, gw_session_t *s, uint64_t id, const gw_sub_entry_t *e)
{
    size_t len;
    const char *name = gw_sub_entry_name(e, &len);
    gw_engine_t *engine = lp->node->engine;
    gw_session_send_subscribe_ok(lp, s, id, gw_sub_entry_offset(e), gw_sub_entry_epoch(e), false,
                                 engine->ops->is_recoverable(engine, lp->fo.index, name, len));
}

/* --- requests ----------------------------------------------------------------------------- */

/* Validates a channel name from a request; answers the error itself. */
static bool session_check_channel(gw_loop_t *lp, gw_session_t *s, uint64_t id, const char *name,
                                  size_t len)
{
    if (gw_channel_name_check(name, len, gw_loop_cfg(lp)->max_channel_bytes) != GW_CHANNEL_OK) {
        gw_session_error(lp, s, id, GW_PERR_BAD_CHANNEL, 0);
        return false;
    }
    if (!gw_session_allows(s, name, len)) {
        gw_session_error(lp, s, id, GW_PERR_FORBIDDEN, 0);
        return false;
    }
    return true;
}

static void session_subscribe(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    const char *name = f->subscribe && f->subscribe->channel ? f->subscribe->channel : "";
    size_t len = strlen(name);
    if (!session_check_channel(lp, s, f->id, name, len))
        return;
    if (gw_sub_set_has(&s->member, name, len)) {
        gw_session_error(lp, s, f->id, GW_PERR_ALREADY_SUBSCRIBED, 0);
        return;
    }
    if (gw_session_presence_sub_count(lp, s) >= gw_loop_cfg(lp)->max_subscriptions_per_conn) {
        gw_session_error(lp, s, f->id, GW_PERR_TOO_MANY_SUBSCRIPTIONS, 0);
        return;
    }
    /* A Subscribe costs a join, a SubscribeOk and a join event to every listener of the
     * channel (and its Unsubscribe the leave): churning them takes from the request budget. */
    uint32_t retry_after_ms = 0;
    if (!gw_session_take_token(lp, s, &retry_after_ms)) {
        gw_session_error(lp, s, f->id, GW_PERR_RATE_LIMITED, retry_after_ms);
        return;
    }
    /* Events first: the listener subscription's join is on its way to the engine before the
     * channel's SubscribeOk can go out, so every event after that SubscribeOk reaches it. */
    bool is_listening = f->subscribe && f->subscribe->join_leave;
    if (is_listening && gw_session_presence_listen(lp, s, name, len) < 0) {
        gw_session_error(lp, s, f->id, GW_PERR_INTERNAL, 0);
        return;
    }
    if (f->subscribe->recover) {
        gw_session_subscribe_recover(lp, s, f, name, len);
        return;
    }
    gw_sub_entry_t *e = NULL;
    int rc = gw_sub_add(&lp->fo.subs, &s->member, name, len, gw_sub_hash(name, len), f->id, &e);
    if (rc == 1) {
        session_subscribed(lp, s, f->id, e);
        gw_session_presence_joined(lp, s, name, len);
    } else if (rc < 0) {
        if (is_listening)
            gw_session_presence_unlisten(lp, s, name, len);
        gw_session_error(lp, s, f->id, GW_PERR_INTERNAL, 0);
    }
    /* rc == 0: the engine's join answer sends SubscribeOk (session_on_joined). */
}

static void session_unsubscribe(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    const char *name = f->unsubscribe && f->unsubscribe->channel ? f->unsubscribe->channel : "";
    size_t len = strlen(name);
    uint64_t sub_id = 0;
    int rc = gw_sub_remove(&lp->fo.subs, &s->member, name, len, gw_sub_hash(name, len), &sub_id);
    if (rc < 0) {
        gw_session_error(lp, s, f->id, GW_PERR_NOT_SUBSCRIBED, 0);
        return;
    }
    gw_session_presence_unlisten(lp, s, name, len);
    if (rc == 0)
        gw_session_presence_left(lp, s, name, len);
    /* Still joining or recovering: its Subscribe will get no SubscribeOk now, and every
     * request is answered. */
    if (rc == 1)
        gw_session_error(lp, s, sub_id, GW_PERR_CANCELLED, 0);
    else if (rc == 2)
        gw_session_recover_withdrawn(lp, s, name, len);
    Herald__UnsubscribeOk ok = HERALD__UNSUBSCRIBE_OK__INIT;
    Herald__Frame r = HERALD__FRAME__INIT;
    r.id = f->id;
    r.body_case = HERALD__FRAME__BODY_UNSUBSCRIBE_OK;
    r.unsubscribe_ok = &ok;
    (void)gw_session_send(lp, s, &r);
}

/* The engine's answer to a client Publish, on the publisher's loop. */
static void session_on_published(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_loop_t *lp = gw_loop_current();
    gw_session_t *s = gw_session_lookup(lp->fo.loop, r->u64[0], GW_SESSION_AUTHENTICATED);
    if (!s)
        return; /* gone or closing meanwhile */
    if (res->status < 0) {
        /* BUSY: the engine's queue toward Redis is full; retry shortly. INTERNAL: not applied.
         * OUTCOME_UNKNOWN: Redis took the request and did not answer (PROTOCOL.md, Publish). */
        if (res->status == -EBUSY)
            gw_session_error(lp, s, r->u64[1], GW_PERR_BUSY, 1000);
        else if (res->status == GW_ENGINE_OUTCOME_UNKNOWN)
            gw_session_error(lp, s, r->u64[1], GW_PERR_OUTCOME_UNKNOWN, 0);
        else
            gw_session_error(lp, s, r->u64[1], GW_PERR_INTERNAL, 0);
        return;
    }
    char epoch[17];
    proto_epoch_str(res->epoch, epoch);
    Herald__PublishOk ok = HERALD__PUBLISH_OK__INIT;
    ok.offset = res->offset;
    ok.epoch = epoch;
    ok.duplicate = res->is_duplicate;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = r->u64[1];
    f.body_case = HERALD__FRAME__BODY_PUBLISH_OK;
    f.publish_ok = &ok;
    (void)gw_session_send(lp, s, &f);
}

static void session_publish(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    const Herald__Publish *p = f->publish;
    const char *name = p && p->channel ? p->channel : "";
    size_t len = strlen(name);
    const char *key = p && p->idempotency_key ? p->idempotency_key : "";
    if (strlen(key) > GW_ENGINE_KEY_MAX) {
        gw_session_error(lp, s, f->id, GW_PERR_BAD_KEY, 0);
        return;
    }
    if (!session_check_channel(lp, s, f->id, name, len))
        return;
    uint32_t retry_after_ms = 0;
    if (!gw_session_take_token(lp, s, &retry_after_ms)) {
        gw_session_error(lp, s, f->id, GW_PERR_RATE_LIMITED, retry_after_ms);
        return;
    }
    gw_engine_msg_t msg = {.chan = name,
                           .chan_len = len,
                           .payload = p ? p->payload.data : NULL,
                           .len = p ? p->payload.len : 0,
                           .key = key,
                           .key_len = strlen(key)};
    gw_engine_reply_t reply = {.loop = lp->fo.loop,
                               .cb = session_on_published,
                               .u64 = {nl_conn_id(s->member.conn), f->id}};
    int err = gw_engine_publish(lp->node->engine, &msg, &reply);
    if (err < 0)
        gw_session_error(lp, s, f->id, err == -ESHUTDOWN ? GW_PERR_BUSY : GW_PERR_INTERNAL,
                         err == -ESHUTDOWN ? 1000 : 0);
}

static void session_ping(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f)
{
    Herald__Pong pong = HERALD__PONG__INIT;
    Herald__Frame r = HERALD__FRAME__INIT;
    r.id = f->id;
    r.body_case = HERALD__FRAME__BODY_PONG;
    r.pong = &pong;
    (void)gw_session_send(lp, s, &r);
}

/* One decoded frame. The session may be reallocated (Connect) or start closing. */
static void session_dispatch(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f, nl_buf_t *in)
{
    if (f->body_case == HERALD__FRAME__BODY_CONNECT) {
        if (s->state == GW_SESSION_AWAIT_CONNECT)
            gw_session_connect(lp, s, f, in);
        else
            gw_session_error(lp, s, f->id, GW_PERR_ALREADY_CONNECTED, 0);
        return;
    }
    if (s->state != GW_SESSION_AUTHENTICATED) {
        if (s->flags & GW_SESSION_CONNECT_DEFERRED)
            gw_session_error(lp, s, f->id, GW_PERR_BUSY, 1000);
        else
            gw_session_error(lp, s, f->id, GW_PERR_BAD_REQUEST, 0);
        return;
    }
    switch (f->body_case) {
    case HERALD__FRAME__BODY_SUBSCRIBE:
        session_subscribe(lp, s, f);
        break;
    case HERALD__FRAME__BODY_UNSUBSCRIBE:
        session_unsubscribe(lp, s, f);
        break;
    case HERALD__FRAME__BODY_PUBLISH:
        session_publish(lp, s, f);
        break;
    case HERALD__FRAME__BODY_PING:
        session_ping(lp, s, f);
        break;
    case HERALD__FRAME__BODY_PRESENCE_REQUEST:
        gw_session_presence_request(lp, s, f);
        break;
    default:
        /* Server-to-client frames and an empty body. */
        gw_session_error(lp, s, f->id, GW_PERR_BAD_REQUEST, 0);
        break;
    }
}

/* --- input -------------------------------------------------------------------------------- */

/* The Error names the offending frame by its id when the frame arrived whole and its id can
 * be read (PROTOCOL.md section 7), as it does for a frame that decoded but broke the rules;
 * a bad or oversized length prefix leaves nothing to read it from (id 0). */
static void session_decode_failed(gw_loop_t *lp, gw_session_t *s, int rc, const nl_buf_t *in,
                                  size_t max_frame)
{
    if (rc == PROTO_ERR_TOO_LARGE)
        gw_session_error(lp, s, 0, GW_PERR_FRAME_TOO_LARGE, 0);
    else if (rc == PROTO_ERR_BAD_VARINT)
        gw_session_error(lp, s, 0, GW_PERR_UNDECODABLE, 0);
    else if (rc == PROTO_ERR_UNDECODABLE)
        gw_session_error(lp, s, proto_frame_peek_id(in, max_frame), GW_PERR_UNDECODABLE, 0);
    else
        nl_conn_close(s->member.conn, rc); /* -ENOMEM: nothing sensible to say */
}

size_t gw_session_process(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in)
{
    nl_conn_t *c = s->member.conn;
    /* Not max_frame_bytes: a client may have been told a larger one before a reload. */
    size_t max_frame = lp->snap->frame_limit_bytes;
    size_t frames = 0;
    while (s->state == GW_SESSION_AWAIT_CONNECT || s->state == GW_SESSION_AUTHENTICATED) {
        Herald__Frame *f = NULL;
        size_t n = 0;
        int rc = proto_frame_peek(in, max_frame, &f, &n);
        if (rc == 0)
            return frames;
        if (rc < 0) {
            session_decode_failed(lp, s, rc, in, max_frame);
            break;
        }
        /* A frame that would overtake an unfinished request stays in the buffer, with all
         * behind it, until that request is answered (gw_session_flow.c). */
        if (s->state == GW_SESSION_AUTHENTICATED && gw_session_must_wait(lp, s, f) &&
            gw_session_hold(lp, s, in)) {
            proto_frame_free(f);
            return frames;
        }
        nl_buf_retrieve(in, n);
        frames++;
        if ((unsigned)f->body_case < GW_STATS_FRAME_TYPES)
            lp->stats.frames_in[f->body_case]++;
        session_dispatch(lp, s, f, in);
        proto_frame_free(f);
        if (nl_conn_state(c) == NL_CONN_DISCONNECTED)
            return frames;
        s = nl_conn_data(c); /* Connect may have reallocated it */
    }
    if (s->state == GW_SESSION_CLOSING)
        nl_buf_retrieve_all(in);
    return frames;
}

/* How long before a token's exp the wheel hands the session over to an exact deadline: the
 * wheel fires up to a tick late, so two ticks leave it a whole tick to spare. */
static uint64_t session_exp_lead_ms(const gw_loop_t *lp)
{
    return 2 * (uint64_t)gw_heartbeat_tick(&lp->hb);
}

/* The wheel runs on the loop's monotonic clock and exp is wall-clock time, so exp is carried
 * over as "this many ms from now". The flag lets gw_session_on_deadline tell an expiry from
 * idleness. For an expiry the wheel's deadline is a little before exp (session_exp_lead_ms):
 * its tick, up to a second, is too coarse for PROTOCOL.md's promise (Disconnect within a
 * second of exp; a 1 s tick plus its phase made it 0.33-1.28 s late), so the last stretch is
 * timed exactly (gw_session_check_exp). */
uint64_t gw_session_deadline_ms(gw_loop_t *lp, gw_session_t *s, uint64_t wall_ms)
{
    uint64_t now_ms = session_now_ms(lp);
    uint64_t idle_ms = now_ms + gw_loop_cfg(lp)->idle_timeout_ms;
    s->flags &= (uint8_t)~GW_SESSION_DEADLINE_EXP;
    if (s->exp_s == 0)
        return idle_ms;
    uint64_t exp_wall_ms = (uint64_t)s->exp_s * 1000u;
    uint64_t exp_ms = now_ms + (exp_wall_ms > wall_ms ? exp_wall_ms - wall_ms : 0);
    uint64_t lead_ms = session_exp_lead_ms(lp);
    uint64_t early_ms = exp_ms > now_ms + lead_ms ? exp_ms - lead_ms : now_ms;
    if (early_ms >= idle_ms)
        return idle_ms;
    s->flags |= GW_SESSION_DEADLINE_EXP;
    return early_ms;
}

/* Whether s's token has expired at wall-clock time wall_ms (false for a token without exp). */
static bool session_is_expired(const gw_session_t *s, uint64_t wall_ms)
{
    return s->exp_s && wall_ms / 1000 >= s->exp_s;
}

/* Ends s with Disconnect{TOKEN_EXPIRED}. */
static void session_expire(gw_loop_t *lp, gw_session_t *s)
{
    gw_session_begin_close(lp, s, GW_CLOSE_TOKEN_EXPIRED, HERALD__DISCONNECT__CODE__TOKEN_EXPIRED,
                           "token expired", true);
}

void gw_session_check_exp(gw_loop_t *lp, gw_session_t *s)
{
    uint64_t wall_ms = nl_wall_ms();
    if (session_is_expired(s, wall_ms)) {
        session_expire(lp, s);
        return;
    }
    uint64_t left_ms = (uint64_t)s->exp_s * 1000u - wall_ms;
    if (left_ms > session_exp_lead_ms(lp)) {
        /* Not near yet (the wall clock was set back since the deadline was taken): the wheel
         * again. */
        gw_heartbeat_set(&lp->hb, &s->deadline, gw_session_deadline_ms(lp, s, wall_ms));
        return;
    }
    uint64_t exp_ms = session_now_ms(lp) + left_ms;
    /* The session stays in the wheel (it is the loop's list of sessions), a tick past exp:
     * should the exact deadline not be kept (no memory for it), the wheel ends it then. */
    gw_heartbeat_set(&lp->hb, &s->deadline, exp_ms + gw_heartbeat_tick(&lp->hb));
    (void)gw_heartbeat_at(&lp->hb, exp_ms, nl_conn_id(s->member.conn));
}

void gw_session_on_exact(uint64_t conn_id, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = gw_session_lookup(lp->fo.loop, conn_id, GW_SESSION_AUTHENTICATED);
    /* Gone, closing, or a session whose deadline is its idleness again (none is: exp stays). */
    if (s && s->exp_s && (s->flags & GW_SESSION_DEADLINE_EXP))
        gw_session_check_exp(lp, s);
}

static void session_on_message(nl_conn_t *c, nl_buf_t *in)
{
    gw_session_t *s = nl_conn_data(c);
    gw_loop_t *lp = gw_loop_current();
    /* Input that waits for an earlier request stays as it is, bytes read since included (an
     * event already returned by the same wait as the pause). */
    if (s->state == GW_SESSION_AUTHENTICATED && gw_session_is_holding(lp, s))
        return;
    gw_session_input(lp, s, in);
}

void gw_session_input(gw_loop_t *lp, gw_session_t *s, nl_buf_t *in)
{
    nl_conn_t *c = s->member.conn;
    uint64_t wall_ms = 0;
    bool was_authenticated = s->state == GW_SESSION_AUTHENTICATED;
    if (was_authenticated) {
        /* A session lives as long as its token: the wheel fires at exp for a client that
         * only listens, and input after exp ends it here at once. */
        wall_ms = s->exp_s ? nl_wall_ms() : 0;
        if (session_is_expired(s, wall_ms)) {
            nl_buf_retrieve_all(in);
            session_expire(lp, s);
            return;
        }
    }
    if (s->state == GW_SESSION_AUTHENTICATING)
        return; /* reading is paused; these bytes wait for the verdict */
    size_t frames = gw_session_process(lp, s, in);
    /* Activity is a whole frame (PROTOCOL.md: any frame counts), not a byte: a client that
     * trickles a frame it never finishes, a byte now and then, would otherwise hold its
     * connection and up to max_frame_bytes of input for as long as it likes. One store per
     * read (the wheel re-files lazily). */
    if (frames == 0 || !was_authenticated || nl_conn_state(c) == NL_CONN_DISCONNECTED)
        return;
    s = nl_conn_data(c);
    if (s->state == GW_SESSION_AUTHENTICATED) {
        gw_heartbeat_touch(&lp->hb, &s->deadline, gw_session_deadline_ms(lp, s, wall_ms));
        /* Seen: the next refresh batch carries the user (gw_presence), one flag per read. */
        s->flags |= GW_SESSION_IS_SEEN;
    }
}

/* --- lifecycle ---------------------------------------------------------------------------- */

/* nl_server gives every connection the limits of the startup config; a reloaded one that
 * differs is applied here, to the connections accepted from now on (gw_config.h). */
static void session_apply_conn_limits(gw_loop_t *lp, nl_conn_t *c)
{
    const gw_node_t *node = lp->node;
    uint64_t high_water = gw_loop_cfg(lp)->output_high_water_bytes;
    uint64_t max_input = lp->snap->frame_limit_bytes + PROTO_VARINT_MAX_BYTES + 64;
    if (high_water != node->conn_high_water_bytes)
        nl_conn_set_high_water(c, high_water);
    if (max_input != node->conn_max_input_bytes)
        nl_conn_set_max_input(c, max_input);
}

static void session_on_connected(nl_conn_t *c)
{
    gw_loop_t *lp = gw_loop_current();
    gw_node_t *node = lp->node;
    const gw_config_t *cfg = gw_loop_cfg(lp);
    if (lp->is_stopping) {
        nl_conn_close(c, 0);
        return;
    }
    _Static_assert(GW_SESSION_PREAUTH_BYTES >= sizeof(gw_session_t), "pre-Connect size");
    gw_session_t *s = calloc(1, GW_SESSION_PREAUTH_BYTES);
    if (!s) {
        nl_conn_close(c, -ENOMEM);
        return;
    }
    s->member.conn = c;
    const gw_node_listen_ctx_t *ctx = nl_conn_ctx(c);
    if (ctx && ctx->is_ws)
        s->member.flags |= GW_SUB_SET_WS;
    s->state = GW_SESSION_AWAIT_CONNECT;
    s->close_reason = GW_SESSION_NO_REASON;
    nl_conn_set_data(c, s);
    lp->stats.accepts++;
    uint64_t n = atomic_fetch_add_explicit(&node->connections, 1, memory_order_relaxed) + 1;
    if (lp->is_draining) {
        /* Only a connection accepted just before the listener closed gets here. */
        gw_session_begin_close(lp, s, GW_CLOSE_SHUTDOWN, HERALD__DISCONNECT__CODE__SHUTDOWN,
                               "node draining", true);
        return;
    }
    if (n > cfg->max_connections) {
        gw_session_begin_close(lp, s, GW_CLOSE_SERVER_FULL, HERALD__DISCONNECT__CODE__SERVER_FULL,
                               "server full", true);
        return;
    }
    session_apply_conn_limits(lp, c);
    gw_heartbeat_set(&lp->hb, &s->deadline, session_now_ms(lp) + cfg->connect_timeout_ms);
    /* Counted as unauthenticated until its Connect is verified; may close an older one. */
    gw_session_preauth_admit(lp, s);
}

static void session_on_close(nl_conn_t *c, int reason)
{
    gw_session_t *s = nl_conn_data(c);
    if (!s)
        return;
    gw_loop_t *lp = gw_loop_current();
    gw_heartbeat_cancel(&lp->hb, &s->deadline);
    gw_session_preauth_leave(lp, s);
    gw_session_flow_close(lp, s);
    gw_session_offline(lp, s);
    gw_sub_remove_all(&lp->fo.subs, &s->member);
    /* -ENOBUFS: the transport closed it for output at its hard cap that the client does not
     * read (a WebSocket ping flood's pongs): a slow consumer, as gw_session_send's. */
    gw_close_reason_t why = s->close_reason != GW_SESSION_NO_REASON ? s->close_reason
                            : reason == 0                           ? GW_CLOSE_PEER
                            : reason == -ENOBUFS                    ? GW_CLOSE_SLOW_CONSUMER
                                                                    : GW_CLOSE_IO_ERROR;
    lp->stats.closes[why]++;
    if (s->flags & GW_SESSION_IS_AUTHED)
        lp->stats.authenticated--;
    atomic_fetch_sub_explicit(&lp->node->connections, 1, memory_order_relaxed);
    nl_conn_set_data(c, NULL);
    free(s);
}

void gw_session_on_deadline(nl_wheel_entry_t *e, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = (gw_session_t *)((char *)e - offsetof(gw_session_t, deadline));
    switch (s->state) {
    case GW_SESSION_AWAIT_CONNECT:
    case GW_SESSION_AUTHENTICATING:
        /* A client that sent no Connect should not come back as it is; one whose Connect the
         * server could not verify in time (a backlog, BUSY) should. */
        gw_session_begin_close(lp, s, GW_CLOSE_HANDSHAKE_TIMEOUT,
                               HERALD__DISCONNECT__CODE__IDLE_TIMEOUT, "handshake timeout",
                               s->state == GW_SESSION_AUTHENTICATING ||
                                   (s->flags & GW_SESSION_CONNECT_DEFERRED));
        break;
    case GW_SESSION_AUTHENTICATED:
        if (!(s->flags & GW_SESSION_DEADLINE_EXP))
            gw_session_begin_close(lp, s, GW_CLOSE_IDLE_TIMEOUT,
                                   HERALD__DISCONNECT__CODE__IDLE_TIMEOUT, "idle timeout", true);
        else
            gw_session_check_exp(lp, s); /* exp is near: timed exactly from here */
        break;
    default:
        nl_conn_close(s->member.conn, -ETIMEDOUT);
        break;
    }
}

const nl_conn_cbs_t gw_session_conn_cbs = {
    .on_connected = session_on_connected,
    .on_message = session_on_message,
    .on_close = session_on_close,
};

/* --- slow consumers ------------------------------------------------------------------------ */

void gw_session_on_slow(gw_sub_set_t *set, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = gw_session_of_set(set);
    if (s->state == GW_SESSION_CLOSING)
        return;
    /* Nothing more is queued for it. Disconnect{SLOW_CONSUMER} goes behind what is (at most
     * the high-water mark plus one Push), so a client that reads again within the
     * slow_consumer_linger (5 s by default) gets an unbroken run of offsets, then the reason,
     * then EOF; one that does not is closed when the linger ends. Inside a delivery loop, so
     * the subscriptions stay: fan-out removes them after the loop. Even if that send closed it
     * (its output at the cap), a closed connection's session lives until the iteration ends,
     * and leaving twice (again in on_close) is harmless. */
    char q[NL_LOG_QUOTE_MAX];
    NL_LOG(NL_DEBUG, "slow_consumer_disconnect", "conn=%" PRIu64 " user=%s queued=%zu",
           nl_conn_id(s->member.conn), gw_session_user_quoted(s, q),
           nl_conn_output_bytes(s->member.conn));
    session_close_gracefully(lp, s, GW_CLOSE_SLOW_CONSUMER, HERALD__DISCONNECT__CODE__SLOW_CONSUMER,
                             "slow consumer", true, true,
                             (uint32_t)gw_loop_cfg(lp)->slow_consumer_linger_ms);
}

/* --- subscription index hooks ------------------------------------------------------------- */

static void session_on_join(const char *name, size_t len, uint32_t hash, void *arg)
{
    gw_loop_t *lp = arg;
    gw_engine_join(lp->node->engine, lp->fo.index, name, len, hash);
}

static void session_on_leave(const char *name, size_t len, uint32_t hash, void *arg)
{
    gw_loop_t *lp = arg;
    gw_engine_leave(lp->node->engine, lp->fo.index, name, len, hash);
}

static void session_on_joined(gw_sub_set_t *set, uint64_t req_id, int status,
                              const gw_sub_entry_t *e, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = gw_session_of_set(set);
    size_t len = 0;
    const char *name = e ? gw_sub_entry_name(e, &len) : NULL;
    if (status < 0) {
        /* Request id 0 is a listener subscription's (gw_session_presence.c): the Subscribe's
         * own channel answers the request. */
        if (req_id == 0 && (s->flags & GW_SESSION_IS_LISTENER))
            gw_session_presence_listener_failed(lp, s);
        /* -EAGAIN: the engine could not reach its Redis in time; the client may retry. */
        else if (status == -EAGAIN || status == -ESHUTDOWN)
            gw_session_error(lp, s, req_id, GW_PERR_BUSY, 1000);
        else
            gw_session_error(lp, s, req_id, GW_PERR_INTERNAL, 0);
    } else if (!gw_presence_is_listener(name, len)) {
        session_subscribed(lp, s, req_id, e);
        gw_session_presence_joined(lp, s, name, len);
    }
    /* A Publish or PresenceRequest of this channel may wait for this answer. */
    gw_session_wake(lp, s);
}

static void session_on_recover_failed(gw_sub_set_t *set, const char *name, size_t len,
                                      uint32_t hash, int status, void *arg)
{
    NL_UNUSED(hash);
    gw_session_recover_failed(arg, gw_session_of_set(set), name, len, status);
}

const gw_sub_index_cbs_t gw_session_sub_cbs = {
    .join = session_on_join,
    .leave = session_on_leave,
    .joined = session_on_joined,
    .recover_failed = session_on_recover_failed,
};

/* --- shutdown ----------------------------------------------------------------------------- */

static void session_close_one(nl_wheel_entry_t *e, void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_t *s = (gw_session_t *)((char *)e - offsetof(gw_session_t, deadline));
    if (s->state != GW_SESSION_CLOSING) {
        session_send_disconnect(lp, s, HERALD__DISCONNECT__CODE__SHUTDOWN, "node shutting down",
                                true);
        s->close_reason = GW_CLOSE_SHUTDOWN;
        if (s->member.flags & GW_SUB_SET_WS)
            gw_ws_set_close(s->member.conn,
                            GW_WS_CLOSE_HERALD_BASE + HERALD__DISCONNECT__CODE__SHUTDOWN,
                            "node shutting down");
    }
    /* The forced close skips the orderly one, which sends a WebSocket client its close frame:
     * send it here, behind the Disconnect (the client saw 1006, no close frame, before). */
    if (s->member.flags & GW_SUB_SET_WS)
        gw_ws_close_now(s->member.conn);
    nl_conn_close(s->member.conn, 0);
}

void gw_session_close_all(gw_loop_t *lp)
{
    gw_heartbeat_foreach(&lp->hb, session_close_one, lp);
}

/* --- drain -------------------------------------------------------------------------------- */

typedef struct session_list_s {
    uint64_t *ids;
    size_t n;
    size_t cap;
} session_list_t;

static void session_list_one(nl_wheel_entry_t *e, void *arg)
{
    session_list_t *l = arg;
    gw_session_t *s = (gw_session_t *)((char *)e - offsetof(gw_session_t, deadline));
    if (s->state != GW_SESSION_CLOSING && l->n < l->cap)
        l->ids[l->n++] = nl_conn_id(s->member.conn);
}

size_t gw_session_list(gw_loop_t *lp, uint64_t *ids, size_t cap)
{
    session_list_t l = {.ids = ids, .n = 0, .cap = cap};
    gw_heartbeat_foreach(&lp->hb, session_list_one, &l);
    return l.n;
}

bool gw_session_drain(gw_loop_t *lp, uint64_t conn_id)
{
    nl_conn_t *c = nl_conn_lookup(lp->fo.loop, conn_id);
    gw_session_t *s = c ? nl_conn_data(c) : NULL;
    if (!s || s->state == GW_SESSION_CLOSING)
        return false;
    /* Queued behind the client's pending output: what it was sent before still reaches it. */
    gw_session_begin_close(lp, s, GW_CLOSE_SHUTDOWN, HERALD__DISCONNECT__CODE__SHUTDOWN,
                           "node draining", true);
    lp->stats.drained++;
    return true;
}
