/*
 * gw_ws_upgrade: the WebSocket opening handshake, server side (RFC 6455 section 4.2): the
 * client's HTTP upgrade request, copied into a buffer of at most GW_WS_REQUEST_MAX bytes and
 * parsed by libhttp-parser as it arrives, checked, and answered with 101 (Sec-WebSocket-Accept
 * from OpenSSL's SHA-1 and base64) or an HTTP error. See gw_transport.h for the rules it
 * applies.
 *
 * The whole request stays in one buffer, so the parser's spans (it reports a header name or
 * value in pieces, as the bytes come) are offsets into it that simply grow: a span that
 * continues in the next read continues at the next byte. Bytes after the request's header
 * (the client's first frames, sent before the answer) are left where they are for the
 * WebSocket layer (gw_ws_upgrade_rest).
 *
 * Memory: the buffer grows with the bytes that came (from 512 bytes, doubling, to the cap), so
 * a client that connects and sends nothing costs this struct only, and one that trickles its
 * request costs what it sent; a browser's request (under 1 KiB) fits in the first or second
 * step. The response is allocated at its size when it is known. The upgrade is freed when the
 * handshake ends (gw_ws.c). Before, the 8 KiB buffer came with the struct at accept: 8.7 KB
 * per connection that sent nothing, for as long as the connect timeout.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <openssl/evp.h>

#include "gw_transport_int.h"
#include "netlib/nl_common.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_PATH "/connection"
#define WS_SUBPROTOCOL "herald.v1"

/* The buffer's first size: a short request (a script's, a bot's) fits. */
#define UPGRADE_BUF_MIN 512

typedef struct span_s {
    uint32_t off;
    uint32_t len;
} span_t;

/* The request headers the handshake reads. */
enum { H_UPGRADE = 0, H_CONNECTION, H_KEY, H_VERSION, H_ORIGIN, H_PROTOCOL, H_HOST, H_COUNT };

static const char *const header_names[H_COUNT] = {
    [H_UPGRADE] = "upgrade",
    [H_CONNECTION] = "connection",
    [H_KEY] = "sec-websocket-key",
    [H_VERSION] = "sec-websocket-version",
    [H_ORIGIN] = "origin",
    [H_PROTOCOL] = "sec-websocket-protocol",
    [H_HOST] = "host",
};

struct gw_ws_upgrade_s {
    http_parser parser;
    span_t url;
    span_t field; /* the header name being read */
    span_t value; /* its value */
    bool is_in_value;
    bool is_complete;
    span_t headers[H_COUNT]; /* the last of each (a repeated one replaces the earlier) */
    uint8_t n_seen[H_COUNT];
    uint32_t len;  /* request bytes in buf */
    uint32_t cap;  /* buf's size: 0 (none yet), UPGRADE_BUF_MIN doubling to the header cap */
    uint32_t rest; /* where the bytes after the header begin (is_complete) */
    uint32_t response_len;
    uint32_t response_off; /* written already */
    char *response;        /* NULL until the request is complete */
    char *buf;
};

gw_ws_upgrade_t *gw_ws_upgrade_new(void)
{
    gw_ws_upgrade_t *u = calloc(1, sizeof(*u));
    if (u)
        http_parser_init(&u->parser, HTTP_REQUEST);
    return u;
}

void gw_ws_upgrade_free(gw_ws_upgrade_t *u)
{
    if (!u)
        return;
    free(u->buf);
    free(u->response);
    free(u);
}

size_t gw_ws_upgrade_room(const gw_ws_upgrade_t *u)
{
    return GW_WS_REQUEST_MAX - u->len;
}

/* Room in buf for n more bytes (n <= gw_ws_upgrade_room). Returns 0 or -ENOMEM. The spans are
 * offsets, so they stay right across the move. */
static int upgrade_reserve(gw_ws_upgrade_t *u, size_t n)
{
    size_t need = u->len + n;
    if (need <= u->cap)
        return 0;
    size_t cap = u->cap ? u->cap : UPGRADE_BUF_MIN;
    while (cap < need)
        cap *= 2;
    if (cap > GW_WS_REQUEST_MAX)
        cap = GW_WS_REQUEST_MAX;
    char *buf = realloc(u->buf, cap);
    if (!buf)
        return -ENOMEM;
    u->buf = buf;
    u->cap = (uint32_t)cap;
    return 0;
}

/* --- the parser's callbacks ------------------------------------------------------------------ */

static gw_ws_upgrade_t *upgrade_of(http_parser *p)
{
    return (gw_ws_upgrade_t *)((char *)p - offsetof(gw_ws_upgrade_t, parser));
}

