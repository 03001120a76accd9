/*
 * gw_token: JWT HS256 verification and signing with OpenSSL's HMAC and jansson.
 *
 * The verifier is ordered so that an attacker's bytes reach the JSON parser as late as
 * possible: the shape is checked by scanning, the (tiny) header is parsed only to read alg,
 * and the claims are parsed only once the signature has matched. Decoding uses stack buffers
 * bounded by GW_TOKEN_MAX_BYTES, so the only allocations are jansson's.
 */
#include "gw_auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "gw_channel.h"

/* An HMAC-SHA256 is 32 bytes, 43 base64url characters without padding. */
#define MAC_BYTES 32
#define MAC_B64_LEN 43
/* Decoded bytes of a base64url run of at most GW_TOKEN_MAX_BYTES characters, plus slack for the
 * padding EVP_DecodeBlock decodes as zero bytes. */
#define DECODED_MAX (GW_TOKEN_MAX_BYTES / 4 * 3 + 3)

/* base64url characters: the standard alphabet with '-' and '_' for '+' and '/'. */
static bool is_b64url_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/*
 * Decodes unpadded base64url in[0..len) into out (at least DECODED_MAX bytes). EVP_DecodeBlock
 * speaks only standard, padded base64, so the run is mapped and padded into a stack copy
 * first; it returns the length including the zero bytes the padding stands for, which are
 * taken off again. Returns the decoded length, or -1.
 */
static ssize_t b64url_decode(const char *in, size_t len, unsigned char *out)
{
    if (len == 0 || len > GW_TOKEN_MAX_BYTES || len % 4 == 1)
        return -1;
    unsigned char std[GW_TOKEN_MAX_BYTES + 4];
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (!is_b64url_char(c))
            return -1;
        std[i] = c == '-' ? '+' : c == '_' ? '/' : c;
    }
    size_t pad = (4 - len % 4) % 4;
    memset(std + len, '=', pad);
    int n = EVP_DecodeBlock(out, std, (int)(len + pad));
    if (n < 0 || (size_t)n < pad)
        return -1;
    return (ssize_t)((size_t)n - pad);
}

/* Encodes in[0..len) as unpadded base64url into out, which must hold 4 * ceil(len / 3) + 1
 * bytes. Returns the encoded length (out is NUL-terminated). */
static size_t b64url_encode(const unsigned char *in, size_t len, char *out)
{
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    out[n] = '\0';
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return (size_t)n;
}

/* jansson seeds its hash function on first use; doing it once, before any concurrent parse,
 * keeps worker threads from racing on the seed in builds without atomic builtins. */
static pthread_once_t json_seed_once = PTHREAD_ONCE_INIT;

static void json_seed(void)
{
    json_object_seed(0);
}

/* Computes the base64url HMAC-SHA256 of data under the secret into out (MAC_B64_LEN + 1). */
static int mac_b64(const void *secret, size_t secret_len, const char *data, size_t len, char *out)
{
    /* OpenSSL refuses a NULL key even with length 0; give it an empty one. */
    static const unsigned char empty_key[1];
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    if (secret_len == 0)
        secret = empty_key;
    if (HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)data, len, mac,
             &mac_len) == NULL ||
        mac_len != MAC_BYTES)
        return -1;
    b64url_encode(mac, mac_len, out);
    return 0;
}

