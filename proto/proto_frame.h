/*
 * proto_frame: herald's frame codec. On the wire a frame is a varint length followed by one
 * serialized herald.Frame (proto/herald.proto), exactly as protobuf's delimited-stream
 * helpers write it, so a client in any language can use its stock protobuf runtime.
 *
 * Decoding is incremental: proto_frame_decode() looks at the readable bytes of a netlib
 * buffer and answers "need more bytes", "here is one frame" (consumed from the buffer) or a
 * typed error. A claimed length over the limit is refused as soon as the length prefix shows
 * it, before any byte of the body is awaited and before anything is allocated.
 *
 * Memory bound: a decoded frame lives in one arena. Before unpacking, the codec walks the
 * wire bytes once (checking the structure and that every string is UTF-8 without NUL) and
 * computes how much the unpacked structure will need; the arena is one allocation of that
 * size. Whatever the input, an arena never exceeds
 * PROTO_DECODE_MEM_FACTOR * frame_bytes + PROTO_DECODE_MEM_SLACK bytes (see PROTOCOL.md,
 * "Limits"); a Publish of n bytes typically takes n + ~200 bytes.
 *
 * Encoding packs straight into a buffer's writable space (proto_frame_append) or, for a Push
 * fanned out to many connections, into one reference-counted nl_block (proto_push_block).
 *
 * Thread: no shared state; every function may run on any thread, on objects that thread owns.
 * Ownership: a decoded frame belongs to the caller, who releases it with proto_frame_free();
 * encoders never keep a pointer to the frame they are given.
 * Usage: while ((rc = proto_frame_decode(&in, max, &f)) == 1) { handle(f);
 *        proto_frame_free(f); } if (rc < 0) { send Error + Disconnect; close; }
 */
#ifndef HERALD_PROTO_PROTO_FRAME_H
#define HERALD_PROTO_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "herald.pb-c.h"
#include "netlib/nl_block.h"
#include "netlib/nl_buf.h"

/* Longest varint length prefix accepted (a varint carries at most 64 bits in 10 bytes). */
#define PROTO_VARINT_MAX_BYTES 10
/* Default frame limit (serialized Frame, prefix excluded) for callers with no configuration. */
#define PROTO_DEFAULT_MAX_FRAME_BYTES (64u * 1024)
/* Bound on a decoded frame's memory: FACTOR * frame bytes + SLACK (see the header comment). */
#define PROTO_DECODE_MEM_FACTOR 80
#define PROTO_DECODE_MEM_SLACK 1024

/* Decoder errors. Negative like errno values, but far below any errno so both can travel in
 * one int: proto_frame_decode returns either. */
enum proto_err {
    PROTO_ERR_TOO_LARGE = -1001,   /* the length prefix claims more than max_frame_bytes */
    PROTO_ERR_BAD_VARINT = -1002,  /* prefix longer than 10 bytes or over 32 bits */
    PROTO_ERR_UNDECODABLE = -1003, /* the body is not a valid herald.Frame */
};

/* Returns a static name for a proto_err ("PROTO_ERR_TOO_LARGE") or, for any other negative
 * value, nl_strerror's text. Thread: any. Ownership: the string is static. */
const char *proto_err_str(int err);

/* Takes one complete frame from the front of in. max_frame_bytes bounds the serialized Frame
 * (the length value; the prefix itself is not counted).
 * Returns: 1 with *out set and the frame's bytes retrieved from in; 0 when in does not yet
 * hold a whole frame (nothing consumed, nothing allocated); PROTO_ERR_TOO_LARGE as soon as
 * the prefix read so far exceeds max_frame_bytes; PROTO_ERR_BAD_VARINT; PROTO_ERR_UNDECODABLE
 * (the body is malformed protobuf, has a field of the wrong wire type, or a string that is
 * not UTF-8 or contains NUL); -ENOMEM. On any error nothing is consumed: the stream cannot
 * be resynchronised and the caller closes the connection. in's max_bytes must leave room for
 * max_frame_bytes + PROTO_VARINT_MAX_BYTES, or a frame at the limit can never be completed.
 * Thread: the owner of in. Ownership: *out belongs to the caller; free it with
 * proto_frame_free(). */
int proto_frame_decode(nl_buf_t *in, size_t max_frame_bytes, Herald__Frame **out);

/* As proto_frame_decode, without consuming: on 1, *frame_bytes gets the frame's length on the
 * wire (prefix included), for the caller to nl_buf_retrieve once it has handled the frame (or
 * to leave in place and decode again later). Returns: as proto_frame_decode.
 * Thread: the owner of in. Ownership: *out belongs to the caller (proto_frame_free). */
