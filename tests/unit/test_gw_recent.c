/*
 * test_gw_recent: recent records (gateway/engine/memory/gw_recent.c): a put sets the value
 * and renews the record; it expires ttl after it was last written (on get, on put, on trim),
 * also when new limits shorten the ttl; the count limit drops the record written longest ago,
 * and a rewritten record becomes the newest; a table with limit 0 keeps nothing; names may
 * hold any byte but NUL's neighbours (the idempotency records' "channel NUL key").
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

#include "gw_recent.h"

static int put(gw_recent_t *ls, const char *name, uint64_t a, uint64_t now)
{
    size_t len = strlen(name);
    gw_recent_val_t v = {.a = a, .b = a * 3};
    return gw_recent_put(ls, name, len, gw_chantab_hash(name, len), &v, now);
}

/* The recorded value's first word, or 0 when there is none. */
static uint64_t get(const gw_recent_t *ls, const char *name, uint64_t now)
{
    size_t len = strlen(name);
    gw_recent_val_t v = {0};
    if (!gw_recent_get(ls, name, len, gw_chantab_hash(name, len), now, &v))
        return 0;
    assert_true(v.a != 0);
    assert_int_equal(v.b, v.a * 3);
    return v.a;
}

static void test_gw_recent_put_sets(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 10, 1000), 0);
    assert_int_equal(put(&ls, "alice", 500, 500), 0);
    assert_int_equal(get(&ls, "alice", 600), 500);
    assert_int_equal(put(&ls, "alice", 400, 700), 0);
    assert_int_equal(get(&ls, "alice", 700), 400);
    assert_int_equal(gw_recent_count(&ls), 1);
    assert_int_equal(get(&ls, "bob", 800), 0);
    gw_recent_deinit(&ls);
}

/* Names with a NUL inside ("channel NUL key"): "a\0bc" and "a\0b" are different records. */
static void test_gw_recent_binary_names(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 10, 1000), 0);
    gw_recent_val_t v1 = {.a = 1, .b = 2};
    gw_recent_val_t v2 = {.a = 3, .b = 4};
    assert_int_equal(gw_recent_put(&ls, "a\0bc", 4, gw_chantab_hash("a\0bc", 4), &v1, 0), 0);
    assert_int_equal(gw_recent_put(&ls, "a\0b", 3, gw_chantab_hash("a\0b", 3), &v2, 0), 0);
    gw_recent_val_t got;
    assert_true(gw_recent_get(&ls, "a\0bc", 4, gw_chantab_hash("a\0bc", 4), 1, &got));
    assert_int_equal(got.a, 1);
    assert_int_equal(got.b, 2);
    assert_true(gw_recent_get(&ls, "a\0b", 3, gw_chantab_hash("a\0b", 3), 1, &got));
    assert_int_equal(got.b, 4);
    assert_false(gw_recent_get(&ls, "a", 1, gw_chantab_hash("a", 1), 1, &got));
    gw_recent_deinit(&ls);
}

/* New limits: the shorter ttl applies to the records kept; a lower count limit drops the
 * oldest at the next put. */
static void test_gw_recent_set_limits(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 10, 1000), 0);
    assert_int_equal(put(&ls, "a", 1, 100), 0);
    assert_int_equal(put(&ls, "b", 2, 200), 0);
    assert_int_equal(put(&ls, "c", 3, 300), 0);
    gw_recent_set_limits(&ls, 2, 500);
    assert_int_equal(get(&ls, "a", 599), 1);
    assert_int_equal(get(&ls, "a", 600), 0);
    assert_int_equal(put(&ls, "d", 4, 650), 0); /* trims "a" (expired), drops "b" (limit) */
    assert_int_equal(gw_recent_count(&ls), 2);
    assert_int_equal(ls.evicted, 1);
    assert_int_equal(get(&ls, "b", 650), 0);
    assert_int_equal(get(&ls, "c", 650), 3);
    gw_recent_set_limits(&ls, 0, 500);
    assert_int_equal(put(&ls, "e", 5, 660), 0);
    assert_int_equal(get(&ls, "e", 660), 0);
    gw_recent_deinit(&ls);
}

