/*
 * libFuzzer target for proto_frame_decode and proto_frame_peek_id (clang
 * -fsanitize=fuzzer,address,undefined).
 *
 * Input layout: byte 0 picks the frame limit (1 << (b % 17), 1 B .. 64 KiB), byte 1 the
 * feeding step (1 + b % 32 bytes per append, or everything at once when b is 0), the rest is
 * the byte stream a client would send. The stream is fed to the decoder step by step, as a
 * socket would deliver it, and decoded until it needs more bytes or reports an error.
 *
 * Beyond "no crash, no leak, no UB" it checks the codec's promises:
 *   - need-more consumes nothing; an error consumes nothing;
 *   - a decoded frame's memory stays within PROTO_DECODE_MEM_FACTOR * len + SLACK;
 *   - a decoded frame re-encodes to bytes that decode again and re-encode identically.
 * The seed corpus (tests/fuzz/corpus_proto_frame/) is written by make_corpus_proto_frame.py.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "netlib/nl_common.h"
#include "proto_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Encodes f, decodes the bytes again, and checks the second encoding equals the first. */
static void check_reencode(const Herald__Frame *f)
{
    nl_buf_t once;
    nl_buf_t twice;
    nl_buf_init(&once, 0);
    nl_buf_init(&twice, 0);
    NL_ASSERT(proto_frame_append(&once, f) == 0);
    size_t len = nl_buf_readable(&once);
    NL_ASSERT(len == proto_frame_encoded_size(f));

    Herald__Frame *again = NULL;
    NL_ASSERT(proto_frame_decode(&once, SIZE_MAX, &again) == 1);
    NL_ASSERT(nl_buf_readable(&once) == 0);
    NL_ASSERT(proto_frame_append(&twice, again) == 0);
    NL_ASSERT(nl_buf_readable(&twice) == len);
    proto_frame_free(again);

    /* once was fully consumed: encode f again to compare with the second round. */
    NL_ASSERT(proto_frame_append(&once, f) == 0);
    NL_ASSERT(memcmp(nl_buf_peek(&once), nl_buf_peek(&twice), len) == 0);
    nl_buf_deinit(&once);
    nl_buf_deinit(&twice);
}

/* Decodes everything in b; returns the last result (0 or a negative error). */
static int drain(nl_buf_t *b, size_t max_frame_bytes)
{
    for (;;) {
        size_t before = nl_buf_readable(b);
        /* The id reader for refused frames looks at the same bytes and consumes nothing. */
        (void)proto_frame_peek_id(b, max_frame_bytes);
        NL_ASSERT(nl_buf_readable(b) == before);
        Herald__Frame *f = NULL;
        int rc = proto_frame_decode(b, max_frame_bytes, &f);
        if (rc != 1) {
            NL_ASSERT(f == NULL);
            NL_ASSERT(nl_buf_readable(b) == before);
            return rc;
        }
        size_t used = before - nl_buf_readable(b);
        NL_ASSERT(used >= 1 && used <= max_frame_bytes + PROTO_VARINT_MAX_BYTES);
        NL_ASSERT(proto_frame_mem_bytes(f) <=
                  (size_t)PROTO_DECODE_MEM_FACTOR * used + PROTO_DECODE_MEM_SLACK);
        check_reencode(f);
        proto_frame_free(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max_frame_bytes = (size_t)1 << (data[0] % 17);
    size_t step = data[1] == 0 ? size : 1 + (size_t)(data[1] % 32);
    data += 2;
    size -= 2;

    nl_buf_t b;
    nl_buf_init(&b, 0);
    int rc = 0;
    for (size_t pos = 0; pos < size && rc == 0;) {
        size_t n = size - pos < step ? size - pos : step;
        NL_ASSERT(nl_buf_append(&b, data + pos, n) == 0);
        pos += n;
        rc = drain(&b, max_frame_bytes);
    }
    NL_ASSERT(rc == 0 || rc == PROTO_ERR_TOO_LARGE || rc == PROTO_ERR_BAD_VARINT ||
              rc == PROTO_ERR_UNDECODABLE);
    nl_buf_deinit(&b);
    return 0;
}
