/*
 * lg_token: HS256 tokens signed with OpenSSL (see lg_token.h).
 *
 * Everything is built in the caller's buffer and one stack buffer for the claims: a token is
 * made on every (re)connect, so at a 10,000 connects/s ramp it must cost microseconds and no
 * allocation. OpenSSL provides only the MAC; the base64url and JSON encodings are written out
 * here because both are tiny and their edge cases (no padding, escaping) are exactly what the
 * unit test pins down against herald's verifier.
 */
#include "lg_token.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

/* An HMAC-SHA256 is 32 bytes: 43 base64url characters without padding. */
#define MAC_BYTES 32
#define MAC_TEXT_LEN 43

/* Any key will do for a server that does not verify signatures. */
static const char insecure_key[] = "herald-loadgen-insecure";

static const char jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";

/* Characters of base64url text needed for len bytes, without padding. */
static size_t b64url_len(size_t len)
{
    return len / 3 * 4 + (len % 3 == 0 ? 0 : len % 3 + 1);
}

/*
 * Writes base64url (RFC 4648 section 5) of in[0..len) to out, without padding: each 3 bytes
 * become 4 characters; a last group of 1 or 2 bytes becomes 2 or 3 characters, its unused low
 * bits zero. Returns the characters written (b64url_len(len)); out gets no NUL.
 */
static size_t b64url_encode(const uint8_t *in, size_t len, char *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[k++] = alphabet[v >> 18 & 63];
        out[k++] = alphabet[v >> 12 & 63];
        out[k++] = alphabet[v >> 6 & 63];
        out[k++] = alphabet[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
        out[k++] = alphabet[v >> 18 & 63];
        out[k++] = alphabet[v >> 12 & 63];
        if (i + 1 < len)
            out[k++] = alphabet[v >> 6 & 63];
    }
    return k;
}

/*
 * Tells whether s[0..len) is well-formed UTF-8 (Unicode Table 3-7: no overlong forms, no
 * surrogates, nothing above U+10FFFF). JSON text must be Unicode, and herald's JSON parser
 * refuses anything else, so a bad byte is caught here as -EINVAL rather than at the server
 * as a malformed token.
 */
static bool is_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t extra;
        unsigned char lo = 0x80;
        unsigned char hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            extra = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            extra = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80; /* overlong */
            hi = c == 0xed ? 0x9f : 0xbf; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            extra = 3;
            lo = c == 0xf0 ? 0x90 : 0x80; /* overlong */
            hi = c == 0xf4 ? 0x8f : 0xbf; /* above U+10FFFF */
        } else {
            return false;
        }
        if (len - i <= extra || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j <= extra; j++) {
            if (s[i + j] < 0x80 || s[i + j] > 0xbf)
                return false;
        }
        i += extra + 1;
    }
    return true;
}

/* A bounded text writer: once a write does not fit, is_full sticks and nothing more is added. */
typedef struct text_s {
    char *buf;
    size_t cap;
    size_t len;
    bool is_full;
} text_t;

static void text_put(text_t *t, const char *s, size_t n)
{
    if (t->is_full || n > t->cap - t->len) {
        t->is_full = true;
        return;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

static void text_puts(text_t *t, const char *s)
{
    text_put(t, s, strlen(s));
}

/*
 * Appends s as a JSON string (RFC 8259 section 7): the quote and the backslash escaped, the
 * control characters U+0000..U+001F as their short escapes or \u00XX; everything else, UTF-8
 * included, as is. '/' needs no escape. Returns false when s is not UTF-8.
 */
static bool text_put_json_string(text_t *t, const char *s)
{
    size_t len = strlen(s);
    if (!is_utf8((const unsigned char *)s, len))
        return false;
    text_put(t, "\"", 1);
    size_t run = 0; /* bytes of s[run..i) that need no escape, copied in one go */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        text_put(t, s + run, i - run);
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"':
            text_put(t, "\\\"", 2);
            break;
        case '\\':
            text_put(t, "\\\\", 2);
            break;
        case '\n':
            text_put(t, "\\n", 2);
            break;
        case '\r':
            text_put(t, "\\r", 2);
            break;
        case '\t':
            text_put(t, "\\t", 2);
            break;
        case '\b':
            text_put(t, "\\b", 2);
            break;
        case '\f':
            text_put(t, "\\f", 2);
            break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            text_put(t, esc, 6);
            break;
        }
    }
    text_put(t, s + run, len - run);
    text_put(t, "\"", 1);
    return true;
}

