/*
 * test_proto_ws: the WebSocket frame reader both ends share (proto/proto_ws.c). Frames are
 * built here byte by byte from RFC 6455 section 5.2, so the reader is checked against the RFC
 * rather than against itself: a table of streams with the messages, control frames and verdict
 * each must give, each fed whole and one byte per read; the parser lent to a reader only while
 * it stops inside a frame; and the stop for room.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "netlib/nl_buf.h"
#include "netlib/nl_common.h"
#include "proto_ws.h"

#define MAX_MESSAGE 64

/* Appends one frame: FIN, RSV1 when rsv, opcode, masked with 01 02 03 04 when is_masked. */
static size_t put_frame(uint8_t *out, bool is_fin, bool rsv, uint8_t opcode, bool is_masked,
                        const char *payload, size_t len)
{
    static const uint8_t key[4] = {1, 2, 3, 4};
    size_t n = 0;
    out[n++] = (uint8_t)((is_fin ? 0x80 : 0) | (rsv ? 0x40 : 0) | opcode);
    uint8_t m = is_masked ? 0x80 : 0;
    if (len < 126) {
        out[n++] = (uint8_t)(m | len);
    } else {
        out[n++] = (uint8_t)(m | 126);
        out[n++] = (uint8_t)(len >> 8);
        out[n++] = (uint8_t)len;
    }
    if (is_masked) {
        memcpy(out + n, key, 4);
        n += 4;
    }
    for (size_t i = 0; i < len; i++)
        out[n + i] = (uint8_t)((payload ? payload[i] : 'x') ^ (is_masked ? key[i & 3] : 0));
    return n + len;
}

/* What the callbacks saw. */
typedef struct seen_s {
    char control[64]; /* "9:hi 10: 8:.." opcode:payload per control frame */
    proto_ws_err_t err;
    int n_err;
} seen_t;

static int on_control(void *arg, uint8_t opcode, const uint8_t *p, size_t len)
{
    seen_t *s = arg;
    size_t at = strlen(s->control);
    snprintf(s->control + at, sizeof(s->control) - at, "%u:%.*s ", opcode, (int)len,
             (const char *)p);
    return opcode == PROTO_WS_CLOSE ? 0 : 1;
}

static int on_error(void *arg, proto_ws_err_t err, uint64_t payload_len)
{
    NL_UNUSED(payload_len);
    seen_t *s = arg;
    s->err = err;
    s->n_err++;
    return 0;
}

/* Feeds stream[0..len) step bytes per read (0: all at once) until the input is over or the
 * bytes run out. Returns the input's text: each message as "<len>:<bytes> ". */
static void feed(proto_ws_reader_t *r, bool is_masked, const uint8_t *stream, size_t len,
                 size_t step, seen_t *s, char *out, size_t out_len)
{
    nl_buf_t in;
    nl_buf_init(&in, 0);
    proto_ws_read_opts_t o = {.max_message_bytes = MAX_MESSAGE,
                              .is_masked = is_masked,
                              .on_control = on_control,
                              .on_error = on_error,
                              .arg = s};
    size_t off = 0;
    while (off < len && s->n_err == 0 && !strstr(s->control, "8:")) {
        size_t n = step == 0 || len - off < step ? len - off : step;
        const uint8_t *p = stream + off;
        size_t left = n;
        ssize_t got = proto_ws_read(r, &o, &p, &left, &in);
        assert_true(got >= 0);
        off += n;
    }
    out[0] = '\0';
    while (nl_buf_readable(&in) > 0) { /* every message is under 128 bytes: one varint byte */
        const uint8_t *b = (const uint8_t *)nl_buf_peek(&in);
        size_t at = strlen(out);
        snprintf(out + at, out_len - at, "%u:%.*s ", b[0], (int)b[0], (const char *)b + 1);
        nl_buf_retrieve(&in, 1 + (size_t)b[0]);
    }
    nl_buf_deinit(&in);
}

