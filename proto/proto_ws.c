/*
 * proto_ws: reading WebSocket frames with libwslay's frame parser (see proto_ws.h).
 *
 * libwslay pulls bytes through a recv callback whose user data is fixed when its context is
 * made. A context moves between a thread and its readers, so that user data is the thread's
 * feed: each proto_ws_read points it at the caller's bytes and its reader, and the callback
 * counts what it hands over in the reader's fed. When a frame ends, its header and payload
 * come off fed again; what remains is what the context holds of the next frame. The send
 * callback never sends: each end builds its own frames.
 */
#include "proto_ws.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <wslay/wslay.h>

#include "netlib/nl_common.h"
#include "proto_frame.h"

/* What the parser reads from: the bytes of the current read, and whose they are. */
typedef struct ws_feed_s {
    proto_ws_reader_t *r;
    const uint8_t *p;
    size_t len;
} ws_feed_t;

typedef struct ws_thread_s {
    ws_feed_t feed;
    wslay_frame_context_ptr spare; /* the thread's parser, when no reader holds it */
} ws_thread_t;

static pthread_key_t ws_thread_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;

static void ws_thread_free(void *arg)
{
    ws_thread_t *t = arg;
    if (t->spare)
        wslay_frame_context_free(t->spare);
    free(t);
}

static void ws_init_once(void)
{
    (void)pthread_key_create(&ws_thread_key, ws_thread_free);
}

/* The thread's parser state, made on first use and freed when the thread ends. NULL on
 * ENOMEM. */
static ws_thread_t *ws_thread(void)
{
    pthread_once(&ws_once, ws_init_once);
    ws_thread_t *t = pthread_getspecific(ws_thread_key);
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (t && pthread_setspecific(ws_thread_key, t) != 0) {
            free(t);
            t = NULL;
        }
    }
    return t;
}

/* libwslay asks for bytes: the feed's, counted as held by the parser until a frame ends. */
static ssize_t ws_recv_cb(uint8_t *buf, size_t len, int flags, void *user_data)
{
    NL_UNUSED(flags);
    ws_feed_t *f = user_data;
    size_t n = len < f->len ? len : f->len;
    if (n == 0)
        return -1; /* libwslay: want read */
    memcpy(buf, f->p, n);
    f->p += n;
    f->len -= n;
    f->r->fed += n;
    return (ssize_t)n;
}

static ssize_t ws_send_cb(const uint8_t *data, size_t len, int flags, void *user_data)
{
    NL_UNUSED(data);
    NL_UNUSED(len);
    NL_UNUSED(flags);
    NL_UNUSED(user_data);
    return -1; /* never sends: each end frames its output itself */
}

static const struct wslay_frame_callbacks ws_callbacks = {
    .send_callback = ws_send_cb,
    .recv_callback = ws_recv_cb,
};

/* The parser for r: its own if it holds one, else the thread's. NULL on ENOMEM. */
static wslay_frame_context_ptr ws_parser(ws_thread_t *t, const proto_ws_reader_t *r)
{
    if (r->ctx)
        return r->ctx;
    if (!t->spare && wslay_frame_context_init(&t->spare, &ws_callbacks, &t->feed) != 0)
        t->spare = NULL;
    return t->spare;
}

/* After parsing: a parser that stopped inside a frame, or after an error (its state is no
 * longer known), stays with r (proto_ws_reader_deinit frees it); a clean one goes back to the
 * thread (or is freed when the thread has one). */
static void ws_parser_settle(ws_thread_t *t, proto_ws_reader_t *r, wslay_frame_context_ptr ctx,
                             bool is_broken)
{
    bool is_inside = r->fed > 0 || is_broken;
    if (ctx == t->spare) {
        if (is_inside) {
            r->ctx = ctx;
            t->spare = NULL;
        }
        return;
    }
    if (!is_inside) {
        r->ctx = NULL;
        if (t->spare)
            wslay_frame_context_free(ctx);
        else
            t->spare = ctx;
    }
}