/* Parses a base64url JSON object. Returns NULL when the part is not one. */
static json_t *decode_object(const char *part, size_t len, unsigned char *buf)
{
    ssize_t n = b64url_decode(part, len, buf);
    if (n <= 0)
        return NULL;
    json_t *obj = json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
    if (obj != NULL && !json_is_object(obj)) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static gw_token_err_t check_header(const char *part, size_t len, unsigned char *buf)
{
    /* Fast path: the canonical {"alg":"HS256","typ":"JWT"} that gw_token_sign, PyJWT and
     * jsonwebtoken all emit needs no JSON parser. */
    static const char canonical[] = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
    if (len == sizeof(canonical) - 1 && memcmp(part, canonical, len) == 0)
        return GW_TOKEN_OK;
    json_t *header = decode_object(part, len, buf);
    if (header == NULL)
        return GW_TOKEN_ERR_MALFORMED;
    /* Exactly "HS256": "none", "hs256" and every other algorithm are refused here, before a
     * signature is considered, so no algorithm confusion is possible. */
    const char *alg = json_string_value(json_object_get(header, "alg"));
    gw_token_err_t rc = alg != NULL && strcmp(alg, "HS256") == 0 ? GW_TOKEN_OK : GW_TOKEN_ERR_ALG;
    json_decref(header);
    return rc;
}

/* Copies the channels claim (an array of valid patterns, or absent) into out. */
static gw_token_err_t read_channels(json_t *claims, size_t max_channel_bytes,
                                    gw_token_claims_t *out)
{
    out->channel_count = 0;
    json_t *list = json_object_get(claims, "channels");
    if (list == NULL)
        return GW_TOKEN_OK;
    if (!json_is_array(list) || json_array_size(list) > GW_TOKEN_MAX_CHANNELS)
        return GW_TOKEN_ERR_CLAIMS;
    size_t used = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *item = json_array_get(list, i);
        const char *pattern = json_string_value(item);
        if (pattern == NULL)
            return GW_TOKEN_ERR_CLAIMS;
        size_t plen = json_string_length(item);
        if (gw_channel_pattern_check(pattern, plen, max_channel_bytes) != GW_CHANNEL_OK ||
            used + plen + 1 > sizeof(out->channel_bytes))
            return GW_TOKEN_ERR_CLAIMS;
        memcpy(out->channel_bytes + used, pattern, plen + 1);
        out->channel_offs[i] = (uint16_t)used;
        out->channel_lens[i] = (uint16_t)plen;
        used += plen + 1;
        out->channel_count = i + 1;
    }
    return GW_TOKEN_OK;
}

/* Reads sub, exp, nbf and channels from the verified claims and applies the time checks. */
static gw_token_err_t read_claims(json_t *claims, int64_t now_s, size_t max_channel_bytes,
                                  gw_token_claims_t *out)
{
    json_t *sub = json_object_get(claims, "sub");
    size_t sub_len = json_string_length(sub);
    if (!json_is_string(sub) || sub_len == 0 || sub_len > GW_TOKEN_SUB_MAX)
        return GW_TOKEN_ERR_MISSING_SUB;
    memcpy(out->sub, json_string_value(sub), sub_len + 1);

    json_t *exp = json_object_get(claims, "exp");
    json_t *nbf = json_object_get(claims, "nbf");
    if (!json_is_integer(exp) || (nbf != NULL && !json_is_integer(nbf)))
        return GW_TOKEN_ERR_CLAIMS;
    out->exp_s = (int64_t)json_integer_value(exp);
    /* A session keeps exp in 32 bits (Unix seconds up to 2106): a later one would have meant
     * "never expires" there, so it is refused, as a bad claim. */
    if (out->exp_s > (int64_t)UINT32_MAX)
        return GW_TOKEN_ERR_CLAIMS;
    gw_token_err_t rc = read_channels(claims, max_channel_bytes, out);
    if (rc != GW_TOKEN_OK)
        return rc;
    if (now_s >= out->exp_s)
        return GW_TOKEN_ERR_EXPIRED;
    if (nbf != NULL && now_s < (int64_t)json_integer_value(nbf))
        return GW_TOKEN_ERR_NOT_YET_VALID;
    return GW_TOKEN_OK;
}

gw_token_err_t gw_token_verify(const char *token, size_t len, const void *secret, size_t secret_len,
                               int64_t now_s, size_t max_channel_bytes, gw_token_claims_t *out)
{
    gw_token_key_t key = {.secret = secret, .len = secret_len};
    return gw_token_verify_keys(token, len, &key, 1, now_s, max_channel_bytes, out, NULL);
}

