/*
 * test_gw_token: a vector minted by Python's hmac/base64 (an independent JWT implementation),
 * sign/verify round trips, and one refusal per error type, each with an exact result. Tokens
 * with chosen headers and claims are built here with OpenSSL directly, not with gw_token.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "gw_auth.h"

#define SECRET "secret-secret-secret"
#define SECRET_LEN (sizeof(SECRET) - 1)
#define NOW 1700000000

/* Minted with /usr/bin/python3 hmac + base64.urlsafe_b64encode, secret SECRET:
 * {"sub":"alice","exp":2000000000,"channels":["news","chat:*"]} */
static const char python_token[] =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJhbGljZSIsImV4cCI6MjAwMDAwMDAwMCwiY2hhbm5lbHMiOlsibmV3cyIsImNoYXQ6KiJdfQ."
    "e-DhLfSGNJKXwvrP2IIIIwgsMniOlrb0rofH76z_w00";

static size_t b64url(const char *in, size_t len, char *out)
{
    int n = EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[n] = '\0';
    return (size_t)n;
}

/* Builds header.payload.signature from raw JSON texts, signed with secret. */
static void make_token(char *out, const char *header, const char *payload, const char *secret)
{
    size_t k = b64url(header, strlen(header), out);
    out[k++] = '.';
    k += b64url(payload, strlen(payload), out + k);
    unsigned char mac[32];
    unsigned int mac_len = 0;
    assert_non_null(
        HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)out, k, mac, &mac_len));
    out[k++] = '.';
    b64url((const char *)mac, mac_len, out + k);
}

static gw_token_err_t verify(const char *token, gw_token_claims_t *claims)
{
    return gw_token_verify(token, strlen(token), SECRET, SECRET_LEN, NOW, 0, claims);
}

static gw_token_err_t verify_claims(const char *payload)
{
    char token[8192];
    gw_token_claims_t claims;
    make_token(token, "{\"alg\":\"HS256\",\"typ\":\"JWT\"}", payload, SECRET);
    return verify(token, &claims);
}

static void test_gw_token_python_vector(void **state)
{
    (void)state;
    gw_token_claims_t c;
    assert_int_equal(verify(python_token, &c), GW_TOKEN_OK);
    assert_string_equal(c.sub, "alice");
    assert_int_equal(c.exp_s, 2000000000);
    assert_int_equal(c.channel_count, 2);
    size_t len = 0;
    assert_string_equal(gw_token_claims_channel(&c, 0, &len), "news");
    assert_int_equal(len, 4);
    assert_string_equal(gw_token_claims_channel(&c, 1, &len), "chat:*");
    assert_int_equal(len, 6);
    assert_true(gw_token_claims_allow(&c, "news", 4));
    assert_true(gw_token_claims_allow(&c, "chat:room1", 10));
    assert_false(gw_token_claims_allow(&c, "newsroom", 8));
    assert_false(gw_token_claims_allow(&c, "chat", 4));
    /* The same token under another secret, or after its expiry. */
    assert_int_equal(gw_token_verify(python_token, strlen(python_token), "other", 5, NOW, 0, &c),
                     GW_TOKEN_ERR_SIGNATURE);
    assert_int_equal(
        gw_token_verify(python_token, strlen(python_token), SECRET, SECRET_LEN, 2000000000, 0, &c),
        GW_TOKEN_ERR_EXPIRED);
    assert_int_equal(
        gw_token_verify(python_token, strlen(python_token), SECRET, SECRET_LEN, 1999999999, 0, &c),
        GW_TOKEN_OK);
}

