/*
 * test_gw_ws_upgrade: the WebSocket opening handshake's request side
 * (gateway/transport/gw_ws_upgrade.c): a request fed one byte at a time, its buffer growing from
 * 512 bytes while the parser's spans (a header value split over many feeds) stay right across
 * each move; the 101 answer with RFC 6455's sample Sec-WebSocket-Accept; the bytes after the
 * request kept for the WebSocket layer; the header cap (431) reached in pieces; refusals (404,
 * 403) with their HTTP answers. How much memory a pending upgrade holds is measured against a
 * real herald (tests/ws/hostile_pending.test.js).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_transport_int.h"

/* RFC 6455 section 1.3's sample key and the answer it asks for. */
#define SAMPLE_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define SAMPLE_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

/* A listener as far as the upgrade reads one: its Origin allow-list. */
static gw_listener_t *listener(const char *origins)
{
    gw_listener_t *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->allowed_origins = strdup(origins);
    assert_non_null(l->allowed_origins);
    l->is_any_origin = strcmp(origins, "*") == 0;
    return l;
}

static void listener_free(gw_listener_t *l)
{
    free(l->allowed_origins);
    free(l);
}

/* An upgrade request for path with extra header lines (each ending in CRLF), into out. */
static size_t request(char *out, size_t cap, const char *path, const char *extra)
{
    int n = snprintf(out, cap,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: " SAMPLE_KEY "\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: herald.v1\r\n%s\r\n",
                     path, extra);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* The response as a string (for strstr). */
static const char *response(const gw_ws_upgrade_t *u, char *out, size_t cap)
{
    size_t len;
    const char *p = gw_ws_upgrade_response(u, &len);
    assert_true(len < cap);
    memcpy(out, p, len);
    out[len] = '\0';
    return out;
}

/* A request of 2.3 KB (a long Cookie) fed a byte at a time: the buffer moves from 512 bytes to
 * 1 KiB, 2 KiB and 4 KiB while the Cookie's value (and the key after it) arrive in pieces. The
 * frame bytes that came with the last feed are the rest. */
static void test_gw_ws_upgrade_byte_by_byte(void **state)
{
    (void)state;
    gw_listener_t *l = listener("*");
    char cookie[2000 + 16];
    memcpy(cookie, "Cookie: c=", 10);
    memset(cookie + 10, 'x', 2000);
    memcpy(cookie + 2010, "\r\n", 3);
    char req[4096];
    size_t len = request(req, sizeof(req), "/connection?v=1", cookie);
    memcpy(req + len, "\x82\x80WXYZ", 6); /* a masked empty binary frame, sent along */
    gw_ws_upgrade_t *u = gw_ws_upgrade_new();
    assert_non_null(u);
    assert_int_equal(gw_ws_upgrade_room(u), GW_WS_REQUEST_MAX);
    for (size_t i = 0; i + 1 < len; i++) {
        assert_int_equal(gw_ws_upgrade_feed(u, req + i, 1, l), 0);
        assert_int_equal(gw_ws_upgrade_room(u), GW_WS_REQUEST_MAX - i - 1);
    }
    /* The last byte of the header and the frame in one read. */
    assert_int_equal(gw_ws_upgrade_feed(u, req + len - 1, 7, l), 1);
    char text[512];
    const char *r = response(u, text, sizeof(text));
    assert_non_null(strstr(r, "HTTP/1.1 101 Switching Protocols\r\n"));
    assert_non_null(strstr(r, "Sec-WebSocket-Accept: " SAMPLE_ACCEPT "\r\n"));
    assert_non_null(strstr(r, "Sec-WebSocket-Protocol: herald.v1\r\n"));
    size_t rest_len;
    const char *rest = gw_ws_upgrade_rest(u, &rest_len);
    assert_int_equal(rest_len, 6);
    assert_memory_equal(rest, "\x82\x80WXYZ", 6);
    /* What went out is taken off the response. */
    size_t left;
    gw_ws_upgrade_response(u, &left);
    gw_ws_upgrade_wrote(u, left - 4);
    char text2[16];
    assert_string_equal(response(u, text2, sizeof(text2)), "\r\n\r\n"); /* not NUL-ended */
    gw_ws_upgrade_free(u);
    listener_free(l);
}

/* A header that never ends, fed in 1000-byte pieces: refused with 431 when the request
 * reaches the cap, and not a byte later. */
static void test_gw_ws_upgrade_header_cap(void **state)
{
    (void)state;
    gw_listener_t *l = listener("*");
    gw_ws_upgrade_t *u = gw_ws_upgrade_new();
    assert_non_null(u);
    const char *head = "GET /connection HTTP/1.1\r\nX-Long: ";
    assert_int_equal(gw_ws_upgrade_feed(u, head, strlen(head), l), 0);
    char piece[1000];
    memset(piece, 'a', sizeof(piece));
    int rc = 0;
    while (rc == 0) {
        size_t room = gw_ws_upgrade_room(u);
        assert_true(room > 0);
        rc = gw_ws_upgrade_feed(u, piece, room < sizeof(piece) ? room : sizeof(piece), l);
    }
    assert_int_equal(rc, GW_HS_FAIL_TOO_LARGE + 2);
    assert_int_equal(gw_ws_upgrade_room(u), 0);
    char text[512];
    assert_non_null(strstr(response(u, text, sizeof(text)), "431 Request Header Fields"));
    gw_ws_upgrade_free(u);
    listener_free(l);
}

/* Refusals answer with their status: another path (404), an Origin not on the list (403),
 * bytes that are not HTTP (400). A listed Origin is accepted. */
static void test_gw_ws_upgrade_refusals(void **state)
{
    (void)state;
    gw_listener_t *l = listener("https://a.example,https://b.example");
    struct {
        const char *path;
        const char *extra;
        int rc;
        const char *status;
    } rows[] = {
        {"/other", "", GW_HS_FAIL_NOT_FOUND + 2, "HTTP/1.1 404 Not Found\r\n"},
        {"/connection", "Origin: https://evil.example\r\n", GW_HS_FAIL_ORIGIN + 2,
         "HTTP/1.1 403 Forbidden\r\n"},
        {"/connection", "Origin: https://b.example\r\n", 1, "HTTP/1.1 101 "},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char req[1024];
        size_t len = request(req, sizeof(req), rows[i].path, rows[i].extra);
        gw_ws_upgrade_t *u = gw_ws_upgrade_new();
        assert_non_null(u);
        assert_int_equal(gw_ws_upgrade_feed(u, req, len, l), rows[i].rc);
        char text[512];
        assert_non_null(strstr(response(u, text, sizeof(text)), rows[i].status));
        gw_ws_upgrade_free(u);
    }
    gw_ws_upgrade_t *u = gw_ws_upgrade_new();
    assert_non_null(u);
    assert_int_equal(gw_ws_upgrade_feed(u, "\x16\x03\x01\x02\x00", 5, l),
                     GW_HS_FAIL_BAD_REQUEST + 2);
    char text[512];
    assert_non_null(strstr(response(u, text, sizeof(text)), "400 Bad Request"));
    gw_ws_upgrade_free(u);
    /* Freed before a byte came: nothing allocated but the struct. */
    gw_ws_upgrade_free(gw_ws_upgrade_new());
    listener_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_ws_upgrade_byte_by_byte),
        cmocka_unit_test(test_gw_ws_upgrade_header_cap),
        cmocka_unit_test(test_gw_ws_upgrade_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
