/*
 * test_gw_lastseen: recently offline users (gateway/gw_lastseen.c): a record keeps the latest
 * time it was given, whatever the order of arrival; it expires ttl after it was last written
 * (on get, on put, on trim); the count limit drops the record written longest ago, and a
 * rewritten record becomes the newest; a table with limit 0 keeps nothing.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gw_lastseen.h"

static int put(gw_lastseen_t *ls, const char *user, uint64_t at_ms, uint64_t now_ms)
{
    size_t len = strlen(user);
    return gw_lastseen_put(ls, user, len, gw_chantab_hash(user, len), at_ms, now_ms);
}

/* The recorded time, or 0 when there is none. */
static uint64_t get(const gw_lastseen_t *ls, const char *user, uint64_t now_ms)
{
    size_t len = strlen(user);
    uint64_t at = 0;
    if (!gw_lastseen_get(ls, user, len, gw_chantab_hash(user, len), now_ms, &at))
        return 0;
    assert_true(at != 0);
    return at;
}

static void test_gw_lastseen_latest_wins(void **state)
{
    (void)state;
    gw_lastseen_t ls;
    assert_int_equal(gw_lastseen_init(&ls, 10, 1000), 0);
    assert_int_equal(put(&ls, "alice", 500, 500), 0);
    assert_int_equal(get(&ls, "alice", 600), 500);
    /* An older report that arrives later does not move it back. */
    assert_int_equal(put(&ls, "alice", 400, 700), 0);
    assert_int_equal(get(&ls, "alice", 700), 500);
    assert_int_equal(put(&ls, "alice", 800, 800), 0);
    assert_int_equal(get(&ls, "alice", 800), 800);
    assert_int_equal(gw_lastseen_count(&ls), 1);
    assert_int_equal(get(&ls, "bob", 800), 0);
    gw_lastseen_deinit(&ls);
}

static void test_gw_lastseen_ttl(void **state)
{
    (void)state;
    gw_lastseen_t ls;
    assert_int_equal(gw_lastseen_init(&ls, 10, 1000), 0);
    assert_int_equal(put(&ls, "a", 100, 100), 0);
    assert_int_equal(put(&ls, "b", 600, 600), 0);
    assert_int_equal(get(&ls, "a", 1099), 100);
    /* Expired for get at once, dropped by the next trim. */
    assert_int_equal(get(&ls, "a", 1100), 0);
    assert_int_equal(gw_lastseen_count(&ls), 2);
    gw_lastseen_trim(&ls, 1100);
    assert_int_equal(gw_lastseen_count(&ls), 1);
    assert_int_equal(get(&ls, "b", 1100), 600);
    /* Rewriting a record restarts its ttl. */
    assert_int_equal(put(&ls, "b", 600, 1500), 0);
    assert_int_equal(get(&ls, "b", 2400), 600);
    /* A put trims first: "b" expires at 2500. */
    assert_int_equal(put(&ls, "c", 2600, 2600), 0);
    assert_int_equal(gw_lastseen_count(&ls), 1);
    assert_int_equal(get(&ls, "c", 2600), 2600);
    gw_lastseen_deinit(&ls);
}

static void test_gw_lastseen_limit(void **state)
{
    (void)state;
    gw_lastseen_t ls;
    assert_int_equal(gw_lastseen_init(&ls, 3, 1000000), 0);
    assert_int_equal(put(&ls, "a", 1, 1), 0);
    assert_int_equal(put(&ls, "b", 2, 2), 0);
    assert_int_equal(put(&ls, "c", 3, 3), 0);
    /* "a" rewritten: now "b" is the oldest. */
    assert_int_equal(put(&ls, "a", 4, 4), 0);
    assert_int_equal(put(&ls, "d", 5, 5), 0);
    assert_int_equal(gw_lastseen_count(&ls), 3);
    assert_int_equal(ls.evicted, 1);
    assert_int_equal(get(&ls, "b", 5), 0);
    assert_int_equal(get(&ls, "a", 5), 4);
    assert_int_equal(get(&ls, "c", 5), 3);
    assert_int_equal(get(&ls, "d", 5), 5);
    gw_lastseen_deinit(&ls);

    /* Limit 0: nothing is kept. */
    assert_int_equal(gw_lastseen_init(&ls, 0, 1000), 0);
    assert_int_equal(put(&ls, "a", 1, 1), 0);
    assert_int_equal(gw_lastseen_count(&ls), 0);
    assert_int_equal(get(&ls, "a", 1), 0);
    gw_lastseen_deinit(&ls);
}

/* Many records, deinit with records in (ASan reports a leak if one is lost), names that
 * share a hash. */
static void test_gw_lastseen_many(void **state)
{
    (void)state;
    gw_lastseen_t ls;
    assert_int_equal(gw_lastseen_init(&ls, 1000, 1000000), 0);
    for (int i = 0; i < 3000; i++) {
        char name[16];
        snprintf(name, sizeof(name), "user-%d", i);
        assert_int_equal(put(&ls, name, (uint64_t)i + 1, (uint64_t)i + 1), 0);
    }
    assert_int_equal(gw_lastseen_count(&ls), 1000);
    assert_int_equal(ls.evicted, 2000);
    assert_int_equal(get(&ls, "user-1999", 5000), 0);
    assert_int_equal(get(&ls, "user-2000", 5000), 2001);
    assert_int_equal(get(&ls, "user-2999", 5000), 3000);
    assert_int_equal(gw_lastseen_put(&ls, "x", 1, 7, 10, 10), 0);
    assert_int_equal(gw_lastseen_put(&ls, "y", 1, 7, 20, 20), 0);
    uint64_t at = 0;
    assert_true(gw_lastseen_get(&ls, "x", 1, 7, 30, &at));
    assert_int_equal(at, 10);
    assert_true(gw_lastseen_get(&ls, "y", 1, 7, 30, &at));
    assert_int_equal(at, 20);
    gw_lastseen_deinit(&ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_lastseen_latest_wins),
        cmocka_unit_test(test_gw_lastseen_ttl),
        cmocka_unit_test(test_gw_lastseen_limit),
        cmocka_unit_test(test_gw_lastseen_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
