/*
 * lg_ws: the client side of WebSocket (RFC 6455) for herald-loadgen, over plain TCP ("ws") or
 * TLS ("wss", lg_tls under it), as one netlib transport (lg_ws_transport, declared in
 * lg_transport.h). proto/PROTOCOL.md's WebSocket section is the contract: path /connection,
 * subprotocol herald.v1, each binary message exactly one herald.Frame without a varint prefix,
 * client frames masked.
 *
 * Handshake: after TCP (and TLS), a GET /connection upgrade request with a random
 * Sec-WebSocket-Key; the answer must be 101 with Upgrade: websocket, Connection: Upgrade, the
 * Sec-WebSocket-Accept that key calls for, Sec-WebSocket-Protocol: herald.v1 and no extension.
 * Anything else fails the attempt with a reason (WS_UPGRADE_REFUSED, WS_BAD_ACCEPT, ...); the
 * first refusal's status line is printed once on stderr.
 *
 * Input: server frames (unmasked) are read, and each binary message's payload goes into the
 * connection's input behind a varint of its length: loadgen's parser (lg_wire) reads one
 * format whatever the transport. A close frame is answered and ends the stream; a ping is
 * answered with a pong; text, masked or reserved frames are protocol errors.
 *
 * Output: netlib's output is the varint-delimited stream lg_client writes; each frame in it
 * leaves as one binary WebSocket frame, its payload masked, its varint replaced by the frame
 * header. Mask keys come from a per-connection key drawn from OpenSSL's RAND_bytes and the
 * frame's number, so a write that must be retried (TLS: the same bytes again) is built again
 * byte for byte.
 *
 * Thread: the pure functions below on any thread; the transport on each connection's loop.
 */
#ifndef HERALD_LOADGEN_LG_WS_H
#define HERALD_LOADGEN_LG_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_WS_PATH "/connection"
#define LG_WS_SUBPROTOCOL "herald.v1"
#define LG_WS_KEY_LEN 24    /* base64 of 16 bytes */
#define LG_WS_ACCEPT_LEN 28 /* base64 of a SHA-1 */
#define LG_WS_HEADER_MAX 14 /* 2 + 8 (64-bit length) + 4 (mask) */

enum {
    LG_WS_CONTINUATION = 0x0,
    LG_WS_TEXT = 0x1,
    LG_WS_BINARY = 0x2,
    LG_WS_CLOSE = 0x8,
    LG_WS_PING = 0x9,
    LG_WS_PONG = 0xa,
};

/* A frame header as read. */
typedef struct lg_ws_frame_s {
    bool fin;
    bool is_masked;
    uint8_t rsv;    /* the three reserved bits */
    uint8_t opcode; /* LG_WS_* */
    size_t hdr_len; /* header bytes, mask included */
    uint64_t len;   /* payload bytes */
} lg_ws_frame_t;

/* Reads the frame header at p[0..n). Returns: 1 (header complete; the payload may not be);
 * 0 (more bytes needed); -EPROTO (a 64-bit length with its top bit set). Thread: any. */
int lg_ws_frame_parse(const uint8_t *p, size_t n, lg_ws_frame_t *f);

/* Writes a final frame's header (FIN, opcode, length, and the mask key when mask is not
 * NULL) to out. Returns its length. Thread: any. */
size_t lg_ws_frame_header(uint8_t out[LG_WS_HEADER_MAX], uint8_t opcode, uint64_t len,
                          const uint8_t *mask);

/* XORs p[0..n) with the 4-byte key, starting at key byte `offset` (0..3). Thread: any. */
void lg_ws_mask(uint8_t *p, size_t n, const uint8_t key[4], unsigned offset);

/* The Sec-WebSocket-Accept a key calls for, NUL-terminated. Thread: any. */
void lg_ws_accept(const char *key, char out[LG_WS_ACCEPT_LEN + 1]);

/* Writes the upgrade request for host ("127.0.0.1:7400") and key to buf. Returns its length,
 * or 0 when it does not fit. Thread: any. */
size_t lg_ws_request(char *buf, size_t cap, const char *host, const char *key);

/* Checks the server's answer in p[0..n) to the request made with key.
 * Returns: 1 with *hdr_len (the bytes up to and with the blank line; frames may follow);
 * 0 when the header is not complete yet; -EPROTO with *reason (WS_UPGRADE_REFUSED: not 101;
 * WS_BAD_UPGRADE: Upgrade or Connection wrong; WS_BAD_ACCEPT; WS_BAD_SUBPROTOCOL;
 * WS_BAD_EXTENSION; WS_BAD_RESPONSE: not HTTP). Thread: any. */
int lg_ws_check_response(const char *p, size_t n, const char *key, size_t *hdr_len,
                         const char **reason);

#endif
