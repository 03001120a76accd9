/*
 * test_lg_ws: herald-loadgen's WebSocket client (loadgen/lg_ws.c, lg_ws_upgrade.c), its pure
 * parts: client frames of every length form as libwslay reads them on herald's side, mask
 * keys that a rebuilt write draws again, masking at every offset against a byte-by-byte
 * reference, RFC 6455's own accept example, the upgrade request, and the checks on the
 * server's answer (libhttp-parser under them), whole and in pieces. The transport itself
 * (server frames read by libwslay) runs against a real herald in
 * tests/integration/test_loadgen_transport.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <wslay/wslay.h>

#include "lg_ws.h"
#include "lg_ws_upgrade.h"

/* What libwslay's parser, reading as a server does, makes of bytes: the first frame's
 * header fields and its payload, pieces put together, unmasked. */
typedef struct wire_s {
    const uint8_t *p;
    size_t len;
} wire_t;

static ssize_t wire_recv(uint8_t *buf, size_t len, int flags, void *user_data)
{
    (void)flags;
    wire_t *w = user_data;
    size_t n = len < w->len ? len : w->len;
    if (n == 0)
        return -1;
    memcpy(buf, w->p, n);
    w->p += n;
    w->len -= n;
    return (ssize_t)n;
}

static ssize_t wire_send(const uint8_t *data, size_t len, int flags, void *user_data)
{
    (void)data;
    (void)len;
    (void)flags;
    (void)user_data;
    return -1;
}

typedef struct read_back_s {
    struct wslay_frame_iocb first; /* the first piece's header fields */
    uint8_t *payload;              /* the pieces read, in order */
    size_t len;
} read_back_t;

/* Reads bytes[0..n) with libwslay until one frame is whole or it wants more. Returns the
 * bytes of payload read. */
static size_t read_back(const uint8_t *bytes, size_t n, read_back_t *out)
{
    wire_t w = {.p = bytes, .len = n};
    const struct wslay_frame_callbacks cbs = {.send_callback = wire_send,
                                              .recv_callback = wire_recv};
    wslay_frame_context_ptr ctx;
    assert_int_equal(wslay_frame_context_init(&ctx, &cbs, &w), 0);
    out->len = 0;
    for (int pieces = 0;; pieces++) {
        struct wslay_frame_iocb io;
        ssize_t r = wslay_frame_recv(ctx, &io);
        if (r == WSLAY_ERR_WANT_READ)
            break;
        assert_true(r >= 0);
        if (pieces == 0)
            out->first = io;
        if (io.data_length)
            memcpy(out->payload + out->len, io.data, io.data_length);
        out->len += io.data_length;
        if (out->len == io.payload_length)
            break; /* one frame only */
    }
    wslay_frame_context_free(ctx);
    return out->len;
}

/* A client frame: the header lg_ws_frame_header writes, the payload masked by lg_ws_mask with
 * the key lg_ws_mask_key gives frame `number` of a connection seeded with seed. Returns its
 * length in out. */
static size_t client_frame(uint8_t *out, uint8_t opcode, const uint8_t *payload, size_t len,
                           uint64_t seed, uint64_t number)
{
    uint8_t key[4];
    lg_ws_mask_key(seed, number, key);
    size_t h = lg_ws_frame_header(out, opcode, len, key);
    if (len)
        memcpy(out + h, payload, len);
    lg_ws_mask(out + h, len, key, 0);
    return h + len;
}

/* Client frames of every length form, as libwslay reads them on herald's side: final, masked,
 * the opcode and length written, and the payload unmasked is the one sent. */
static void test_lg_ws_client_frames_read_by_wslay(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 5, 125, 126, 127, 65535, 65536, 200000};
    enum { MAX = 200000 };
    uint8_t *plain = malloc(MAX);
    uint8_t *frame = malloc(MAX + LG_WS_HEADER_MAX);
    uint8_t *got = malloc(MAX);
    assert_non_null(plain);
    assert_non_null(frame);
    assert_non_null(got);
    for (size_t i = 0; i < MAX; i++)
        plain[i] = (uint8_t)(i * 131 + 17);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = client_frame(frame, LG_WS_BINARY, plain, lens[i], 0x1234abcdull, i);
        size_t want_hdr = (lens[i] < 126 ? 2 : lens[i] <= 0xffff ? 4 : 10) + 4;
        assert_int_equal(n, want_hdr + lens[i]);
        read_back_t rb = {.payload = got};
        assert_int_equal(read_back(frame, n, &rb), lens[i]);
        assert_int_equal(rb.first.fin, 1);
        assert_int_equal(rb.first.rsv, 0);
        assert_int_equal(rb.first.opcode, WSLAY_BINARY_FRAME);
        assert_int_equal(rb.first.mask, 1);
        assert_true(rb.first.payload_length == lens[i]);
        assert_memory_equal(got, plain, lens[i]);
    }
    /* Control frames (a close with its code, a pong), and the 64-bit form at a length no test
     * sends: its header and the first bytes are enough for the length. */
    static const uint8_t code[2] = {0x03, 0xe8};
    read_back_t rb = {.payload = got};
    size_t n = client_frame(frame, LG_WS_CLOSE, code, 2, 7, ~0ull);
    assert_int_equal(read_back(frame, n, &rb), 2);
    assert_int_equal(rb.first.opcode, WSLAY_CONNECTION_CLOSE);
    assert_memory_equal(got, code, 2);
    n = client_frame(frame, LG_WS_PONG, plain, 125, 7, 3);
    assert_int_equal(read_back(frame, n, &rb), 125);
    assert_int_equal(rb.first.opcode, WSLAY_PONG);
    assert_memory_equal(got, plain, 125);
    static const uint8_t key[4] = {1, 2, 3, 4};
    size_t h = lg_ws_frame_header(frame, LG_WS_BINARY, 1ull << 40, key);
    assert_int_equal(h, 14);
    memset(frame + h, 0, 8);
    assert_int_equal(read_back(frame, h + 8, &rb), 8);
    assert_true(rb.first.payload_length == 1ull << 40);
    assert_int_equal(rb.first.mask, 1);
    free(plain);
    free(frame);
    free(got);
}

