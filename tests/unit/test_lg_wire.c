/*
 * test_lg_wire: herald-loadgen's receive fast path (loadgen/lg_wire.c): the delimited-stream
 * splitter, table-driven over every prefix boundary, and the in-place Push reader, checked
 * against frames packed by protobuf-c itself and against hand-made malformed ones.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "herald.pb-c.h"
#include "lg_wire.h"

typedef struct split_row_s {
    const char *what;
    uint8_t bytes[8];
    size_t len;
    size_t max;
    int rc;
    size_t hdr;
    size_t body;
} split_row_t;

static const split_row_t split_rows[] = {
    {"empty", {0}, 0, 100, 0, 0, 0},
    {"zero-length frame", {0x00}, 1, 100, 1, 1, 0},
    {"short body", {0x05, 1, 2, 3}, 4, 100, 0, 0, 0},
    {"whole body", {0x03, 1, 2, 3}, 4, 100, 1, 1, 3},
    {"whole body plus more", {0x02, 1, 2, 3}, 4, 100, 1, 1, 2},
    {"truncated prefix", {0x80}, 1, 1000, 0, 0, 0},
    {"two-byte prefix, no body yet", {0x80, 0x01}, 2, 1000, 0, 0, 0},
    {"at the limit", {0x04, 1, 2, 3, 4}, 5, 4, 1, 1, 4},
    {"one over the limit", {0x05}, 1, 4, -EMSGSIZE, 0, 0},
    {"over the limit before the prefix ends", {0xff, 0xff, 0xff}, 3, 1000, -EMSGSIZE, 0, 0},
    {"six-byte prefix", {0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 6, 1u << 31, -EPROTO, 0, 0},
    {"over 32 bits", {0xff, 0xff, 0xff, 0xff, 0x7f}, 5, SIZE_MAX, -EPROTO, 0, 0},
};

static void test_lg_wire_split_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(split_rows) / sizeof(split_rows[0]); i++) {
        const split_row_t *r = &split_rows[i];
        size_t hdr = 99;
        size_t body = 99;
        int rc = lg_wire_split(r->bytes, r->len, r->max, &hdr, &body);
        print_message("row: %s\n", r->what);
        assert_int_equal(rc, r->rc);
        if (rc == 1) {
            assert_int_equal(hdr, r->hdr);
            assert_int_equal(body, r->body);
        }
    }
}

/* Packs f (no prefix) into buf; returns the length. */
static size_t pack(const Herald__Frame *f, uint8_t *buf, size_t cap)
{
    size_t n = herald__frame__get_packed_size(f);
    assert_true(n <= cap);
    assert_int_equal(herald__frame__pack(f, buf), n);
    return n;
}

static void test_lg_wire_push_matches_protobuf_c(void **state)
{
    (void)state;
    uint8_t payload[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    char channel[] = "lg:g:3";
    char epoch[] = "e1";
    Herald__Push push = HERALD__PUSH__INIT;
    push.channel = channel;
    push.offset = 300; /* a two-byte varint */
    push.epoch = epoch;
    push.payload.data = payload;
    push.payload.len = sizeof(payload);
    push.publish_time_ms = 1700000000000ull;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_PUSH;
    f.push = &push;
    uint8_t buf[256];
    size_t n = pack(&f, buf, sizeof(buf));

    lg_push_t out;
    assert_int_equal(lg_wire_push(buf, n, &out), 1);
    assert_int_equal(out.channel_len, strlen(channel));
    assert_memory_equal(out.channel, channel, strlen(channel));
    assert_int_equal(out.offset, 300);
    assert_int_equal(out.payload_len, sizeof(payload));
    assert_memory_equal(out.payload, payload, sizeof(payload));
}

static void test_lg_wire_other_frames_are_not_push(void **state)
{
    (void)state;
    uint8_t buf[64];
    Herald__PublishOk ok = HERALD__PUBLISH_OK__INIT;
    ok.offset = 7;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = 12;
    f.body_case = HERALD__FRAME__BODY_PUBLISH_OK;
    f.publish_ok = &ok;
    lg_push_t out;
    assert_int_equal(lg_wire_push(buf, pack(&f, buf, sizeof(buf)), &out), 0);

    Herald__Pong pong = HERALD__PONG__INIT;
    f.body_case = HERALD__FRAME__BODY_PONG;
    f.pong = &pong;
    assert_int_equal(lg_wire_push(buf, pack(&f, buf, sizeof(buf)), &out), 0);

    /* A frame with an id and no body at all. */
    f.body_case = HERALD__FRAME__BODY__NOT_SET;
    assert_int_equal(lg_wire_push(buf, pack(&f, buf, sizeof(buf)), &out), 0);
}

typedef struct raw_row_s {
    const char *what;
    uint8_t bytes[24];
    size_t len;
    int rc;
    uint64_t offset; /* when rc == 1 */
} raw_row_t;

/* Frame.push is field 10, wire type 2: key 0x52. Push.offset is field 2 varint: key 0x10. */
static const raw_row_t raw_rows[] = {
    {"empty push", {0x52, 0x00}, 2, 1, 0},
    {"offset only", {0x52, 0x02, 0x10, 0x05}, 4, 1, 5},
    {"unknown push field skipped", {0x52, 0x04, 0x48, 0x01, 0x10, 0x09}, 6, 1, 9},
    {"unknown frame field skipped", {0xa0, 0x01, 0x01, 0x52, 0x02, 0x10, 0x03}, 7, 1, 3},
    {"fixed32 and fixed64 skipped",
     {0x52, 0x10, 0x4d, 1, 2, 3, 4, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x02},
     18,
     1,
     2},
    {"truncated offset varint", {0x52, 0x02, 0x10, 0x80}, 4, -EPROTO, 0},
    {"offset with the wrong wire type", {0x52, 0x02, 0x12, 0x00}, 4, -EPROTO, 0},
    {"channel with the wrong wire type", {0x52, 0x02, 0x08, 0x01}, 4, -EPROTO, 0},
    {"push length past the frame", {0x52, 0x05, 0x10, 0x01}, 4, 0, 0},
    {"a later body wins", {0x52, 0x02, 0x10, 0x01, 0x62, 0x00}, 6, 0, 0},
    {"a later push wins", {0x62, 0x00, 0x52, 0x02, 0x10, 0x04}, 6, 1, 4},
    {"group wire type", {0x52, 0x01, 0x0b}, 3, -EPROTO, 0},
};

static void test_lg_wire_push_raw_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(raw_rows) / sizeof(raw_rows[0]); i++) {
        const raw_row_t *r = &raw_rows[i];
        lg_push_t out;
        print_message("row: %s\n", r->what);
        int rc = lg_wire_push(r->bytes, r->len, &out);
        assert_int_equal(rc, r->rc);
        if (rc == 1)
            assert_int_equal(out.offset, r->offset);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lg_wire_split_table),
        cmocka_unit_test(test_lg_wire_push_matches_protobuf_c),
        cmocka_unit_test(test_lg_wire_other_frames_are_not_push),
        cmocka_unit_test(test_lg_wire_push_raw_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
