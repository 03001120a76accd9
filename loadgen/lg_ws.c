/*
 * lg_ws: WebSocket client frames and transport (see lg_ws.h; the handshake's request and
 * checks: lg_ws_upgrade.c).
 *
 * Libraries. The server's frames are read by proto_ws (libwslay's frame parser underneath),
 * the reader herald's gw_ws.c reads the client's with; the 101 answer by libhttp-parser
 * (lg_ws_upgrade.c).
 *
 * Client frames are built here (lg_ws_frame_header, lg_ws_mask), not by wslay_frame_send,
 * which cannot keep what this output needs:
 *   - A write is one batch of up to WS_WRITE_FRAMES frames built in a scratch area and written
 *     with one send (one SSL_write on wss); when the socket or TLS takes part of it, the state
 *     goes back to the frame and payload offset where it stopped (ws_out_settle_short), and
 *     TLS's retry must get the same bytes again. wslay_frame_send keeps that state (header
 *     written or not, payload offset, mask key) in its opaque context and moves it on as its
 *     send callback takes bytes; nothing sets it back, so a retry could be rebuilt only by a
 *     new context per frame (malloc of over 4 KiB each) replayed from the frame's start.
 *   - It masks byte by byte into a 4 KiB stack buffer and hands each piece to the send
 *     callback, so batching costs a second copy of every payload byte (that buffer, then the
 *     scratch area) where this code copies the payload once into the scratch area and masks it
 *     there 8 bytes at a time; a callback writing to the socket instead costs a send (on wss
 *     a TLS record) per header and per 4 KiB.
 * Its genmask callback would have served (the key comes from the seed and the frame number,
 * lg_ws_mask_key); the rest would not. gw_ws.c builds its server frames itself too.
 *
 * Memory per connection: this struct and, only while they hold bytes, the parser context of a
 * frame that arrived in part and the buffer of a fragmented message (proto_ws lends a
 * connection its thread's 4 KiB libwslay context only while it stops inside a frame). Reads
 * land in a per-thread scratch area, writes are built in another: an idle client holds no
 * buffer.
 */
#include "lg_ws.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "lg_tls.h"
#include "lg_transport.h"
#include "lg_ws_upgrade.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"
#include "proto_ws.h"

/* The upgrade request, then the answer's header, live in one buffer this big. */
#define WS_HANDSHAKE_MAX 4096
/* A message larger than herald's frame limit could ever allow is a broken stream. */
#define WS_MESSAGE_MAX ((uint64_t)PROTO_DEFAULT_MAX_FRAME_BYTES * 16)
/* Per-thread scratch: one read, one batch of frames to write. */
#define WS_SCRATCH 65536
/* Frames begun in one write; more wait for the next call. */
#define WS_WRITE_FRAMES 128
/* A control frame with its header and mask. */
#define WS_CONTROL_MAX (LG_WS_HEADER_MAX + 125)

/* --- pure functions -------------------------------------------------------------------------- */

size_t lg_ws_frame_header(uint8_t out[LG_WS_HEADER_MAX], uint8_t opcode, uint64_t len,
                          const uint8_t *mask)
{
    uint8_t m = mask ? 0x80 : 0;
    size_t n;
    out[0] = (uint8_t)(0x80 | opcode);
    if (len < 126) {
        out[1] = (uint8_t)(m | len);
        n = 2;
    } else if (len <= 0xffff) {
        out[1] = (uint8_t)(m | 126);
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        n = 4;
    } else {
        out[1] = (uint8_t)(m | 127);
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        n = 10;
    }
    if (mask) {
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

void lg_ws_mask(uint8_t *p, size_t n, const uint8_t key[4], unsigned offset)
{
    /* Eight bytes at a time with the key rotated to the offset, then the tail. */
    uint8_t k8[8];
    for (unsigned i = 0; i < 8; i++)
        k8[i] = key[(offset + i) & 3];
    uint64_t k;
    memcpy(&k, k8, sizeof(k));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, sizeof(v));
        v ^= k;
        memcpy(p + i, &v, sizeof(v));
    }
    for (; i < n; i++)
        p[i] ^= k8[i & 7];
}

