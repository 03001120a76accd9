/*
 * test_lg_token: herald-loadgen's own HS256 signer (loadgen/lg_token.c) against herald's
 * verifier (gw_token_verify), two independent implementations of PROTOCOL.md section 8. Tokens
 * loadgen signs must be accepted with the same sub, channels and exp; a flipped signature or
 * claims byte, the wrong key and an expired exp must be refused. The known token of
 * PROTOCOL.md's example pins the encoding itself.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gw_auth.h"
#include "lg_config.h"
#include "lg_token.h"

static const char key[] = "test-lg-token-secret-0123456789";
#define NOW_S 1767225000

/* Verifies tok with key at now_s (default channel limit) and returns the verdict. */
static gw_token_err_t verify_at(const char *tok, int64_t now_s, gw_token_claims_t *claims)
{
    return gw_token_verify(tok, strlen(tok), key, strlen(key), now_s, 0, claims);
}

/* PROTOCOL.md's example: secret "secret", these claims, exactly this token. */
static void test_lg_token_protocol_example(void **state)
{
    (void)state;
    static const char claims[] =
        "{\"sub\":\"42\",\"exp\":1767225600,\"channels\":[\"news\",\"chat:*\"]}";
    static const char want[] =
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiI0MiIsImV4cCI6MTc2NzIyNTYwMCwiY2hhbm5lbHMiOlsibmV3cyIsImNoYXQ6KiJdfQ."
        "-29WbJ-Tros9d9-VOBmTHBipo77rDYMkqd9ERQnu0p0";
    char tok[LG_TOKEN_MAX];
    ssize_t n = lg_token_sign_json(claims, strlen(claims), "secret", 6, tok, sizeof(tok));
    assert_int_equal(n, (ssize_t)strlen(want));
    assert_string_equal(tok, want);
}

static void test_lg_token_accepted_with_same_claims(void **state)
{
    (void)state;
    const char *channels[] = {"lg:*", "news", "user:42"};
    char tok[LG_TOKEN_MAX];
    ssize_t n = lg_token_sign("lg-42", channels, 3, NOW_S, 600, key, strlen(key), tok, sizeof(tok));
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(tok));
    /* base64url without padding: none of '=', '+', '/' anywhere. */
    assert_null(strpbrk(tok, "=+/"));
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_OK);
    assert_string_equal(claims.sub, "lg-42");
    assert_int_equal(claims.exp_s, NOW_S + 600);
    assert_int_equal(claims.channel_count, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(gw_token_claims_channel(&claims, i, NULL), channels[i]);
    assert_true(gw_token_claims_allow(&claims, "lg:all", 6));
    assert_false(gw_token_claims_allow(&claims, "other", 5));

    /* No channels at all is a valid token too (an empty list). */
    n = lg_token_sign("lg-43", NULL, 0, NOW_S, 600, key, strlen(key), tok, sizeof(tok));
    assert_true(n > 0);
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_OK);
    assert_int_equal(claims.channel_count, 0);
}

/* Claims of every length modulo 3 (the base64url tail of 0, 2 or 3 characters) verify. */
static void test_lg_token_every_tail_length(void **state)
{
    (void)state;
    char sub[16];
    for (size_t len = 1; len <= 12; len++) {
        memset(sub, 'a' + (int)len, len);
        sub[len] = '\0';
        char tok[LG_TOKEN_MAX];
        ssize_t n = lg_token_sign(sub, NULL, 0, NOW_S, 60, key, strlen(key), tok, sizeof(tok));
        assert_true(n > 0);
        gw_token_claims_t claims;
        assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_OK);
        assert_string_equal(claims.sub, sub);
    }
}

