/*
 * gw_ws: the WebSocket transport (RFC 6455), server side, over plain TCP or TLS. See
 * gw_transport.h for what it does; nl_transport.h for the seam it sits on.
 *
 * Input. Raw bytes are read from the socket (or TLS) into a per-thread scratch area and fed
 * to the connection's WebSocket frame reader (proto_ws, over libwslay's parser), which unmasks
 * payloads and puts each binary message into the session's input buffer behind a varint of
 * its length, the form the TCP stream has, so the session reads one format. Pings are
 * answered with a pong, a close frame with a close frame and the end of the stream; anything
 * RFC 6455 forbids (an unmasked frame, reserved bits or opcodes, a continuation out of place)
 * closes with 1002, a text message with 1003, a message over the frame limit with 1009
 * (checked on the frame's header, before its payload is read): ws_errors maps the reader's
 * verdicts.
 *
 * Memory. The reader lends itself libwslay's 4 KiB parser context from its thread only while
 * it stops inside a frame (proto_ws.h). An idle connection holds this struct only; raw bytes
 * not parsed yet (the rest of a read that stopped because the session's input was full) sit
 * in a buffer that has storage only while it has bytes. In its opening handshake a connection
 * holds the upgrade, whose buffer is as large as what the client sent (gw_ws_upgrade.c), and
 * over TLS gw_tls's state, which has no SSL before the client's first record: one that
 * connects and sends nothing costs a few hundred bytes until its deadline.
 *
 * Back-pressure. The session's input buffer has room for one frame of the largest size (its
 * cap), so a message is parsed only when the input has room for the largest one: the rest of
 * the bytes wait here (has_pending tells netlib), and reading the socket pauses, as it does
 * for TCP when the input buffer is full.
 *
 * Output. The session and fan-out queue whole frames (gw_ws_header), so netlib's byte stream
 * is a sequence of frames and anything this file queues itself (a pong, a close frame) goes
 * between two of them, a pong with the iteration's flush (nl_conn_send_later), a close frame
 * at once (nl_conn_send). Over plain TCP netlib writes to the fd itself, as for TCP; over TLS
 * through gw_tls. The orderly close (shutdown) sends the close frame the session set
 * (gw_ws_set_close; 1000 by default), then TLS's close_notify.
 */
#include "gw_transport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "gw_transport_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"
#include "proto_ws.h"

/* ws->flags */
#define WS_TLS_DONE 0x01u   /* wss: the TLS handshake is done */
#define WS_CLOSING 0x02u    /* a close frame went out: input is over */
#define WS_CLOSE_SENT 0x04u /* shutdown: the close frame is written */
#define WS_IS_REFUSED 0x08u /* the upgrade is refused: write the answer, then fail */

/* Tells a WebSocket connection's state from another transport's (gw_ws_set_close is called
 * with any connection of a ws listener, which is all the caller knows). */
#define WS_MAGIC 0x7773u

typedef struct ws_conn_s {
    uint16_t magic; /* WS_MAGIC */
    gw_listener_t *l;
    nl_conn_t *c;
    gw_tls_conn_t *tls;   /* wss: the TLS under it; NULL: plain TCP */
    gw_ws_upgrade_t *up;  /* the opening handshake, while it runs */
    gw_hs_t hs;           /* the handshake's deadline (TLS and upgrade) */
    nl_buf_t raw;         /* read, not parsed yet; storage only while it has bytes */
    proto_ws_reader_t rd; /* the client's frames: parser, a message put together */
    const char *close_reason;
    char *out; /* shutdown: the close frame's unwritten rest */
    uint16_t out_len;
    uint16_t close_code; /* the orderly close's; 0: 1000 */
    uint8_t flags;
    uint8_t refusal; /* WS_IS_REFUSED: the gw_hs_fail_t */
} ws_conn_t;

/* --- the thread's scratch area ------------------------------------------------------------------
 */

/* One TLS record, or one plain read, or a piece of an upgrade request: what a read lands in
 * before the frame reader (proto_ws) or the upgrade takes it. */
static _Thread_local uint8_t ws_scratch[16384];

/* --- output of its own ------------------------------------------------------------------------ */

