/*
 * proto_ws: reads WebSocket frames (RFC 6455) into herald's frame stream, for both ends: the
 * server reading a client (gateway/transport/gw_ws.c) and herald-loadgen reading a server
 * (loadgen/lg_ws.c). Each binary message carries one herald.Frame (PROTOCOL.md, section 14);
 * the reader appends it to an input buffer behind a varint of its length, the form the TCP
 * stream has, so a session reads one format whatever the transport. An unfragmented message
 * goes straight in (its length is in its header); a fragmented one is put together first.
 * Control frames (close, ping, pong) go whole to the caller's on_control; what RFC 6455 or
 * herald.v1 forbids goes to on_error as a proto_ws_err_t, which each end maps to its answer
 * (the server to a close code, the client to an errno). Frames are parsed by libwslay, which
 * unmasks payloads and hands them over in pieces; writing frames is each end's own business.
 *
 * Memory. libwslay's parser context carries a 4 KiB read-ahead buffer, too much to keep per
 * idle connection. So each thread parses with one context of its own, and a reader takes a
 * context away only while it stops inside a frame (its bytes are in that context's buffer):
 * the bytes handed to the parser are counted against the bytes of the frames it finished, and
 * when they are equal the context holds nothing of the reader and goes back to the thread. An
 * idle reader is this struct; the buffers of a control frame or a fragmented message that
 * span reads have storage only while they do.
 *
 * Thread: a reader belongs to the thread that owns its connection and is only used there (the
 * context it holds comes from, and goes back to, that thread). The thread's own context is
 * made on first use and freed when the thread ends.
 * Ownership: the reader is a value in the caller's storage (proto_ws_reader_init/deinit); its
 * fields are touched only through proto_ws_*.
 * Usage: proto_ws_reader_init(&r) when the connection opens; per read, p/len = the bytes read,
 * n = proto_ws_read(&r, &opts, &p, &len, in); keep what is left in p/len if the reader
 * stopped for room; proto_ws_reader_deinit(&r) when the connection is freed.
 */
#ifndef HERALD_PROTO_PROTO_WS_H
#define HERALD_PROTO_PROTO_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "netlib/nl_buf.h"

/* Opcodes (RFC 6455 5.2) that reach on_control. */
#define PROTO_WS_CLOSE 0x8
#define PROTO_WS_PING 0x9
#define PROTO_WS_PONG 0xa

/* What a frame broke, in the order the reader checks a frame's header: the first that
 * applies is reported. */
typedef enum proto_ws_err_e {
    PROTO_WS_ERR_FRAME = 1, /* libwslay refused the header (a control frame over 125 bytes or
                               fragmented, a length in a longer form than it needs, ...) */
    PROTO_WS_ERR_MASK,      /* a client's frame unmasked, or a server's masked (RFC 6455 5.1) */
    PROTO_WS_ERR_RSV,       /* reserved bits set: no extension was agreed */
    PROTO_WS_ERR_TEXT,      /* a text message: herald.v1 speaks binary */
    PROTO_WS_ERR_NESTED,    /* a new message inside a fragmented one */
    PROTO_WS_ERR_TOO_BIG,   /* a message over max_message_bytes (a binary frame's header, or
                               a continuation's with the bytes before it) */
    PROTO_WS_ERR_ORPHAN,    /* a continuation without a message */
    PROTO_WS_ERR_OPCODE,    /* a reserved opcode */
} proto_ws_err_t;

/* A whole control frame came: opcode PROTO_WS_CLOSE, _PING or _PONG, its payload (at most
 * 125 bytes, unmasked) in payload[0..len), valid only during the call. Returns 1 to read on,
 * 0 when the input is over (the reader stops), or a negative errno (proto_ws_read returns it). */
typedef int (*proto_ws_control_cb)(void *arg, uint8_t opcode, const uint8_t *payload, size_t len);

/* A frame broke the protocol; payload_len is its declared length (0 for PROTO_WS_ERR_FRAME,
 * whose header was not read). Returns 0 when the input is over (the reader stops), or a
 * negative errno (proto_ws_read returns it). The reader must not be read again. */
typedef int (*proto_ws_error_cb)(void *arg, proto_ws_err_t err, uint64_t payload_len);

/* What one proto_ws_read needs besides the bytes. */
typedef struct proto_ws_read_opts_s {
    uint64_t max_message_bytes; /* the largest message, fragments summed */
    bool is_masked;             /* frames must come masked (the server reads a client) */
    bool is_paced;              /* a frame starts only while `in` has room for a message of
                                   max_message_bytes (with its varint); else the reader stops */
    proto_ws_control_cb on_control;
    proto_ws_error_cb on_error;
    void *arg; /* both callbacks' */
} proto_ws_read_opts_t;

/* One connection's reader. */
typedef struct proto_ws_reader_s {
    struct wslay_frame_context *ctx; /* its own parser while it is inside a frame */
    uint64_t fed;       /* bytes handed to the parser that no finished frame accounts for */
    uint64_t frame_off; /* payload bytes of the current frame seen so far */
    nl_buf_t msg;       /* a fragmented message being put together */
    uint8_t *ctl;       /* a control frame's payload while it spans reads; NULL otherwise */
    uint8_t ctl_len;
    bool is_in_message; /* msg holds a message begun */
    bool is_stopped;    /* the last read stopped for room (is_paced) */
} proto_ws_reader_t;

/* Initialises a reader without allocating. Thread: the owner. */
void proto_ws_reader_init(proto_ws_reader_t *r);

/* Frees what the reader holds (a parser context, a part of a message). Thread: the owner. */
void proto_ws_reader_deinit(proto_ws_reader_t *r);

/* Parses the bytes (*p)[0..*len), after what the reader's parser still holds, appending each
 * whole binary message to in behind a varint of its length and handing control frames and
 * errors to the callbacks, until the bytes run out, a callback says the input is over, or (with
 * is_paced) `in` has no room for another message. *p and *len are moved past the bytes the
 * parser took: what is left is the caller's to hand over again (after a stop for room) or to
 * drop (after the input ended).
 * Returns: the bytes appended to in (>= 0); -ENOMEM; -ENOBUFS when in is at its cap (never with
 * is_paced); a callback's negative errno.
 * Callbacks: on_control and on_error, before it returns.
 * Thread: the owner of r and in. Ownership: nothing is kept of *p. */
ssize_t proto_ws_read(proto_ws_reader_t *r, const proto_ws_read_opts_t *opts, const uint8_t **p,
                      size_t *len, nl_buf_t *in);

/* Whether the last proto_ws_read stopped for room (is_paced) with bytes of the next frame in
 * its parser or left to it: read again once the input has room, even with no new bytes. */
static inline bool proto_ws_reader_is_stopped(const proto_ws_reader_t *r)
{
    return r->is_stopped;
}

/* Whether the reader's parser holds bytes of a frame not finished: the stream may not end
 * here. */
static inline bool proto_ws_reader_is_inside(const proto_ws_reader_t *r)
{
    return r->fed > 0;
}

#endif /* HERALD_PROTO_PROTO_WS_H */
