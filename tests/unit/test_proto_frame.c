/*
 * Tests for proto/proto_frame.c: round trip of every frame kind, every frame split at every
 * byte boundary, the length prefix's boundaries (table-driven, STYLE.md §9), malformed bodies
 * (table-driven), the decoded-memory bound, and the encoders' error paths.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netlib/nl_common.h"
#include "proto_frame.h"

#define KIND_COUNT 16
#define MAX_FRAME 65536u

/* Storage for one sample frame of each kind, built on the caller's stack. */
typedef struct sample_s {
    Herald__Frame frame;
    Herald__Connect connect;
    Herald__ConnectOk connect_ok;
    Herald__Subscribe subscribe;
    Herald__SubscribeOk subscribe_ok;
    Herald__Unsubscribe unsubscribe;
    Herald__UnsubscribeOk unsubscribe_ok;
    Herald__Publish publish;
    Herald__PublishOk publish_ok;
    Herald__Push push[3];
    Herald__Push *push_ptr[3];
    Herald__Ping ping;
    Herald__Pong pong;
    Herald__PresenceRequest presence_request;
    Herald__PresenceResponse presence_response;
    Herald__ClientInfo info[2];
    Herald__ClientInfo *info_ptr[2];
    Herald__Error error;
    Herald__Disconnect disconnect;
    Herald__PresenceEvent presence_event;
    uint8_t payload[300];
} sample_t;

static void sample_push(Herald__Push *p, const char *chan, uint64_t offset, uint8_t *payload,
                        size_t len)
{
    herald__push__init(p);
    p->channel = (char *)(uintptr_t)chan;
    p->offset = offset;
    p->epoch = (char *)"e-7f3a";
    p->payload.data = payload;
    p->payload.len = len;
    p->publish_time_ms = 1735700000123ull;
}

static void sample_requests(sample_t *s, Herald__Frame *f, int kind)
{
    switch (kind) {
    case 0:
        herald__connect__init(&s->connect);
        s->connect.token = (char *)"eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl";
        s->connect.client_name = (char *)"test";
        s->connect.client_version = (char *)"1.0.0";
        f->body_case = HERALD__FRAME__BODY_CONNECT;
        f->connect = &s->connect;
        break;
    case 2:
        herald__subscribe__init(&s->subscribe);
        s->subscribe.channel = (char *)"chat:lobby";
        s->subscribe.recover = 1;
        s->subscribe.offset = 41;
        s->subscribe.epoch = (char *)"e-7f3a";
        f->body_case = HERALD__FRAME__BODY_SUBSCRIBE;
        f->subscribe = &s->subscribe;
        break;
    case 4:
        herald__unsubscribe__init(&s->unsubscribe);
        s->unsubscribe.channel = (char *)"chat:lobby";
        f->body_case = HERALD__FRAME__BODY_UNSUBSCRIBE;
        f->unsubscribe = &s->unsubscribe;
        break;
    case 6:
        herald__publish__init(&s->publish);
        s->publish.channel = (char *)"news";
        s->publish.payload.data = s->payload;
        s->publish.payload.len = sizeof s->payload;
        f->body_case = HERALD__FRAME__BODY_PUBLISH;
        f->publish = &s->publish;
        break;
    case 9:
        herald__ping__init(&s->ping);
        f->body_case = HERALD__FRAME__BODY_PING;
        f->ping = &s->ping;
        break;
    case 11:
        herald__presence_request__init(&s->presence_request);
        s->presence_request.channel = (char *)"chat:lobby";
        f->body_case = HERALD__FRAME__BODY_PRESENCE_REQUEST;
        f->presence_request = &s->presence_request;
        break;
    default:
        fail_msg("kind %d is not a request", kind);
    }
}