static void span_grow(gw_ws_upgrade_t *u, span_t *s, const char *at, size_t len)
{
    if (s->len == 0)
        s->off = (uint32_t)(at - u->buf);
    s->len += (uint32_t)len;
}

/* A header (name and value) is complete: keep it if the handshake reads it. */
static void header_done(gw_ws_upgrade_t *u)
{
    for (int h = 0; h < H_COUNT; h++) {
        if (strlen(header_names[h]) == u->field.len &&
            strncasecmp(u->buf + u->field.off, header_names[h], u->field.len) == 0) {
            u->headers[h] = u->value;
            if (u->n_seen[h] < UINT8_MAX)
                u->n_seen[h]++;
            break;
        }
    }
    u->field = (span_t){0, 0};
    u->value = (span_t){0, 0};
    u->is_in_value = false;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    gw_ws_upgrade_t *u = upgrade_of(p);
    span_grow(u, &u->url, at, len);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    gw_ws_upgrade_t *u = upgrade_of(p);
    if (u->is_in_value)
        header_done(u);
    span_grow(u, &u->field, at, len);
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    gw_ws_upgrade_t *u = upgrade_of(p);
    u->is_in_value = true;
    /* An empty value still marks the header as present (at points past the colon). */
    if (u->value.len == 0 && len == 0)
        u->value.off = (uint32_t)(at - u->buf);
    span_grow(u, &u->value, at, len);
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    gw_ws_upgrade_t *u = upgrade_of(p);
    if (u->is_in_value || u->field.len)
        header_done(u);
    u->is_complete = true;
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
};

/* --- checks ---------------------------------------------------------------------------------- */

/* Whether the comma-separated token list s (a header value) holds token, case-insensitive,
 * with optional spaces. */
static bool list_has(const char *s, size_t len, const char *token)
{
    size_t tlen = strlen(token);
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == ','))
            i++;
        size_t start = i;
        while (i < len && s[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (s[end - 1] == ' ' || s[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(s + start, token, tlen) == 0)
            return true;
    }
    return false;
}

static bool header_has(const gw_ws_upgrade_t *u, int h, const char *token)
{
    return u->n_seen[h] && list_has(u->buf + u->headers[h].off, u->headers[h].len, token);
}

/* Whether origin (len bytes) is in the listener's allow-list (scheme and host compare
 * without case, as RFC 6454 serialises them). */
static bool origin_allowed(const gw_listener_t *l, const char *origin, size_t len)
{
    if (l->is_any_origin)
        return true;
    char copy[256];
    if (len == 0 || len >= sizeof(copy))
        return false;
    memcpy(copy, origin, len);
    copy[len] = '\0';
    return list_has(l->allowed_origins, strlen(l->allowed_origins), copy);
}

/* The request's path (the URL up to '?'). */
static bool path_is_ours(const gw_ws_upgrade_t *u)
{
    struct http_parser_url url;
    http_parser_url_init(&url);
    if (http_parser_parse_url(u->buf + u->url.off, u->url.len, 0, &url) != 0 ||
        !(url.field_set & (1 << UF_PATH)))
        return false;
    const char *path = u->buf + u->url.off + url.field_data[UF_PATH].off;
    size_t len = url.field_data[UF_PATH].len;
    return len == strlen(WS_PATH) && memcmp(path, WS_PATH, len) == 0;
}

/* Sec-WebSocket-Accept: base64 of the SHA-1 of the key and the GUID. */
static bool accept_key(const gw_ws_upgrade_t *u, char out[32])
{
    const span_t *k = &u->headers[H_KEY];
    char in[64 + sizeof(WS_GUID)];
    if (k->len > 64)
        return false;
    memcpy(in, u->buf + k->off, k->len);
    memcpy(in + k->len, WS_GUID, sizeof(WS_GUID) - 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_Digest(in, k->len + sizeof(WS_GUID) - 1, md, &md_len, EVP_sha1(), NULL) != 1)
        return false;
    return EVP_EncodeBlock((unsigned char *)out, md, (int)md_len) == 28;
}

/* The key must be 16 bytes in base64: 24 characters ending in "==". */
static bool key_is_valid(const gw_ws_upgrade_t *u)
{
    const span_t *k = &u->headers[H_KEY];
    if (u->n_seen[H_KEY] != 1 || k->len != 24)
        return false;
    unsigned char raw[24];
    return EVP_DecodeBlock(raw, (const unsigned char *)u->buf + k->off, 24) == 18 &&
           u->buf[k->off + 22] == '=' && u->buf[k->off + 23] == '=';
}

/* Keeps the response text (n bytes). Returns 0 or -ENOMEM. */
static int set_response(gw_ws_upgrade_t *u, const char *text, int n)
{
    free(u->response);
    u->response = NULL;
    u->response_len = 0;
    u->response_off = 0;
    if (n <= 0)
        return 0;
    if ((u->response = malloc((size_t)n)) == NULL)
        return -ENOMEM;
    memcpy(u->response, text, (size_t)n);
    u->response_len = (uint32_t)n;
    return 0;
}

/* An HTTP error response. Returns why + 2 (gw_ws_upgrade_feed's refusal), or -ENOMEM. */
static int refuse(gw_ws_upgrade_t *u, gw_hs_fail_t why, const char *status, const char *extra)
{
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n%s\r\n", status,
                     extra ? extra : "");
    if (n >= (int)sizeof(text))
        n = 0;
    return set_response(u, text, n) < 0 ? -ENOMEM : (int)why + 2;
}