/* Queues a control frame (a pong, a close) between the frames already queued. Returns 0, or a
 * negative errno. -ENOBUFS: the output is at its hard cap, so the client sends (a ping flood,
 * say) and does not read what it is answered; like a session's unread answers (gw_session_send)
 * that closes the connection at once, with -ENOBUFS, which the session counts as a slow
 * consumer. Without it the close came from the read's -EPIPE and was counted as an I/O
 * error.
 *
 * A pong goes out with the iteration's flush (nl_conn_send_later), as the session's answers
 * do: the pongs for a read's pings, and the answers to the frames beside them, leave in one
 * write (one TLS record on wss) instead of one send each. A close frame is written at once: it
 * ends the input, and gw_ws_close_now's comes right before a forced close. */
static int ws_send_control(ws_conn_t *ws, uint8_t opcode, const void *payload, size_t len)
{
    uint8_t frame[2 + 125];
    if (len > 125)
        len = 125;
    frame[0] = (uint8_t)(0x80 | opcode);
    frame[1] = (uint8_t)len;
    memcpy(frame + 2, payload, len);
    int err = opcode == PROTO_WS_PONG ? nl_conn_send_later(ws->c, frame, 2 + len)
                                      : nl_conn_send(ws->c, frame, 2 + len);
    if (err == -ENOBUFS)
        nl_conn_close(ws->c, -ENOBUFS);
    return err;
}

/* A close frame's payload: the code, then at most 123 bytes of reason. */
static size_t ws_close_payload(uint8_t out[125], uint16_t code, const char *reason)
{
    out[0] = (uint8_t)(code >> 8);
    out[1] = (uint8_t)code;
    size_t n = reason ? strlen(reason) : 0;
    if (n > 123)
        n = 123;
    memcpy(out + 2, reason, n);
    return 2 + n;
}

/* Ends the input with a close frame for the client's protocol error. */
static ssize_t ws_fail(ws_conn_t *ws, gw_ws_err_t err, uint16_t code, const char *reason)
{
    gw_listener_count(&ws->l->n.ws_errors[err], 1);
    uint8_t payload[125];
    size_t n = ws_close_payload(payload, code, reason);
    ws->flags |= WS_CLOSING;
    if (ws_send_control(ws, PROTO_WS_CLOSE, payload, n) < 0)
        return -EPIPE;
    ws->flags |= WS_CLOSE_SENT; /* the orderly close that follows sends no second one */
    return 0;
}

/* --- input ------------------------------------------------------------------------------------ */

/* The largest message this connection may send: the listener's limit, but never more than
 * its input buffer holds. A reload that raises max_frame raises the listener's limit at once,
 * while a connection accepted before keeps the input cap it was made with (and was told the
 * frame limit of then): measured against the new limit it never had room for a message, so
 * parsing stopped for good and every WebSocket connection open at the reload hung. */
static uint64_t ws_max_message(const ws_conn_t *ws, const nl_buf_t *in)
{
    uint64_t max = atomic_load_explicit(&ws->l->max_message_bytes, memory_order_relaxed);
    uint64_t fits =
        in->max_bytes > PROTO_VARINT_MAX_BYTES ? in->max_bytes - PROTO_VARINT_MAX_BYTES : 0;
    return max < fits ? max : fits;
}

/* A whole control frame (proto_ws_control_cb). Returns 1 to go on, or 0 when the input is
 * over (a close: WS_CLOSING), or -errno. */
static int ws_control(void *arg, uint8_t opcode, const uint8_t *p, size_t len)
{
    ws_conn_t *ws = arg;
    if (opcode == PROTO_WS_PING) {
        gw_listener_count(&ws->l->n.ws_pings, 1);
        return ws_send_control(ws, PROTO_WS_PONG, p, len) < 0 ? -EPIPE : 1;
    }
    if (opcode == PROTO_WS_PONG)
        return 1;
    /* A close: answered with the client's code (1000 without one), and the stream ends. */
    if (len == 1)
        return ws_fail(ws, GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR, "bad close frame");
    uint8_t payload[2];
    uint16_t code = len >= 2 ? (uint16_t)(p[0] << 8 | p[1]) : GW_WS_CLOSE_NORMAL;
    payload[0] = (uint8_t)(code >> 8);
    payload[1] = (uint8_t)code;
    ws->flags |= WS_CLOSING | WS_CLOSE_SENT;
    return ws_send_control(ws, PROTO_WS_CLOSE, payload, 2) < 0 ? -EPIPE : 0;
}

