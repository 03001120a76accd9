/*
 * test_gw_channel_name: name validation at every boundary (length 0, 1, max, max + 1, each
 * allowed and a sample of refused bytes), pattern validation, and matching, table-driven.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gw_channel.h"

static void test_gw_channel_name_lengths(void **state)
{
    (void)state;
    char name[GW_CHANNEL_NAME_MAX_LIMIT + 2];
    memset(name, 'a', sizeof(name));
    assert_int_equal(gw_channel_name_check(name, 0, 0), GW_CHANNEL_ERR_EMPTY);
    assert_int_equal(gw_channel_name_check(name, 1, 0), GW_CHANNEL_OK);
    assert_int_equal(gw_channel_name_check(name, 128, 0), GW_CHANNEL_OK);
    assert_int_equal(gw_channel_name_check(name, 129, 0), GW_CHANNEL_ERR_TOO_LONG);
    assert_int_equal(gw_channel_name_check(name, 10, 10), GW_CHANNEL_OK);
    assert_int_equal(gw_channel_name_check(name, 11, 10), GW_CHANNEL_ERR_TOO_LONG);
    assert_int_equal(
        gw_channel_name_check(name, GW_CHANNEL_NAME_MAX_LIMIT, GW_CHANNEL_NAME_MAX_LIMIT),
        GW_CHANNEL_OK);
    /* Length is checked before the bytes. */
    name[0] = ' ';
    assert_int_equal(gw_channel_name_check(name, 129, 0), GW_CHANNEL_ERR_TOO_LONG);
    assert_int_equal(gw_channel_name_check(name, 5, 0), GW_CHANNEL_ERR_BAD_CHAR);
}

/* Every byte value: exactly the documented set is accepted. */
static void test_gw_channel_name_every_byte(void **state)
{
    (void)state;
    const char *allowed = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:.@/=";
    int accepted = 0;
    for (int b = 0; b < 256; b++) {
        char name[3] = {'x', (char)b, 'y'};
        gw_channel_err_t rc = gw_channel_name_check(name, 3, 0);
        bool is_allowed = b != 0 && strchr(allowed, b) != NULL;
        assert_int_equal(rc, is_allowed ? GW_CHANNEL_OK : GW_CHANNEL_ERR_BAD_CHAR);
        accepted += rc == GW_CHANNEL_OK;
    }
    assert_int_equal(accepted, (int)strlen(allowed));
    assert_int_equal(gw_channel_name_check("chat:*", 6, 0), GW_CHANNEL_ERR_BAD_CHAR);
}

static void test_gw_channel_name_patterns_valid(void **state)
{
    (void)state;
    static const struct {
        const char *pattern;
        size_t max;
        gw_channel_err_t rc;
    } rows[] = {
        {"*", 0, GW_CHANNEL_OK},
        {"chat:*", 0, GW_CHANNEL_OK},
        {"news", 0, GW_CHANNEL_OK},
        {"user:42", 0, GW_CHANNEL_OK},
        {"", 0, GW_CHANNEL_ERR_EMPTY},
        {"**", 0, GW_CHANNEL_ERR_BAD_CHAR},
        {"*chat", 0, GW_CHANNEL_ERR_BAD_CHAR},
        {"a*b", 0, GW_CHANNEL_ERR_BAD_CHAR},
        {"chat:**", 0, GW_CHANNEL_ERR_BAD_CHAR},
        {"bad name*", 0, GW_CHANNEL_ERR_BAD_CHAR},
        {"abc*", 3, GW_CHANNEL_OK}, /* the star does not count against max */
        {"abcd*", 3, GW_CHANNEL_ERR_TOO_LONG},
        {"abcd", 3, GW_CHANNEL_ERR_TOO_LONG},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        gw_channel_err_t rc =
            gw_channel_pattern_check(rows[i].pattern, strlen(rows[i].pattern), rows[i].max);
        if (rc != rows[i].rc)
            fail_msg("pattern '%s': %s, want %s", rows[i].pattern, gw_channel_err_str(rc),
                     gw_channel_err_str(rows[i].rc));
    }
}

static void test_gw_channel_name_pattern_match(void **state)
{
    (void)state;
    static const struct {
        const char *pattern;
        const char *name;
        bool is_match;
    } rows[] = {
        {"*", "anything", true},
        {"*", "a", true},
        {"chat:*", "chat:room1", true},
        {"chat:*", "chat:", true},
        {"chat:*", "chat", false},
        {"chat:*", "chatroom", false},
        {"chat:*", "news:chat:x", false},
        {"chat:*", "Chat:room1", false},
        {"news", "news", true},
        {"news", "news2", false},
        {"news", "new", false},
        {"news", "", false},
        {"", "news", false},
        {"user:42", "user:42", true},
        {"user:4*", "user:42", true},
        {"user:42*", "user:4", false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        bool is_match = gw_channel_pattern_match(rows[i].pattern, strlen(rows[i].pattern),
                                                 rows[i].name, strlen(rows[i].name));
        if (is_match != rows[i].is_match)
            fail_msg("'%s' vs '%s': got %d", rows[i].pattern, rows[i].name, is_match);
    }
    /* Lengths, not NULs, delimit: a prefix of a longer buffer is its own name. */
    assert_true(gw_channel_pattern_match("news", 4, "newsroom", 4));
    assert_false(gw_channel_pattern_match("news*", 5, "newsroom", 3));
}

static void test_gw_channel_name_err_str(void **state)
{
    (void)state;
    assert_string_equal(gw_channel_err_str(GW_CHANNEL_OK), "ok");
    assert_string_equal(gw_channel_err_str(GW_CHANNEL_ERR_EMPTY), "empty");
    assert_string_equal(gw_channel_err_str(GW_CHANNEL_ERR_TOO_LONG), "too_long");
    assert_string_equal(gw_channel_err_str(GW_CHANNEL_ERR_BAD_CHAR), "bad_char");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_channel_name_lengths),
        cmocka_unit_test(test_gw_channel_name_every_byte),
        cmocka_unit_test(test_gw_channel_name_patterns_valid),
        cmocka_unit_test(test_gw_channel_name_pattern_match),
        cmocka_unit_test(test_gw_channel_name_err_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
