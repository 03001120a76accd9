/*
 * test_gw_history_rules: `[history] rules` parsing, table-driven (one row per accepted or
 * refused form), and matching, where the first matching rule decides.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gw_config.h"

typedef struct {
    const char *text;
    int rc;
    uint32_t n;             /* rules when rc == 0 */
    const char *pattern0;   /* the first rule's pattern */
    uint32_t count0;        /* and count */
    uint64_t age0_ms;       /* and age */
    const char *err_substr; /* in the message when rc < 0 */
} parse_row_t;

static const parse_row_t parse_rows[] = {
    {"", 0, 0, NULL, 0, 0, NULL},
    {"   ", 0, 0, NULL, 0, 0, NULL},
    {"chat:*=100/5m", 0, 1, "chat:*", 100, 300000, NULL},
    {" chat:* = 100 / 5m ", 0, 1, "chat:*", 100, 300000, NULL},
    {"news=20", 0, 1, "news", 20, 0, NULL},
    {"*=1/1s", 0, 1, "*", 1, 1000, NULL},
    {"chat:tmp*=0,chat:*=100/5m", 0, 2, "chat:tmp*", 0, 0, NULL},
    {"a=65536/30d", 0, 1, "a", 65536, 30ull * 86400 * 1000, NULL},
    {"a=65537", -EINVAL, 0, NULL, 0, 0, "count"},
    {"a=-1", -EINVAL, 0, NULL, 0, 0, "count"},
    {"a=", -EINVAL, 0, NULL, 0, 0, "count"},
    {"a=1x", -EINVAL, 0, NULL, 0, 0, "count"},
    {"a=1/500ms", -EINVAL, 0, NULL, 0, 0, "age"},
    {"a=1/31d", -EINVAL, 0, NULL, 0, 0, "age"},
    {"a=1/5x", -EINVAL, 0, NULL, 0, 0, "age"},
    {"a=1/", -EINVAL, 0, NULL, 0, 0, "age"},
    {"a", -EINVAL, 0, NULL, 0, 0, "pattern=count"},
    {"=5", -EINVAL, 0, NULL, 0, 0, "not a channel pattern"},
    {"a*b=5", -EINVAL, 0, NULL, 0, 0, "not a channel pattern"},
    {"a b=5", -EINVAL, 0, NULL, 0, 0, "not a channel pattern"},
    {"a=1,,b=2", -EINVAL, 0, NULL, 0, 0, "empty rule"},
    {"a=1,", -EINVAL, 0, NULL, 0, 0, "empty rule"},
};

static void test_gw_history_rules_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_rows) / sizeof(parse_rows[0]); i++) {
        const parse_row_t *row = &parse_rows[i];
        gw_history_rules_t rules;
        char err[200];
        int rc = gw_history_rules_parse(row->text, &rules, err, sizeof(err));
        if (rc != row->rc)
            fail_msg("'%s': rc %d, want %d (%s)", row->text, rc, row->rc, err);
        if (rc < 0) {
            assert_int_equal(rules.n, 0);
            if (!strstr(err, row->err_substr))
                fail_msg("'%s': message '%s' lacks '%s'", row->text, err, row->err_substr);
            continue;
        }
        assert_int_equal(rules.n, row->n);
        if (row->n == 0)
            continue;
        assert_string_equal(gw_history_rule_pattern(&rules, &rules.rule[0]), row->pattern0);
        assert_int_equal(rules.rule[0].count, row->count0);
        assert_int_equal(rules.rule[0].age_ms, row->age0_ms);
    }
}

static void test_gw_history_rules_too_many(void **state)
{
    (void)state;
    char text[GW_HISTORY_RULES_TEXT_MAX];
    size_t len = 0;
    for (int i = 0; i <= GW_HISTORY_RULES_MAX; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%sc%d=1", i ? "," : "", i);
    gw_history_rules_t rules;
    char err[200];
    assert_int_equal(gw_history_rules_parse(text, &rules, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "more than"));
    assert_int_equal(rules.n, 0);
    /* One fewer is fine. */
    *strrchr(text, ',') = '\0';
    assert_int_equal(gw_history_rules_parse(text, &rules, NULL, 0), 0);
    assert_int_equal(rules.n, GW_HISTORY_RULES_MAX);
}

static uint32_t count_of(const gw_history_rules_t *rules, const char *name)
{
    const gw_history_rule_t *r = gw_history_rules_match(rules, name, strlen(name));
    return r ? r->count : UINT32_MAX;
}

static void test_gw_history_rules_first_match_wins(void **state)
{
    (void)state;
    gw_history_rules_t rules;
    assert_int_equal(
        gw_history_rules_parse("chat:tmp*=0, chat:*=100/5m, news=20/1h", &rules, NULL, 0), 0);
    assert_int_equal(count_of(&rules, "chat:tmp1"), 0);
    assert_false(gw_history_rule_keeps(gw_history_rules_match(&rules, "chat:tmp1", 9)));
    assert_int_equal(count_of(&rules, "chat:room"), 100);
    assert_true(gw_history_rule_keeps(gw_history_rules_match(&rules, "chat:room", 9)));
    assert_int_equal(count_of(&rules, "chat:"), 100);
    assert_int_equal(count_of(&rules, "news"), 20);
    assert_int_equal(count_of(&rules, "newsx"), UINT32_MAX);
    assert_int_equal(count_of(&rules, "chat"), UINT32_MAX);
    assert_false(gw_history_rule_keeps(NULL));
    /* Reversed, the general rule shadows the exception. */
    assert_int_equal(gw_history_rules_parse("chat:*=100, chat:tmp*=0", &rules, NULL, 0), 0);
    assert_int_equal(count_of(&rules, "chat:tmp1"), 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_history_rules_parse_table),
        cmocka_unit_test(test_gw_history_rules_too_many),
        cmocka_unit_test(test_gw_history_rules_first_match_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
