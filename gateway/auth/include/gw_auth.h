/*
 * gw_token: client tokens, JWT HS256 compatible, so any JWT library can mint them:
 *
 *     base64url({"alg":"HS256","typ":"JWT"}) "." base64url(claims) "." base64url(HMAC-SHA256)
 *
 * Claims herald reads:
 *   sub       string, required, 1..GW_TOKEN_SUB_MAX bytes: the user id.
 *   exp       integer, required: expiry, seconds since the Unix epoch, at most 2^32 - 1 (year
 *             2106; a later one is a bad claim). A token is expired when now >= exp (RFC 7519
 *             §4.1.4; no leeway, pass a later `now` to allow skew).
 *   nbf       integer, optional: not valid before this second.
 *   channels  array of strings, optional: the channel patterns (gw_channel.h) the user
 *             may subscribe and publish to. Absent or empty means NO channel rights at all:
 *             the connection may authenticate, ping and be seen online, nothing else. There
 *             is no implicit personal channel; mint "user:42" into the list if you want one.
 *             At most GW_TOKEN_MAX_CHANNELS patterns, each valid for max_channel_bytes.
 * Other claims (iat, iss, aud, ...) are ignored. The header must say "alg":"HS256"; "none"
 * and every other algorithm are refused before the signature is looked at.
 *
 * Tokens are at most GW_TOKEN_MAX_BYTES (4 KiB). Verification does no allocation of its own
 * beyond the JSON parser's: decoding happens in stack buffers, and the claims land in the
 * caller's gw_token_claims_t. Signatures are compared in constant time.
 *
 * Tokens are never logged. Log gw_token_hash_short() instead.
 *
 * Thread: every function is safe from any thread (no shared state); verification is meant to
 * run on worker threads.
 * Ownership: the caller owns every buffer; gw_token_claims_t holds no pointers.
 */
#ifndef HERALD_GATEWAY_AUTH_GW_AUTH_H
#define HERALD_GATEWAY_AUTH_GW_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GW_TOKEN_MAX_BYTES 4096      /* the whole token */
#define GW_TOKEN_SUB_MAX 128         /* user id bytes, NUL excluded */
#define GW_TOKEN_MAX_CHANNELS 64     /* patterns in the channels claim */
#define GW_TOKEN_CHANNELS_BYTES 3072 /* all patterns together, a NUL after each */
#define GW_TOKEN_HASH_SHORT_LEN 12   /* hex digits of gw_token_hash_short, NUL excluded */

/* Why a token was refused. 0 is "valid"; every error is negative. */
typedef enum gw_token_err_e {
    GW_TOKEN_OK = 0,
    GW_TOKEN_ERR_MALFORMED = -1,     /* too long, not three base64url parts, not JSON objects */
    GW_TOKEN_ERR_ALG = -2,           /* header alg is not exactly "HS256" ("none" included) */
    GW_TOKEN_ERR_SIGNATURE = -3,     /* the HMAC does not match */
    GW_TOKEN_ERR_EXPIRED = -4,       /* now >= exp */
    GW_TOKEN_ERR_NOT_YET_VALID = -5, /* now < nbf */
    GW_TOKEN_ERR_MISSING_SUB = -6,   /* sub absent, not a string, empty or too long */
    GW_TOKEN_ERR_CLAIMS = -7,        /* exp absent, not an integer or past 2^32 - 1, bad nbf,
                                      * bad channels */
} gw_token_err_t;

/* What a valid token grants. A plain value (about 3.5 KiB, no pointers): copy it freely. */
typedef struct gw_token_claims_s {
    char sub[GW_TOKEN_SUB_MAX + 1]; /* NUL-terminated */
    int64_t exp_s;                  /* expiry, Unix seconds */
    size_t channel_count;
    /* Pattern i is channel_bytes + channel_offs[i], channel_lens[i] bytes, NUL-terminated;
     * gw_token_claims_channel() reads it. */
    uint16_t channel_offs[GW_TOKEN_MAX_CHANNELS];
    uint16_t channel_lens[GW_TOKEN_MAX_CHANNELS];
    char channel_bytes[GW_TOKEN_CHANNELS_BYTES];
} gw_token_claims_t;