typedef struct row_s {
    const char *name;
    bool is_masked; /* the server's direction */
    size_t (*build)(uint8_t *out, bool is_masked);
    const char *messages;
    const char *control;
    proto_ws_err_t err; /* 0: none */
} row_t;

static size_t b_one(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x2, m, "abc", 3);
}
static size_t b_fragments(uint8_t *o, bool m)
{
    size_t n = put_frame(o, false, false, 0x2, m, "ab", 2);
    n += put_frame(o + n, true, false, 0x9, m, "hi", 2); /* a ping between fragments */
    return n + put_frame(o + n, true, false, 0x0, m, "c", 1);
}
static size_t b_empty(uint8_t *o, bool m)
{
    size_t n = put_frame(o, true, false, 0x2, m, "", 0);
    return n + put_frame(o + n, true, false, 0xa, m, "", 0);
}
static size_t b_close(uint8_t *o, bool m)
{
    size_t n = put_frame(o, true, false, 0x8, m, "\x03\xe8", 2);
    return n + put_frame(o + n, true, false, 0x2, m, "late", 4); /* never read */
}
static size_t b_unmasked(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x2, !m, "abc", 3);
}
static size_t b_rsv(uint8_t *o, bool m)
{
    return put_frame(o, true, true, 0x2, m, "abc", 3);
}
static size_t b_text(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x1, m, "abc", 3);
}
static size_t b_nested(uint8_t *o, bool m)
{
    size_t n = put_frame(o, false, false, 0x2, m, "ab", 2);
    return n + put_frame(o + n, true, false, 0x2, m, "c", 1);
}
static size_t b_too_big(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x2, m, NULL, MAX_MESSAGE + 1);
}
static size_t b_too_big_summed(uint8_t *o, bool m)
{
    size_t n = put_frame(o, false, false, 0x2, m, NULL, MAX_MESSAGE);
    return n + put_frame(o + n, true, false, 0x0, m, "c", 1);
}
static size_t b_orphan(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x0, m, "c", 1);
}
static size_t b_opcode(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x3, m, "c", 1);
}
static size_t b_long_ping(uint8_t *o, bool m)
{
    return put_frame(o, true, false, 0x9, m, NULL, 126); /* control frames stop at 125 */
}

static const row_t rows[] = {
    {"one message", true, b_one, "3:abc ", "", 0},
    {"fragments around a ping", true, b_fragments, "3:abc ", "9:hi ", 0},
    {"empty message, empty pong", true, b_empty, "0: ", "10: ", 0},
    {"close ends the input", true, b_close, "", "8:\x03\xe8 ", 0},
    {"client reads a server", false, b_one, "3:abc ", "", 0},
    {"unmasked at the server", true, b_unmasked, "", "", PROTO_WS_ERR_MASK},
    {"masked at the client", false, b_unmasked, "", "", PROTO_WS_ERR_MASK},
    {"reserved bits", true, b_rsv, "", "", PROTO_WS_ERR_RSV},
    {"text", true, b_text, "", "", PROTO_WS_ERR_TEXT},
    {"a message inside a message", true, b_nested, "", "", PROTO_WS_ERR_NESTED},
    {"over the limit", true, b_too_big, "", "", PROTO_WS_ERR_TOO_BIG},
    {"over the limit summed", true, b_too_big_summed, "", "", PROTO_WS_ERR_TOO_BIG},
    {"continuation alone", true, b_orphan, "", "", PROTO_WS_ERR_ORPHAN},
    {"reserved opcode", true, b_opcode, "", "", PROTO_WS_ERR_OPCODE},
    {"ping over 125 bytes", true, b_long_ping, "", "", PROTO_WS_ERR_FRAME},
};

