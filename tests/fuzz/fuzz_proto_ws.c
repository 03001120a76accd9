/*
 * libFuzzer target for proto/proto_ws.c, the WebSocket frame reader herald's server and
 * herald-loadgen share (clang -fsanitize=fuzzer,address,undefined). WebSocket frames come
 * from the network, so every byte stream must give a bounded, well-formed result.
 *
 * Input layout: byte 0 picks the options (bit 0 masked frames required, bit 1 paced, bits 2-5
 * the message limit 1 << (b >> 2 & 15), 1 B .. 32 KiB), byte 1 the size of each read
 * (1 + b: 1..256 bytes); the rest is the byte stream, fed read after read as a connection
 * would, until it ends or the reader says the input is over.
 *
 * Checked on every read:
 *   - proto_ws_read returns the bytes it appended, or -ENOMEM / -ENOBUFS / the callback's
 *     error, and moves *p and *len only forward inside the read's bytes;
 *   - what it appended is messages, each behind its whole varint length and none over the
 *     limit (the last one may still be coming: a message's bytes are appended as they arrive);
 *   - control frames carry at most 125 bytes; after on_error (or a close) nothing is read;
 *   - a reader that goes on takes the whole read; only a paced one stops for room, and then
 *     gets its input drained and is read again until it goes on.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "netlib/nl_buf.h"
#include "netlib/nl_common.h"
#include "proto_ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz_s {
    bool is_over; /* a close or an error ended the input */
} fz_t;

static int fz_control(void *arg, uint8_t opcode, const uint8_t *payload, size_t len)
{
    fz_t *fz = arg;
    NL_ASSERT(!fz->is_over);
    NL_ASSERT(len <= 125);
    NL_ASSERT(len == 0 || payload != NULL);
    NL_ASSERT(opcode == PROTO_WS_CLOSE || opcode == PROTO_WS_PING || opcode == PROTO_WS_PONG);
    if (opcode == PROTO_WS_CLOSE) {
        fz->is_over = true;
        return 0;
    }
    return 1;
}

static int fz_error(void *arg, proto_ws_err_t err, uint64_t payload_len)
{
    NL_UNUSED(err);
    NL_UNUSED(payload_len);
    fz_t *fz = arg;
    NL_ASSERT(!fz->is_over);
    fz->is_over = true;
    return 0;
}

/* Takes the whole messages off in, checking each prefix and length against max. A message's
 * payload is appended as its frames arrive, so the last one may be partial: it stays. */
static void drain(nl_buf_t *in, uint64_t max)
{
    while (nl_buf_readable(in) > 0) {
        const uint8_t *b = (const uint8_t *)nl_buf_peek(in);
        size_t avail = nl_buf_readable(in);
        uint64_t v = 0;
        size_t k = 0;
        for (;; k++) {
            NL_ASSERT(k < 10); /* a prefix is at most 10 bytes */
            NL_ASSERT(k < avail); /* and written whole */
            v |= (uint64_t)(b[k] & 0x7f) << (7 * k);
            if (!(b[k] & 0x80))
                break;
        }
        NL_ASSERT(v <= max);
        if (k + 1 + v > avail)
            return; /* the rest of this message comes with later reads */
        nl_buf_retrieve(in, k + 1 + (size_t)v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    fz_t fz = {0};
    proto_ws_read_opts_t o = {
        .max_message_bytes = UINT64_C(1) << (data[0] >> 2 & 15),
        .is_masked = data[0] & 1,
        .is_paced = (data[0] & 2) != 0,
        .on_control = fz_control,
        .on_error = fz_error,
        .arg = &fz,
    };
    size_t step = 1 + (size_t)data[1];
    data += 2;
    size -= 2;
    proto_ws_reader_t r;
    proto_ws_reader_init(&r);
    nl_buf_t in;
    nl_buf_init(&in, 2 * o.max_message_bytes + 64);
    while (size > 0 && !fz.is_over) {
        const uint8_t *p = data;
        size_t chunk = size < step ? size : step;
        size_t len = chunk;
        for (int rounds = 0;; rounds++) {
            NL_ASSERT(rounds < 100000); /* a stop for room ends once the input is drained */
            size_t before = nl_buf_readable(&in);
            const uint8_t *was = p;
            ssize_t n = proto_ws_read(&r, &o, &p, &len, &in);
            NL_ASSERT(p >= was && (size_t)(p - data) + len == chunk);
            if (n < 0) {
                NL_ASSERT(n == -ENOMEM || (n == -ENOBUFS && !o.is_paced));
                fz.is_over = true;
                break;
            }
            NL_ASSERT((size_t)n == nl_buf_readable(&in) - before);
            drain(&in, o.max_message_bytes);
            if (fz.is_over || !proto_ws_reader_is_stopped(&r))
                break;
            NL_ASSERT(o.is_paced); /* only a paced reader stops for room */
        }
        if (fz.is_over)
            break;
        NL_ASSERT(len == 0); /* a reader that goes on takes the whole read */
        data += chunk;
        size -= chunk;
    }
    proto_ws_reader_deinit(&r);
    nl_buf_deinit(&in);
    return 0;
}
