/*
 * lg_wire: the receive fast path. A load generator that unpacks every Push with protobuf-c
 * (one arena allocation and free per message) spends about a microsecond per delivery and
 * becomes the bottleneck of a fan-out benchmark before herald does. lg_wire splits the
 * delimited stream itself and reads Push frames in place, without allocating; every other
 * frame (ConnectOk, SubscribeOk, Error, ...) goes through proto_frame_unpack as usual.
 *
 * The reader follows the protobuf wire format (varints, length-delimited fields, unknown
 * fields skipped) for exactly the fields herald.proto gives Frame.id, Frame.push and Push.
 *
 * Thread: pure functions, any thread. Ownership: results point into the caller's bytes.
 * Usage: rc = lg_wire_split(p, n, max, &hdr, &body); if (rc == 1) {
 *        if (lg_wire_push(p + hdr, body, &push) == 1) fast; else proto_frame_unpack(...); }
 */
#ifndef HERALD_LOADGEN_LG_WIRE_H
#define HERALD_LOADGEN_LG_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* A Push read in place. */
typedef struct lg_push_s {
    const uint8_t *channel;
    size_t channel_len;
    const uint8_t *payload;
    size_t payload_len;
    uint64_t offset;
} lg_push_t;

/* Reads the varint length prefix at the front of p[0..n).
 * Returns: 1 when a whole frame is present (*hdr_len prefix bytes, then *body_len bytes);
 * 0 when more bytes are needed; -EMSGSIZE when the length exceeds max_frame_bytes (known as
 * soon as the prefix is); -EPROTO for a prefix over 5 bytes or 32 bits. Thread: any. */
int lg_wire_split(const uint8_t *p, size_t n, size_t max_frame_bytes, size_t *hdr_len,
                  size_t *body_len);

/* Reads a serialized Frame body. Returns: 1 when it is a Push (filled into *out); 0 when it is
 * some other frame (use proto_frame_unpack); -EPROTO when the Push part is malformed.
 * Thread: any. Ownership: out points into body. */
int lg_wire_push(const uint8_t *body, size_t len, lg_push_t *out);

#endif
