/*
 * lg_ws_upgrade: the upgrade request and the checks on its answer (see lg_ws_upgrade.h).
 *
 * lg_ws_check_response parses the whole answer so far from its first byte each time it is
 * called (a fresh http_parser on the stack), so it keeps no state between reads: the answer
 * is a few hundred bytes, mostly in one read, and the buffer it sits in is lg_ws.c's.
 */
#include "lg_ws_upgrade.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <openssl/evp.h>

#include "netlib/nl_common.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

void lg_ws_accept(const char *key, char out[LG_WS_ACCEPT_LEN + 1])
{
    char in[LG_WS_KEY_LEN + sizeof(WS_GUID)];
    size_t klen = strlen(key);
    if (klen > LG_WS_KEY_LEN)
        klen = LG_WS_KEY_LEN;
    memcpy(in, key, klen);
    memcpy(in + klen, WS_GUID, sizeof(WS_GUID) - 1);
    unsigned char sha[EVP_MAX_MD_SIZE];
    unsigned int sha_len = 0;
    if (EVP_Digest(in, klen + sizeof(WS_GUID) - 1, sha, &sha_len, EVP_sha1(), NULL) != 1 ||
        sha_len != 20) {
        out[0] = '\0'; /* matches no answer: the handshake fails as WS_BAD_ACCEPT */
        return;
    }
    EVP_EncodeBlock((unsigned char *)out, sha, 20);
}

size_t lg_ws_request(char *buf, size_t cap, const char *host, const char *key)
{
    int n = snprintf(buf, cap,
                     "GET " LG_WS_PATH " HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "Upgrade: websocket\r\n"
                     "Connection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: " LG_WS_SUBPROTOCOL "\r\n"
                     "User-Agent: herald-loadgen\r\n"
                     "\r\n",
                     host, key);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Whether the comma-separated list [v, v + n) holds token (case-insensitive). */
static bool list_has(const char *v, size_t n, const char *token)
{
    size_t tlen = strlen(token);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < n && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(v + start, token, tlen) == 0)
            return true;
    }
    return false;
}

/* The answer as libhttp-parser reads it, and what its header said about the handshake. The
 * whole answer is one buffer, so a name or value the parser reports in pieces is one span
 * that grows. */
typedef struct answer_s {
    http_parser parser;
    const char *accept; /* the Sec-WebSocket-Accept our key calls for */
    const char *name;   /* the header being read: its name, then its value */
    size_t name_len;
    const char *value;
    size_t value_len;
    bool is_in_value;
    bool has_status;  /* the status line was read (parser.status_code is its code) */
    bool is_complete; /* the header ended */
    bool is_upgrade;
    bool is_connection;
    bool is_accept;
    bool is_protocol;
    bool has_extension;
} answer_t;

static answer_t *answer_of(http_parser *p)
{
    return (answer_t *)((char *)p - offsetof(answer_t, parser));
}

/* A header (name and value) is complete: note what it says. */
static void answer_header(answer_t *a)
{
    const char *v = a->value;
    size_t vlen = a->value_len;
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
#define IS(s) (a->name_len == sizeof(s) - 1 && strncasecmp(a->name, s, a->name_len) == 0)
    if (IS("upgrade"))
        a->is_upgrade = vlen == 9 && strncasecmp(v, "websocket", 9) == 0;
    else if (IS("connection"))
        a->is_connection = list_has(v, vlen, "upgrade");
    else if (IS("sec-websocket-accept"))
        a->is_accept = vlen == LG_WS_ACCEPT_LEN && memcmp(v, a->accept, vlen) == 0;
    else if (IS("sec-websocket-protocol"))
        a->is_protocol =
            vlen == sizeof(LG_WS_SUBPROTOCOL) - 1 && memcmp(v, LG_WS_SUBPROTOCOL, vlen) == 0;
    else if (IS("sec-websocket-extensions"))
        a->has_extension = true;
#undef IS
    a->name = a->value = NULL;
    a->name_len = a->value_len = 0;
    a->is_in_value = false;
}

static int on_status(http_parser *p, const char *at, size_t len)
{
    NL_UNUSED(at);
    NL_UNUSED(len);
    answer_of(p)->has_status = true;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    answer_t *a = answer_of(p);
    if (a->is_in_value)
        answer_header(a);
    if (!a->name)
        a->name = at;
    a->name_len += len;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    answer_t *a = answer_of(p);
    a->is_in_value = true;
    if (!a->value)
        a->value = at;
    a->value_len += len;
    return 0;
}

/* Returns 2: no body, and the bytes after the header are another protocol's (the frames). */
static int on_headers_complete(http_parser *p)
{
    answer_t *a = answer_of(p);
    if (a->is_in_value || a->name)
        answer_header(a);
    a->is_complete = true;
    return 2;
}

static const http_parser_settings answer_settings = {
    .on_status = on_status,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
};

int lg_ws_check_response(const char *p, size_t n, const char *key, size_t *hdr_len,
                         const char **reason)
{
    char accept[LG_WS_ACCEPT_LEN + 1];
    lg_ws_accept(key, accept);
    answer_t a = {.accept = accept};
    http_parser_init(&a.parser, HTTP_RESPONSE);
    size_t parsed = http_parser_execute(&a.parser, &answer_settings, p, n);
    if (!a.is_complete) {
        if (HTTP_PARSER_ERRNO(&a.parser) == HPE_OK && parsed == n)
            return 0; /* the header is not complete yet */
        /* A refusal whose header is broken is still a refusal. */
        *reason =
            a.has_status && a.parser.status_code != 101 ? "WS_UPGRADE_REFUSED" : "WS_BAD_RESPONSE";
        return -EPROTO;
    }
    *hdr_len = parsed;
    if (a.parser.http_major != 1)
        *reason = "WS_BAD_RESPONSE";
    else if (a.parser.status_code != 101)
        *reason = "WS_UPGRADE_REFUSED";
    else if (!a.is_upgrade || !a.is_connection)
        *reason = "WS_BAD_UPGRADE";
    else if (!a.is_accept)
        *reason = "WS_BAD_ACCEPT";
    else if (!a.is_protocol)
        *reason = "WS_BAD_SUBPROTOCOL";
    else if (a.has_extension)
        *reason = "WS_BAD_EXTENSION";
    else
        return 1;
    return -EPROTO;
}
