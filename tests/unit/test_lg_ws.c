/*
 * test_lg_ws: herald-loadgen's WebSocket client (loadgen/lg_ws.c), its pure parts: frame
 * headers read (table-driven, every length form and boundary) and written, masking at every
 * offset against a byte-by-byte reference, RFC 6455's own accept example, the upgrade request,
 * and the checks on the server's answer. The transport itself runs against a real herald in
 * tests/integration/test_loadgen.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lg_ws.h"

typedef struct parse_row_s {
    const char *what;
    uint8_t bytes[16];
    size_t len;
    int rc;
    bool fin;
    bool is_masked;
    uint8_t rsv;
    uint8_t opcode;
    size_t hdr_len;
    uint64_t payload;
} parse_row_t;

static const parse_row_t parse_rows[] = {
    {"empty", {0}, 0, 0, 0, 0, 0, 0, 0, 0},
    {"one byte", {0x82}, 1, 0, 0, 0, 0, 0, 0, 0},
    {"binary, 5 bytes", {0x82, 0x05}, 2, 1, true, false, 0, 0x2, 2, 5},
    {"not final", {0x02, 0x05}, 2, 1, false, false, 0, 0x2, 2, 5},
    {"continuation", {0x80, 0x00}, 2, 1, true, false, 0, 0x0, 2, 0},
    {"close", {0x88, 0x02}, 2, 1, true, false, 0, 0x8, 2, 2},
    {"reserved bits", {0xf2, 0x01}, 2, 1, true, false, 7, 0x2, 2, 1},
    {"125: the largest short form", {0x82, 0x7d}, 2, 1, true, false, 0, 0x2, 2, 125},
    {"126 form, cut", {0x82, 0x7e, 0x00}, 3, 0, 0, 0, 0, 0, 0, 0},
    {"126 form: 126", {0x82, 0x7e, 0x00, 0x7e}, 4, 1, true, false, 0, 0x2, 4, 126},
    {"126 form: 65535", {0x82, 0x7e, 0xff, 0xff}, 4, 1, true, false, 0, 0x2, 4, 65535},
    {"127 form, cut", {0x82, 0x7f, 0, 0, 0, 0, 0, 1}, 8, 0, 0, 0, 0, 0, 0, 0},
    {"127 form: 65536",
     {0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0},
     10,
     1,
     true,
     false,
     0,
     0x2,
     10,
     65536},
    {"127 form, top bit set",
     {0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0},
     10,
     -EPROTO,
     0,
     0,
     0,
     0,
     0,
     0},
    {"masked, key cut", {0x82, 0x85, 1, 2, 3}, 5, 0, 0, 0, 0, 0, 0, 0},
    {"masked", {0x82, 0x85, 1, 2, 3, 4}, 6, 1, true, true, 0, 0x2, 6, 5},
    {"masked 126 form", {0x82, 0xfe, 0x01, 0x00, 1, 2, 3, 4}, 8, 1, true, true, 0, 0x2, 8, 256},
};

static void test_lg_ws_frame_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_rows) / sizeof(parse_rows[0]); i++) {
        const parse_row_t *row = &parse_rows[i];
        lg_ws_frame_t f;
        memset(&f, 0xee, sizeof(f));
        int rc = lg_ws_frame_parse(row->bytes, row->len, &f);
        if (rc != row->rc)
            fail_msg("%s: rc %d, want %d", row->what, rc, row->rc);
        if (rc != 1)
            continue;
        if (f.fin != row->fin || f.is_masked != row->is_masked || f.rsv != row->rsv ||
            f.opcode != row->opcode || f.hdr_len != row->hdr_len || f.len != row->payload)
            fail_msg("%s: fin %d masked %d rsv %u opcode %u hdr %zu len %llu", row->what, f.fin,
                     f.is_masked, f.rsv, f.opcode, f.hdr_len, (unsigned long long)f.len);
    }
}

/* Every length form written, then read back, with and without a mask. */
static void test_lg_ws_frame_header_round_trip(void **state)
{
    (void)state;
    static const uint64_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 1u << 20, 1ull << 40};
    static const uint8_t key[4] = {0xde, 0xad, 0xbe, 0xef};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (int masked = 0; masked < 2; masked++) {
            uint8_t h[LG_WS_HEADER_MAX];
            size_t n = lg_ws_frame_header(h, LG_WS_BINARY, lens[i], masked ? key : NULL);
            size_t want = (lens[i] < 126 ? 2 : lens[i] <= 0xffff ? 4 : 10) + (masked ? 4 : 0);
            assert_int_equal(n, want);
            lg_ws_frame_t f;
            assert_int_equal(lg_ws_frame_parse(h, n, &f), 1);
            assert_true(f.fin);
            assert_int_equal(f.opcode, LG_WS_BINARY);
            assert_int_equal(f.is_masked, masked);
            assert_int_equal(f.hdr_len, n);
            assert_true(f.len == lens[i]);
            if (masked)
                assert_memory_equal(h + n - 4, key, 4);
            /* One byte short of the header is never enough. */
            assert_int_equal(lg_ws_frame_parse(h, n - 1, &f), 0);
        }
    }
}

