/*
 * libFuzzer target for loadgen/lg_wire.c, the load generator's in-place reader of the frames
 * herald sends (clang -fsanitize=fuzzer,address,undefined).
 *
 * lg_wire is a second, hand-written reader of the same bytes proto_frame decodes, so the
 * target is differential: proto_frame (protobuf-c behind a strict wire walk) is the reference.
 *
 * Input layout: byte 0 picks the frame limit (1 << (b % 17), 1 B .. 64 KiB), the rest is the
 * byte stream a server would send. Frames are split off one by one with both splitters:
 *   - lg_wire_split and proto_frame_decode agree on the frame limit and on "need more bytes"
 *     (up to lg_wire's shorter prefix, 5 bytes against 10), and on where each frame ends;
 *   - for every body protobuf-c accepts, lg_wire_push says "Push" exactly when it is one, and
 *     then reads the same channel, offset and payload.
 * Where proto_frame refuses the body, lg_wire may answer anything but must stay in bounds.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lg_wire.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks lg_wire_push against protobuf-c on one serialized Frame. */
static void check_push(const uint8_t *body, size_t len)
{
    lg_push_t push;
    int rc = lg_wire_push(body, len, &push);
    NL_ASSERT(rc == 1 || rc == 0 || rc == -EPROTO);
    if (rc == 1) {
        /* Whatever it read lies inside the body. */
        NL_ASSERT(push.channel_len == 0 ||
                  (push.channel >= body && push.channel + push.channel_len <= body + len));
        NL_ASSERT(push.payload_len == 0 ||
                  (push.payload >= body && push.payload + push.payload_len <= body + len));
    }
    Herald__Frame *f = NULL;
    int prc = proto_frame_unpack(body, len, &f);
    NL_ASSERT(prc == 0 || prc == PROTO_ERR_UNDECODABLE);
    if (prc != 0)
        return;
    if (f->body_case != HERALD__FRAME__BODY_PUSH) {
        NL_ASSERT(rc == 0);
    } else {
        NL_ASSERT(rc == 1);
        const Herald__Push *p = f->push;
        size_t clen = strlen(p->channel);
        NL_ASSERT(push.channel_len == clen);
        NL_ASSERT(clen == 0 || memcmp(push.channel, p->channel, clen) == 0);
        NL_ASSERT(push.offset == p->offset);
        NL_ASSERT(push.payload_len == p->payload.len);
        NL_ASSERT(p->payload.len == 0 ||
                  memcmp(push.payload, p->payload.data, p->payload.len) == 0);
    }
    proto_frame_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t max_frame_bytes = (size_t)1 << (data[0] % 17);
    data++;
    size--;

    nl_buf_t b;
    nl_buf_init(&b, 0);
    NL_ASSERT(nl_buf_append(&b, data, size) == 0);
    size_t pos = 0;
    for (;;) {
        size_t hdr = 0;
        size_t body = 0;
        int rc = lg_wire_split(data + pos, size - pos, max_frame_bytes, &hdr, &body);
        size_t before = nl_buf_readable(&b);
        Herald__Frame *f = NULL;
        int prc = proto_frame_decode(&b, max_frame_bytes, &f);
        proto_frame_free(f);
        /* Past 5 prefix bytes lg_wire refuses (-EPROTO) where proto_frame, which reads a
         * padded prefix of up to 10 bytes, may still see a length over the limit. */
        if (rc == -EMSGSIZE)
            NL_ASSERT(prc == PROTO_ERR_TOO_LARGE);
        if (prc == PROTO_ERR_TOO_LARGE || prc == PROTO_ERR_BAD_VARINT)
            NL_ASSERT(rc == -EMSGSIZE || rc == -EPROTO);
        if (rc == 0)
            NL_ASSERT(prc == 0);
        if (rc != 1)
            break;
        NL_ASSERT(rc == 1 && hdr >= 1 && hdr <= 5 && body <= max_frame_bytes);
        NL_ASSERT(hdr + body <= size - pos);
        if (prc == 1)
            NL_ASSERT(before - nl_buf_readable(&b) == hdr + body);
        else
            NL_ASSERT(prc == PROTO_ERR_UNDECODABLE);
        check_push(data + pos + hdr, body);
        if (prc != 1)
            break;
        pos += hdr + body;
    }
    nl_buf_deinit(&b);
    return 0;
}