/* A user id with every character JSON must escape, and multi-byte UTF-8, arrives unchanged. */
static void test_lg_token_escapes_user_id(void **state)
{
    (void)state;
    static const char *const subs[] = {
        "quote\"back\\slash",
        "ctl\x01\x1f\b\f\n\r\tend",
        "slash/and</script>",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
        "\"",
        "\\",
    };
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char tok[LG_TOKEN_MAX];
        ssize_t n = lg_token_sign(subs[i], NULL, 0, NOW_S, 60, key, strlen(key), tok, sizeof(tok));
        assert_true(n > 0);
        gw_token_claims_t claims;
        assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_OK);
        assert_string_equal(claims.sub, subs[i]);
    }
    /* A pattern with a quote is escaped, not spliced into the JSON: herald parses the claims
     * and then refuses the pattern itself (bad_claims), never a JSON that means something else. */
    const char *bad[] = {"a\",\"*"};
    char tok[LG_TOKEN_MAX];
    assert_true(lg_token_sign("u", bad, 1, NOW_S, 60, key, strlen(key), tok, sizeof(tok)) > 0);
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_ERR_CLAIMS);
}

static void test_lg_token_flipped_byte_refused(void **state)
{
    (void)state;
    const char *channels[] = {"lg:*"};
    char tok[LG_TOKEN_MAX];
    ssize_t n = lg_token_sign("lg-7", channels, 1, NOW_S, 60, key, strlen(key), tok, sizeof(tok));
    assert_true(n > 0);
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_OK);
    const char *sig = strrchr(tok, '.') + 1;
    assert_int_equal(strlen(sig), 43);
    /* Every byte of the signature, and one in the claims, changed to another base64url
     * character: each one refused for its signature. */
    for (char *p = (char *)sig; *p; p++) {
        char was = *p;
        *p = was == 'A' ? 'B' : 'A';
        assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_ERR_SIGNATURE);
        *p = was;
    }
    char *claims_part = strchr(tok, '.') + 1;
    claims_part[5] = claims_part[5] == 'A' ? 'B' : 'A';
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_ERR_SIGNATURE);
}

static void test_lg_token_wrong_key_refused(void **state)
{
    (void)state;
    char tok[LG_TOKEN_MAX];
    static const char other[] = "another-secret";
    assert_true(lg_token_sign("lg-1", NULL, 0, NOW_S, 60, other, strlen(other), tok, sizeof(tok)) >
                0);
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, NOW_S, &claims), GW_TOKEN_ERR_SIGNATURE);
}

/* exp = now + ttl: valid in its last second, refused from that second on (RFC 7519). */
static void test_lg_token_expired_refused(void **state)
{
    (void)state;
    char tok[LG_TOKEN_MAX];
    assert_true(lg_token_sign("lg-1", NULL, 0, NOW_S, 60, key, strlen(key), tok, sizeof(tok)) > 0);
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, NOW_S + 59, &claims), GW_TOKEN_OK);
    assert_int_equal(verify_at(tok, NOW_S + 60, &claims), GW_TOKEN_ERR_EXPIRED);
    assert_int_equal(verify_at(tok, NOW_S + 86400, &claims), GW_TOKEN_ERR_EXPIRED);
}