static void test_proto_ws_table(void **state)
{
    NL_UNUSED(state);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t stream[512];
        size_t len = rows[i].build(stream, rows[i].is_masked);
        for (size_t step = 0; step <= 1; step++) {
            proto_ws_reader_t r;
            proto_ws_reader_init(&r);
            seen_t s = {0};
            char messages[256];
            feed(&r, rows[i].is_masked, stream, len, step, &s, messages, sizeof(messages));
            print_message("%s, step %zu\n", rows[i].name, step);
            assert_string_equal(messages, rows[i].messages);
            assert_string_equal(s.control, rows[i].control);
            assert_int_equal(s.n_err, rows[i].err ? 1 : 0);
            assert_int_equal(s.err, rows[i].err);
            proto_ws_reader_deinit(&r);
        }
    }
}

/* A reader holds a parser only while it stops inside a frame. */
static void test_proto_ws_parser_lent_inside_frame(void **state)
{
    NL_UNUSED(state);
    uint8_t stream[64];
    size_t len = b_one(stream, true);
    proto_ws_reader_t r;
    proto_ws_reader_init(&r);
    seen_t s = {0};
    nl_buf_t in;
    nl_buf_init(&in, 0);
    proto_ws_read_opts_t o = {.max_message_bytes = MAX_MESSAGE,
                              .is_masked = true,
                              .on_control = on_control,
                              .on_error = on_error,
                              .arg = &s};
    const uint8_t *p = stream;
    size_t n = 3; /* inside the header */
    assert_int_equal(proto_ws_read(&r, &o, &p, &n, &in), 0);
    assert_int_equal(n, 0);
    assert_true(proto_ws_reader_is_inside(&r));
    assert_non_null(r.ctx);
    n = len - 3;
    assert_int_equal(proto_ws_read(&r, &o, &p, &n, &in), 4); /* varint + "abc" */
    assert_false(proto_ws_reader_is_inside(&r));
    assert_null(r.ctx); /* back to the thread */
    nl_buf_deinit(&in);
    proto_ws_reader_deinit(&r);
}

/* is_paced: no frame starts without room for the largest message; the bytes stay the
 * caller's and a later read with room goes on. */
static void test_proto_ws_stops_for_room(void **state)
{
    NL_UNUSED(state);
    uint8_t stream[64];
    size_t len = b_one(stream, true);
    len += b_one(stream + len, true);
    proto_ws_reader_t r;
    proto_ws_reader_init(&r);
    seen_t s = {0};
    nl_buf_t in;
    nl_buf_init(&in, 20); /* room for one message of 8 with its varint, not after one */
    proto_ws_read_opts_t o = {.max_message_bytes = 8,
                              .is_masked = true,
                              .is_paced = true,
                              .on_control = on_control,
                              .on_error = on_error,
                              .arg = &s};
    const uint8_t *p = stream;
    size_t n = len;
    assert_int_equal(proto_ws_read(&r, &o, &p, &n, &in), 4);
    assert_true(proto_ws_reader_is_stopped(&r));
    /* libwslay reads ahead: the second frame is in the parser, which stays with the reader. */
    assert_int_equal(n, 0);
    assert_true(proto_ws_reader_is_inside(&r));
    assert_non_null(r.ctx);
    nl_buf_retrieve_all(&in);
    assert_int_equal(proto_ws_read(&r, &o, &p, &n, &in), 4);
    assert_true(proto_ws_reader_is_stopped(&r)); /* full again, but between frames */
    assert_false(proto_ws_reader_is_inside(&r));
    assert_null(r.ctx);
    nl_buf_retrieve_all(&in);
    assert_int_equal(proto_ws_read(&r, &o, &p, &n, &in), 0);
    assert_false(proto_ws_reader_is_stopped(&r));
    assert_int_equal(s.n_err, 0);
    nl_buf_deinit(&in);
    proto_ws_reader_deinit(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proto_ws_table),
        cmocka_unit_test(test_proto_ws_parser_lent_inside_frame),
        cmocka_unit_test(test_proto_ws_stops_for_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