static void test_gw_recent_ttl(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 10, 1000), 0);
    assert_int_equal(put(&ls, "a", 100, 100), 0);
    assert_int_equal(put(&ls, "b", 600, 600), 0);
    assert_int_equal(get(&ls, "a", 1099), 100);
    /* Expired for get at once, dropped by the next trim. */
    assert_int_equal(get(&ls, "a", 1100), 0);
    assert_int_equal(gw_recent_count(&ls), 2);
    gw_recent_trim(&ls, 1100);
    assert_int_equal(gw_recent_count(&ls), 1);
    assert_int_equal(get(&ls, "b", 1100), 600);
    /* Rewriting a record restarts its ttl. */
    assert_int_equal(put(&ls, "b", 600, 1500), 0);
    assert_int_equal(get(&ls, "b", 2400), 600);
    /* A put trims first: "b" expires at 2500. */
    assert_int_equal(put(&ls, "c", 2600, 2600), 0);
    assert_int_equal(gw_recent_count(&ls), 1);
    assert_int_equal(get(&ls, "c", 2600), 2600);
    gw_recent_deinit(&ls);
}

static void test_gw_recent_limit(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 3, 1000000), 0);
    assert_int_equal(put(&ls, "a", 1, 1), 0);
    assert_int_equal(put(&ls, "b", 2, 2), 0);
    assert_int_equal(put(&ls, "c", 3, 3), 0);
    /* "a" rewritten: now "b" is the oldest. */
    assert_int_equal(put(&ls, "a", 4, 4), 0);
    assert_int_equal(put(&ls, "d", 5, 5), 0);
    assert_int_equal(gw_recent_count(&ls), 3);
    assert_int_equal(ls.evicted, 1);
    assert_int_equal(get(&ls, "b", 5), 0);
    assert_int_equal(get(&ls, "a", 5), 4);
    assert_int_equal(get(&ls, "c", 5), 3);
    assert_int_equal(get(&ls, "d", 5), 5);
    gw_recent_deinit(&ls);

    /* Limit 0: nothing is kept. */
    assert_int_equal(gw_recent_init(&ls, 0, 1000), 0);
    assert_int_equal(put(&ls, "a", 1, 1), 0);
    assert_int_equal(gw_recent_count(&ls), 0);
    assert_int_equal(get(&ls, "a", 1), 0);
    gw_recent_deinit(&ls);
}

/* Many records, deinit with records in (ASan reports a leak if one is lost), names that
 * share a hash. */
static void test_gw_recent_many(void **state)
{
    (void)state;
    gw_recent_t ls;
    assert_int_equal(gw_recent_init(&ls, 1000, 1000000), 0);
    for (int i = 0; i < 3000; i++) {
        char name[16];
        snprintf(name, sizeof(name), "user-%d", i);
        assert_int_equal(put(&ls, name, (uint64_t)i + 1, (uint64_t)i + 1), 0);
    }
    assert_int_equal(gw_recent_count(&ls), 1000);
    assert_int_equal(ls.evicted, 2000);
    assert_int_equal(get(&ls, "user-1999", 5000), 0);
    assert_int_equal(get(&ls, "user-2000", 5000), 2001);
    assert_int_equal(get(&ls, "user-2999", 5000), 3000);
    gw_recent_val_t vx = {.a = 10};
    gw_recent_val_t vy = {.a = 20};
    assert_int_equal(gw_recent_put(&ls, "x", 1, 7, &vx, 10), 0);
    assert_int_equal(gw_recent_put(&ls, "y", 1, 7, &vy, 20), 0);
    gw_recent_val_t at = {0};
    assert_true(gw_recent_get(&ls, "x", 1, 7, 30, &at));
    assert_int_equal(at.a, 10);
    assert_true(gw_recent_get(&ls, "y", 1, 7, 30, &at));
    assert_int_equal(at.a, 20);
    gw_recent_deinit(&ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_recent_put_sets),
        cmocka_unit_test(test_gw_recent_binary_names),
        cmocka_unit_test(test_gw_recent_set_limits),
        cmocka_unit_test(test_gw_recent_ttl),
        cmocka_unit_test(test_gw_recent_limit),
        cmocka_unit_test(test_gw_recent_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