gw_token_err_t gw_token_verify_keys(const char *token, size_t len, const gw_token_key_t *keys,
                                    size_t n_keys, int64_t now_s, size_t max_channel_bytes,
                                    gw_token_claims_t *out, size_t *key_index)
{
    if (token == NULL || len == 0 || len > GW_TOKEN_MAX_BYTES)
        return GW_TOKEN_ERR_MALFORMED;
    /* Shape: exactly two dots, three non-empty runs of base64url characters. */
    size_t dots[2] = {0, 0};
    size_t n_dots = 0;
    for (size_t i = 0; i < len; i++) {
        if (token[i] != '.') {
            if (!is_b64url_char((unsigned char)token[i]))
                return GW_TOKEN_ERR_MALFORMED;
        } else if (n_dots == 2) {
            return GW_TOKEN_ERR_MALFORMED;
        } else {
            dots[n_dots++] = i;
        }
    }
    if (n_dots != 2 || dots[0] == 0 || dots[1] == dots[0] + 1 || dots[1] == len - 1)
        return GW_TOKEN_ERR_MALFORMED;
    const char *dot1 = token + dots[0];
    const char *dot2 = token + dots[1];
    size_t header_len = dots[0];
    size_t payload_len = dots[1] - dots[0] - 1;
    size_t sig_len = len - dots[1] - 1;
    pthread_once(&json_seed_once, json_seed);

    unsigned char buf[DECODED_MAX];
    gw_token_err_t rc = check_header(token, header_len, buf);
    if (rc != GW_TOKEN_OK)
        return rc;

    /* The signature covers "header.payload" exactly as sent. Comparing the base64url text of
     * the expected MAC, rather than decoded bytes, also refuses non-canonical encodings. Each
     * key is tried in turn (a secret rotation keeps the old ones for a while); the shape and
     * the header were checked once above, and nothing unsigned is parsed until one matches. */
    if (sig_len != MAC_B64_LEN)
        return GW_TOKEN_ERR_SIGNATURE;
    size_t match = n_keys;
    for (size_t k = 0; k < n_keys && match == n_keys; k++) {
        char expected[MAC_B64_LEN + 4];
        if (mac_b64(keys[k].secret, keys[k].len, token, (size_t)(dot2 - token), expected) == 0 &&
            CRYPTO_memcmp(expected, dot2 + 1, MAC_B64_LEN) == 0)
            match = k;
    }
    if (match == n_keys)
        return GW_TOKEN_ERR_SIGNATURE;
    if (key_index != NULL)
        *key_index = match;

    json_t *claims = decode_object(dot1 + 1, payload_len, buf);
    if (claims == NULL)
        return GW_TOKEN_ERR_MALFORMED;
    rc = read_claims(claims, now_s, max_channel_bytes, out);
    json_decref(claims);
    return rc;
}

/* Builds the claims JSON text (caller frees), or NULL. */
static char *claims_json(const char *sub, const char *const *channels, size_t n, int64_t now_s,
                         int64_t ttl_s)
{
    json_t *obj = json_object();
    json_t *list = json_array();
    char *text = NULL;
    if (obj == NULL || list == NULL)
        goto done;
    for (size_t i = 0; i < n; i++) {
        if (json_array_append_new(list, json_string(channels[i])) != 0)
            goto done;
    }
    if (json_object_set_new(obj, "sub", json_string(sub)) != 0 ||
        json_object_set_new(obj, "iat", json_integer(now_s)) != 0 ||
        json_object_set_new(obj, "exp", json_integer(now_s + ttl_s)) != 0 ||
        json_object_set(obj, "channels", list) != 0)
        goto done;
    text = json_dumps(obj, JSON_COMPACT);
done:
    json_decref(list);
    json_decref(obj);
    return text;
}