static void sample_replies(sample_t *s, Herald__Frame *f, int kind)
{
    switch (kind) {
    case 1:
        herald__connect_ok__init(&s->connect_ok);
        s->connect_ok.client_id = (char *)"n1-42";
        s->connect_ok.node_id = (char *)"n1";
        s->connect_ok.ping_interval_ms = 25000;
        s->connect_ok.idle_timeout_ms = 75000;
        s->connect_ok.user_id = (char *)"user-9";
        s->connect_ok.max_frame_bytes = MAX_FRAME;
        f->body_case = HERALD__FRAME__BODY_CONNECT_OK;
        f->connect_ok = &s->connect_ok;
        break;
    case 3:
        herald__subscribe_ok__init(&s->subscribe_ok);
        for (int i = 0; i < 3; i++) {
            sample_push(&s->push[i], "chat:lobby", 42 + (uint64_t)i, s->payload, 10);
            s->push_ptr[i] = &s->push[i];
        }
        s->subscribe_ok.recovered = 1;
        s->subscribe_ok.n_publications = 3;
        s->subscribe_ok.publications = s->push_ptr;
        s->subscribe_ok.offset = 44;
        s->subscribe_ok.epoch = (char *)"e-7f3a";
        s->subscribe_ok.recoverable = 1;
        f->body_case = HERALD__FRAME__BODY_SUBSCRIBE_OK;
        f->subscribe_ok = &s->subscribe_ok;
        break;
    case 5:
        herald__unsubscribe_ok__init(&s->unsubscribe_ok);
        f->body_case = HERALD__FRAME__BODY_UNSUBSCRIBE_OK;
        f->unsubscribe_ok = &s->unsubscribe_ok;
        break;
    case 7:
        herald__publish_ok__init(&s->publish_ok);
        s->publish_ok.offset = 1ull << 40;
        s->publish_ok.epoch = (char *)"e-7f3a";
        f->body_case = HERALD__FRAME__BODY_PUBLISH_OK;
        f->publish_ok = &s->publish_ok;
        break;
    case 10:
        herald__pong__init(&s->pong);
        f->body_case = HERALD__FRAME__BODY_PONG;
        f->pong = &s->pong;
        break;
    case 12:
        herald__presence_response__init(&s->presence_response);
        for (int i = 0; i < 2; i++) {
            herald__client_info__init(&s->info[i]);
            s->info[i].user_id = (char *)(i ? "user-2" : "user-1");
            s->info[i].client_id = (char *)(i ? "n2-7" : "n1-3");
            s->info_ptr[i] = &s->info[i];
        }
        s->presence_response.channel = (char *)"chat:lobby";
        s->presence_response.n_clients = 2;
        s->presence_response.clients = s->info_ptr;
        s->presence_response.num_clients = 2;
        s->presence_response.num_users = 2;
        f->body_case = HERALD__FRAME__BODY_PRESENCE_RESPONSE;
        f->presence_response = &s->presence_response;
        break;
    default:
        fail_msg("kind %d is not a reply", kind);
    }
}

/* Builds the sample frame of kind 0..KIND_COUNT-1 (every body case, in tag order). */
static Herald__Frame *sample_frame(sample_t *s, int kind)
{
    Herald__Frame *f = &s->frame;
    herald__frame__init(f);
    for (size_t i = 0; i < sizeof s->payload; i++)
        s->payload[i] = (uint8_t)(i * 7 + 1);
    f->id = 1000 + (uint64_t)kind;
    switch (kind) {
    case 0:
    case 2:
    case 4:
    case 6:
    case 9:
    case 11:
        sample_requests(s, f, kind);
        break;
    case 8:
        f->id = 0;
        sample_push(&s->push[0], "news", 7, s->payload, 100);
        f->body_case = HERALD__FRAME__BODY_PUSH;
        f->push = &s->push[0];
        break;
    case 13:
        herald__error__init(&s->error);
        s->error.code = HERALD__ERROR__CODE__RATE_LIMITED;
        s->error.text = (char *)"slow down";
        s->error.retry_after_ms = 1500;
        f->body_case = HERALD__FRAME__BODY_ERROR;
        f->error = &s->error;
        break;
    case 14:
        f->id = 0;
        herald__disconnect__init(&s->disconnect);
        s->disconnect.code = HERALD__DISCONNECT__CODE__SHUTDOWN;
        s->disconnect.reason = (char *)"draining";
        s->disconnect.reconnect = 1;
        s->disconnect.reconnect_delay_ms = 2000;
        f->body_case = HERALD__FRAME__BODY_DISCONNECT;
        f->disconnect = &s->disconnect;
        break;
    case 15:
        f->id = 0;
        herald__presence_event__init(&s->presence_event);
        herald__client_info__init(&s->info[0]);
        s->info[0].user_id = (char *)"user-1";
        s->info[0].client_id = (char *)"n1-3";
        s->info[0].connected_at_ms = 1735700000123ull;
        s->info_ptr[0] = &s->info[0];
        s->presence_event.channel = (char *)"chat:lobby";
        s->presence_event.n_left = 1;
        s->presence_event.left = s->info_ptr;
        f->body_case = HERALD__FRAME__BODY_PRESENCE_EVENT;
        f->presence_event = &s->presence_event;
        break;
    default:
        sample_replies(s, f, kind);
    }
    return f;
}

/* Encodes f delimited into a malloc'ed array; *len gets its size. */
static uint8_t *encode(const Herald__Frame *f, size_t *len)
{
    nl_buf_t b;
    nl_buf_init(&b, 0);
    assert_int_equal(proto_frame_append(&b, f), 0);
    *len = nl_buf_readable(&b);
    assert_int_equal(*len, proto_frame_encoded_size(f));
    uint8_t *out = malloc(*len);
    assert_non_null(out);
    memcpy(out, nl_buf_peek(&b), *len);
    nl_buf_deinit(&b);
    return out;
}

/* Asserts that two frames serialize to the same bytes (protobuf-c packs deterministically,
 * in field order, so equal bytes mean equal frames). */