static void test_gw_token_sign_round_trip(void **state)
{
    (void)state;
    const char *channels[] = {"news", "chat:*", "user:bob"};
    char token[GW_TOKEN_MAX_BYTES + 1];
    ssize_t n =
        gw_token_sign("bob", channels, 3, NOW, 3600, SECRET, SECRET_LEN, token, sizeof(token));
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(token));
    /* The header is the canonical JWT one, so other libraries accept the token. */
    assert_memory_equal(token, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.", 37);
    gw_token_claims_t c;
    assert_int_equal(gw_token_verify(token, (size_t)n, SECRET, SECRET_LEN, NOW, 0, &c),
                     GW_TOKEN_OK);
    assert_string_equal(c.sub, "bob");
    assert_int_equal(c.exp_s, NOW + 3600);
    assert_int_equal(c.channel_count, 3);
    assert_string_equal(gw_token_claims_channel(&c, 2, NULL), "user:bob");
    assert_int_equal(gw_token_verify(token, (size_t)n, SECRET, SECRET_LEN, NOW + 3600, 0, &c),
                     GW_TOKEN_ERR_EXPIRED);
    /* A copied claims struct works on its own (no pointers inside). */
    gw_token_claims_t copy = c;
    memset(&c, 0, sizeof(c));
    assert_true(gw_token_claims_allow(&copy, "chat:x", 6));

    /* No channels: valid, with no rights at all. */
    n = gw_token_sign("carol", NULL, 0, NOW, 60, SECRET, SECRET_LEN, token, sizeof(token));
    assert_true(n > 0);
    assert_int_equal(gw_token_verify(token, (size_t)n, SECRET, SECRET_LEN, NOW, 0, &c),
                     GW_TOKEN_OK);
    assert_int_equal(c.channel_count, 0);
    assert_false(gw_token_claims_allow(&c, "user:carol", 10));
}

/* Several keys (a secret rotation): a token signed by any of them verifies, and the index of
 * the key that matched comes back, also when the claims are refused after the signature. */
static void test_gw_token_verify_keys(void **state)
{
    (void)state;
    static const char old_secret[] = "old-secret-0123456789";
    const gw_token_key_t keys[] = {{SECRET, SECRET_LEN}, {old_secret, sizeof(old_secret) - 1}};
    char by_old[GW_TOKEN_MAX_BYTES + 1];
    char by_new[GW_TOKEN_MAX_BYTES + 1];
    ssize_t n_old = gw_token_sign("ann", NULL, 0, NOW, 60, old_secret, sizeof(old_secret) - 1,
                                  by_old, sizeof(by_old));
    ssize_t n_new =
        gw_token_sign("ann", NULL, 0, NOW, 60, SECRET, SECRET_LEN, by_new, sizeof(by_new));
    assert_true(n_old > 0 && n_new > 0);
    gw_token_claims_t c;
    size_t which = 99;
    assert_int_equal(gw_token_verify_keys(by_new, (size_t)n_new, keys, 2, NOW, 0, &c, &which),
                     GW_TOKEN_OK);
    assert_int_equal(which, 0);
    assert_int_equal(gw_token_verify_keys(by_old, (size_t)n_old, keys, 2, NOW, 0, &c, &which),
                     GW_TOKEN_OK);
    assert_int_equal(which, 1);
    assert_string_equal(c.sub, "ann");
    /* Either order of the keys, and no index wanted. */
    assert_int_equal(gw_token_verify_keys(by_old, (size_t)n_old, keys + 1, 1, NOW, 0, &c, NULL),
                     GW_TOKEN_OK);
    /* The old key removed: refused as a bad signature. No key at all: everything refused. */
    assert_int_equal(gw_token_verify_keys(by_old, (size_t)n_old, keys, 1, NOW, 0, &c, &which),
                     GW_TOKEN_ERR_SIGNATURE);
    assert_int_equal(gw_token_verify_keys(by_new, (size_t)n_new, keys, 0, NOW, 0, &c, &which),
                     GW_TOKEN_ERR_SIGNATURE);
    /* Checks after the signature still run, and say which key signed. */
    which = 99;
    assert_int_equal(gw_token_verify_keys(by_old, (size_t)n_old, keys, 2, NOW + 60, 0, &c, &which),
                     GW_TOKEN_ERR_EXPIRED);
    assert_int_equal(which, 1);
    /* Checks before it do not depend on the keys. */
    char token[512];
    make_token(token, "{\"alg\":\"none\"}", "{\"sub\":\"x\",\"exp\":2000000000}", old_secret);
    assert_int_equal(gw_token_verify_keys(token, strlen(token), keys, 2, NOW, 0, &c, NULL),
                     GW_TOKEN_ERR_ALG);
    assert_int_equal(gw_token_verify_keys("a.b", 3, keys, 2, NOW, 0, &c, NULL),
                     GW_TOKEN_ERR_MALFORMED);
    /* A one-key list is gw_token_verify. */
    assert_int_equal(gw_token_verify(by_new, (size_t)n_new, SECRET, SECRET_LEN, NOW, 0, &c),
                     GW_TOKEN_OK);
}