static void test_lg_token_bad_input(void **state)
{
    (void)state;
    char tok[LG_TOKEN_MAX];
    char long_sub[LG_TOKEN_SUB_MAX + 2];
    memset(long_sub, 'u', sizeof(long_sub) - 1);
    long_sub[sizeof(long_sub) - 1] = '\0';
    size_t k = strlen(key);
    assert_int_equal(lg_token_sign("", NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok)), -EINVAL);
    assert_int_equal(lg_token_sign(NULL, NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok)), -EINVAL);
    assert_int_equal(lg_token_sign(long_sub, NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok)),
                     -EINVAL);
    long_sub[LG_TOKEN_SUB_MAX] = '\0'; /* exactly the limit: fine */
    assert_true(lg_token_sign(long_sub, NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok)) > 0);
    assert_int_equal(lg_token_sign("u", NULL, 0, NOW_S, 0, key, k, tok, sizeof(tok)), -EINVAL);
    assert_int_equal(lg_token_sign("u", NULL, 0, INT64_MAX - 5, 60, key, k, tok, sizeof(tok)),
                     -EINVAL);
    assert_int_equal(lg_token_sign("u", NULL, 0, NOW_S, 60, key, 0, tok, sizeof(tok)), -EINVAL);
    /* Not UTF-8: a lone continuation byte, an overlong '/', a surrogate, a cut sequence. */
    static const char *const not_utf8[] = {"a\x80", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(lg_token_sign(not_utf8[i], NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok)),
                         -EINVAL);
        const char *ch[] = {not_utf8[i]};
        assert_int_equal(lg_token_sign("u", ch, 1, NOW_S, 60, key, k, tok, sizeof(tok)), -EINVAL);
    }
    /* Too small an output buffer, by one byte. */
    ssize_t n = lg_token_sign("u", NULL, 0, NOW_S, 60, key, k, tok, sizeof(tok));
    assert_true(n > 0);
    assert_int_equal(lg_token_sign("u", NULL, 0, NOW_S, 60, key, k, tok, (size_t)n), -ENOBUFS);
    assert_int_equal(lg_token_sign("u", NULL, 0, NOW_S, 60, key, k, tok, (size_t)n + 1), n);
    /* Claims past LG_TOKEN_CLAIMS_MAX. */
    static char big[LG_TOKEN_CLAIMS_MAX];
    memset(big, 'c', sizeof(big) - 1);
    const char *ch[] = {big};
    assert_int_equal(lg_token_sign("u", ch, 1, NOW_S, 60, key, k, tok, sizeof(tok)), -ENOBUFS);
}

/* What the fleet's clients send: sub "<prefix>-<id>", channels ["<prefix>:*"], exp now + ttl. */
static void test_lg_token_make_fleet_token(void **state)
{
    (void)state;
    lg_config_t cfg;
    lg_config_init(&cfg);
    snprintf(cfg.secret, sizeof(cfg.secret), "%s", key);
    snprintf(cfg.channel_prefix, sizeof(cfg.channel_prefix), "bench");
    cfg.token_ttl_s = 120;
    char tok[LG_TOKEN_MAX];
    int64_t before = (int64_t)time(NULL);
    assert_true(lg_token_make(&cfg, 4242, tok, sizeof(tok)) > 0);
    int64_t after = (int64_t)time(NULL);
    gw_token_claims_t claims;
    assert_int_equal(verify_at(tok, before, &claims), GW_TOKEN_OK);
    assert_string_equal(claims.sub, "bench-4242");
    assert_true(claims.exp_s >= before + 120 && claims.exp_s <= after + 120);
    assert_int_equal(claims.channel_count, 1);
    assert_string_equal(gw_token_claims_channel(&claims, 0, NULL), "bench:*");

    /* --insecure without --secret: signed with a dummy key, the user id still readable. */
    cfg.secret[0] = '\0';
    cfg.is_insecure = true;
    assert_true(lg_token_make(&cfg, 7, tok, sizeof(tok)) > 0);
    assert_int_equal(verify_at(tok, before, &claims), GW_TOKEN_ERR_SIGNATURE);
    char user[GW_TOKEN_SUB_MAX + 1];
    assert_int_equal(gw_token_insecure_user(tok, strlen(tok), user), strlen("bench-7"));
    assert_string_equal(user, "bench-7");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lg_token_protocol_example),
        cmocka_unit_test(test_lg_token_accepted_with_same_claims),
        cmocka_unit_test(test_lg_token_every_tail_length),
        cmocka_unit_test(test_lg_token_escapes_user_id),
        cmocka_unit_test(test_lg_token_flipped_byte_refused),
        cmocka_unit_test(test_lg_token_wrong_key_refused),
        cmocka_unit_test(test_lg_token_expired_refused),
        cmocka_unit_test(test_lg_token_bad_input),
        cmocka_unit_test(test_lg_token_make_fleet_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