static void assert_same_frame(const Herald__Frame *a, const Herald__Frame *b)
{
    size_t la;
    size_t lb;
    uint8_t *ea = encode(a, &la);
    uint8_t *eb = encode(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(ea, eb, la);
    free(ea);
    free(eb);
}

static void test_proto_frame_round_trip_every_kind(void **state)
{
    (void)state;
    for (int kind = 0; kind < KIND_COUNT; kind++) {
        sample_t s;
        Herald__Frame *f = sample_frame(&s, kind);
        nl_buf_t b;
        nl_buf_init(&b, 0);
        assert_int_equal(proto_frame_append(&b, f), 0);
        Herald__Frame *got = NULL;
        assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 1);
        assert_int_equal(nl_buf_readable(&b), 0);
        assert_int_equal(got->id, f->id);
        assert_int_equal(got->body_case, f->body_case);
        assert_string_not_equal(proto_body_name(got->body_case), "unknown");
        assert_same_frame(f, got);
        proto_frame_free(got);
        nl_buf_deinit(&b);
    }
}

static void test_proto_frame_round_trip_fields(void **state)
{
    (void)state;
    sample_t s;
    nl_buf_t b;
    nl_buf_init(&b, 0);
    assert_int_equal(proto_frame_append(&b, sample_frame(&s, 3)), 0);
    assert_int_equal(proto_frame_append(&b, sample_frame(&s, 6)), 0);
    Herald__Frame *ok = NULL;
    Herald__Frame *pub = NULL;
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &ok), 1);
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &pub), 1);
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &pub), 0);

    assert_int_equal(ok->body_case, HERALD__FRAME__BODY_SUBSCRIBE_OK);
    assert_true(ok->subscribe_ok->recovered);
    assert_int_equal(ok->subscribe_ok->n_publications, 3);
    assert_int_equal(ok->subscribe_ok->publications[2]->offset, 44);
    assert_string_equal(ok->subscribe_ok->publications[2]->channel, "chat:lobby");
    assert_string_equal(ok->subscribe_ok->epoch, "e-7f3a");

    assert_string_equal(pub->publish->channel, "news");
    assert_int_equal(pub->publish->payload.len, sizeof s.payload);
    assert_memory_equal(pub->publish->payload.data, s.payload, sizeof s.payload);
    /* A Publish costs little more than its own size (the arena is sized from the walk). */
    assert_true(proto_frame_mem_bytes(pub) < proto_frame_encoded_size(pub) + 512);
    proto_frame_free(ok);
    proto_frame_free(pub);
    nl_buf_deinit(&b);
}

/* Feeds [0, cut) then [cut, n): need-more until complete, then exactly the frame. */
static void split_once(const uint8_t *wire, size_t n, size_t cut, const Herald__Frame *want)
{
    nl_buf_t b;
    nl_buf_init(&b, 0);
    Herald__Frame *got = NULL;
    if (cut > 0)
        assert_int_equal(nl_buf_append(&b, wire, cut), 0);
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 0);
    assert_null(got);
    assert_int_equal(nl_buf_readable(&b), cut);
    assert_int_equal(nl_buf_append(&b, wire + cut, n - cut), 0);
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 1);
    assert_int_equal(nl_buf_readable(&b), 0);
    assert_same_frame(want, got);
    proto_frame_free(got);
    nl_buf_deinit(&b);
}

static void test_proto_frame_split_every_byte(void **state)
{
    (void)state;
    for (int kind = 0; kind < KIND_COUNT; kind++) {
        sample_t s;
        Herald__Frame *f = sample_frame(&s, kind);
        size_t n;
        uint8_t *wire = encode(f, &n);
        for (size_t cut = 0; cut < n; cut++)
            split_once(wire, n, cut, f);

        /* And one byte at a time, with a second frame queued behind the first. */
        nl_buf_t b;
        nl_buf_init(&b, 0);
        Herald__Frame *got = NULL;
        for (size_t i = 0; i + 1 < n; i++) {
            assert_int_equal(nl_buf_append(&b, wire + i, 1), 0);
            assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 0);
        }
        assert_int_equal(nl_buf_append(&b, wire + n - 1, 1), 0);
        assert_int_equal(nl_buf_append(&b, wire, 1), 0);
        assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 1);
        assert_int_equal(nl_buf_readable(&b), 1);
        assert_same_frame(f, got);
        proto_frame_free(got);
        nl_buf_deinit(&b);
        free(wire);
    }
}

/* Length prefix boundaries. Each row: the bytes in the buffer, the length they declare (for
 * the reader; ~0 when malformed), the limit, the expected return and, on 1, the bytes
 * consumed. The frames here have empty bodies, so a complete prefix of 0 decodes. */
typedef struct prefix_row_s {
    uint8_t bytes[12];
    size_t n;
    uint64_t declared;
    size_t max_frame_bytes;
    int want_rc;
    size_t want_consumed;
} prefix_row_t;