static void test_gw_token_sign_errors(void **state)
{
    (void)state;
    char token[GW_TOKEN_MAX_BYTES + 1];
    const char *bad[] = {"a*b"};
    const char *ok[] = {"news"};
    char long_sub[GW_TOKEN_SUB_MAX + 2];
    memset(long_sub, 'u', sizeof(long_sub) - 1);
    long_sub[sizeof(long_sub) - 1] = '\0';
    assert_int_equal(gw_token_sign("", ok, 1, NOW, 60, SECRET, SECRET_LEN, token, sizeof(token)),
                     -EINVAL);
    assert_int_equal(
        gw_token_sign(long_sub, ok, 1, NOW, 60, SECRET, SECRET_LEN, token, sizeof(token)), -EINVAL);
    assert_int_equal(gw_token_sign("u", bad, 1, NOW, 60, SECRET, SECRET_LEN, token, sizeof(token)),
                     -EINVAL);
    assert_int_equal(gw_token_sign("u", ok, 1, NOW, 0, SECRET, SECRET_LEN, token, sizeof(token)),
                     -EINVAL);
    assert_int_equal(gw_token_sign("u", ok, 1, NOW, 60, SECRET, SECRET_LEN, token, 40), -ENOBUFS);
    const char *many[GW_TOKEN_MAX_CHANNELS + 1];
    for (size_t i = 0; i <= GW_TOKEN_MAX_CHANNELS; i++)
        many[i] = "c";
    assert_int_equal(gw_token_sign("u", many, GW_TOKEN_MAX_CHANNELS + 1, NOW, 60, SECRET,
                                   SECRET_LEN, token, sizeof(token)),
                     -EINVAL);
    assert_true(gw_token_sign("u", many, GW_TOKEN_MAX_CHANNELS, NOW, 60, SECRET, SECRET_LEN, token,
                              sizeof(token)) > 0);
    /* 64 patterns of 100 bytes cannot fit in 4 KiB. */
    char big[100];
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (size_t i = 0; i < GW_TOKEN_MAX_CHANNELS; i++)
        many[i] = big;
    assert_int_equal(gw_token_sign("u", many, GW_TOKEN_MAX_CHANNELS, NOW, 60, SECRET, SECRET_LEN,
                                   token, sizeof(token)),
                     -ENOBUFS);
}