int proto_frame_peek(const nl_buf_t *in, size_t max_frame_bytes, Herald__Frame **out,
                     size_t *frame_bytes);

/* The Frame.id of the first frame in `in`, read from its raw bytes without decoding the rest:
 * for an answer to a frame that proto_frame_decode refused as PROTO_ERR_UNDECODABLE. 0 when
 * the frame is not whole, its prefix is bad or over max_frame_bytes, or its body does not
 * begin with field 1 (every protobuf runtime writes set fields in number order).
 * Thread: the owner of in. */
uint64_t proto_frame_peek_id(const nl_buf_t *in, size_t max_frame_bytes);

/* Decodes one serialized Frame of len bytes (no length prefix) from data.
 * Returns: 0 with *out set; PROTO_ERR_UNDECODABLE; -ENOMEM. Thread: any.
 * Ownership: data is only read; *out belongs to the caller (proto_frame_free). */
int proto_frame_unpack(const uint8_t *data, size_t len, Herald__Frame **out);

/* Releases a frame returned by proto_frame_decode/proto_frame_unpack, all of its fields
 * included (one arena). NULL is a no-op. Passing any other frame aborts. Thread: any. */
void proto_frame_free(Herald__Frame *f);

/* Bytes of heap a decoded frame holds (its arena, headers included); for metrics and tests.
 * Thread: any. Ownership: f is only read. */
size_t proto_frame_mem_bytes(const Herald__Frame *f);

/* Bytes the delimited encoding of f takes: varint prefix plus the serialized Frame.
 * Thread: any. Ownership: f is only read. */
size_t proto_frame_encoded_size(const Herald__Frame *f);

/* The size of one element of a repeated field's array of this type, as protobuf-c lays it out
 * in a decoded message (pointers for strings and messages, ProtobufCBinaryData for bytes).
 * Used by the decoder's memory pre-walk and by tools that walk decoded messages. Thread: any. */
size_t proto_field_elt_bytes(ProtobufCType type);

/* Appends f, delimited (varint length + message), to out, packed directly into the buffer's
 * writable space. Returns: 0; -ENOBUFS when out would pass its max_bytes (nothing appended);
 * -ENOMEM; -EMSGSIZE when the message exceeds 4 GiB - 1. Thread: the owner of out.
 * Ownership: f is only read. */
int proto_frame_append(nl_buf_t *out, const Herald__Frame *f);

/* Encodes f, delimited, into a new block of exactly proto_frame_encoded_size(f) bytes.
 * Returns the block with one reference, or NULL on ENOMEM (or a message over 4 GiB - 1).
 * Thread: any. Ownership: the caller owns the reference (nl_block_unref). */
nl_block_t *proto_frame_block(const Herald__Frame *f);

/* Encodes Frame{id: 0, push: *push} once into a block for fan-out: every subscriber's output
 * queue takes a reference to the same bytes. One allocation. Returns NULL on ENOMEM.
 * Thread: any. Ownership: push is only read; the caller owns the returned reference. */
nl_block_t *proto_push_block(const Herald__Push *push);

/* Writes the header of a frame whose body (the packed Frame) is body_len bytes into out and
 * returns its length, at most PROTO_PREFIX_MAX: the varint prefix of the TCP stream, or another
 * transport's framing (a WebSocket frame header). */
#define PROTO_PREFIX_MAX 14
typedef size_t (*proto_prefix_cb)(uint8_t *out, size_t body_len);

/* As proto_frame_append, with prefix's header in place of the varint (NULL: the varint).
 * Returns: as proto_frame_append. Thread: any. */
int proto_frame_append_prefixed(nl_buf_t *out, const Herald__Frame *f, proto_prefix_cb prefix);

/* Writes v as a protobuf varint (a frame's length prefix) into out and returns its length.
 * Thread: any. */
size_t proto_varint_put(uint8_t out[PROTO_VARINT_MAX_BYTES], uint64_t v);

/* Writes epoch as the wire shows it, 16 lower-case hex digits, and a NUL into out (17 bytes).
 * Thread: any. */
void proto_epoch_str(uint64_t epoch, char out[17]);

/* Parses an epoch as the wire shows it (exactly 16 lower-case hex digits). Returns: 0 with
 * *epoch set; -EINVAL. Thread: any. */
int proto_epoch_parse(const char *text, uint64_t *epoch);

/* Returns a static lower-case name for a body case ("subscribe_ok"), "none" for NOT_SET and
 * "unknown" for a value the schema does not define. Thread: any. */
const char *proto_body_name(Herald__Frame__BodyCase body);

#endif
