/*
 * lg_token: the tokens herald-loadgen's clients present in Connect, signed here with OpenSSL:
 * JWT HS256, as proto/PROTOCOL.md section 8 describes them,
 *
 *     base64url({"alg":"HS256","typ":"JWT"}) "." base64url(claims) "." base64url(HMAC-SHA256)
 *
 * base64url without padding, claims {"sub":..., "iat":..., "exp":..., "channels":[...]}.
 * loadgen speaks only the wire protocol: it does not link the gateway, so this signer is an
 * independent implementation of what herald verifies, and tests/unit/test_lg_token.c checks
 * the one against the other.
 *
 * Each loadgen client is its own user, "<prefix>-<id>", allowed the channels "<prefix>:*" (its
 * own, the group and the broadcast channels). With --insecure and no --secret the token is
 * signed with a fixed dummy key: the server does not check signatures then, but still reads
 * the sub claim as the user id.
 *
 * Thread: every function is safe from any thread (no shared state). Ownership: the caller owns
 * every buffer; nothing is retained or allocated.
 * Usage: char tok[LG_TOKEN_MAX]; ssize_t n = lg_token_make(cfg, id, tok, sizeof tok);
 */
#ifndef HERALD_LOADGEN_LG_TOKEN_H
#define HERALD_LOADGEN_LG_TOKEN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lg_config.h"

#define LG_TOKEN_MAX 1024        /* bytes for one loadgen token, NUL included */
#define LG_TOKEN_SUB_MAX 128     /* user id bytes herald accepts (PROTOCOL.md section 8) */
#define LG_TOKEN_CLAIMS_MAX 3072 /* the claims JSON text lg_token_sign builds */

/* Signs claims[0..len) (a JSON object's text, used as is) with HMAC-SHA256 under
 * key[0..key_len) and writes the whole token and a NUL to out.
 * Returns: the token length (NUL excluded); -EINVAL when len or key_len is 0; -ENOBUFS when
 *          out_cap is too small; -EIO when OpenSSL fails.
 * Thread: any. Ownership: out is the caller's. */
ssize_t lg_token_sign_json(const char *claims, size_t len, const void *key, size_t key_len,
                           char *out, size_t out_cap);

/* Signs a token for user sub granting the n patterns in channels, issued at now_s and expiring
 * at now_s + ttl_s (Unix seconds). sub and the patterns are JSON-escaped; they must be UTF-8.
 * Returns: the token length; -EINVAL when sub is empty, longer than LG_TOKEN_SUB_MAX bytes or
 *          not UTF-8, a pattern is not UTF-8, ttl_s <= 0 or exp would overflow, or key_len is
 *          0; -ENOBUFS when the claims pass LG_TOKEN_CLAIMS_MAX or out_cap is too small; -EIO.
 * Thread: any. Ownership: out is the caller's. */
ssize_t lg_token_sign(const char *sub, const char *const *channels, size_t n, int64_t now_s,
                      int64_t ttl_s, const void *key, size_t key_len, char *out, size_t out_cap);

/* Writes the token of fleet client id (NUL-terminated) to out, valid from now for
 * cfg->token_ttl_s seconds.
 * Returns: its length; as lg_token_sign otherwise. Thread: any. */
ssize_t lg_token_make(const lg_config_t *cfg, uint32_t id, char *out, size_t out_cap);

#endif