static const prefix_row_t prefix_rows[] = {
    {{0}, 0, ~0ull, 100, 0, 0},                          /* nothing yet */
    {{0x00}, 1, 0, 100, 1, 1},                           /* empty Frame */
    {{0x00}, 1, 0, 0, 1, 1},                             /* limit 0 still allows 0 */
    {{0x7f}, 1, 127, 127, 0, 0},                         /* at the limit: wait */
    {{0x7f}, 1, 127, 126, PROTO_ERR_TOO_LARGE, 0},       /* one over */
    {{0x80}, 1, ~0ull, 100, 0, 0},                       /* prefix incomplete */
    {{0x80, 0x01}, 2, 128, 128, 0, 0},                   /* 2-byte prefix, wait */
    {{0x80, 0x01}, 2, 128, 127, PROTO_ERR_TOO_LARGE, 0}, /* 2-byte prefix, over */
    {{0xe5}, 1, ~0ull, 100, PROTO_ERR_TOO_LARGE, 0},     /* >= 101 before it ends */
    {{0xff, 0x7f}, 2, 16383, 16383, 0, 0},               /* largest 2-byte value */
    {{0x80, 0x80, 0x01}, 3, 16384, 16383, PROTO_ERR_TOO_LARGE, 0},
    {{0x80, 0x00}, 2, 0, 100, 1, 2}, /* non-canonical 0 */
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 10, 0, 100, 1, 10},
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, 9, ~0ull, 100, 0, 0},
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
     10,
     ~0ull,
     100,
     PROTO_ERR_BAD_VARINT,
     0}, /* 10 bytes, no end */
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
     11,
     ~0ull,
     100,
     PROTO_ERR_BAD_VARINT,
     0},                                                                /* 11 bytes */
    {{0xff, 0xff, 0xff, 0xff, 0x0f}, 5, 0xffffffffull, SIZE_MAX, 0, 0}, /* 2^32-1: wait */
    {{0xff, 0xff, 0xff, 0xff, 0x1f}, 5, 0x1ffffffffull, SIZE_MAX, PROTO_ERR_BAD_VARINT, 0},
    {{0x80, 0x80, 0x80, 0x80, 0x10}, 5, 1ull << 32, SIZE_MAX, PROTO_ERR_BAD_VARINT, 0},
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 6, 1ull << 35, SIZE_MAX, PROTO_ERR_BAD_VARINT, 0},
    {{0xff, 0xff, 0xff, 0xff, 0x0f}, 5, 0xffffffffull, MAX_FRAME, PROTO_ERR_TOO_LARGE, 0},
};

/* A plain varint reader, to check each row's declared length against its bytes. Returns
 * false when the bytes hold no complete varint of at most 10 bytes. */
static bool reference_varint(const uint8_t *p, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n && i < 10; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0)
            return true;
    }
    return false;
}

static void test_proto_frame_prefix_boundaries(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof prefix_rows / sizeof prefix_rows[0]; i++) {
        const prefix_row_t *r = &prefix_rows[i];
        uint64_t v;
        if (reference_varint(r->bytes, r->n, &v))
            assert_int_equal(v, r->declared);
        else
            assert_int_equal(r->declared, ~0ull);
        nl_buf_t b;
        nl_buf_init(&b, 0);
        if (r->n > 0)
            assert_int_equal(nl_buf_append(&b, r->bytes, r->n), 0);
        Herald__Frame *got = NULL;
        int rc = proto_frame_decode(&b, r->max_frame_bytes, &got);
        if (rc != r->want_rc)
            fail_msg("row %zu: rc %d (%s), want %d", i, rc, proto_err_str(rc), r->want_rc);
        if (rc == 1) {
            assert_int_equal(r->n - nl_buf_readable(&b), r->want_consumed);
            assert_int_equal(got->body_case, HERALD__FRAME__BODY__NOT_SET);
            proto_frame_free(got);
        } else {
            /* Need-more and errors consume nothing and allocate nothing. */
            assert_int_equal(nl_buf_readable(&b), r->n);
            assert_null(got);
        }
        nl_buf_deinit(&b);
    }
}

/* Bodies (prefix added by the test). Each row: the body bytes, the expected return, and on
 * 1 the body case decoded. */
typedef struct body_row_s {
    const char *what;
    uint8_t bytes[12];
    size_t n;
    int want_rc;
    Herald__Frame__BodyCase want_body;
} body_row_t;