/* How each broken frame is counted and closed (PROTOCOL.md 14, "Errors"). */
static const struct {
    gw_ws_err_t counter;
    uint16_t code;
    const char *reason;
} ws_errors[] = {
    [PROTO_WS_ERR_FRAME] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR, "bad frame"},
    [PROTO_WS_ERR_MASK] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR, "unmasked frame"},
    [PROTO_WS_ERR_RSV] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR, "reserved bits"},
    [PROTO_WS_ERR_TEXT] = {GW_WS_ERR_TEXT, GW_WS_CLOSE_UNSUPPORTED_DATA,
                           "herald.v1 speaks binary messages"},
    [PROTO_WS_ERR_NESTED] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR,
                             "a new message inside a fragmented one"},
    [PROTO_WS_ERR_TOO_BIG] = {GW_WS_ERR_TOO_BIG, GW_WS_CLOSE_MESSAGE_TOO_BIG,
                              "message over the frame limit"},
    [PROTO_WS_ERR_ORPHAN] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR,
                             "continuation without a message"},
    [PROTO_WS_ERR_OPCODE] = {GW_WS_ERR_PROTOCOL, GW_WS_CLOSE_PROTOCOL_ERROR, "reserved opcode"},
};

/* A frame broke RFC 6455 or herald.v1 (proto_ws_error_cb): a close frame with its code, and
 * the input is over. Returns 0, or -EPIPE. */
static int ws_broken(void *arg, proto_ws_err_t err, uint64_t payload_len)
{
    NL_UNUSED(payload_len);
    return (int)ws_fail(arg, ws_errors[err].counter, ws_errors[err].code, ws_errors[err].reason);
}

/* Parses the bytes p[0..len) (and what the parser holds) while the session's input has room.
 * Returns the bytes appended to in, or a negative errno. Bytes it did not take are left in p
 * and len; proto_ws_reader_is_stopped says it stopped for room, WS_CLOSING that the input is
 * over. */
static ssize_t ws_parse(ws_conn_t *ws, const uint8_t **p, size_t *len, nl_buf_t *in)
{
    const proto_ws_read_opts_t opts = {
        .max_message_bytes = ws_max_message(ws, in),
        .is_masked = true,
        .is_paced = true,
        .on_control = ws_control,
        .on_error = ws_broken,
        .arg = ws,
    };
    return proto_ws_read(&ws->rd, &opts, p, len, in);
}

/* recv on the connection's socket: bytes, 0 at EOF, -EAGAIN, -errno. */
static ssize_t ws_recv(const ws_conn_t *ws, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = recv(nl_conn_fd(ws->c), buf, len, 0);
        if (n >= 0)
            return n;
        int err = -errno;
        if (err == -EWOULDBLOCK)
            return -EAGAIN;
        if (err != -EINTR)
            return err;
    }
}

/* send on the connection's socket: bytes, -EAGAIN, -errno. */
static ssize_t ws_send(const ws_conn_t *ws, const void *buf, size_t len)
{
    for (;;) {
        ssize_t n = send(nl_conn_fd(ws->c), buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            return n;
        int err = -errno;
        if (err == -EWOULDBLOCK)
            return -EAGAIN;
        if (err != -EINTR)
            return err;
    }
}

/* Reads raw bytes into the thread's scratch area. */
static ssize_t ws_read_raw(const ws_conn_t *ws)
{
    if (ws->tls)
        return gw_tls_conn_read(ws->tls, ws_scratch, sizeof(ws_scratch));
    return ws_recv(ws, ws_scratch, sizeof(ws_scratch));
}

static ssize_t ws_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    NL_UNUSED(c);
    ws_conn_t *ws = state;
    size_t appended = 0;
    for (;;) {
        if (ws->flags & WS_CLOSING)
            return appended > 0 ? (ssize_t)appended : 0;
        /* Bytes left from before come first (the upgrade's rest, a stop for room), then what
         * the parser itself holds; only then the socket. */
        bool is_raw = nl_buf_readable(&ws->raw) > 0;
        const uint8_t *p = NULL;
        size_t len = 0;
        if (is_raw) {
            p = (const uint8_t *)nl_buf_peek(&ws->raw);
            len = nl_buf_readable(&ws->raw);
        } else if (!proto_ws_reader_is_stopped(&ws->rd)) {
            ssize_t n = ws_read_raw(ws);
            if (n <= 0)
                return appended > 0 && (n == 0 || n == -EAGAIN) ? (ssize_t)appended : n;
            p = ws_scratch;
            len = (size_t)n;
        }
        ssize_t rc = ws_parse(ws, &p, &len, in);
        /* What the parser did not take waits in raw. */
        if (is_raw) {
            nl_buf_retrieve(&ws->raw, nl_buf_readable(&ws->raw) - len);
            nl_buf_release(&ws->raw);
        } else if (len > 0 && nl_buf_append(&ws->raw, p, len) < 0) {
            return -ENOMEM;
        }
        if (rc < 0)
            return rc;
        appended += (size_t)rc;
        if (proto_ws_reader_is_stopped(&ws->rd))
            return appended > 0 ? (ssize_t)appended : -ENOBUFS;
        /* A whole read parsed without a message (a ping, half a frame): read on, so that an
         * edge-triggered socket is drained before netlib waits. */
        if (appended > 0)
            return (ssize_t)appended;
    }
}