/* splitmix64 of the seed and n. */
void lg_ws_mask_key(uint64_t seed, uint64_t n, uint8_t key[4])
{
    uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    memcpy(key, &z, 4);
}

/* --- a connection ---------------------------------------------------------------------------- */

enum { WS_TLS_HANDSHAKE, WS_REQUEST, WS_RESPONSE, WS_OPEN };

typedef struct ws_state_s {
    const lg_transport_t *t;
    nl_conn_t *c;
    nl_timer_t *deadline; /* the handshake's, until it is done */
    lg_tls_conn_t tls;    /* wss only */
    bool is_tls;
    bool is_closed;        /* a close frame came (answered), or the stream ended: input over */
    bool is_write_pending; /* TLS: a write stopped short, its bytes must come first again */
    bool is_close_sent;    /* shutdown queued our close frame */
    uint8_t phase;         /* WS_* above */
    char key[LG_WS_KEY_LEN + 1];
    char *hs; /* the request being written, then the answer being read */
    uint32_t hs_len;
    uint32_t hs_off;
    nl_buf_t raw;         /* server bytes that came with the answer, not parsed yet */
    proto_ws_reader_t rd; /* the server's frames: parser, a message put together */

    /* Output. out_left payload bytes of the current frame are still to come from netlib's
     * stream, masked with mask from byte mask_off on. own holds what of a frame header the
     * socket did not take; ctl a control frame (pong, close) that goes between two frames,
     * next the one queued while part of ctl is out (it cannot be replaced then: the peer has
     * its first bytes, and a TLS write retry needs the same ones). */
    uint64_t out_left;
    uint64_t frames;    /* frames whose header went out: the next one's number */
    uint64_t mask_seed; /* from RAND_bytes: each frame's key is mixed from it and the number */
    uint8_t mask[4];
    uint8_t mask_off;
    uint8_t own_len;
    uint8_t ctl_len;
    uint8_t next_len;
    bool is_ctl_started;
    uint8_t own[LG_WS_HEADER_MAX];
    uint8_t ctl[WS_CONTROL_MAX];
    uint8_t next[WS_CONTROL_MAX];
} ws_state_t;

static _Thread_local uint8_t ws_in_scratch[WS_SCRATCH];
static _Thread_local uint8_t ws_out_scratch[WS_SCRATCH];