/* The request is complete: 1 (accepted, 101 ready), a refusal's reason + 2, or -ENOMEM. */
static int upgrade_check(gw_ws_upgrade_t *u, const gw_listener_t *l)
{
    if (u->parser.method != HTTP_GET || u->parser.http_major != 1 || u->parser.http_minor < 1 ||
        !header_has(u, H_UPGRADE, "websocket") || !header_has(u, H_CONNECTION, "upgrade") ||
        !u->n_seen[H_HOST] || !key_is_valid(u))
        return refuse(u, GW_HS_FAIL_BAD_REQUEST, "400 Bad Request", NULL);
    if (!path_is_ours(u))
        return refuse(u, GW_HS_FAIL_NOT_FOUND, "404 Not Found", NULL);
    const span_t *v = &u->headers[H_VERSION];
    if (u->n_seen[H_VERSION] != 1 || v->len != 2 || memcmp(u->buf + v->off, "13", 2) != 0)
        return refuse(u, GW_HS_FAIL_VERSION, "426 Upgrade Required",
                      "Sec-WebSocket-Version: 13\r\n");
    if (u->n_seen[H_ORIGIN] &&
        !origin_allowed(l, u->buf + u->headers[H_ORIGIN].off, u->headers[H_ORIGIN].len))
        return refuse(u, GW_HS_FAIL_ORIGIN, "403 Forbidden", NULL);
    bool has_protocols = u->n_seen[H_PROTOCOL] > 0;
    if (has_protocols && !header_has(u, H_PROTOCOL, WS_SUBPROTOCOL))
        return refuse(u, GW_HS_FAIL_SUBPROTOCOL, "400 Bad Request",
                      "Sec-WebSocket-Protocol: " WS_SUBPROTOCOL "\r\n");
    char accept[32];
    if (!accept_key(u, accept))
        return refuse(u, GW_HS_FAIL_BAD_REQUEST, "400 Bad Request", NULL);
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n",
                     accept, has_protocols ? "Sec-WebSocket-Protocol: " WS_SUBPROTOCOL "\r\n" : "");
    return set_response(u, text, n) < 0 ? -ENOMEM : 1;
}

int gw_ws_upgrade_feed(gw_ws_upgrade_t *u, const void *bytes, size_t n, const gw_listener_t *l)
{
    if (upgrade_reserve(u, n) < 0)
        return -ENOMEM;
    char *data = u->buf + u->len;
    memcpy(data, bytes, n);
    u->len += (uint32_t)n;
    size_t parsed = http_parser_execute(&u->parser, &parser_settings, data, n);
    if (u->is_complete) {
        u->rest = (uint32_t)(data - u->buf + parsed);
        return upgrade_check(u, l);
    }
    if (HTTP_PARSER_ERRNO(&u->parser) != HPE_OK || parsed != n)
        return refuse(u, GW_HS_FAIL_BAD_REQUEST, "400 Bad Request", NULL);
    if (u->len == GW_WS_REQUEST_MAX)
        return refuse(u, GW_HS_FAIL_TOO_LARGE, "431 Request Header Fields Too Large", NULL);
    return 0;
}

const char *gw_ws_upgrade_response(const gw_ws_upgrade_t *u, size_t *len)
{
    *len = u->response_len - u->response_off;
    return u->response ? u->response + u->response_off : "";
}

void gw_ws_upgrade_wrote(gw_ws_upgrade_t *u, size_t n)
{
    u->response_off += (uint32_t)n;
}

const char *gw_ws_upgrade_rest(const gw_ws_upgrade_t *u, size_t *len)
{
    *len = u->len - u->rest;
    return u->buf + u->rest;
}