static bool ws_has_pending(const nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    const ws_conn_t *ws = state;
    return nl_buf_readable(&ws->raw) > 0 || proto_ws_reader_is_stopped(&ws->rd) ||
           (ws->tls && gw_tls_conn_has_pending(ws->tls));
}

/* --- the opening handshake -------------------------------------------------------------------- */

static int ws_open(nl_conn_t *c, void *arg, bool is_client, void **state)
{
    NL_UNUSED(is_client);
    gw_listener_t *l = arg;
    ws_conn_t *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    ws->magic = WS_MAGIC;
    ws->l = l;
    ws->c = c;
    nl_buf_init(&ws->raw, 0);
    proto_ws_reader_init(&ws->rd);
    ws->up = gw_ws_upgrade_new();
    if (l->tls)
        ws->tls = gw_tls_conn_new(l, c);
    int err = !ws->up || (l->tls && !ws->tls) ? -ENOMEM : gw_hs_start(&ws->hs, l, c);
    if (err < 0) {
        gw_ws_upgrade_free(ws->up);
        gw_tls_conn_free(ws->tls);
        free(ws);
        return err;
    }
    *state = ws;
    return 0;
}

/* Writes the upgrade's response. Returns 0 when it is all out, or NL_TRANSPORT_WANT_WRITE,
 * or -errno. */
static int ws_write_response(ws_conn_t *ws)
{
    size_t len;
    const char *p;
    while ((p = gw_ws_upgrade_response(ws->up, &len)), len > 0) {
        ssize_t n;
        if (ws->tls) {
            struct iovec iov = {.iov_base = (void *)(uintptr_t)p, .iov_len = len};
            n = gw_tls_conn_writev(ws->tls, &iov, 1);
        } else {
            n = ws_send(ws, p, len);
        }
        if (n == -EAGAIN)
            return NL_TRANSPORT_WANT_WRITE;
        if (n < 0)
            return (int)n;
        gw_ws_upgrade_wrote(ws->up, (size_t)n);
    }
    return 0;
}

/* Reads the request until it is complete. Returns 0 (complete: accepted or refused, see
 * ws->flags), NL_TRANSPORT_WANT_READ, or -errno. The bytes land in the thread's scratch area
 * first, so the upgrade's buffer grows only by what came. */
static int ws_read_request(ws_conn_t *ws)
{
    for (;;) {
        size_t cap = gw_ws_upgrade_room(ws->up);
        if (cap > sizeof(ws_scratch))
            cap = sizeof(ws_scratch);
        ssize_t n;
        n = ws->tls ? gw_tls_conn_read(ws->tls, ws_scratch, cap) : ws_recv(ws, ws_scratch, cap);
        if (n == -EAGAIN)
            return NL_TRANSPORT_WANT_READ;
        if (n == 0)
            return -ECONNRESET; /* the peer left before its request was complete */
        if (n < 0)
            return (int)n;
        int rc = gw_ws_upgrade_feed(ws->up, ws_scratch, (size_t)n, ws->l);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return 0;
        if (rc >= 2) {
            ws->flags |= WS_IS_REFUSED;
            ws->refusal = (uint8_t)(rc - 2);
            return 0;
        }
    }
}

static int ws_handshake(nl_conn_t *c, void *state)
{
    ws_conn_t *ws = state;
    if (ws->tls && !(ws->flags & WS_TLS_DONE)) {
        int rc = gw_tls_conn_handshake(ws->tls, &ws->hs);
        if (rc != NL_TRANSPORT_DONE)
            return rc;
        ws->flags |= WS_TLS_DONE;
        gw_tls_conn_after_handshake(ws->tls, c);
    }
    size_t pending;
    gw_ws_upgrade_response(ws->up, &pending);
    if (pending == 0) {
        int rc = ws_read_request(ws);
        if (rc != 0)
            return rc;
    }
    int rc = ws_write_response(ws);
    if (rc != 0)
        return rc;
    if (ws->flags & WS_IS_REFUSED) {
        gw_hs_end(&ws->hs, false, (gw_hs_fail_t)ws->refusal);
        return -EPROTO;
    }
    /* Accepted: the bytes after the request are the client's first frames. */
    size_t rest_len;
    const char *rest = gw_ws_upgrade_rest(ws->up, &rest_len);
    if (rest_len > 0 && nl_buf_append(&ws->raw, rest, rest_len) < 0)
        return -ENOMEM;
    gw_ws_upgrade_free(ws->up);
    ws->up = NULL;
    gw_hs_end(&ws->hs, true, 0);
    return NL_TRANSPORT_DONE;
}