static const body_row_t body_rows[] = {
    {"channel 0xff", {0x22, 0x03, 0x0a, 0x01, 0xff}, 5, PROTO_ERR_UNDECODABLE, 0},
    {"channel NUL", {0x22, 0x03, 0x0a, 0x01, 0x00}, 5, PROTO_ERR_UNDECODABLE, 0},
    {"overlong NUL", {0x22, 0x04, 0x0a, 0x02, 0xc0, 0x80}, 6, PROTO_ERR_UNDECODABLE, 0},
    {"surrogate", {0x22, 0x05, 0x0a, 0x03, 0xed, 0xa0, 0x80}, 7, PROTO_ERR_UNDECODABLE, 0},
    {"> U+10FFFF", {0x22, 0x06, 0x0a, 0x04, 0xf4, 0x90, 0x80, 0x80}, 8, PROTO_ERR_UNDECODABLE, 0},
    {"cut UTF-8", {0x22, 0x03, 0x0a, 0x01, 0xe2}, 5, PROTO_ERR_UNDECODABLE, 0},
    {"emoji",
     {0x22, 0x06, 0x0a, 0x04, 0xf0, 0x9f, 0x98, 0x80},
     8,
     1,
     HERALD__FRAME__BODY_SUBSCRIBE},
    {"string past sub", {0x22, 0x02, 0x0a, 0x05}, 4, PROTO_ERR_UNDECODABLE, 0},
    {"sub past frame", {0x22, 0x05, 0x0a}, 3, PROTO_ERR_UNDECODABLE, 0},
    {"group", {0x0b}, 1, PROTO_ERR_UNDECODABLE, 0},
    {"wire type 7", {0x0f}, 1, PROTO_ERR_UNDECODABLE, 0},
    {"tag 0", {0x00}, 1, PROTO_ERR_UNDECODABLE, 0},
    {"varint missing", {0x08}, 1, PROTO_ERR_UNDECODABLE, 0},
    {"varint cut", {0x08, 0x80}, 2, PROTO_ERR_UNDECODABLE, 0},
    {"varint 11 bytes",
     {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
     12,
     PROTO_ERR_UNDECODABLE,
     0},
    {"id as bytes", {0x0a, 0x00}, 2, PROTO_ERR_UNDECODABLE, 0},
    {"bool as fixed64", {0x22, 0x02, 0x11, 0x01}, 4, PROTO_ERR_UNDECODABLE, 0},
    {"recover = 1", {0x22, 0x02, 0x10, 0x01}, 4, 1, HERALD__FRAME__BODY_SUBSCRIBE},
    {"unknown field", {0xa2, 0x06, 0x01, 0x41, 0x5a, 0x00}, 6, 1, HERALD__FRAME__BODY_PING},
    {"two pings", {0x5a, 0x00, 0x5a, 0x00}, 4, 1, HERALD__FRAME__BODY_PING},
    {"ping then pong", {0x5a, 0x00, 0x62, 0x00}, 4, 1, HERALD__FRAME__BODY_PONG},
    {"payload 0xff", {0x42, 0x03, 0x12, 0x01, 0xff}, 5, 1, HERALD__FRAME__BODY_PUBLISH},
    {"push cut", {0x52, 0x02, 0x22, 0x03}, 4, PROTO_ERR_UNDECODABLE, 0},
    {"tag over 2^29", {0xf8, 0xff, 0xff, 0xff, 0x7f, 0x00}, 6, PROTO_ERR_UNDECODABLE, 0},
};

static void test_proto_frame_malformed_bodies(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof body_rows / sizeof body_rows[0]; i++) {
        const body_row_t *r = &body_rows[i];
        nl_buf_t b;
        nl_buf_init(&b, 0);
        uint8_t prefix = (uint8_t)r->n;
        assert_int_equal(nl_buf_append(&b, &prefix, 1), 0);
        assert_int_equal(nl_buf_append(&b, r->bytes, r->n), 0);
        Herald__Frame *got = NULL;
        int rc = proto_frame_decode(&b, MAX_FRAME, &got);
        if (rc != r->want_rc)
            fail_msg("%s: rc %d (%s), want %d", r->what, rc, proto_err_str(rc), r->want_rc);
        if (rc == 1) {
            assert_int_equal(got->body_case, r->want_body);
            assert_int_equal(nl_buf_readable(&b), 0);
            proto_frame_free(got);
        } else {
            assert_int_equal(nl_buf_readable(&b), r->n + 1);
        }
        nl_buf_deinit(&b);
    }
}

static void test_proto_frame_unknown_fields_kept(void **state)
{
    (void)state;
    /* Frame{id: 5, field 100: "A", ping: {}}: a newer peer's field is skipped, not fatal. */
    static const uint8_t body[] = {0x08, 0x05, 0xa2, 0x06, 0x01, 0x41, 0x5a, 0x00};
    Herald__Frame *f = NULL;
    assert_int_equal(proto_frame_unpack(body, sizeof body, &f), 0);
    assert_int_equal(f->id, 5);
    assert_int_equal(f->body_case, HERALD__FRAME__BODY_PING);
    assert_int_equal(f->base.n_unknown_fields, 1);
    assert_int_equal(f->base.unknown_fields[0].tag, 100);
    proto_frame_free(f);
    proto_frame_free(NULL);
}