ssize_t lg_token_sign_json(const char *claims, size_t len, const void *key, size_t key_len,
                           char *out, size_t out_cap)
{
    if (len == 0 || key_len == 0)
        return -EINVAL;
    if (len > SIZE_MAX / 2)
        return -ENOBUFS;
    size_t header_len = b64url_len(sizeof(jwt_header) - 1);
    size_t signed_len = header_len + 1 + b64url_len(len);
    if (out_cap < signed_len + 1 + MAC_TEXT_LEN + 1)
        return -ENOBUFS;
    /* The MAC covers the text "header.claims" exactly as it goes out. */
    size_t k = b64url_encode((const uint8_t *)jwt_header, sizeof(jwt_header) - 1, out);
    out[k++] = '.';
    k += b64url_encode((const uint8_t *)claims, len, out + k);
    uint8_t mac[EVP_MAX_MD_SIZE];
    size_t mac_len = 0;
    if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, key_len, (const uint8_t *)out, k, mac,
                  sizeof(mac), &mac_len) == NULL ||
        mac_len != MAC_BYTES)
        return -EIO;
    out[k++] = '.';
    k += b64url_encode(mac, mac_len, out + k);
    out[k] = '\0';
    return (ssize_t)k;
}

ssize_t lg_token_sign(const char *sub, const char *const *channels, size_t n, int64_t now_s,
                      int64_t ttl_s, const void *key, size_t key_len, char *out, size_t out_cap)
{
    size_t sub_len = sub != NULL ? strlen(sub) : 0;
    if (sub_len == 0 || sub_len > LG_TOKEN_SUB_MAX || ttl_s <= 0 || now_s > INT64_MAX - ttl_s ||
        key_len == 0)
        return -EINVAL;
    char buf[LG_TOKEN_CLAIMS_MAX];
    text_t t = {.buf = buf, .cap = sizeof(buf)};
    char num[64];
    text_puts(&t, "{\"sub\":");
    if (!text_put_json_string(&t, sub))
        return -EINVAL;
    snprintf(num, sizeof(num), ",\"iat\":%" PRId64 ",\"exp\":%" PRId64 ",\"channels\":[", now_s,
             now_s + ttl_s);
    text_puts(&t, num);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            text_put(&t, ",", 1);
        if (!text_put_json_string(&t, channels[i]))
            return -EINVAL;
    }
    text_puts(&t, "]}");
    if (t.is_full)
        return -ENOBUFS;
    return lg_token_sign_json(buf, t.len, key, key_len, out, out_cap);
}

ssize_t lg_token_make(const lg_config_t *cfg, uint32_t id, char *out, size_t out_cap)
{
    char sub[LG_PREFIX_MAX + 16];
    char pattern[LG_PREFIX_MAX + 4];
    snprintf(sub, sizeof(sub), "%s-%" PRIu32, cfg->channel_prefix, id);
    snprintf(pattern, sizeof(pattern), "%s:*", cfg->channel_prefix);
    const char *channels[1] = {pattern};
    const char *key = cfg->is_insecure && cfg->secret[0] == '\0' ? insecure_key : cfg->secret;
    /* Wall-clock seconds: exp is compared with the server's real-time clock. */
    int64_t now_s = (int64_t)time(NULL);
    return lg_token_sign(sub, channels, 1, now_s, (int64_t)cfg->token_ttl_s, key, strlen(key), out,
                         out_cap);
}