/* --- the orderly close --------------------------------------------------------------------------
 */

void gw_ws_set_close(nl_conn_t *c, uint16_t code, const char *reason)
{
    ws_conn_t *ws = nl_conn_transport_state(c);
    if (!ws || ws->magic != WS_MAGIC)
        return;
    ws->close_code = code;
    ws->close_reason = reason;
}

void gw_ws_close_now(nl_conn_t *c)
{
    ws_conn_t *ws = nl_conn_transport_state(c);
    /* ws->out: the orderly close began writing its frame; another would break the stream. */
    if (!ws || ws->magic != WS_MAGIC || ws->up || ws->out || (ws->flags & WS_CLOSE_SENT))
        return;
    uint8_t payload[125];
    size_t n = ws_close_payload(payload, ws->close_code ? ws->close_code : GW_WS_CLOSE_NORMAL,
                                ws->close_reason);
    if (ws_send_control(ws, PROTO_WS_CLOSE, payload, n) == 0)
        ws->flags |= WS_CLOSE_SENT;
}

static int ws_shutdown(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    ws_conn_t *ws = state;
    if (!(ws->flags & WS_CLOSE_SENT)) {
        if (!ws->out) {
            uint8_t payload[125];
            size_t n = ws_close_payload(
                payload, ws->close_code ? ws->close_code : GW_WS_CLOSE_NORMAL, ws->close_reason);
            if ((ws->out = malloc(2 + n)) == NULL)
                return NL_TRANSPORT_DONE; /* no close frame: the half-close says it all */
            ws->out[0] = (char)(0x80 | PROTO_WS_CLOSE);
            ws->out[1] = (char)n;
            memcpy(ws->out + 2, payload, n);
            ws->out_len = (uint16_t)(2 + n);
        }
        while (ws->out_len > 0) {
            ssize_t n;
            if (ws->tls) {
                struct iovec iov = {.iov_base = ws->out, .iov_len = ws->out_len};
                n = gw_tls_conn_writev(ws->tls, &iov, 1);
            } else {
                n = ws_send(ws, ws->out, ws->out_len);
            }
            if (n == -EAGAIN)
                return NL_TRANSPORT_WANT_WRITE;
            if (n < 0)
                break; /* the socket is gone: nothing more to say */
            memmove(ws->out, ws->out + n, ws->out_len - (size_t)n);
            ws->out_len = (uint16_t)(ws->out_len - (size_t)n);
        }
        free(ws->out);
        ws->out = NULL;
        ws->flags |= WS_CLOSE_SENT;
    }
    return ws->tls ? gw_tls_conn_shutdown(ws->tls) : NL_TRANSPORT_DONE;
}

static ssize_t wss_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    NL_UNUSED(c);
    ws_conn_t *ws = state;
    return gw_tls_conn_writev(ws->tls, iov, iovcnt);
}

static void ws_free(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    ws_conn_t *ws = state;
    gw_hs_free(&ws->hs);
    gw_ws_upgrade_free(ws->up);
    gw_tls_conn_free(ws->tls);
    nl_buf_deinit(&ws->raw);
    proto_ws_reader_deinit(&ws->rd);
    free(ws->out);
    free(ws);
}

/* Over plain TCP netlib writes the (already framed) output to the fd itself. */
const nl_transport_t gw_ws_transport = {
    .name = "ws",
    .open = ws_open,
    .handshake = ws_handshake,
    .read = ws_read,
    .has_pending = ws_has_pending,
    .shutdown = ws_shutdown,
    .free = ws_free,
};

const nl_transport_t gw_wss_transport = {
    .name = "wss",
    .open = ws_open,
    .handshake = ws_handshake,
    .read = ws_read,
    .writev = wss_writev,
    .has_pending = ws_has_pending,
    .shutdown = ws_shutdown,
    .free = ws_free,
};