static void test_proto_frame_repeated_member_merged(void **state)
{
    (void)state;
    /* Frame{id: 7, subscribe: {channel: "a"}, subscribe: {join_leave: true}} is, to protobuf,
     * one Subscribe with both fields; protobuf-c alone would keep only the second. */
    static const uint8_t twice[] = {0x08, 0x07, 0x22, 0x03, 0x0a, 0x01, 0x61,
                                    0x22, 0x02, 0x28, 0x01};
    Herald__Frame *f = NULL;
    assert_int_equal(proto_frame_unpack(twice, sizeof twice, &f), 0);
    assert_int_equal(f->id, 7);
    assert_int_equal(f->body_case, HERALD__FRAME__BODY_SUBSCRIBE);
    assert_string_equal(f->subscribe->channel, "a");
    assert_true(f->subscribe->join_leave);
    proto_frame_free(f);

    /* A later occurrence wins field by field: channel "a" then channel "b" is "b", and the
     * id between the two occurrences stays (non-member fields are untouched). */
    static const uint8_t later_wins[] = {0x22, 0x05, 0x0a, 0x01, 0x61, 0x28, 0x01, 0x08, 0x09,
                                         0x22, 0x03, 0x0a, 0x01, 0x62};
    assert_int_equal(proto_frame_unpack(later_wins, sizeof later_wins, &f), 0);
    assert_int_equal(f->id, 9);
    assert_string_equal(f->subscribe->channel, "b");
    assert_true(f->subscribe->join_leave);
    proto_frame_free(f);

    /* A different member in between clears the earlier one (the oneof's last member wins):
     * subscribe{channel "a"}, ping{}, subscribe{join_leave} is a Subscribe without a channel. */
    static const uint8_t cleared[] = {0x22, 0x03, 0x0a, 0x01, 0x61, 0x5a, 0x00,
                                      0x22, 0x02, 0x28, 0x01};
    assert_int_equal(proto_frame_unpack(cleared, sizeof cleared, &f), 0);
    assert_int_equal(f->body_case, HERALD__FRAME__BODY_SUBSCRIBE);
    assert_string_equal(f->subscribe->channel, "");
    assert_true(f->subscribe->join_leave);
    proto_frame_free(f);

    /* A repeat with a malformed payload is still refused, not merged into something else. */
    static const uint8_t bad[] = {0x22, 0x03, 0x0a, 0x01, 0x61, 0x22, 0x02, 0x0a, 0x05};
    assert_int_equal(proto_frame_unpack(bad, sizeof bad, &f), PROTO_ERR_UNDECODABLE);
}

static void test_proto_frame_too_large_before_body(void **state)
{
    (void)state;
    /* A client claims 1 GiB: refused from the 5-byte prefix alone, nothing consumed. */
    static const uint8_t prefix[] = {0x80, 0x80, 0x80, 0x80, 0x04};
    nl_buf_t b;
    nl_buf_init(&b, 0);
    assert_int_equal(nl_buf_append(&b, prefix, 3), 0);
    Herald__Frame *got = NULL;
    assert_int_equal(proto_frame_decode(&b, 1u << 20, &got), 0);
    assert_int_equal(nl_buf_append(&b, prefix + 3, 2), 0);
    assert_int_equal(proto_frame_decode(&b, 1u << 20, &got), PROTO_ERR_TOO_LARGE);
    assert_int_equal(nl_buf_readable(&b), 5);
    assert_null(got);

    /* A frame of exactly the limit decodes; one byte more does not. */
    sample_t s;
    Herald__Frame *f = sample_frame(&s, 6);
    size_t n;
    uint8_t *wire = encode(f, &n);
    size_t body = n - 2; /* a 300-byte payload makes a 2-byte prefix */
    nl_buf_retrieve_all(&b);
    assert_int_equal(nl_buf_append(&b, wire, n), 0);
    assert_int_equal(proto_frame_decode(&b, body - 1, &got), PROTO_ERR_TOO_LARGE);
    assert_int_equal(proto_frame_decode(&b, body, &got), 1);
    proto_frame_free(got);
    free(wire);
    nl_buf_deinit(&b);
}

/* Decodes a body made of repeats of the 2-byte field {f0, f1}, wrapped in the field `outer`
 * (a 3-byte length follows its tag) unless outer is 0, and checks the decoded frame stays
 * within the documented bound. */