static void test_gw_token_malformed(void **state)
{
    (void)state;
    gw_token_claims_t c;
    char good[512];
    snprintf(good, sizeof(good), "%s", python_token);
    const char *rows[] = {
        "",
        "abc",
        "abc.def",
        "a.b.c.d",
        "eyJhbGciOiJIUzI1NiJ9..sig",     /* empty payload */
        "..",                            /* empty everything */
        "eyJhbGciOiJIUzI1NiJ9+.e30.sig", /* '+' is not base64url */
        "eyJhbGciOiJIUzI1NiJ9=.e30.sig", /* no padding allowed */
        "e.e30.sig",                     /* a 1-character run cannot decode */
        "bm90IGpzb24.e30.sig",           /* header "not json" */
        "WzFd.e30.sig",                  /* header [1], not an object */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        gw_token_err_t rc = verify(rows[i], &c);
        if (rc != GW_TOKEN_ERR_MALFORMED)
            fail_msg("'%s': %s", rows[i], gw_token_err_str(rc));
    }
    /* Over 4 KiB: refused before anything is decoded. */
    char huge[GW_TOKEN_MAX_BYTES + 2];
    memset(huge, 'A', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    assert_int_equal(gw_token_verify(huge, GW_TOKEN_MAX_BYTES + 1, SECRET, SECRET_LEN, NOW, 0, &c),
                     GW_TOKEN_ERR_MALFORMED);
    /* A correctly signed payload that is not a JSON object, or has a duplicate key. */
    assert_int_equal(verify_claims("[\"sub\"]"), GW_TOKEN_ERR_MALFORMED);
    assert_int_equal(verify_claims("{\"sub\":\"a\",\"exp\":2000000000,\"sub\":\"b\"}"),
                     GW_TOKEN_ERR_MALFORMED);
    assert_int_equal(verify_claims("{\"sub\":"), GW_TOKEN_ERR_MALFORMED);
    /* Trailing bytes after the token change its length: no longer the signed text. */
    strcat(good, "x");
    assert_int_equal(verify(good, &c), GW_TOKEN_ERR_SIGNATURE);
}

static void test_gw_token_alg(void **state)
{
    (void)state;
    char token[1024];
    gw_token_claims_t c;
    const char *payload = "{\"sub\":\"a\",\"exp\":2000000000}";
    static const char *const headers[] = {
        "{\"alg\":\"none\",\"typ\":\"JWT\"}",
        "{\"alg\":\"HS512\"}",
        "{\"alg\":\"hs256\"}",
        "{\"alg\":\"RS256\"}",
        "{\"typ\":\"JWT\"}",
        "{\"alg\":256}",
        "{\"alg\":\"HS256 \"}",
    };
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        make_token(token, headers[i], payload, SECRET);
        assert_int_equal(verify(token, &c), GW_TOKEN_ERR_ALG);
    }
    /* The classic "none" attack: no signature at all is refused by shape, any filler
     * signature by alg. */
    char none[256];
    size_t k = b64url("{\"alg\":\"none\"}", 14, none);
    none[k++] = '.';
    k += b64url(payload, strlen(payload), none + k);
    strcpy(none + k, ".");
    assert_int_equal(verify(none, &c), GW_TOKEN_ERR_MALFORMED);
    strcpy(none + k, ".AAAA");
    assert_int_equal(verify(none, &c), GW_TOKEN_ERR_ALG);
    /* A valid header spelled differently from the canonical one takes the JSON path. */
    make_token(token, "{\"typ\":\"JWT\",\"alg\":\"HS256\",\"kid\":\"k1\"}", payload, SECRET);
    assert_int_equal(verify(token, &c), GW_TOKEN_OK);
    make_token(token, "{\"alg\":\"HS256\",\"alg\":\"none\"}", payload, SECRET);
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_MALFORMED); /* duplicate key */
    /* alg is checked before the signature. */
    make_token(token, "{\"alg\":\"HS384\"}", payload, "wrong");
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_ALG);
}

static void test_gw_token_signature(void **state)
{
    (void)state;
    gw_token_claims_t c;
    char token[512];
    size_t len = strlen(python_token);
    /* Each signature character flipped in turn. */
    for (size_t i = len - 43; i < len; i++) {
        memcpy(token, python_token, len + 1);
        token[i] = token[i] == 'A' ? 'B' : 'A';
        assert_int_equal(verify(token, &c), GW_TOKEN_ERR_SIGNATURE);
    }
    /* Truncated and empty signatures. */
    memcpy(token, python_token, len + 1);
    token[len - 1] = '\0';
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_SIGNATURE);
    token[len - 43] = '\0';
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_MALFORMED); /* "h.p." has no third part */
    /* A changed payload under the old signature. */
    memcpy(token, python_token, len + 1);
    token[40] = token[40] == 'a' ? 'b' : 'a';
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_SIGNATURE);
    /* A bad signature wins over bad claims: nothing unsigned is parsed. */
    make_token(token, "{\"alg\":\"HS256\"}", "{\"exp\":1}", "wrong");
    assert_int_equal(verify(token, &c), GW_TOKEN_ERR_SIGNATURE);
}

