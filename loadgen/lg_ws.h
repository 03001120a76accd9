/*
 * lg_ws: the client side of WebSocket (RFC 6455) for herald-loadgen, over plain TCP ("ws") or
 * TLS ("wss", lg_tls under it), as one netlib transport (lg_ws_transport, declared in
 * lg_transport.h). proto/PROTOCOL.md's WebSocket section is the contract: path /connection,
 * subprotocol herald.v1, each binary message exactly one herald.Frame without a varint prefix,
 * client frames masked.
 *
 * Handshake (lg_ws_upgrade.h): after TCP (and TLS), a GET /connection upgrade request with a
 * random Sec-WebSocket-Key; an answer that is not the 101 that key calls for fails the attempt
 * with a reason (WS_UPGRADE_REFUSED, WS_BAD_ACCEPT, ...); the first refusal's status line is
 * printed once on stderr.
 *
 * Input: server frames (unmasked) are read by libwslay's frame parser, and each binary
 * message's payload goes into the connection's input behind a varint of its length: loadgen's
 * parser (lg_wire) reads one format whatever the transport. A close frame is answered and ends
 * the stream; a ping is answered with a pong; text, masked or reserved frames are protocol
 * errors.
 *
 * Output: netlib's output is the varint-delimited stream lg_client writes; each frame in it
 * leaves as one binary WebSocket frame, its payload masked, its varint replaced by the frame
 * header (built here, not by libwslay: lg_ws.c says why). Mask keys come from a per-connection
 * seed drawn from OpenSSL's RAND_bytes and the frame's number, so a write that must be
 * retried (TLS: the same bytes again) is built again byte for byte.
 *
 * Thread: the pure functions below on any thread; the transport on each connection's loop.
 */
#ifndef HERALD_LOADGEN_LG_WS_H
#define HERALD_LOADGEN_LG_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_WS_HEADER_MAX 14 /* 2 + 8 (64-bit length) + 4 (mask) */

enum {
    LG_WS_CONTINUATION = 0x0,
    LG_WS_TEXT = 0x1,
    LG_WS_BINARY = 0x2,
    LG_WS_CLOSE = 0x8,
    LG_WS_PING = 0x9,
    LG_WS_PONG = 0xa,
};

/* Writes a final frame's header (FIN, opcode, length, and the mask key when mask is not
 * NULL) to out. Returns its length. Thread: any. */
size_t lg_ws_frame_header(uint8_t out[LG_WS_HEADER_MAX], uint8_t opcode, uint64_t len,
                          const uint8_t *mask);

/* XORs p[0..n) with the 4-byte key, starting at key byte `offset` (0..3). Thread: any. */
void lg_ws_mask(uint8_t *p, size_t n, const uint8_t key[4], unsigned offset);

/* Frame n's mask key on a connection whose seed is seed: the same for the same pair, so a
 * write that is built again (a TLS retry) masks with the same key. Thread: any. */
void lg_ws_mask_key(uint64_t seed, uint64_t n, uint8_t key[4]);

#endif