static void check_worst_case(uint8_t outer, uint8_t f0, uint8_t f1, size_t body_bytes)
{
    uint8_t *body = malloc(body_bytes);
    assert_non_null(body);
    size_t pos = 0;
    size_t inner_len = outer ? body_bytes - 4 : body_bytes;
    inner_len -= inner_len % 2;
    if (outer) {
        body[pos++] = outer;
        body[pos++] = (uint8_t)(inner_len | 0x80);
        body[pos++] = (uint8_t)((inner_len >> 7) | 0x80);
        body[pos++] = (uint8_t)(inner_len >> 14);
    }
    for (size_t i = 0; i < inner_len / 2; i++) {
        body[pos++] = f0;
        body[pos++] = f1;
    }
    Herald__Frame *f = NULL;
    assert_int_equal(proto_frame_unpack(body, pos, &f), 0);
    size_t mem = proto_frame_mem_bytes(f);
    size_t bound = (size_t)PROTO_DECODE_MEM_FACTOR * pos + PROTO_DECODE_MEM_SLACK;
    print_message("worst case outer=0x%02x field=%02x%02x: %zu wire bytes -> %zu bytes "
                  "(%.1fx, bound %dx)\n",
                  outer, f0, f1, pos, mem, (double)mem / (double)pos, PROTO_DECODE_MEM_FACTOR);
    assert_true(mem <= bound);
    proto_frame_free(f);
    free(body);
}

static void test_proto_frame_memory_bound(void **state)
{
    (void)state;
    /* SubscribeOk{publications: [{}, {}, ...]}: the most expensive bytes the schema has. */
    check_worst_case(0x2a, 0x12, 0x00, 60000);
    /* PresenceResponse{clients: [{}, {}, ...]}. */
    check_worst_case(0x72, 0x12, 0x00, 60000);
    /* Frame{ping: {}, ping: {}, ...}: each repeat of a oneof member is a new struct. */
    check_worst_case(0, 0x5a, 0x00, 60000);
    /* Subscribe{field 9 (unknown): 0, ...}: an entry and a byte copy per unknown field. */
    check_worst_case(0x22, 0x48, 0x00, 60000);
    /* Subscribe{channel: "", channel: "", ...}: a string allocation per repeat. */
    check_worst_case(0x22, 0x0a, 0x00, 60000);
}

static void test_proto_frame_push_block(void **state)
{
    (void)state;
    uint8_t payload[64];
    memset(payload, 0xab, sizeof payload);
    Herald__Push push;
    sample_push(&push, "chat:lobby", 99, payload, sizeof payload);
    nl_block_t *blk = proto_push_block(&push);
    assert_non_null(blk);

    Herald__Frame want = HERALD__FRAME__INIT;
    want.body_case = HERALD__FRAME__BODY_PUSH;
    want.push = &push;
    assert_int_equal(nl_block_len(blk), proto_frame_encoded_size(&want));

    nl_buf_t b;
    nl_buf_init(&b, 0);
    assert_int_equal(nl_buf_append(&b, nl_block_data(blk), nl_block_len(blk)), 0);
    Herald__Frame *got = NULL;
    assert_int_equal(proto_frame_decode(&b, MAX_FRAME, &got), 1);
    assert_int_equal(got->id, 0);
    assert_int_equal(got->body_case, HERALD__FRAME__BODY_PUSH);
    assert_int_equal(got->push->offset, 99);
    assert_int_equal(got->push->publish_time_ms, 1735700000123ull);
    assert_memory_equal(got->push->payload.data, payload, sizeof payload);
    assert_same_frame(&want, got);
    proto_frame_free(got);
    nl_buf_deinit(&b);
    nl_block_unref(blk);
}

static void test_proto_frame_append_full_buffer(void **state)
{
    (void)state;
    sample_t s;
    Herald__Frame *f = sample_frame(&s, 6); /* ~320 bytes */
    nl_buf_t b;
    nl_buf_init(&b, 64);
    assert_int_equal(nl_buf_append(&b, "x", 1), 0);
    assert_int_equal(proto_frame_append(&b, f), -ENOBUFS);
    assert_int_equal(nl_buf_readable(&b), 1);
    nl_buf_deinit(&b);
}

static void test_proto_frame_names(void **state)
{
    (void)state;
    assert_string_equal(proto_err_str(PROTO_ERR_TOO_LARGE), "PROTO_ERR_TOO_LARGE");
    assert_string_equal(proto_err_str(PROTO_ERR_BAD_VARINT), "PROTO_ERR_BAD_VARINT");
    assert_string_equal(proto_err_str(PROTO_ERR_UNDECODABLE), "PROTO_ERR_UNDECODABLE");
    assert_string_equal(proto_err_str(-ENOMEM), nl_strerror(-ENOMEM));
    assert_string_equal(proto_body_name(HERALD__FRAME__BODY__NOT_SET), "none");
    assert_string_equal(proto_body_name(HERALD__FRAME__BODY_PRESENCE_RESPONSE),
                        "presence_response");
    assert_string_equal(proto_body_name(HERALD__FRAME__BODY_PRESENCE_EVENT), "presence_event");
    assert_string_equal(proto_body_name((Herald__Frame__BodyCase)99), "unknown");
}