/* Header bytes of a frame with this payload length (libwslay refuses a length in a longer
 * form than it needs, so the length and the mask say). */
static uint64_t ws_header_len(uint64_t payload_len, bool is_masked)
{
    return 2 + (payload_len < 126 ? 0 : payload_len <= 0xffff ? 2 : 8) + (is_masked ? 4 : 0);
}

/* Appends a varint of len, then len bytes of payload (none when payload is NULL: they follow
 * piece by piece), all or nothing. Returns 0 or the buffer's -ENOMEM / -ENOBUFS. */
static int ws_put_message(nl_buf_t *in, uint64_t len, const void *payload)
{
    uint8_t prefix[PROTO_VARINT_MAX_BYTES];
    size_t n = proto_varint_put(prefix, len);
    int err = nl_buf_ensure_writable(in, n + (payload ? len : 0));
    if (err < 0)
        return err;
    memcpy(nl_buf_begin_write(in), prefix, n);
    nl_buf_has_written(in, n);
    if (payload && len)
        (void)nl_buf_append(in, payload, len);
    return 0;
}

/* The first piece of a frame: what RFC 6455 and herald.v1 allow. Returns 1 to go on, or what
 * the read goes on with (on_error's answer, or the buffer's error). */
static int ws_frame_start(proto_ws_reader_t *r, const proto_ws_read_opts_t *o,
                          const struct wslay_frame_iocb *io, nl_buf_t *in)
{
    proto_ws_err_t err;
    if (!io->mask != !o->is_masked)
        err = PROTO_WS_ERR_MASK;
    else if (io->rsv)
        err = PROTO_WS_ERR_RSV;
    else {
        switch (io->opcode) {
        case WSLAY_TEXT_FRAME:
            err = PROTO_WS_ERR_TEXT;
            break;
        case WSLAY_BINARY_FRAME:
            if (r->is_in_message) {
                err = PROTO_WS_ERR_NESTED;
                break;
            }
            if (io->payload_length > o->max_message_bytes) {
                err = PROTO_WS_ERR_TOO_BIG;
                break;
            }
            if (!io->fin) {
                r->is_in_message = true;
                return 1;
            }
            /* With is_paced, room was checked before the frame began: the payload follows
             * its length. */
            int rc = ws_put_message(in, io->payload_length, NULL);
            return rc < 0 ? rc : 1;
        case WSLAY_CONTINUATION_FRAME:
            if (!r->is_in_message) {
                err = PROTO_WS_ERR_ORPHAN;
                break;
            }
            if (nl_buf_readable(&r->msg) + io->payload_length > o->max_message_bytes) {
                err = PROTO_WS_ERR_TOO_BIG;
                break;
            }
            return 1;
        case WSLAY_CONNECTION_CLOSE:
        case WSLAY_PING:
        case WSLAY_PONG:
            return 1;
        default:
            err = PROTO_WS_ERR_OPCODE;
            break;
        }
    }
    return o->on_error(o->arg, err, io->payload_length);
}

/* One piece of a control frame (at most 125 bytes, never fragmented: libwslay checks), which
 * may span reads. Returns on_control's answer, 1 while the frame is not whole, or -ENOMEM. */
static int ws_control_piece(proto_ws_reader_t *r, const proto_ws_read_opts_t *o,
                            const struct wslay_frame_iocb *io, bool is_first, bool is_last)
{
    if (is_first && is_last)
        return o->on_control(o->arg, io->opcode, io->data, io->data_length);
    if (!r->ctl && (r->ctl = malloc(125)) == NULL)
        return -ENOMEM;
    memcpy(r->ctl + r->ctl_len, io->data, io->data_length);
    r->ctl_len = (uint8_t)(r->ctl_len + io->data_length);
    if (!is_last)
        return 1;
    int rc = o->on_control(o->arg, io->opcode, r->ctl, r->ctl_len);
    free(r->ctl);
    r->ctl = NULL;
    r->ctl_len = 0;
    return rc;
}

