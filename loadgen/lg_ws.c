/*
 * lg_ws: WebSocket client frames, handshake and transport (see lg_ws.h).
 *
 * Memory per connection: this struct (about 200 bytes) and, only while they hold bytes, the
 * buffer of a frame that arrived in part and that of a fragmented message. Reads land in a
 * per-thread scratch area, writes are built in another: an idle client holds no buffer.
 */
#include "lg_ws.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "lg_tls.h"
#include "lg_transport.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
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

int lg_ws_frame_parse(const uint8_t *p, size_t n, lg_ws_frame_t *f)
{
    if (n < 2)
        return 0;
    f->fin = (p[0] & 0x80) != 0;
    f->rsv = (uint8_t)((p[0] >> 4) & 0x7);
    f->opcode = p[0] & 0x0f;
    f->is_masked = (p[1] & 0x80) != 0;
    uint64_t len = p[1] & 0x7f;
    size_t hdr = 2;
    if (len == 126) {
        if (n < 4)
            return 0;
        len = (uint64_t)p[2] << 8 | p[3];
        hdr = 4;
    } else if (len == 127) {
        if (n < 10)
            return 0;
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | p[2 + i];
        if (len >> 63)
            return -EPROTO; /* RFC 6455 5.2: the most significant bit must be 0 */
        hdr = 10;
    }
    if (f->is_masked)
        hdr += 4;
    if (n < hdr)
        return 0;
    f->hdr_len = hdr;
    f->len = len;
    return 1;
}

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

void lg_ws_accept(const char *key, char out[LG_WS_ACCEPT_LEN + 1])
{
    char in[LG_WS_KEY_LEN + sizeof(WS_GUID)];
    size_t klen = strlen(key);
    if (klen > LG_WS_KEY_LEN)
        klen = LG_WS_KEY_LEN;
    memcpy(in, key, klen);
    memcpy(in + klen, WS_GUID, sizeof(WS_GUID) - 1);
    unsigned char sha[EVP_MAX_MD_SIZE];
    unsigned int sha_len = 0;
    if (EVP_Digest(in, klen + sizeof(WS_GUID) - 1, sha, &sha_len, EVP_sha1(), NULL) != 1 ||
        sha_len != 20) {
        out[0] = '\0'; /* matches no answer: the handshake fails as WS_BAD_ACCEPT */
        return;
    }
    EVP_EncodeBlock((unsigned char *)out, sha, 20);
}

size_t lg_ws_request(char *buf, size_t cap, const char *host, const char *key)
{
    int n = snprintf(buf, cap,
                     "GET " LG_WS_PATH " HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "Upgrade: websocket\r\n"
                     "Connection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: " LG_WS_SUBPROTOCOL "\r\n"
                     "User-Agent: herald-loadgen\r\n"
                     "\r\n",
                     host, key);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Whether the comma-separated list [v, v + n) holds token (case-insensitive). */
static bool list_has(const char *v, size_t n, const char *token)
{
    size_t tlen = strlen(token);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < n && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(v + start, token, tlen) == 0)
            return true;
    }
    return false;
}

/* What the answer's header said about the handshake. */
typedef struct answer_s {
    bool is_upgrade;
    bool is_connection;
    bool is_accept;
    bool is_protocol;
    bool has_extension;
} answer_t;

static void answer_header(answer_t *a, const char *name, size_t name_len, const char *v,
                          size_t vlen, const char *accept)
{
#define IS(s) (name_len == sizeof(s) - 1 && strncasecmp(name, s, name_len) == 0)
    if (IS("upgrade"))
        a->is_upgrade = vlen == 9 && strncasecmp(v, "websocket", 9) == 0;
    else if (IS("connection"))
        a->is_connection = list_has(v, vlen, "upgrade");
    else if (IS("sec-websocket-accept"))
        a->is_accept = vlen == LG_WS_ACCEPT_LEN && memcmp(v, accept, vlen) == 0;
    else if (IS("sec-websocket-protocol"))
        a->is_protocol =
            vlen == sizeof(LG_WS_SUBPROTOCOL) - 1 && memcmp(v, LG_WS_SUBPROTOCOL, vlen) == 0;
    else if (IS("sec-websocket-extensions"))
        a->has_extension = true;
#undef IS
}