/* The socket, or TLS on it: bytes, 0 at the end of the stream, -EAGAIN, -errno. */
static ssize_t ws_lower_read(ws_state_t *ws, void *buf, size_t len)
{
    if (ws->is_tls) {
        bool want_write;
        ssize_t n = lg_tls_conn_read(&ws->tls, buf, len, &want_write);
        if (want_write && ws->phase == WS_OPEN)
            nl_conn_transport_want_write(ws->c);
        return n;
    }
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

static ssize_t ws_lower_write(ws_state_t *ws, const void *buf, size_t len)
{
    if (ws->is_tls)
        return lg_tls_conn_write(&ws->tls, buf, len);
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

/* Queues a control frame for the next write between frames. A newer one replaces an older one
 * not yet started (RFC 6455 5.5.3 lets a pong answer only the latest ping); one whose first
 * bytes are out finishes first, and the new one waits in next. */
static void ws_queue_control(ws_state_t *ws, uint8_t opcode, const uint8_t *payload, size_t len)
{
    uint8_t key[4];
    if (len > 125)
        len = 125;
    bool is_behind = ws->ctl_len > 0 && ws->is_ctl_started;
    uint8_t *to = is_behind ? ws->next : ws->ctl;
    lg_ws_mask_key(ws->mask_seed, ~ws->frames, key); /* no data frame's number: no retry */
    size_t h = lg_ws_frame_header(to, opcode, len, key);
    memcpy(to + h, payload, len);
    lg_ws_mask(to + h, len, key, 0);
    *(is_behind ? &ws->next_len : &ws->ctl_len) = (uint8_t)(h + len);
    nl_conn_transport_want_write(ws->c);
}

/* n bytes of ctl went out: the rest moves up, and once it is all out the waiting one is next. */
static void ws_ctl_sent(ws_state_t *ws, size_t n)
{
    memmove(ws->ctl, ws->ctl + n, ws->ctl_len - n);
    ws->ctl_len = (uint8_t)(ws->ctl_len - n);
    ws->is_ctl_started = ws->ctl_len > 0 && (ws->is_ctl_started || n > 0);
    if (ws->ctl_len == 0 && ws->next_len > 0) {
        memcpy(ws->ctl, ws->next, ws->next_len);
        ws->ctl_len = ws->next_len;
        ws->next_len = 0;
    }
}

static int ws_open(nl_conn_t *c, void *arg, bool is_client, void **state)
{
    NL_UNUSED(is_client);
    const lg_transport_t *t = arg;
    ws_state_t *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    ws->t = t;
    ws->c = c;
    ws->is_tls = t->kind == LG_TRANSPORT_WSS;
    ws->phase = ws->is_tls ? WS_TLS_HANDSHAKE : WS_REQUEST;
    nl_buf_init(&ws->raw, 0);
    proto_ws_reader_init(&ws->rd);
    uint8_t nonce[16];
    int rc = -ENOMEM;
    if (RAND_bytes(nonce, sizeof(nonce)) != 1 ||
        RAND_bytes((unsigned char *)&ws->mask_seed, sizeof(ws->mask_seed)) != 1)
        goto fail;
    EVP_EncodeBlock((unsigned char *)ws->key, nonce, sizeof(nonce));
    ws->hs = malloc(WS_HANDSHAKE_MAX);
    if (!ws->hs)
        goto fail;
    ws->hs_len = (uint32_t)lg_ws_request(ws->hs, WS_HANDSHAKE_MAX, t->host_header, ws->key);
    if (ws->hs_len == 0) {
        rc = -EINVAL;
        goto fail;
    }
    if (ws->is_tls && (rc = lg_tls_conn_init(&ws->tls, t, c)) < 0)
        goto fail;
    if ((rc = lg_transport_deadline_start(t, c, &ws->deadline)) < 0)
        goto fail;
    *state = ws;
    return 0;
fail:
    if (ws->is_tls)
        lg_tls_conn_deinit(&ws->tls);
    free(ws->hs);
    free(ws);
    return rc;
}

/* The first line of a refused answer, once per process, for whoever reads stderr. */
static void ws_say_refused(const ws_state_t *ws, const char *reason)
{
    static atomic_bool said;
    if (atomic_exchange(&said, true))
        return;
    const char *eol = memchr(ws->hs, '\r', ws->hs_len);
    int n = eol ? (int)(eol - ws->hs) : (int)(ws->hs_len < 80 ? ws->hs_len : 80);
    fprintf(stderr,
            "herald-loadgen: WebSocket: the server did not accept the upgrade (%s): %.*s\n"
            "  (is --port herald's [websocket] listen port, and --transport ws/wss the one it "
            "speaks?)\n",
            reason, n, ws->hs);
}

/* Reads the answer until its header is complete. Returns NL_TRANSPORT_DONE, _WANT_READ,
 * _WANT_WRITE, or -errno with *reason. */
static int ws_read_answer(ws_state_t *ws, const char **reason)
{
    for (;;) {
        if (ws->hs_len == WS_HANDSHAKE_MAX) {
            *reason = "WS_BAD_RESPONSE";
            return -EPROTO;
        }
        bool want_write = false;
        ssize_t n;
        if (ws->is_tls)
            n = lg_tls_conn_read(&ws->tls, ws->hs + ws->hs_len, WS_HANDSHAKE_MAX - ws->hs_len,
                                 &want_write);
        else
            n = ws_lower_read(ws, ws->hs + ws->hs_len, WS_HANDSHAKE_MAX - ws->hs_len);
        if (n == -EAGAIN)
            return want_write ? NL_TRANSPORT_WANT_WRITE : NL_TRANSPORT_WANT_READ;
        if (n == 0) {
            *reason = "WS_UPGRADE_EOF";
            return -ECONNRESET;
        }
        if (n < 0)
            return (int)n;
        ws->hs_len += (uint32_t)n;
        size_t hdr;
        int rc = lg_ws_check_response(ws->hs, ws->hs_len, ws->key, &hdr, reason);
        if (rc == 0)
            continue; /* the header is not complete yet */
        if (rc < 0) {
            ws_say_refused(ws, *reason);
            return rc;
        }
        /* Frames may have followed the answer at once: they wait in raw, and has_pending says
         * so, so that netlib reads them right after on_connected. */
        if (ws->hs_len > hdr && nl_buf_append(&ws->raw, ws->hs + hdr, ws->hs_len - hdr) < 0)
            return -ENOMEM;
        return NL_TRANSPORT_DONE;
    }
}

static int ws_handshake(nl_conn_t *c, void *state)
{
    ws_state_t *ws = state;
    const char *reason = NULL;
    int rc = NL_TRANSPORT_DONE;
    if (ws->phase == WS_TLS_HANDSHAKE) {
        rc = lg_tls_conn_handshake(&ws->tls, ws->t, &reason);
        if (rc != NL_TRANSPORT_DONE)
            goto out;
        ws->phase = WS_REQUEST;
    }
    if (ws->phase == WS_REQUEST) {
        while (ws->hs_off < ws->hs_len) {
            ssize_t n = ws_lower_write(ws, ws->hs + ws->hs_off, ws->hs_len - ws->hs_off);
            if (n == -EAGAIN)
                return NL_TRANSPORT_WANT_WRITE;
            if (n < 0) {
                rc = (int)n;
                goto out;
            }
            ws->hs_off += (uint32_t)n;
        }
        ws->phase = WS_RESPONSE;
        ws->hs_len = 0;
    }
    rc = ws_read_answer(ws, &reason);
    if (rc != NL_TRANSPORT_DONE)
        goto out;
    free(ws->hs);
    ws->hs = NULL;
    ws->phase = WS_OPEN;
    lg_transport_deadline_stop(&ws->deadline);
    return NL_TRANSPORT_DONE;
out:
    if (rc < 0 && reason)
        lg_transport_fail(ws->t, c, reason);
    return rc;
}

/* --- input ------------------------------------------------------------------------------------ */

/* A whole control frame (proto_ws_control_cb). Returns 1, or 0 after a close (is_closed). */
static int ws_control(void *arg, uint8_t opcode, const uint8_t *p, size_t len)
{
    ws_state_t *ws = arg;
    if (opcode == PROTO_WS_PING) {
        ws_queue_control(ws, LG_WS_PONG, p, len);
    } else if (opcode == PROTO_WS_CLOSE) {
        /* The server's close: echo its code, and the stream ends. */
        ws->is_closed = true;
        ws_queue_control(ws, LG_WS_CLOSE, p, len >= 2 ? 2 : 0);
        return 0;
    }
    return 1;
}

/* A broken frame (proto_ws_error_cb): -EMSGSIZE for a frame over the limit (even one that is
 * also wrong otherwise, once its mask and reserved bits pass), -EPROTO for anything else. */
static int ws_broken(void *arg, proto_ws_err_t err, uint64_t payload_len)
{
    NL_UNUSED(arg);
    if (err == PROTO_WS_ERR_FRAME || err == PROTO_WS_ERR_MASK || err == PROTO_WS_ERR_RSV)
        return -EPROTO;
    return err == PROTO_WS_ERR_TOO_BIG || payload_len > WS_MESSAGE_MAX ? -EMSGSIZE : -EPROTO;
}

/* Parses the bytes p[0..len) (and what the parser holds) until they run out or the input is
 * over (is_closed). Returns the bytes appended to in, or -errno. */
static ssize_t ws_parse(ws_state_t *ws, const uint8_t *p, size_t len, nl_buf_t *in)
{
    static const proto_ws_read_opts_t opts_base = {
        .max_message_bytes = WS_MESSAGE_MAX,
        .on_control = ws_control,
        .on_error = ws_broken,
    };
    proto_ws_read_opts_t opts = opts_base;
    opts.arg = ws;
    /* The parser takes every byte unless the input ended (a close frame) or broke: what is
     * left then is never read. */
    return proto_ws_read(&ws->rd, &opts, &p, &len, in);
}

static ssize_t ws_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    NL_UNUSED(c);
    ws_state_t *ws = state;
    /* Reads until a message (or part of one) came or the socket is drained: -EAGAIN must mean
     * drained (the fd is edge-triggered), so a read that brought only part of a frame's
     * header, a ping or a pong reads again. */
    for (;;) {
        if (ws->is_closed)
            return 0;
        /* Bytes that came with the answer first, then the socket. */
        ssize_t rc;
        if (nl_buf_readable(&ws->raw) > 0) {
            rc =
                ws_parse(ws, (const uint8_t *)nl_buf_peek(&ws->raw), nl_buf_readable(&ws->raw), in);
            nl_buf_retrieve_all(&ws->raw);
            nl_buf_release(&ws->raw);
        } else {
            ssize_t n = ws_lower_read(ws, ws_in_scratch, sizeof(ws_in_scratch));
            if (n == 0 && proto_ws_reader_is_inside(&ws->rd))
                return -ECONNRESET; /* the stream ended inside a frame */
            if (n == 0)
                ws->is_closed = true; /* the end of the stream, between two frames */
            if (n <= 0)
                return n;
            rc = ws_parse(ws, ws_in_scratch, (size_t)n, in);
        }
        if (rc != 0 || ws->is_closed)
            return rc;
    }
}

static bool ws_has_pending(const nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    const ws_state_t *ws = state;
    return nl_buf_readable(&ws->raw) > 0 || (ws->is_tls && lg_tls_conn_has_pending(&ws->tls));
}

/* --- output ----------------------------------------------------------------------------------- */

/* Where one frame's bytes sit in a write's scratch area and in netlib's stream. */
typedef struct out_mark_s {
    size_t at;        /* scratch offset of its header (or payload, for the continued frame) */
    size_t hdr_len;   /* 0 for the frame continued from the last write */
    size_t stream_at; /* stream offset of its varint (or payload) */
    size_t prefix_len;
    uint64_t left; /* payload bytes to go at its payload's start */
    uint64_t number;
    uint8_t mask[4];
    uint8_t mask_off;
} out_mark_t;

/* A read position over netlib's iovecs. */
typedef struct cursor_s {
    const struct iovec *iov;
    int iovcnt;
    int i;
    size_t off;
} cursor_t;

/* Reads the varint at the cursor without moving it. Returns 1 (*len, *bytes), 0 at the end of
 * the stream, -EPROTO when it is cut or too long (not a stream of whole frames). */
static int cursor_varint(const cursor_t *cur, uint64_t *len, size_t *bytes)
{
    uint64_t v = 0;
    size_t n = 0;
    int i = cur->i;
    size_t off = cur->off;
    for (; i < cur->iovcnt; i++, off = 0) {
        const uint8_t *p = cur->iov[i].iov_base;
        for (; off < cur->iov[i].iov_len; off++) {
            v |= (uint64_t)(p[off] & 0x7f) << (7 * n);
            n++;
            if (!(p[off] & 0x80)) {
                *len = v;
                *bytes = n;
                return 1;
            }
            if (n == PROTO_VARINT_MAX_BYTES)
                return -EPROTO;
        }
    }
    return n == 0 ? 0 : -EPROTO;
}

/* Copies up to max bytes from the cursor to out and moves it. Returns the bytes copied. */
static size_t cursor_copy(cursor_t *cur, uint8_t *out, size_t max)
{
    size_t done = 0;
    while (done < max && cur->i < cur->iovcnt) {
        const struct iovec *v = &cur->iov[cur->i];
        size_t k = v->iov_len - cur->off;
        if (k > max - done)
            k = max - done;
        if (out)
            memcpy(out + done, (const uint8_t *)v->iov_base + cur->off, k);
        done += k;
        cur->off += k;
        if (cur->off == v->iov_len) {
            cur->i++;
            cur->off = 0;
        }
    }
    return done;
}

/* What a write's scratch area holds. */
typedef struct out_batch_s {
    uint8_t *buf;
    size_t len;
    size_t own;    /* own bytes at the front (a header's rest, or a control frame) */
    bool is_ctl;   /* those are ctl's, else own's */
    size_t stream; /* stream bytes the batch holds, varints included */
    out_mark_t marks[WS_WRITE_FRAMES];
    size_t n_marks;
    /* The state after the whole batch is written. */
    uint64_t left;
    uint64_t frames;
    uint8_t mask[4];
    uint8_t mask_off;
} out_batch_t;

/* Builds a batch: own bytes, the continued frame's payload, then whole new frames (each
 * varint replaced by a masked header) while the scratch area has room. Returns 0 or -EPROTO. */
static int ws_out_build(ws_state_t *ws, cursor_t *cur, out_batch_t *b)
{
    b->buf = ws_out_scratch;
    b->len = 0;
    b->is_ctl = false;
    if (ws->own_len > 0) {
        memcpy(b->buf, ws->own, ws->own_len);
        b->len = ws->own_len;
    } else if (ws->ctl_len > 0 && ws->out_left == 0 && !ws->is_write_pending) {
        memcpy(b->buf, ws->ctl, ws->ctl_len);
        b->len = ws->ctl_len;
        b->is_ctl = true;
    }
    b->own = b->len;
    b->stream = 0;
    b->n_marks = 0;
    b->left = ws->out_left;
    b->frames = ws->frames;
    memcpy(b->mask, ws->mask, 4);
    b->mask_off = ws->mask_off;
    if (b->left > 0) { /* the frame the last write stopped in: its payload goes on */
        out_mark_t *m = &b->marks[b->n_marks++];
        *m = (out_mark_t){
            .at = b->len, .left = b->left, .number = UINT64_MAX, .mask_off = b->mask_off};
        memcpy(m->mask, b->mask, 4);
    }
    for (;;) {
        if (b->left > 0) {
            size_t want = WS_SCRATCH - b->len;
            if (want > b->left)
                want = (size_t)b->left;
            size_t k = cursor_copy(cur, b->buf + b->len, want);
            lg_ws_mask(b->buf + b->len, k, b->mask, b->mask_off);
            b->mask_off = (uint8_t)((b->mask_off + k) & 3);
            b->left -= k;
            b->len += k;
            b->stream += k;
            if (b->left > 0)
                return 0; /* the scratch area is full, or the stream ended */
        }
        if (b->n_marks == WS_WRITE_FRAMES || WS_SCRATCH - b->len < LG_WS_HEADER_MAX)
            return 0;
        uint64_t body;
        size_t prefix;
        int rc = cursor_varint(cur, &body, &prefix);
        if (rc <= 0)
            return rc;
        cursor_copy(cur, NULL, prefix);
        out_mark_t *m = &b->marks[b->n_marks++];
        *m = (out_mark_t){.at = b->len,
                          .stream_at = b->stream,
                          .prefix_len = prefix,
                          .left = body,
                          .number = b->frames};
        lg_ws_mask_key(ws->mask_seed, b->frames, m->mask);
        m->hdr_len = lg_ws_frame_header(b->buf + b->len, LG_WS_BINARY, body, m->mask);
        b->len += m->hdr_len;
        b->stream += prefix;
        b->frames++;
        b->left = body;
        memcpy(b->mask, m->mask, 4);
        b->mask_off = 0;
    }
}

/* The socket took w of the batch's bytes (w < len): the state for the frame it stopped in.
 * Returns the stream bytes taken. */
static size_t ws_out_settle_short(ws_state_t *ws, const out_batch_t *b, size_t w)
{
    size_t i = 0;
    while (i + 1 < b->n_marks && b->marks[i + 1].at <= w)
        i++;
    const out_mark_t *m = &b->marks[i];
    size_t payload_at = m->at + m->hdr_len;
    if (w < payload_at) {
        if (w == m->at) { /* the frame did not begin: as it was before the write */
            if (m->hdr_len > 0) {
                ws->out_left = 0;
                ws->frames = m->number;
            } else {
                ws->out_left = m->left;
                memcpy(ws->mask, m->mask, 4);
                ws->mask_off = m->mask_off;
            }
            return m->stream_at;
        }
        /* Part of the header went: the rest is ours to write first. */
        ws->own_len = (uint8_t)(payload_at - w);
        memcpy(ws->own, b->buf + w, ws->own_len);
        ws->out_left = m->left;
        ws->frames = m->number + 1;
        memcpy(ws->mask, m->mask, 4);
        ws->mask_off = 0;
        return m->stream_at + m->prefix_len;
    }
    size_t k = w - payload_at;
    ws->out_left = m->left - k;
    if (m->hdr_len > 0)
        ws->frames = m->number + 1;
    memcpy(ws->mask, m->mask, 4);
    ws->mask_off = (uint8_t)((m->mask_off + k) & 3);
    return m->stream_at + m->prefix_len + k;
}

static ssize_t ws_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    ws_state_t *ws = state;
    cursor_t cur = {.iov = iov, .iovcnt = iovcnt};
    out_batch_t b;
    if (ws_out_build(ws, &cur, &b) < 0)
        return -EPROTO; /* not a stream of whole frames: a bug above us */
    if (b.len == 0)
        return 0;
    ssize_t w = ws_lower_write(ws, b.buf, b.len);
    if (w < 0 && w != -EAGAIN)
        return w;
    size_t wrote = w > 0 ? (size_t)w : 0;
    ws->is_write_pending = ws->is_tls && wrote < b.len;
    /* Own bytes first: while some are left, nothing of the stream went. */
    size_t own = wrote < b.own ? wrote : b.own;
    if (b.is_ctl) {
        ws_ctl_sent(ws, own);
    } else {
        memmove(ws->own, ws->own + own, ws->own_len - own);
        ws->own_len = (uint8_t)(ws->own_len - own);
    }
    if (wrote < b.own)
        return -EAGAIN;
    if (wrote == b.len) {
        ws->out_left = b.left;
        ws->frames = b.frames;
        memcpy(ws->mask, b.mask, 4);
        ws->mask_off = b.mask_off;
        /* A control frame that waited for the end of a frame goes in the next flush. */
        if (ws->ctl_len > 0 && ws->out_left == 0)
            nl_conn_transport_want_write(c);
        return (ssize_t)b.stream;
    }
    size_t taken = ws_out_settle_short(ws, &b, wrote);
    return taken > 0 ? (ssize_t)taken : -EAGAIN;
}