/* A write built again (TLS wants the same bytes on its retry) masks with the same keys: frame
 * n's key depends on the connection's seed and n only. Keys differ from frame to frame and
 * from connection to connection, as RFC 6455 5.3 asks of a client. */
static void test_lg_ws_mask_keys_deterministic(void **state)
{
    (void)state;
    static const uint8_t payload[] = "a Publish frame's bytes, more or less";
    uint8_t a[64];
    uint8_t b[64];
    for (uint64_t number = 0; number < 1000; number++) {
        size_t na = client_frame(a, LG_WS_BINARY, payload, sizeof(payload), 0xfeedull, number);
        size_t nb = client_frame(b, LG_WS_BINARY, payload, sizeof(payload), 0xfeedull, number);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
    }
    for (uint64_t number = 0; number < 1000; number++) {
        uint8_t k0[4];
        uint8_t k1[4];
        uint8_t other_seed[4];
        lg_ws_mask_key(0xfeedull, number, k0);
        lg_ws_mask_key(0xfeedull, number + 1, k1);
        lg_ws_mask_key(0xfeedull + 1, number, other_seed);
        if (memcmp(k0, k1, 4) == 0 || memcmp(k0, other_seed, 4) == 0)
            fail_msg("frame %llu: the same key as a neighbour's", (unsigned long long)number);
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
    {"200 with the right headers", "HTTP/1.1 200 OK\r\n" UPGRADE ACCEPT PROTO "\r\n", -EPROTO,
     "WS_UPGRADE_REFUSED"},
    /* HTTP's status is three digits: 1010 is no status, not a 101. */
    {"1010 is not 101", "HTTP/1.1 1010 X\r\n" UPGRADE ACCEPT PROTO "\r\n", -EPROTO,
     "WS_BAD_RESPONSE"},
    {"not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n", -EPROTO, "WS_BAD_RESPONSE"},
    {"not HTTP/1.x", "HTTP/2.0 101 Switching Protocols\r\n" UPGRADE ACCEPT PROTO "\r\n", -EPROTO,
     "WS_BAD_RESPONSE"},
    {"a refusal with a broken header", "HTTP/1.1 503 Busy\r\nRetry After: 1\r\n\r\n", -EPROTO,
     "WS_UPGRADE_REFUSED"},
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

/* The answer as reads bring it: every prefix of the header is "not complete yet" (no
 * verdict from part of it), the whole one is accepted, and so is a refusal cut anywhere
 * before its blank line. */
static void test_lg_ws_check_response_in_pieces(void **state)
{
    (void)state;
    static const char ok[] = "HTTP/1.1 101 Switching Protocols\r\n" UPGRADE ACCEPT PROTO "\r\n";
    for (size_t n = 0; n < sizeof(ok) - 1; n++) {
        size_t hdr = 0;
        const char *reason = NULL;
        int rc = lg_ws_check_response(ok, n, KEY, &hdr, &reason);
        if (rc != 0)
            fail_msg("%zu bytes: rc %d (%s), want 0", n, rc, reason ? reason : "");
    }
    size_t hdr = 0;
    const char *reason = NULL;
    assert_int_equal(lg_ws_check_response(ok, sizeof(ok) - 1, KEY, &hdr, &reason), 1);
    assert_int_equal(hdr, sizeof(ok) - 1);
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
        cmocka_unit_test(test_lg_ws_client_frames_read_by_wslay),
        cmocka_unit_test(test_lg_ws_mask_keys_deterministic),
        cmocka_unit_test(test_lg_ws_mask_matches_reference),
        cmocka_unit_test(test_lg_ws_accept_rfc_example),
        cmocka_unit_test(test_lg_ws_request),
        cmocka_unit_test(test_lg_ws_check_response_table),
        cmocka_unit_test(test_lg_ws_check_response_in_pieces),
        cmocka_unit_test(test_lg_ws_check_response_frames_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