/* Verifies token[0..len) against secret[0..secret_len) at time now_s (Unix seconds) and fills
 * *out. Channel patterns are validated with max_channel_bytes (0: the default, 128).
 * Returns: GW_TOKEN_OK, or one gw_token_err_t. The checks run in this order: size and shape
 *          (MALFORMED), header alg (ALG), signature (SIGNATURE), claims JSON (MALFORMED), sub
 *          (MISSING_SUB), exp/nbf types and channels (CLAIMS), then time (EXPIRED,
 *          NOT_YET_VALID). *out is meaningful only on GW_TOKEN_OK.
 * Thread: any. Ownership: nothing retained; *out is the caller's. */
gw_token_err_t gw_token_verify(const char *token, size_t len, const void *secret, size_t secret_len,
                               int64_t now_s, size_t max_channel_bytes, gw_token_claims_t *out);

/* One HS256 key: secret[0..len). Not NUL-terminated; the caller owns the bytes. */
typedef struct gw_token_key_s {
    const void *secret;
    size_t len;
} gw_token_key_t;

/* As gw_token_verify, with several keys: the signature may match any of keys[0..n_keys) (the
 * current secret and those kept during a rotation). *key_index (may be NULL) gets the index
 * of the key that matched, on GW_TOKEN_OK and on every error found after the signature
 * (claims, time). Keys are tried in order; each costs one HMAC, and only a signature that
 * matches none of them is refused. n_keys 0 refuses every token with GW_TOKEN_ERR_SIGNATURE.
 * Returns: as gw_token_verify. Thread: any. Ownership: nothing retained. */
gw_token_err_t gw_token_verify_keys(const char *token, size_t len, const gw_token_key_t *keys,
                                    size_t n_keys, int64_t now_s, size_t max_channel_bytes,
                                    gw_token_claims_t *out, size_t *key_index);

/* Signs a token for sub, valid from now_s for ttl_s seconds (exp = now_s + ttl_s, iat = now_s),
 * granting the n patterns in channels (n may be 0). Writes a NUL-terminated token to out.
 * Returns: the token length (excluding the NUL); -EINVAL when sub is empty or too long, a
 *          pattern is invalid, n > GW_TOKEN_MAX_CHANNELS or ttl_s <= 0; -ENOBUFS when out_cap
 *          is too small or the token would exceed GW_TOKEN_MAX_BYTES; -ENOMEM.
 * Thread: any. Ownership: out is the caller's. */
ssize_t gw_token_sign(const char *sub, const char *const *channels, size_t n, int64_t now_s,
                      int64_t ttl_s, const void *secret, size_t secret_len, char *out,
                      size_t out_cap);

/* Insecure mode's user id for token[0..len), read with no verification at all: the sub claim
 * of a JWT-shaped token when it is a string of 1..GW_TOKEN_SUB_MAX bytes, else the token's
 * first GW_TOKEN_SUB_MAX bytes (fewer if that would split a UTF-8 character), else
 * "anonymous" for an empty token. Writes it and a NUL to out (GW_TOKEN_SUB_MAX + 1 bytes).
 * Never use it where tokens are verified.
 * Returns: its length, 1..GW_TOKEN_SUB_MAX. Thread: any. Ownership: out is the caller's. */
size_t gw_token_insecure_user(const char *token, size_t len, char *out);

/* Tells whether the claims allow channel name[0..len): some pattern matches it.
 * Returns: true when allowed. Thread: any. */
bool gw_token_claims_allow(const gw_token_claims_t *claims, const char *name, size_t len);

/* Returns pattern i (NUL-terminated) of claims and stores its length in *len (may be NULL).
 * Thread: any. Ownership: points into claims. */
const char *gw_token_claims_channel(const gw_token_claims_t *claims, size_t i, size_t *len);

/* Writes the first GW_TOKEN_HASH_SHORT_LEN hex digits of SHA-256(token) and a NUL to out,
 * which must hold GW_TOKEN_HASH_SHORT_LEN + 1 bytes: a stable tag for logs that does not
 * reveal the token. Thread: any. */
void gw_token_hash_short(const char *token, size_t len, char *out);

/* Returns a static snake_case text for an error ("malformed", "bad_signature", ...).
 * Thread: any. Ownership: static string. */
const char *gw_token_err_str(gw_token_err_t err);

#endif