static void test_gw_token_claims(void **state)
{
    (void)state;
    static const struct {
        const char *payload;
        gw_token_err_t rc;
    } rows[] = {
        {"{\"sub\":\"a\",\"exp\":1700000001}", GW_TOKEN_OK},
        {"{\"sub\":\"a\",\"exp\":1700000000}", GW_TOKEN_ERR_EXPIRED},
        {"{\"sub\":\"a\",\"exp\":1}", GW_TOKEN_ERR_EXPIRED},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"nbf\":1700000000}", GW_TOKEN_OK},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"nbf\":1700000001}", GW_TOKEN_ERR_NOT_YET_VALID},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"nbf\":\"soon\"}", GW_TOKEN_ERR_CLAIMS},
        {"{\"exp\":2000000000}", GW_TOKEN_ERR_MISSING_SUB},
        {"{\"sub\":\"\",\"exp\":2000000000}", GW_TOKEN_ERR_MISSING_SUB},
        {"{\"sub\":42,\"exp\":2000000000}", GW_TOKEN_ERR_MISSING_SUB},
        {"{\"sub\":null,\"exp\":2000000000}", GW_TOKEN_ERR_MISSING_SUB},
        {"{\"sub\":\"a\"}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":\"2000000000\"}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000.5}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":\"news\"}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[1]}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[\"a*b\"]}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[\"\"]}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[]}", GW_TOKEN_OK},
        {"{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[\"*\"],\"iss\":\"x\"}", GW_TOKEN_OK},
        /* Issue 24: exp past 2^32 - 1 meant "never expires" in a session; it is refused. */
        {"{\"sub\":\"a\",\"exp\":4294967295}", GW_TOKEN_OK},
        {"{\"sub\":\"a\",\"exp\":4294967296}", GW_TOKEN_ERR_CLAIMS},
        {"{\"sub\":\"a\",\"exp\":9223372036854775807}", GW_TOKEN_ERR_CLAIMS},
        /* An expired token with bad claims reports the claims: time is checked last. */
        {"{\"sub\":\"a\",\"exp\":1,\"channels\":7}", GW_TOKEN_ERR_CLAIMS},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        gw_token_err_t rc = verify_claims(rows[i].payload);
        if (rc != rows[i].rc)
            fail_msg("%s: %s, want %s", rows[i].payload, gw_token_err_str(rc),
                     gw_token_err_str(rows[i].rc));
    }
}

/* sub of exactly GW_TOKEN_SUB_MAX bytes passes, one more fails; 64 patterns pass, 65 fail. */
static void test_gw_token_bounds(void **state)
{
    (void)state;
    char payload[4096];
    char sub[GW_TOKEN_SUB_MAX + 2];
    memset(sub, 's', sizeof(sub));
    sub[GW_TOKEN_SUB_MAX] = '\0';
    snprintf(payload, sizeof(payload), "{\"sub\":\"%s\",\"exp\":2000000000}", sub);
    assert_int_equal(verify_claims(payload), GW_TOKEN_OK);
    sub[GW_TOKEN_SUB_MAX] = 's';
    sub[GW_TOKEN_SUB_MAX + 1] = '\0';
    snprintf(payload, sizeof(payload), "{\"sub\":\"%s\",\"exp\":2000000000}", sub);
    assert_int_equal(verify_claims(payload), GW_TOKEN_ERR_MISSING_SUB);

    for (size_t count = GW_TOKEN_MAX_CHANNELS; count <= GW_TOKEN_MAX_CHANNELS + 1; count++) {
        size_t k = (size_t)snprintf(payload, sizeof(payload),
                                    "{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[");
        for (size_t i = 0; i < count; i++)
            k += (size_t)snprintf(payload + k, sizeof(payload) - k, "%s\"c%zu\"", i ? "," : "", i);
        snprintf(payload + k, sizeof(payload) - k, "]}");
        assert_int_equal(verify_claims(payload),
                         count == GW_TOKEN_MAX_CHANNELS ? GW_TOKEN_OK : GW_TOKEN_ERR_CLAIMS);
    }
    /* A pattern longer than max_channel_bytes is refused. */
    char token[1024];
    gw_token_claims_t c;
    make_token(token, "{\"alg\":\"HS256\"}",
               "{\"sub\":\"a\",\"exp\":2000000000,\"channels\":[\"abcdef*\"]}", SECRET);
    assert_int_equal(gw_token_verify(token, strlen(token), SECRET, SECRET_LEN, NOW, 6, &c),
                     GW_TOKEN_OK);
    assert_int_equal(gw_token_verify(token, strlen(token), SECRET, SECRET_LEN, NOW, 5, &c),
                     GW_TOKEN_ERR_CLAIMS);
}