static void test_proto_epoch_str(void **state)
{
    (void)state;
    const uint64_t epochs[] = {
        0, 1, 0xf, 0x10, 0xabcdef, 0x8000000000000000u, 0x0123456789abcdefu, UINT64_MAX};
    for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]); i++) {
        char got[17];
        char want[17];
        memset(got, 'x', sizeof(got));
        proto_epoch_str(epochs[i], got);
        snprintf(want, sizeof(want), "%016llx", (unsigned long long)epochs[i]);
        assert_string_equal(got, want);
        uint64_t back = 0;
        assert_int_equal(proto_epoch_parse(got, &back), 0);
        assert_int_equal(back, epochs[i]);
    }
    static const char *const bad[] = {"",
                                      "0123",
                                      "0123456789abcdef0",
                                      "0123456789ABCDEF",
                                      "0123456789abcdeg",
                                      " 123456789abcdef"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 42;
        assert_int_equal(proto_epoch_parse(bad[i], &v), -EINVAL);
        assert_int_equal(v, 42);
    }
}

/* proto_frame_peek decodes like proto_frame_decode and leaves the bytes; the caller retrieves
 * frame_bytes of them. */
static void test_proto_frame_peek_keeps_bytes(void **state)
{
    (void)state;
    sample_t s;
    nl_buf_t b;
    nl_buf_init(&b, 0);
    assert_int_equal(proto_frame_append(&b, sample_frame(&s, 6)), 0);
    size_t whole = nl_buf_readable(&b);
    Herald__Frame *f = NULL;
    size_t n = 0;
    assert_int_equal(proto_frame_peek(&b, MAX_FRAME, &f, &n), 1);
    assert_int_equal(n, whole);
    assert_int_equal(nl_buf_readable(&b), whole);
    assert_string_equal(f->publish->channel, "news");
    proto_frame_free(f);
    /* Again, the same frame; then taken. */
    assert_int_equal(proto_frame_peek(&b, MAX_FRAME, &f, &n), 1);
    proto_frame_free(f);
    nl_buf_retrieve(&b, n);
    assert_int_equal(proto_frame_peek(&b, MAX_FRAME, &f, &n), 0);
    nl_buf_deinit(&b);
}

/* The id of a frame refused as undecodable, read from its raw bytes: one row per boundary. */
typedef struct peek_id_row_s {
    const char *what;
    uint8_t bytes[16];
    size_t len;
    size_t max_frame_bytes;
    uint64_t want;
} peek_id_row_t;

static void test_proto_frame_peek_id(void **state)
{
    (void)state;
    static const peek_id_row_t rows[] = {
        /* Subscribe{channel: "\xff"}, id 7: the string is not UTF-8. */
        {"bad string, id first", {0x07, 0x08, 0x07, 0x22, 0x03, 0x0a, 0x01, 0xff}, 8, 64, 7},
        {"two-byte id 300", {0x05, 0x08, 0xac, 0x02, 0x10, 0x01}, 6, 64, 300},
        {"id not first", {0x05, 0x10, 0x01, 0x08, 0x07, 0x00}, 6, 64, 0},
        {"no id", {0x02, 0x5a, 0x00}, 3, 64, 0},
        {"frame not whole", {0x07, 0x08, 0x07, 0x22}, 4, 64, 0},
        {"id varint cut by the frame's end", {0x02, 0x08, 0x80, 0x01}, 4, 64, 0},
        {"prefix over the limit", {0x07, 0x08, 0x07, 0x22, 0x03, 0x0a, 0x01, 0xff}, 8, 4, 0},
        {"prefix of 11 bytes",
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
         11,
         64,
         0},
        {"empty", {0}, 0, 64, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const peek_id_row_t *r = &rows[i];
        nl_buf_t b;
        nl_buf_init(&b, 0);
        if (r->len)
            assert_int_equal(nl_buf_append(&b, r->bytes, r->len), 0);
        uint64_t got = proto_frame_peek_id(&b, r->max_frame_bytes);
        if (got != r->want)
            fail_msg("%s: id %llu, want %llu", r->what, (unsigned long long)got,
                     (unsigned long long)r->want);
        assert_int_equal(nl_buf_readable(&b), r->len);
        nl_buf_deinit(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proto_epoch_str),
        cmocka_unit_test(test_proto_frame_round_trip_every_kind),
        cmocka_unit_test(test_proto_frame_round_trip_fields),
        cmocka_unit_test(test_proto_frame_split_every_byte),
        cmocka_unit_test(test_proto_frame_prefix_boundaries),
        cmocka_unit_test(test_proto_frame_malformed_bodies),
        cmocka_unit_test(test_proto_frame_unknown_fields_kept),
        cmocka_unit_test(test_proto_frame_repeated_member_merged),
        cmocka_unit_test(test_proto_frame_too_large_before_body),
        cmocka_unit_test(test_proto_frame_memory_bound),
        cmocka_unit_test(test_proto_frame_push_block),
        cmocka_unit_test(test_proto_frame_append_full_buffer),
        cmocka_unit_test(test_proto_frame_names),
        cmocka_unit_test(test_proto_frame_peek_keeps_bytes),
        cmocka_unit_test(test_proto_frame_peek_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