/* The 8-bytes-at-a-time masking equals the byte loop of RFC 6455 5.3 at every offset and
 * length, and masking twice gives the bytes back. */
static void test_lg_ws_mask_matches_reference(void **state)
{
    (void)state;
    static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
    uint8_t plain[67];
    for (size_t i = 0; i < sizeof(plain); i++)
        plain[i] = (uint8_t)(i * 31 + 7);
    for (unsigned off = 0; off < 4; off++) {
        for (size_t n = 0; n <= sizeof(plain); n++) {
            uint8_t got[sizeof(plain)];
            uint8_t want[sizeof(plain)];
            memcpy(got, plain, n);
            for (size_t i = 0; i < n; i++)
                want[i] = plain[i] ^ key[(off + i) % 4];
            lg_ws_mask(got, n, key, off);
            assert_memory_equal(got, want, n);
            lg_ws_mask(got, n, key, off);
            assert_memory_equal(got, plain, n);
        }
    }
    /* RFC 6455 5.7: "Hello" masked with 37 fa 21 3d. */
    uint8_t hello[5] = {'H', 'e', 'l', 'l', 'o'};
    lg_ws_mask(hello, 5, key, 0);
    static const uint8_t rfc[5] = {0x7f, 0x9f, 0x4d, 0x51, 0x58};
    assert_memory_equal(hello, rfc, 5);
}

/* RFC 6455 1.3's example key and answer. */
static void test_lg_ws_accept_rfc_example(void **state)
{
    (void)state;
    char out[LG_WS_ACCEPT_LEN + 1];
    lg_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out);
    assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void test_lg_ws_request(void **state)
{
    (void)state;
    char buf[1024];
    size_t n = lg_ws_request(buf, sizeof(buf), "127.0.0.1:7402", "dGhlIHNhbXBsZSBub25jZQ==");
    assert_true(n > 0 && n == strlen(buf));
    assert_non_null(strstr(buf, "GET /connection HTTP/1.1\r\n"));
    assert_non_null(strstr(buf, "\r\nHost: 127.0.0.1:7402\r\n"));
    assert_non_null(strstr(buf, "\r\nUpgrade: websocket\r\n"));
    assert_non_null(strstr(buf, "\r\nConnection: Upgrade\r\n"));
    assert_non_null(strstr(buf, "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"));
    assert_non_null(strstr(buf, "\r\nSec-WebSocket-Version: 13\r\n"));
    assert_non_null(strstr(buf, "\r\nSec-WebSocket-Protocol: herald.v1\r\n"));
    assert_int_equal(strcmp(buf + n - 4, "\r\n\r\n"), 0);
    assert_int_equal(lg_ws_request(buf, 40, "127.0.0.1:7402", "x"), 0); /* does not fit */
}

#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
#define UPGRADE "Upgrade: websocket\r\nConnection: Upgrade\r\n"
#define PROTO "Sec-WebSocket-Protocol: herald.v1\r\n"

typedef struct answer_row_s {
    const char *what;
    const char *text;
    int rc;
    const char *reason;
} answer_row_t;