/* Insecure mode's user id: the unverified sub, else the token's first 128 bytes cut at a
 * character boundary (fuzz_gw_token found a 4-byte character split at byte 128, which
 * made ConnectOk.user_id invalid UTF-8), else "anonymous". */
static void test_gw_token_insecure_user(void **state)
{
    (void)state;
    char user[GW_TOKEN_SUB_MAX + 1];
    assert_int_equal(gw_token_insecure_user(python_token, strlen(python_token), user), 5);
    assert_string_equal(user, "alice"); /* the signature is not looked at */
    assert_int_equal(gw_token_insecure_user("", 0, user), 9);
    assert_string_equal(user, "anonymous");
    assert_int_equal(gw_token_insecure_user("a.b.c", 5, user), 5);
    assert_string_equal(user, "a.b.c");

    /* 127 ASCII bytes, then a character whose bytes straddle the cut at 128. */
    static const char *const tails[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        char token[GW_TOKEN_SUB_MAX + 8];
        memset(token, 'a', GW_TOKEN_SUB_MAX - 1);
        snprintf(token + GW_TOKEN_SUB_MAX - 1, 9, "%sz", tails[i]);
        assert_int_equal(gw_token_insecure_user(token, strlen(token), user), GW_TOKEN_SUB_MAX - 1);
        assert_memory_equal(user, token, GW_TOKEN_SUB_MAX - 1);
    }
    /* A character that ends at byte 128 stays whole. */
    char token[GW_TOKEN_SUB_MAX + 8];
    memset(token, 'a', GW_TOKEN_SUB_MAX - 2);
    snprintf(token + GW_TOKEN_SUB_MAX - 2, 9, "\xc3\xa9zz");
    assert_int_equal(gw_token_insecure_user(token, strlen(token), user), GW_TOKEN_SUB_MAX);
    assert_memory_equal(user, token, GW_TOKEN_SUB_MAX);
}

static void test_gw_token_hash_short(void **state)
{
    (void)state;
    char h[GW_TOKEN_HASH_SHORT_LEN + 1];
    memset(h, 'z', sizeof(h));
    gw_token_hash_short("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01"); /* SHA-256("abc") starts ba7816bf8f01cfea */
    char h2[GW_TOKEN_HASH_SHORT_LEN + 1];
    gw_token_hash_short(python_token, strlen(python_token), h2);
    assert_int_equal(strlen(h2), GW_TOKEN_HASH_SHORT_LEN);
    assert_string_not_equal(h, h2);
    assert_null(strstr(python_token, h2));
}

static void test_gw_token_err_str(void **state)
{
    (void)state;
    assert_string_equal(gw_token_err_str(GW_TOKEN_OK), "ok");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_MALFORMED), "malformed");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_ALG), "bad_alg");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_SIGNATURE), "bad_signature");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_EXPIRED), "expired");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_NOT_YET_VALID), "not_yet_valid");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_MISSING_SUB), "missing_sub");
    assert_string_equal(gw_token_err_str(GW_TOKEN_ERR_CLAIMS), "bad_claims");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_token_python_vector),
        cmocka_unit_test(test_gw_token_sign_round_trip),
        cmocka_unit_test(test_gw_token_verify_keys),
        cmocka_unit_test(test_gw_token_sign_errors),
        cmocka_unit_test(test_gw_token_malformed),
        cmocka_unit_test(test_gw_token_alg),
        cmocka_unit_test(test_gw_token_signature),
        cmocka_unit_test(test_gw_token_claims),
        cmocka_unit_test(test_gw_token_bounds),
        cmocka_unit_test(test_gw_token_insecure_user),
        cmocka_unit_test(test_gw_token_hash_short),
        cmocka_unit_test(test_gw_token_err_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
