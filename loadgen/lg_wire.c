/*
 * lg_wire: delimited-stream splitting and an in-place Push reader (see lg_wire.h).
 */
#include "lg_wire.h"

#include <errno.h>
#include <stdbool.h>

/* Field numbers from proto/herald.proto. */
#define FRAME_FIELD_PUSH 10
#define FRAME_BODY_FIRST 2
#define FRAME_BODY_LAST 17
#define PUSH_FIELD_CHANNEL 1
#define PUSH_FIELD_OFFSET 2
#define PUSH_FIELD_PAYLOAD 4

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

/* Reads a varint of at most 10 bytes. Returns bytes used, 0 when truncated, -1 when longer. */
static int read_varint(const uint8_t *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 10; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            *out = v;
            return (int)i + 1;
        }
    }
    return n >= 10 ? -1 : 0;
}

int lg_wire_split(const uint8_t *p, size_t n, size_t max_frame_bytes, size_t *hdr_len,
                  size_t *body_len)
{
    uint64_t len = 0;
    size_t i = 0;
    /* A 32-bit length fits in 5 varint bytes; check the limit as the prefix arrives. */
    for (;; i++) {
        if (i >= n)
            return 0;
        if (i >= 5)
            return -EPROTO;
        len |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (len > UINT32_MAX)
            return -EPROTO;
        if (len > max_frame_bytes)
            return -EMSGSIZE;
        if ((p[i] & 0x80) == 0)
            break;
    }
    *hdr_len = i + 1;
    *body_len = (size_t)len;
    return n - *hdr_len >= len ? 1 : 0;
}

/* One field: its number, wire type, and value (varint or the bytes of a LEN field). */
typedef struct field_s {
    uint32_t number;
    uint32_t type;
    uint64_t varint;
    const uint8_t *bytes;
    size_t len;
} field_t;

/* Reads the field at p[*pos..n) and advances *pos. Returns 1, or -EPROTO. */
static int next_field(const uint8_t *p, size_t n, size_t *pos, field_t *f)
{
    uint64_t key;
    int k = read_varint(p + *pos, n - *pos, &key);
    if (k <= 0 || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return -EPROTO;
    *pos += (size_t)k;
    f->number = (uint32_t)(key >> 3);
    f->type = (uint32_t)(key & 7);
    f->bytes = NULL;
    f->len = 0;
    switch (f->type) {
    case WT_VARINT:
        k = read_varint(p + *pos, n - *pos, &f->varint);
        if (k <= 0)
            return -EPROTO;
        *pos += (size_t)k;
        return 1;
    case WT_FIXED64:
    case WT_FIXED32: {
        size_t w = f->type == WT_FIXED64 ? 8 : 4;
        if (n - *pos < w)
            return -EPROTO;
        *pos += w;
        return 1;
    }
    case WT_LEN: {
        uint64_t len;
        k = read_varint(p + *pos, n - *pos, &len);
        if (k <= 0 || len > n - *pos - (size_t)k)
            return -EPROTO;
        *pos += (size_t)k;
        f->bytes = p + *pos;
        f->len = (size_t)len;
        *pos += (size_t)len;
        return 1;
    }
    default:
        return -EPROTO; /* groups (3, 4) and reserved types never appear in herald frames */
    }
}

static int read_push(const uint8_t *p, size_t n, lg_push_t *out)
{
    out->channel = NULL;
    out->channel_len = 0;
    out->payload = NULL;
    out->payload_len = 0;
    out->offset = 0;
    size_t pos = 0;
    while (pos < n) {
        field_t f;
        if (next_field(p, n, &pos, &f) < 0)
            return -EPROTO;
        if (f.number == PUSH_FIELD_CHANNEL && f.type == WT_LEN) {
            out->channel = f.bytes;
            out->channel_len = f.len;
        } else if (f.number == PUSH_FIELD_OFFSET && f.type == WT_VARINT) {
            out->offset = f.varint;
        } else if (f.number == PUSH_FIELD_PAYLOAD && f.type == WT_LEN) {
            out->payload = f.bytes;
            out->payload_len = f.len;
        } else if (f.number <= 5 &&
                   f.type != (f.number == 2 || f.number == 5 ? WT_VARINT : WT_LEN)) {
            return -EPROTO; /* a known field with the wrong wire type */
        }
    }
    return 1;
}

int lg_wire_push(const uint8_t *body, size_t len, lg_push_t *out)
{
    /* The last body field wins, as in protobuf's oneof semantics. */
    const uint8_t *push = NULL;
    size_t push_len = 0;
    bool is_push = false;
    size_t pos = 0;
    while (pos < len) {
        field_t f;
        if (next_field(body, len, &pos, &f) < 0)
            return 0; /* let proto_frame_unpack report the malformed frame */
        if (f.number < FRAME_BODY_FIRST || f.number > FRAME_BODY_LAST)
            continue;
        is_push = f.number == FRAME_FIELD_PUSH && f.type == WT_LEN;
        push = f.bytes;
        push_len = f.len;
    }
    if (!is_push)
        return 0;
    return read_push(push, push_len, out);
}