ssize_t gw_token_sign(const char *sub, const char *const *channels, size_t n, int64_t now_s,
                      int64_t ttl_s, const void *secret, size_t secret_len, char *out,
                      size_t out_cap)
{
    size_t sub_len = sub != NULL ? strlen(sub) : 0;
    if (sub_len == 0 || sub_len > GW_TOKEN_SUB_MAX || n > GW_TOKEN_MAX_CHANNELS || ttl_s <= 0 ||
        now_s > INT64_MAX - ttl_s)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (gw_channel_pattern_check(channels[i], strlen(channels[i]), GW_CHANNEL_NAME_MAX_LIMIT) !=
            GW_CHANNEL_OK)
            return -EINVAL;
    }
    pthread_once(&json_seed_once, json_seed);
    char *payload = claims_json(sub, channels, n, now_s, ttl_s);
    if (payload == NULL)
        return -ENOMEM;
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    size_t payload_len = strlen(payload);
    /* header.payload.signature, each part 4/3 of its bytes, plus two dots and a NUL. */
    size_t need = (sizeof(header) + 2) / 3 * 4 + (payload_len + 2) / 3 * 4 + MAC_B64_LEN + 3;
    ssize_t rc = -ENOBUFS;
    if (need > out_cap || need > GW_TOKEN_MAX_BYTES + 1)
        goto done;
    size_t k = b64url_encode((const unsigned char *)header, sizeof(header) - 1, out);
    out[k++] = '.';
    k += b64url_encode((const unsigned char *)payload, payload_len, out + k);
    rc = -EINVAL;
    if (mac_b64(secret, secret_len, out, k, out + k + 1) != 0)
        goto done;
    out[k] = '.';
    rc = (ssize_t)(k + 1 + MAC_B64_LEN);
done:
    free(payload);
    return rc;
}

size_t gw_token_insecure_user(const char *token, size_t len, char *out)
{
    const char *dot1 = len <= GW_TOKEN_MAX_BYTES ? memchr(token, '.', len) : NULL;
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
    if (dot2 != NULL) {
        pthread_once(&json_seed_once, json_seed);
        unsigned char buf[DECODED_MAX];
        json_t *claims = decode_object(dot1 + 1, (size_t)(dot2 - dot1 - 1), buf);
        const char *sub = json_string_value(json_object_get(claims, "sub"));
        size_t sub_len = sub != NULL ? strlen(sub) : 0;
        if (sub_len > 0 && sub_len <= GW_TOKEN_SUB_MAX)
            memcpy(out, sub, sub_len + 1);
        else
            sub_len = 0;
        json_decref(claims);
        if (sub_len > 0)
            return sub_len;
    }
    /* The cut goes back to a character boundary: the user id returns in ConnectOk.user_id,
     * a protobuf string, and half a character there makes clients refuse the frame. */
    size_t n = len > GW_TOKEN_SUB_MAX ? GW_TOKEN_SUB_MAX : len;
    while (n > 0 && n < len && ((unsigned char)token[n] & 0xc0) == 0x80)
        n--;
    if (n == 0) {
        memcpy(out, "anonymous", 10);
        return 9;
    }
    memcpy(out, token, n);
    out[n] = '\0';
    return n;
}

bool gw_token_claims_allow(const gw_token_claims_t *claims, const char *name, size_t len)
{
    for (size_t i = 0; i < claims->channel_count; i++) {
        const char *pattern = claims->channel_bytes + claims->channel_offs[i];
        if (gw_channel_pattern_match(pattern, claims->channel_lens[i], name, len))
            return true;
    }
    return false;
}

const char *gw_token_claims_channel(const gw_token_claims_t *claims, size_t i, size_t *len)
{
    if (len != NULL)
        *len = claims->channel_lens[i];
    return claims->channel_bytes + claims->channel_offs[i];
}

void gw_token_hash_short(const char *token, size_t len, char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_Digest(token, len, md, &md_len, EVP_sha256(), NULL) != 1)
        memset(md, 0, sizeof(md));
    for (size_t i = 0; i < GW_TOKEN_HASH_SHORT_LEN / 2; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[GW_TOKEN_HASH_SHORT_LEN] = '\0';
}

const char *gw_token_err_str(gw_token_err_t err)
{
    switch (err) {
    case GW_TOKEN_OK:
        return "ok";
    case GW_TOKEN_ERR_MALFORMED:
        return "malformed";
    case GW_TOKEN_ERR_ALG:
        return "bad_alg";
    case GW_TOKEN_ERR_SIGNATURE:
        return "bad_signature";
    case GW_TOKEN_ERR_EXPIRED:
        return "expired";
    case GW_TOKEN_ERR_NOT_YET_VALID:
        return "not_yet_valid";
    case GW_TOKEN_ERR_MISSING_SUB:
        return "missing_sub";
    case GW_TOKEN_ERR_CLAIMS:
        return "bad_claims";
    }
    return "unknown";
}