/* One piece of a frame, as libwslay hands it over. Returns 1 to go on, 0 when the input is
 * over, or -errno. */
static int ws_piece(proto_ws_reader_t *r, const proto_ws_read_opts_t *o,
                    const struct wslay_frame_iocb *io, nl_buf_t *in)
{
    bool is_first = r->frame_off == 0;
    if (is_first) {
        int rc = ws_frame_start(r, o, io, in);
        if (rc != 1)
            return rc;
    }
    r->frame_off += io->data_length;
    bool is_last = r->frame_off == io->payload_length;
    if (is_last) {
        r->fed -= ws_header_len(io->payload_length, o->is_masked) + io->payload_length;
        r->frame_off = 0;
    }
    if (io->opcode & 0x8)
        return ws_control_piece(r, o, io, is_first, is_last);
    if (!r->is_in_message) { /* an unfragmented binary frame: straight into the input */
        int err = io->data_length ? nl_buf_append(in, io->data, io->data_length) : 0;
        return err < 0 ? err : 1;
    }
    /* msg's cap (NL_BUF_DEFAULT_MAX) is far above any frame limit: only malloc fails here. */
    if (io->data_length && nl_buf_append(&r->msg, io->data, io->data_length) < 0)
        return -ENOMEM;
    if (!is_last || !io->fin)
        return 1;
    int err = ws_put_message(in, nl_buf_readable(&r->msg), nl_buf_peek(&r->msg));
    nl_buf_retrieve_all(&r->msg);
    nl_buf_release(&r->msg);
    r->is_in_message = false;
    return err < 0 ? err : 1;
}

/* Whether in has room for a message of the largest size, with its varint. */
static bool ws_has_room(const nl_buf_t *in, uint64_t max_message_bytes)
{
    return (uint64_t)nl_buf_readable(in) + max_message_bytes + PROTO_VARINT_MAX_BYTES <=
           nl_buf_max_bytes(in);
}

void proto_ws_reader_init(proto_ws_reader_t *r)
{
    memset(r, 0, sizeof(*r));
    nl_buf_init(&r->msg, 0);
}

void proto_ws_reader_deinit(proto_ws_reader_t *r)
{
    if (r->ctx)
        wslay_frame_context_free(r->ctx);
    r->ctx = NULL;
    nl_buf_deinit(&r->msg);
    free(r->ctl);
    r->ctl = NULL;
}

ssize_t proto_ws_read(proto_ws_reader_t *r, const proto_ws_read_opts_t *opts, const uint8_t **p,
                      size_t *len, nl_buf_t *in)
{
    ws_thread_t *t = ws_thread();
    if (!t)
        return -ENOMEM;
    wslay_frame_context_ptr ctx = ws_parser(t, r);
    if (!ctx)
        return -ENOMEM;
    t->feed = (ws_feed_t){.r = r, .p = *p, .len = *len};
    size_t before = nl_buf_readable(in);
    int rc = 1;
    r->is_stopped = false;
    for (;;) {
        /* A new frame starts only with room for the largest message. */
        if (opts->is_paced && r->frame_off == 0 && !ws_has_room(in, opts->max_message_bytes)) {
            r->is_stopped = true;
            break;
        }
        struct wslay_frame_iocb io;
        ssize_t n = wslay_frame_recv(ctx, &io);
        if (n == WSLAY_ERR_WANT_READ)
            break;
        rc = n < 0 ? opts->on_error(opts->arg, PROTO_WS_ERR_FRAME, 0) : ws_piece(r, opts, &io, in);
        if (rc <= 0)
            break;
    }
    ws_parser_settle(t, r, ctx, rc < 0);
    *p = t->feed.p;
    *len = t->feed.len;
    t->feed = (ws_feed_t){0};
    if (rc < 0)
        return rc;
    return (ssize_t)(nl_buf_readable(in) - before);
}
