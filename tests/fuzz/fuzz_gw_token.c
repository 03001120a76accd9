/*
 * libFuzzer target for gateway/gw_token.c, the verification of the token every client sends
 * in Connect (clang -fsanitize=fuzzer,address,undefined).
 *
 * Input layout: byte 0 picks the mode (bit 0) and max_channel_bytes (b >> 1: 0 means the
 * default 128); byte 1 where the rest splits in two.
 *   - mode 0: the rest is a token, verified as a client would send it. Almost every input
 *     stops at the shape, the header or the signature, which is what a stranger reaches.
 *   - mode 1: the rest is a header JSON text and a claims JSON text (an empty header means
 *     the canonical one). The target base64url-encodes them and signs them with the secret,
 *     so the input reaches the claims parser: what a buggy or careless token issuer reaches.
 *
 * Beyond "no crash, no leak, no UB" it checks what a verified token promises:
 *   - sub is 1..GW_TOKEN_SUB_MAX bytes and is the claim's whole string, not a prefix of it;
 *   - exp is in the future; every pattern is valid for max_channel_bytes, NUL-terminated at
 *     its length, inside channel_bytes, and allows a name it covers;
 *   - the claims re-signed by gw_token_sign verify to the same sub, exp and patterns.
 * In mode 0 it also derives insecure mode's user id from the input (gw_token_insecure_user),
 * which must be 1..GW_TOKEN_SUB_MAX bytes and, for a token that is UTF-8 without NUL (what
 * proto_frame lets through in Connect), UTF-8 too: it goes back in ConnectOk.user_id.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "gw_channel.h"
#include "gw_auth.h"
#include "netlib/nl_common.h"

#define SECRET "fuzz-secret-fuzz-secret"
#define SECRET_LEN (sizeof(SECRET) - 1)
#define NOW 1700000000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Unpadded base64url of in[0..len) into out (4 * ceil(len / 3) + 1 bytes). */
static size_t b64url(const uint8_t *in, size_t len, char *out)
{
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[n] = '\0';
    return (size_t)n;
}

/* header.claims.signature into out (GW_TOKEN_MAX_BYTES + 1); returns its length, or 0 when
 * the token would be too long to be accepted anyway. */