int lg_ws_check_response(const char *p, size_t n, const char *key, size_t *hdr_len,
                         const char **reason)
{
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    if (!end)
        return 0;
    *hdr_len = (size_t)(end - p) + 4;
    const char *eol = memmem(p, n, "\r\n", 2);
    /* "HTTP/1.1 101 Switching Protocols": the code is the second field. */
    if ((size_t)(eol - p) < 12 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ') {
        *reason = "WS_BAD_RESPONSE";
        return -EPROTO;
    }
    if (strncmp(p + 9, "101", 3) != 0 || (eol - p > 12 && p[12] != ' ')) {
        *reason = "WS_UPGRADE_REFUSED";
        return -EPROTO;
    }
    char accept[LG_WS_ACCEPT_LEN + 1];
    lg_ws_accept(key, accept);
    answer_t a = {0};
    for (const char *line = eol + 2; line < end;) {
        const char *next = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
        const char *colon = memchr(line, ':', (size_t)(next - line));
        if (!colon) {
            *reason = "WS_BAD_RESPONSE";
            return -EPROTO;
        }
        const char *v = colon + 1;
        const char *vend = next;
        while (v < vend && (*v == ' ' || *v == '\t'))
            v++;
        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
            vend--;
        answer_header(&a, line, (size_t)(colon - line), v, (size_t)(vend - v), accept);
        line = next + 2;
    }
    if (!a.is_upgrade || !a.is_connection)
        *reason = "WS_BAD_UPGRADE";
    else if (!a.is_accept)
        *reason = "WS_BAD_ACCEPT";
    else if (!a.is_protocol)
        *reason = "WS_BAD_SUBPROTOCOL";
    else if (a.has_extension)
        *reason = "WS_BAD_EXTENSION";
    else
        return 1;
    return -EPROTO;
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
    bool is_in_message;    /* a fragmented message is being put together in msg */
    bool is_write_pending; /* TLS: a write stopped short, its bytes must come first again */
    bool is_close_sent;    /* shutdown queued our close frame */
    uint8_t phase;         /* WS_* above */
    char key[LG_WS_KEY_LEN + 1];
    char *hs; /* the request being written, then the answer being read */
    uint32_t hs_len;
    uint32_t hs_off;
    nl_buf_t raw; /* server bytes after the last whole frame */
    nl_buf_t msg; /* a fragmented message so far */

    /* Output. out_left payload bytes of the current frame are still to come from netlib's
     * stream, masked with mask from byte mask_off on. own holds what of a frame header the
     * socket did not take; ctl a control frame (pong, close) that goes between two frames. */
    uint64_t out_left;
    uint64_t frames;    /* frames whose header went out: the next one's number */
    uint64_t mask_seed; /* from RAND_bytes: each frame's key is mixed from it and the number */
    uint8_t mask[4];
    uint8_t mask_off;
    uint8_t own_len;
    uint8_t ctl_len;
    uint8_t own[LG_WS_HEADER_MAX];
    uint8_t ctl[WS_CONTROL_MAX];
} ws_state_t;

static _Thread_local uint8_t ws_in_scratch[WS_SCRATCH];
static _Thread_local uint8_t ws_out_scratch[WS_SCRATCH];