static const answer_row_t answer_rows[] = {
    {"accepted", "HTTP/1.1 101 Switching Protocols\r\n" UPGRADE ACCEPT PROTO "\r\n", 1, NULL},
    {"header names in any case, spaces around values",
     "HTTP/1.1 101 Switching Protocols\r\nupgrade:  WebSocket \r\nCONNECTION: keep-alive, "
     "upgrade\r\nsec-websocket-accept:s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
     "sec-websocket-protocol: herald.v1\r\n\r\n",
     1, NULL},
    {"no reason phrase", "HTTP/1.1 101\r\n" UPGRADE ACCEPT PROTO "\r\n", 1, NULL},
    {"not complete yet", "HTTP/1.1 101 Switching Protocols\r\n" UPGRADE, 0, NULL},
    {"refused", "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", -EPROTO,
     "WS_UPGRADE_REFUSED"},
    {"1010 is not 101", "HTTP/1.1 1010 X\r\n" UPGRADE ACCEPT PROTO "\r\n", -EPROTO,
     "WS_UPGRADE_REFUSED"},
    {"not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n", -EPROTO, "WS_BAD_RESPONSE"},
    {"a line without a colon", "HTTP/1.1 101 OK\r\nUpgrade websocket\r\n\r\n", -EPROTO,
     "WS_BAD_RESPONSE"},
    {"no Upgrade", "HTTP/1.1 101 OK\r\nConnection: Upgrade\r\n" ACCEPT PROTO "\r\n", -EPROTO,
     "WS_BAD_UPGRADE"},
    {"Connection without upgrade",
     "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: close\r\n" ACCEPT PROTO "\r\n", -EPROTO,
     "WS_BAD_UPGRADE"},
    {"no accept", "HTTP/1.1 101 OK\r\n" UPGRADE PROTO "\r\n", -EPROTO, "WS_BAD_ACCEPT"},
    {"wrong accept",
     "HTTP/1.1 101 OK\r\n" UPGRADE "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOO=\r\n" PROTO
     "\r\n",
     -EPROTO, "WS_BAD_ACCEPT"},
    {"no subprotocol", "HTTP/1.1 101 OK\r\n" UPGRADE ACCEPT "\r\n", -EPROTO, "WS_BAD_SUBPROTOCOL"},
    {"another subprotocol",
     "HTTP/1.1 101 OK\r\n" UPGRADE ACCEPT "Sec-WebSocket-Protocol: herald.v2\r\n\r\n", -EPROTO,
     "WS_BAD_SUBPROTOCOL"},
    {"an extension nobody asked for",
     "HTTP/1.1 101 OK\r\n" UPGRADE ACCEPT PROTO "Sec-WebSocket-Extensions: permessage-deflate\r\n"
     "\r\n",
     -EPROTO, "WS_BAD_EXTENSION"},
};

static void test_lg_ws_check_response_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(answer_rows) / sizeof(answer_rows[0]); i++) {
        const answer_row_t *row = &answer_rows[i];
        size_t hdr = 0;
        const char *reason = NULL;
        int rc = lg_ws_check_response(row->text, strlen(row->text), KEY, &hdr, &reason);
        if (rc != row->rc)
            fail_msg("%s: rc %d, want %d (%s)", row->what, rc, row->rc, reason ? reason : "");
        if (rc == 1 && hdr != strlen(row->text))
            fail_msg("%s: header length %zu, want %zu", row->what, hdr, strlen(row->text));
        if (rc < 0 && strcmp(reason, row->reason) != 0)
            fail_msg("%s: reason %s, want %s", row->what, reason, row->reason);
    }
}

/* Frames that follow the answer in the same read are not part of its header. */
static void test_lg_ws_check_response_frames_behind(void **state)
{
    (void)state;
    static const char head[] = "HTTP/1.1 101 Switching Protocols\r\n" UPGRADE ACCEPT PROTO "\r\n";
    char buf[sizeof(head) + 8];
    memcpy(buf, head, sizeof(head) - 1);
    memcpy(buf + sizeof(head) - 1, "\x82\x03\x0a\x01\x00", 5);
    size_t hdr = 0;
    const char *reason = NULL;
    assert_int_equal(lg_ws_check_response(buf, sizeof(head) - 1 + 5, KEY, &hdr, &reason), 1);
    assert_int_equal(hdr, sizeof(head) - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lg_ws_frame_parse_table),
        cmocka_unit_test(test_lg_ws_frame_header_round_trip),
        cmocka_unit_test(test_lg_ws_mask_matches_reference),
        cmocka_unit_test(test_lg_ws_accept_rfc_example),
        cmocka_unit_test(test_lg_ws_request),
        cmocka_unit_test(test_lg_ws_check_response_table),
        cmocka_unit_test(test_lg_ws_check_response_frames_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