static size_t make_token(const uint8_t *header, size_t hlen, const uint8_t *claims, size_t clen,
                         char *out)
{
    static const char canonical[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    if (hlen == 0) {
        header = (const uint8_t *)canonical;
        hlen = sizeof(canonical) - 1;
    }
    if ((hlen + 2) / 3 * 4 + (clen + 2) / 3 * 4 + 45 > GW_TOKEN_MAX_BYTES)
        return 0;
    size_t k = b64url(header, hlen, out);
    out[k++] = '.';
    k += b64url(claims, clen, out + k);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    NL_ASSERT(HMAC(EVP_sha256(), SECRET, (int)SECRET_LEN, (const unsigned char *)out, k, mac,
                   &mac_len) != NULL);
    out[k++] = '.';
    k += b64url(mac, mac_len, out + k);
    return k;
}

/* Strict UTF-8 without NUL: what a protobuf string field may carry (see proto_frame.c). */
static bool is_utf8_no_nul(const uint8_t *s, size_t n)
{
    static const uint8_t lead_bits[] = {0x7f, 0x1f, 0x0f, 0x07};
    static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : 3;
        if (c == 0 || (c & 0xc0) == 0x80 || c >= 0xf8 || n - i - 1 < more)
            return false;
        uint32_t cp = c & lead_bits[more];
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (cp < min[more] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += more + 1;
    }
    return true;
}

/* Insecure mode's user id for a token as gw_session_connect passes it (no NUL inside). */
static void check_insecure_user(const char *token, size_t len)
{
    if (memchr(token, '\0', len) != NULL)
        return;
    char user[GW_TOKEN_SUB_MAX + 1];
    size_t n = gw_token_insecure_user(token, len, user);
    NL_ASSERT(n >= 1 && n <= GW_TOKEN_SUB_MAX && strlen(user) == n);
    if (is_utf8_no_nul((const uint8_t *)token, len))
        NL_ASSERT(is_utf8_no_nul((const uint8_t *)user, n));
}

/* A name the pattern covers: the pattern itself, its prefix, or "x" for "*". */
static void covered_name(const char *pattern, size_t plen, char *out, size_t *len)
{
    if (plen == 1 && pattern[0] == '*') {
        out[0] = 'x';
        *len = 1;
        return;
    }
    *len = pattern[plen - 1] == '*' ? plen - 1 : plen;
    memcpy(out, pattern, *len);
}

static void check_claims(const gw_token_claims_t *c, size_t max_channel_bytes)
{
    size_t sub_len = strlen(c->sub);
    NL_ASSERT(sub_len >= 1 && sub_len <= GW_TOKEN_SUB_MAX);
    NL_ASSERT(c->exp_s > NOW);
    NL_ASSERT(c->channel_count <= GW_TOKEN_MAX_CHANNELS);
    for (size_t i = 0; i < c->channel_count; i++) {
        size_t plen = 0;
        const char *p = gw_token_claims_channel(c, i, &plen);
        NL_ASSERT(p >= c->channel_bytes && p + plen < c->channel_bytes + sizeof(c->channel_bytes));
        NL_ASSERT(strlen(p) == plen);
        NL_ASSERT(gw_channel_pattern_check(p, plen, max_channel_bytes) == GW_CHANNEL_OK);
        char name[GW_CHANNEL_NAME_MAX_LIMIT + 1];
        size_t nlen = 0;
        covered_name(p, plen, name, &nlen);
        NL_ASSERT(gw_token_claims_allow(c, name, nlen));
    }
}

/* The sub claim as jansson reads it from the (already verified) token's claims text. */
static void check_sub_is_whole(const uint8_t *claims, size_t clen, const gw_token_claims_t *c)
{
    json_t *root = json_loadb((const char *)claims, clen, JSON_REJECT_DUPLICATES, NULL);
    NL_ASSERT(root != NULL);
    json_t *sub = json_object_get(root, "sub");
    NL_ASSERT(json_string_length(sub) == strlen(c->sub));
    json_decref(root);
}

/* Signs the claims again with gw_token_sign and checks they verify to the same grant. */
static void check_resign(const gw_token_claims_t *c, size_t max_channel_bytes)
{
    const char *patterns[GW_TOKEN_MAX_CHANNELS];
    for (size_t i = 0; i < c->channel_count; i++)
        patterns[i] = gw_token_claims_channel(c, i, NULL);
    char token[GW_TOKEN_MAX_BYTES + 1];
    ssize_t n = gw_token_sign(c->sub, patterns, c->channel_count, NOW, c->exp_s - NOW, SECRET,
                              SECRET_LEN, token, sizeof(token));
    if (n == -ENOBUFS)
        return; /* the canonical encoding can be longer than a compact original */
    NL_ASSERT(n > 0 && (size_t)n == strlen(token));
    gw_token_claims_t again;
    NL_ASSERT(gw_token_verify(token, (size_t)n, SECRET, SECRET_LEN, NOW, max_channel_bytes,
                              &again) == GW_TOKEN_OK);
    NL_ASSERT(strcmp(again.sub, c->sub) == 0);
    NL_ASSERT(again.exp_s == c->exp_s);
    NL_ASSERT(again.channel_count == c->channel_count);
    for (size_t i = 0; i < c->channel_count; i++)
        NL_ASSERT(strcmp(gw_token_claims_channel(&again, i, NULL), patterns[i]) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    bool is_signed = data[0] & 1;
    size_t max_channel_bytes = data[0] >> 1;
    size_t split = data[1];
    data += 2;
    size -= 2;
    if (split > size)
        split = size;

    static char token[GW_TOKEN_MAX_BYTES + 1];
    size_t len;
    if (is_signed) {
        len = make_token(data, split, data + split, size - split, token);
        if (len == 0)
            return 0;
    } else {
        len = size < sizeof(token) ? size : sizeof(token);
        memcpy(token, data, len);
        check_insecure_user(token, len);
    }
    gw_token_claims_t claims;
    gw_token_err_t rc =
        gw_token_verify(token, len, SECRET, SECRET_LEN, NOW, max_channel_bytes, &claims);
    NL_ASSERT(rc <= GW_TOKEN_OK && rc >= GW_TOKEN_ERR_CLAIMS);
    NL_ASSERT(strcmp(gw_token_err_str(rc), "unknown") != 0);
    char tag[GW_TOKEN_HASH_SHORT_LEN + 1];
    gw_token_hash_short(token, len, tag);
    NL_ASSERT(strlen(tag) == GW_TOKEN_HASH_SHORT_LEN);
    if (rc != GW_TOKEN_OK)
        return 0;
    NL_ASSERT(is_signed); /* nobody forges a signature by chance */
    check_claims(&claims, max_channel_bytes);
    check_sub_is_whole(data + split, size - split, &claims);
    check_resign(&claims, max_channel_bytes);
    return 0;
}
