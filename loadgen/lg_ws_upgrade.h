/*
 * lg_ws_upgrade: the WebSocket opening handshake, client side (RFC 6455 section 4.1), for
 * lg_ws: the upgrade request herald-loadgen sends, and the checks on herald's answer, which
 * libhttp-parser reads (response mode), as gw_ws_upgrade.c reads the request on herald's side.
 * The answer must be 101 with Upgrade: websocket, Connection: Upgrade, the
 * Sec-WebSocket-Accept the request's key calls for (SHA-1 and base64 from OpenSSL),
 * Sec-WebSocket-Protocol: herald.v1 and no extension.
 *
 * Thread: any (pure functions). Ownership: the caller's buffers only; nothing is allocated.
 */
#ifndef HERALD_LOADGEN_LG_WS_UPGRADE_H
#define HERALD_LOADGEN_LG_WS_UPGRADE_H

#include <stddef.h>

#define LG_WS_PATH "/connection"
#define LG_WS_SUBPROTOCOL "herald.v1"
#define LG_WS_KEY_LEN 24    /* base64 of 16 bytes */
#define LG_WS_ACCEPT_LEN 28 /* base64 of a SHA-1 */

/* The Sec-WebSocket-Accept a key calls for, NUL-terminated. Thread: any. */
void lg_ws_accept(const char *key, char out[LG_WS_ACCEPT_LEN + 1]);

/* Writes the upgrade request for host ("127.0.0.1:7400") and key to buf. Returns its length,
 * or 0 when it does not fit. Thread: any. */
size_t lg_ws_request(char *buf, size_t cap, const char *host, const char *key);

/* Checks the server's answer in p[0..n) to the request made with key, parsed by
 * libhttp-parser (response mode) from p[0] on, so p holds the answer from its first byte.
 * Returns: 1 with *hdr_len (the bytes up to and with the blank line; frames may follow);
 * 0 when the header is not complete yet; -EPROTO with *reason (WS_UPGRADE_REFUSED: a status
 * line with another code than 101; WS_BAD_UPGRADE: Upgrade or Connection wrong;
 * WS_BAD_ACCEPT; WS_BAD_SUBPROTOCOL; WS_BAD_EXTENSION; WS_BAD_RESPONSE: not HTTP/1.x).
 * Thread: any. */
int lg_ws_check_response(const char *p, size_t n, const char *key, size_t *hdr_len,
                         const char **reason);

#endif