/* Frame n's mask key: splitmix64 of the seed and n. Drawn again on a retry, the same. */
static void ws_mask_key(const ws_state_t *ws, uint64_t n, uint8_t key[4])
{
    uint64_t z = ws->mask_seed + (n + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    memcpy(key, &z, 4);
}

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

/* Queues a control frame for the next write between frames (a newer pong replaces an older
 * one, as RFC 6455 5.5.3 allows). */
static void ws_queue_control(ws_state_t *ws, uint8_t opcode, const uint8_t *payload, size_t len)
{
    uint8_t key[4];
    if (len > 125)
        len = 125;
    ws_mask_key(ws, ~ws->frames, key); /* not a data frame's number: no retry builds it */
    size_t h = lg_ws_frame_header(ws->ctl, opcode, len, key);
    memcpy(ws->ctl + h, payload, len);
    lg_ws_mask(ws->ctl + h, len, key, 0);
    ws->ctl_len = (uint8_t)(h + len);
    nl_conn_transport_want_write(ws->c);
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
    nl_buf_init(&ws->msg, 0);
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

/* Appends a whole message to the input as the TCP stream carries it: varint, then bytes. */
static int ws_deliver(nl_buf_t *in, const uint8_t *payload, size_t len)
{
    uint8_t prefix[PROTO_VARINT_MAX_BYTES];
    size_t n = proto_varint_put(prefix, len);
    int err = nl_buf_ensure_writable(in, n + len);
    if (err < 0)
        return err;
    memcpy(nl_buf_begin_write(in), prefix, n);
    if (len)
        memcpy((uint8_t *)nl_buf_begin_write(in) + n, payload, len);
    nl_buf_has_written(in, n + len);
    return 0;
}

/* One whole frame. Returns 0 or -errno. */
static int ws_frame(ws_state_t *ws, const lg_ws_frame_t *f, const uint8_t *p, nl_buf_t *in)
{
    if (f->opcode & 0x8) { /* control: final, at most 125 bytes (RFC 6455 5.5) */
        if (!f->fin || f->len > 125)
            return -EPROTO;
        if (f->opcode == LG_WS_PING) {
            ws_queue_control(ws, LG_WS_PONG, p, (size_t)f->len);
            return 0;
        }
        if (f->opcode == LG_WS_PONG)
            return 0;
        if (f->opcode != LG_WS_CLOSE)
            return -EPROTO;
        /* The server's close: echo its code, and the stream ends. */
        ws->is_closed = true;
        ws_queue_control(ws, LG_WS_CLOSE, p, f->len >= 2 ? 2 : 0);
        return 0;
    }
    switch (f->opcode) {
    case LG_WS_BINARY:
        if (ws->is_in_message)
            return -EPROTO;
        if (f->fin)
            return ws_deliver(in, p, (size_t)f->len);
        ws->is_in_message = true;
        return nl_buf_append(&ws->msg, p, (size_t)f->len);
    case LG_WS_CONTINUATION: {
        if (!ws->is_in_message)
            return -EPROTO;
        if (nl_buf_readable(&ws->msg) + f->len > WS_MESSAGE_MAX)
            return -EMSGSIZE;
        int err = nl_buf_append(&ws->msg, p, (size_t)f->len);
        if (err < 0 || !f->fin)
            return err;
        err = ws_deliver(in, (const uint8_t *)nl_buf_peek(&ws->msg), nl_buf_readable(&ws->msg));
        nl_buf_retrieve_all(&ws->msg);
        nl_buf_release(&ws->msg);
        ws->is_in_message = false;
        return err;
    }
    default: /* text, or a reserved opcode: herald.v1 speaks binary only */
        return -EPROTO;
    }
}

/* Handles the whole frames at p[0..n). Returns the bytes appended to in, or -errno;
 * *used: the bytes of the frames handled (a frame in part stays). */
static ssize_t ws_parse(ws_state_t *ws, const uint8_t *p, size_t n, nl_buf_t *in, size_t *used)
{
    size_t before = nl_buf_readable(in);
    size_t pos = 0;
    while (!ws->is_closed) {
        lg_ws_frame_t f;
        int rc = lg_ws_frame_parse(p + pos, n - pos, &f);
        if (rc == 0)
            break;
        if (rc < 0 || f.is_masked || f.rsv)
            return -EPROTO; /* a server never masks (RFC 6455 5.1), and we asked no extension */
        if (f.len > WS_MESSAGE_MAX)
            return -EMSGSIZE;
        if (n - pos - f.hdr_len < f.len)
            break;
        rc = ws_frame(ws, &f, p + pos + f.hdr_len, in);
        if (rc < 0)
            return rc;
        pos += f.hdr_len + (size_t)f.len;
    }
    *used = pos;
    return (ssize_t)(nl_buf_readable(in) - before);
}

/* Whether raw holds a whole frame (left by the handshake's read). */
static bool ws_raw_has_frame(const ws_state_t *ws)
{
    lg_ws_frame_t f;
    size_t n = nl_buf_readable(&ws->raw);
    return lg_ws_frame_parse((const uint8_t *)nl_buf_peek(&ws->raw), n, &f) == 1 &&
           n - f.hdr_len >= f.len;
}

/* Reads and parses once: from raw when it holds part of a frame (the next read continues it
 * there), else through the thread's scratch area, the rest of which goes to raw. Returns the
 * bytes appended to in (0: none yet, read again; or the end of the stream, which sets
 * is_closed), or -EAGAIN, -errno. */
static ssize_t ws_read_once(ws_state_t *ws, nl_buf_t *in)
{
    size_t used = 0;
    ssize_t rc;
    if (nl_buf_readable(&ws->raw) > 0) {
        if (!ws_raw_has_frame(ws)) {
            if (nl_buf_ensure_writable(&ws->raw, 16384) < 0)
                return -ENOMEM;
            ssize_t n = ws_lower_read(ws, nl_buf_begin_write(&ws->raw), nl_buf_writable(&ws->raw));
            if (n <= 0)
                return n == 0 ? -ECONNRESET : n; /* the stream ended inside a frame */
            nl_buf_has_written(&ws->raw, (size_t)n);
        }
        rc = ws_parse(ws, (const uint8_t *)nl_buf_peek(&ws->raw), nl_buf_readable(&ws->raw), in,
                      &used);
        nl_buf_retrieve(&ws->raw, used);
        if (nl_buf_readable(&ws->raw) == 0)
            nl_buf_release(&ws->raw);
        return rc;
    }
    ssize_t n = ws_lower_read(ws, ws_in_scratch, sizeof(ws_in_scratch));
    if (n == 0)
        ws->is_closed = true; /* the end of the stream, between two frames */
    if (n <= 0)
        return n;
    rc = ws_parse(ws, ws_in_scratch, (size_t)n, in, &used);
    if (rc >= 0 && used < (size_t)n && !ws->is_closed &&
        nl_buf_append(&ws->raw, ws_in_scratch + used, (size_t)n - used) < 0)
        return -ENOMEM;
    return rc;
}

static ssize_t ws_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    NL_UNUSED(c);
    ws_state_t *ws = state;
    /* Reads until a message came or the socket is drained: -EAGAIN must mean drained (the fd
     * is edge-triggered), so a read that brought only part of a frame, a ping or a pong reads
     * again. */
    for (;;) {
        if (ws->is_closed)
            return 0;
        ssize_t rc = ws_read_once(ws, in);
        if (rc != 0 || ws->is_closed)
            return rc;
    }
}

static bool ws_has_pending(const nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    const ws_state_t *ws = state;
    return ws_raw_has_frame(ws) || (ws->is_tls && lg_tls_conn_has_pending(&ws->tls));
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
        ws_mask_key(ws, b->frames, m->mask);
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
    uint8_t *from = b.is_ctl ? ws->ctl : ws->own;
    uint8_t *count = b.is_ctl ? &ws->ctl_len : &ws->own_len;
    memmove(from, from + own, *count - own);
    *count = (uint8_t)(*count - own);
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
            ws->ctl_len = 0; /* the socket is gone: nothing more to say */
            break;
        }
        memmove(ws->ctl, ws->ctl + n, ws->ctl_len - (size_t)n);
        ws->ctl_len = (uint8_t)(ws->ctl_len - (size_t)n);
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
    nl_buf_deinit(&ws->msg);
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