/* The orderly close: a close frame (1000), then TLS's close_notify. */
static int ws_shutdown(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    ws_state_t *ws = state;
    /* netlib calls this once the queued output is written, so no frame is cut in two. */
    if (!ws->is_close_sent && !ws->is_closed && ws->out_left == 0 && ws->own_len == 0 &&
        !ws->is_write_pending) {
        static const uint8_t normal[2] = {0x03, 0xe8};
        ws->is_close_sent = true;
        ws_queue_control(ws, LG_WS_CLOSE, normal, sizeof(normal));
    }
    while (ws->is_close_sent && ws->ctl_len > 0) {
        ssize_t n = ws_lower_write(ws, ws->ctl, ws->ctl_len);
        if (n == -EAGAIN)
            return NL_TRANSPORT_WANT_WRITE;
        if (n < 0) {
            ws->ctl_len = ws->next_len = 0; /* the socket is gone: nothing more to say */
            break;
        }
        ws_ctl_sent(ws, (size_t)n);
    }
    return ws->is_tls ? lg_tls_conn_shutdown(&ws->tls) : NL_TRANSPORT_DONE;
}

static void ws_free(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    ws_state_t *ws = state;
    lg_transport_deadline_stop(&ws->deadline);
    if (ws->is_tls)
        lg_tls_conn_deinit(&ws->tls);
    nl_buf_deinit(&ws->raw);
    proto_ws_reader_deinit(&ws->rd);
    free(ws->hs);
    free(ws);
}

const nl_transport_t lg_ws_transport = {
    .name = "ws",
    .open = ws_open,
    .handshake = ws_handshake,
    .read = ws_read,
    .writev = ws_writev,
    .has_pending = ws_has_pending,
    .shutdown = ws_shutdown,
    .free = ws_free,
};
