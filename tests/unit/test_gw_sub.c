/*
 * test_gw_sub: the per-loop subscription index: join on the first subscriber, SubscribeOk
 * answered once the engine replies, leave on the last, a JOINING entry that empties before its
 * answer, a failed join, O(1) removal with position fix-ups, inline-to-heap growth, and table
 * growth and shrinkage over many channels; RECOVERING members (in the entry, keeping it alive,
 * never answered by the join, flagged through position fix-ups, reported when the join fails).
 *
 * The engine is a recorder: join/leave calls and joined answers land in arrays the tests check.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_fanout.h"

#define MAX_CALLS 16384

typedef struct {
    char name[64];
    int kind; /* 'j' join, 'l' leave */
} call_t;

typedef struct {
    gw_sub_set_t *set;
    uint64_t req_id;
    int status;
    uint64_t offset;
} answer_t;

typedef struct {
    gw_sub_index_t ix;
    call_t calls[MAX_CALLS];
    size_t n_calls;
    answer_t answers[MAX_CALLS];
    size_t n_answers;
    uint64_t withdrawn; /* set by rem(): the id gw_sub_remove reported */
    gw_sub_set_t *recover_failed[8];
    size_t n_recover_failed;
} fx_t;

static void on_engine(int kind, const char *name, size_t len, uint32_t hash, void *arg)
{
    fx_t *fx = arg;
    assert_int_equal(hash, gw_sub_hash(name, len));
    assert_true(fx->n_calls < MAX_CALLS);
    call_t *c = &fx->calls[fx->n_calls++];
    snprintf(c->name, sizeof(c->name), "%.*s", (int)len, name);
    c->kind = kind;
}

static void on_join(const char *name, size_t len, uint32_t hash, void *arg)
{
    on_engine('j', name, len, hash, arg);
}

static void on_leave(const char *name, size_t len, uint32_t hash, void *arg)
{
    on_engine('l', name, len, hash, arg);
}

static void on_joined(gw_sub_set_t *set, uint64_t req_id, int status, const gw_sub_entry_t *e,
                      void *arg)
{
    fx_t *fx = arg;
    assert_true(fx->n_answers < MAX_CALLS);
    assert_true((status == 0) == (e != NULL));
    fx->answers[fx->n_answers++] = (answer_t){
        .set = set, .req_id = req_id, .status = status, .offset = e ? gw_sub_entry_offset(e) : 0};
}

static void on_recover_failed(gw_sub_set_t *set, const char *name, size_t len, uint32_t hash,
                              int status, void *arg)
{
    fx_t *fx = arg;
    assert_int_equal(hash, gw_sub_hash(name, len));
    assert_true(status < 0);
    /* The entry is out of the index already, and the set out of the channel. */
    assert_null(gw_sub_find(&fx->ix, name, len, hash));
    assert_false(gw_sub_set_has(set, name, len));
    assert_true(fx->n_recover_failed < 8);
    fx->recover_failed[fx->n_recover_failed++] = set;
}

static const gw_sub_index_cbs_t cbs = {
    .join = on_join, .leave = on_leave, .joined = on_joined, .recover_failed = on_recover_failed};

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(gw_sub_index_init(&fx->ix, &cbs, fx), 0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    gw_sub_index_deinit(&fx->ix);
    free(fx);
    return 0;
}

static int add(fx_t *fx, gw_sub_set_t *set, const char *name, uint64_t req_id)
{
    return gw_sub_add(&fx->ix, set, name, strlen(name), gw_sub_hash(name, strlen(name)), req_id,
                      NULL);
}

/* Returns gw_sub_remove's result; a withdrawn Subscribe's id goes to fx->withdrawn. */
static int rem(fx_t *fx, gw_sub_set_t *set, const char *name)
{
    fx->withdrawn = 0;
    return gw_sub_remove(&fx->ix, set, name, strlen(name), gw_sub_hash(name, strlen(name)),
                         &fx->withdrawn);
}

static void joined(fx_t *fx, const char *name, int status, uint64_t offset)
{
    gw_sub_joined(&fx->ix, name, strlen(name), gw_sub_hash(name, strlen(name)), status, offset,
                  0xabcdu);
}

static gw_sub_entry_t *find(fx_t *fx, const char *name)
{
    return gw_sub_find(&fx->ix, name, strlen(name), gw_sub_hash(name, strlen(name)));
}

static int add_recovering(fx_t *fx, gw_sub_set_t *set, const char *name)
{
    return gw_sub_add_recovering(&fx->ix, set, name, strlen(name), gw_sub_hash(name, strlen(name)),
                                 NULL);
}

/* A recovering member is in the entry (counted, listed, keeping it), is not answered by the
 * join, and becomes an ordinary member with gw_sub_recovered. */
static void test_gw_sub_recovering_member(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0}, r = {0};
    assert_int_equal(add_recovering(fx, &r, "c"), 0); /* first: it joins */
    assert_int_equal(add(fx, &a, "c", 5), 0);
    assert_int_equal(fx->n_calls, 1);
    assert_int_equal(add_recovering(fx, &r, "c"), -EEXIST);
    gw_sub_entry_t *e = find(fx, "c");
    assert_true(gw_sub_set_is_recovering(&r, e));
    assert_true(gw_sub_set_has_recovering(&r));
    assert_false(gw_sub_set_is_recovering(&a, e));
    joined(fx, "c", 0, 10);
    assert_int_equal(fx->n_answers, 1); /* only a's Subscribe */
    assert_ptr_equal(fx->answers[0].set, &a);
    uint32_t n;
    gw_sub_entry_members(e, &n);
    assert_int_equal(n, 2);
    assert_int_equal(fx->ix.subscriptions, 2);
    /* Everyone else leaves: the recovering member keeps the entry. */
    assert_int_equal(rem(fx, &a, "c"), 0);
    assert_ptr_equal(find(fx, "c"), e);
    assert_int_equal(fx->n_calls, 1);
    assert_int_equal(gw_sub_recovered(&r, e), 0);
    assert_false(gw_sub_set_is_recovering(&r, e));
    assert_false(gw_sub_set_has_recovering(&r));
    assert_int_equal(gw_sub_recovered(&r, e), -ENOENT);
    assert_int_equal(rem(fx, &r, "c"), 0);
    assert_int_equal(fx->n_calls, 2); /* the leave */
    assert_null(find(fx, "c"));
}

/* On an ACTIVE entry too, and removal reports 2 for a member still recovering. */
static void test_gw_sub_recovering_removed(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0}, r = {0};
    assert_int_equal(add(fx, &a, "c", 1), 0);
    joined(fx, "c", 0, 3);
    assert_int_equal(add_recovering(fx, &r, "c"), 0);
    assert_int_equal(fx->n_calls, 1); /* no second join */
    assert_true(gw_sub_set_is_recovering(&r, find(fx, "c")));
    assert_int_equal(rem(fx, &r, "c"), 2);
    assert_int_equal(rem(fx, &a, "c"), 0);
    assert_null(find(fx, "c"));
}

/* The flag rides along when swap-removal moves the member to another position. */
static void test_gw_sub_recovering_flag_survives_moves(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t s[4];
    memset(s, 0, sizeof(s));
    assert_int_equal(add(fx, &s[0], "c", 1), 0);
    joined(fx, "c", 0, 0);
    assert_int_equal(add(fx, &s[1], "c", 2), 1);
    assert_int_equal(add(fx, &s[2], "c", 3), 1);
    assert_int_equal(add_recovering(fx, &s[3], "c"), 0); /* last position */
    assert_int_equal(rem(fx, &s[0], "c"), 0);            /* s[3] moves to position 0 */
    gw_sub_entry_t *e = find(fx, "c");
    uint32_t n;
    gw_sub_set_t *const *m = gw_sub_entry_members(e, &n);
    assert_int_equal(n, 3);
    assert_ptr_equal(m[0], &s[3]);
    assert_true(gw_sub_set_is_recovering(&s[3], e));
    assert_false(gw_sub_set_is_recovering(&s[1], e));
    /* Removal from its new position works, and reports it recovering. */
    assert_int_equal(rem(fx, &s[3], "c"), 2);
    gw_sub_entry_members(e, &n);
    assert_int_equal(n, 2);
    gw_sub_remove_all(&fx->ix, &s[1]);
    gw_sub_remove_all(&fx->ix, &s[2]);
    assert_null(find(fx, "c"));
}

/* A failed join takes recovering members out too and reports each through recover_failed. */
static void test_gw_sub_failed_join_reports_recovering(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0}, r1 = {0}, r2 = {0};
    assert_int_equal(add_recovering(fx, &r1, "c"), 0);
    assert_int_equal(add(fx, &a, "c", 4), 0);
    assert_int_equal(add_recovering(fx, &r2, "c"), 0);
    joined(fx, "c", -ENOMEM, 0);
    assert_null(find(fx, "c"));
    assert_int_equal(fx->n_answers, 1);
    assert_int_equal(fx->answers[0].status, -ENOMEM);
    assert_int_equal(fx->n_recover_failed, 2);
    assert_true((fx->recover_failed[0] == &r1 && fx->recover_failed[1] == &r2) ||
                (fx->recover_failed[0] == &r2 && fx->recover_failed[1] == &r1));
    assert_int_equal(gw_sub_set_count(&r1), 0);
    assert_int_equal(gw_sub_set_count(&r2), 0);
    assert_int_equal(fx->ix.subscriptions, 0);
}

static void test_gw_sub_first_subscriber_joins_then_answered(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0}, b = {0};
    assert_int_equal(add(fx, &a, "news", 7), 0);
    assert_int_equal(add(fx, &b, "news", 8), 0);
    assert_int_equal(fx->n_calls, 1);
    assert_int_equal(fx->calls[0].kind, 'j');
    assert_string_equal(fx->calls[0].name, "news");
    assert_false(gw_sub_entry_is_active(find(fx, "news")));
    assert_int_equal(fx->n_answers, 0);

    joined(fx, "news", 0, 41);
    assert_int_equal(fx->n_answers, 2);
    assert_ptr_equal(fx->answers[0].set, &a);
    assert_int_equal(fx->answers[0].req_id, 7);
    assert_int_equal(fx->answers[0].status, 0);
    assert_int_equal(fx->answers[0].offset, 41);
    assert_ptr_equal(fx->answers[1].set, &b);
    assert_int_equal(fx->answers[1].req_id, 8);
    gw_sub_entry_t *e = find(fx, "news");
    assert_true(gw_sub_entry_is_active(e));
    assert_int_equal(gw_sub_entry_epoch(e), 0xabcd);

    /* A third subscriber on an ACTIVE entry is answered at once, with the latest offset. */
    gw_sub_entry_advance(e, 42, 0xabcd);
    gw_sub_set_t c = {0};
    gw_sub_entry_t *out = NULL;
    assert_int_equal(gw_sub_add(&fx->ix, &c, "news", 4, gw_sub_hash("news", 4), 9, &out), 1);
    assert_ptr_equal(out, e);
    assert_int_equal(gw_sub_entry_offset(out), 42);
    assert_int_equal(fx->n_calls, 1);
    assert_int_equal(fx->ix.subscriptions, 3);

    /* A second answer for an ACTIVE entry is ignored. */
    joined(fx, "news", 0, 99);
    assert_int_equal(fx->n_answers, 2);
    assert_int_equal(gw_sub_entry_offset(e), 42);

    gw_sub_remove_all(&fx->ix, &a);
    gw_sub_remove_all(&fx->ix, &b);
    assert_int_equal(fx->n_calls, 1);
    gw_sub_remove_all(&fx->ix, &c);
    assert_int_equal(fx->n_calls, 2);
    assert_int_equal(fx->calls[1].kind, 'l');
    assert_null(find(fx, "news"));
    assert_int_equal(gw_sub_index_channels(&fx->ix), 0);
    assert_int_equal(fx->ix.subscriptions, 0);
}

static void test_gw_sub_duplicate_and_missing(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0};
    assert_int_equal(add(fx, &a, "x", 1), 0);
    assert_int_equal(add(fx, &a, "x", 2), -EEXIST);
    assert_true(gw_sub_set_has(&a, "x", 1));
    assert_false(gw_sub_set_has(&a, "y", 1));
    assert_int_equal(rem(fx, &a, "y"), -ENOENT);
    joined(fx, "x", 0, 0);
    assert_int_equal(rem(fx, &a, "x"), 0);
    assert_int_equal(rem(fx, &a, "x"), -ENOENT);
    assert_int_equal(gw_sub_set_count(&a), 0);
    gw_sub_set_deinit(&a);
}

/* The last member leaves while the join is in flight: the entry waits for the answer, then
 * goes with a leave, and nobody is answered. */
static void test_gw_sub_joining_entry_emptied_waits_for_answer(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0};
    assert_int_equal(add(fx, &a, "c", 1), 0);
    /* Its Subscribe (request 1) is still unanswered: the caller must answer it. */
    assert_int_equal(rem(fx, &a, "c"), 1);
    assert_int_equal(fx->withdrawn, 1);
    assert_non_null(find(fx, "c"));
    assert_int_equal(fx->n_calls, 1);

    /* A new subscriber meanwhile rides on the same join. */
    gw_sub_set_t b = {0};
    assert_int_equal(add(fx, &b, "c", 2), 0);
    assert_int_equal(fx->n_calls, 1);
    assert_int_equal(rem(fx, &b, "c"), 1);
    assert_int_equal(fx->withdrawn, 2);

    joined(fx, "c", 0, 5);
    assert_int_equal(fx->n_answers, 0);
    assert_null(find(fx, "c"));
    assert_int_equal(fx->n_calls, 2);
    assert_int_equal(fx->calls[1].kind, 'l');
    gw_sub_set_deinit(&a);
    gw_sub_set_deinit(&b);
}

static void test_gw_sub_failed_join_undoes(void **state)
{
    fx_t *fx = *state;
    gw_sub_set_t a = {0}, b = {0};
    assert_int_equal(add(fx, &a, "c", 1), 0);
    assert_int_equal(add(fx, &a, "d", 2), 0);
    assert_int_equal(add(fx, &b, "c", 3), 0);
    joined(fx, "c", -EIO, 0);
    assert_int_equal(fx->n_answers, 2);
    assert_int_equal(fx->answers[0].status, -EIO);
    assert_int_equal(fx->answers[1].status, -EIO);
    assert_null(find(fx, "c"));
    assert_int_equal(gw_sub_set_count(&a), 1);
    assert_true(gw_sub_set_has(&a, "d", 1));
    assert_int_equal(gw_sub_set_count(&b), 0);
    assert_int_equal(fx->ix.subscriptions, 1);
    /* No leave for a join that never took. */
    for (size_t i = 0; i < fx->n_calls; i++)
        assert_int_equal(fx->calls[i].kind, 'j');
    gw_sub_remove_all(&fx->ix, &a);
    gw_sub_set_deinit(&b);
}

/* Many members, removed in an order that moves others around: the positions stay right. */
static void test_gw_sub_swap_remove_keeps_positions(void **state)
{
    fx_t *fx = *state;
    enum { N = 100 };
    gw_sub_set_t *sets = calloc(N, sizeof(*sets));
    assert_non_null(sets);
    for (int i = 0; i < N; i++)
        assert_int_equal(add(fx, &sets[i], "big", (uint64_t)i), 0);
    joined(fx, "big", 0, 0);
    assert_int_equal(fx->n_answers, N);
    /* Every member also joins a second, personal channel (inline slot 2), then a third
     * (heap growth). */
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "user:%d", i);
        assert_int_equal(add(fx, &sets[i], name, 0), 0);
        assert_int_equal(add(fx, &sets[i], "third", 0), 0);
        assert_int_equal(gw_sub_set_count(&sets[i]), 3);
        assert_int_not_equal(sets[i].cap, 0);
        joined(fx, name, 0, 0);
    }
    joined(fx, "third", 0, 0);
    for (int i = 0; i < N; i += 3)
        assert_int_equal(rem(fx, &sets[i], "big"), 0);
    gw_sub_entry_t *e = find(fx, "big");
    uint32_t n;
    gw_sub_set_t *const *m = gw_sub_entry_members(e, &n);
    assert_int_equal(n, N - (N + 2) / 3);
    for (uint32_t k = 0; k < n; k++) {
        assert_true(gw_sub_set_has(m[k], "big", 3));
        assert_int_not_equal((m[k] - sets) % 3, 0);
    }
    for (int i = 0; i < N; i++)
        gw_sub_remove_all(&fx->ix, &sets[i]);
    assert_int_equal(gw_sub_index_channels(&fx->ix), 0);
    assert_int_equal(fx->ix.subscriptions, 0);
    free(sets);
}

/* Thousands of channels: the table grows, then shrinks as they go, and every lookup holds. */
static void test_gw_sub_table_grows_and_shrinks(void **state)
{
    fx_t *fx = *state;
    enum { N = 5000 };
    gw_sub_set_t *sets = calloc(N, sizeof(*sets));
    assert_non_null(sets);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "user:%d", i);
        assert_int_equal(add(fx, &sets[i], name, 0), 0);
        joined(fx, name, 0, (uint64_t)i);
    }
    assert_int_equal(gw_sub_index_channels(&fx->ix), N);
    assert_true((uint64_t)(fx->ix.tab.mask + 1) * 3 >= (uint64_t)N * 4);
    for (int i = 0; i < N; i += 2)
        gw_sub_remove_all(&fx->ix, &sets[i]);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "user:%d", i);
        gw_sub_entry_t *e = find(fx, name);
        if (i % 2 == 0) {
            assert_null(e);
        } else {
            assert_non_null(e);
            assert_int_equal(gw_sub_entry_offset(e), (uint64_t)i);
        }
    }
    for (int i = 1; i < N; i += 2)
        gw_sub_remove_all(&fx->ix, &sets[i]);
    assert_int_equal(gw_sub_index_channels(&fx->ix), 0);
    assert_int_equal(fx->ix.tab.mask + 1, 16);
    assert_int_equal(fx->n_calls, 2 * N);
    free(sets);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_sub_first_subscriber_joins_then_answered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_duplicate_and_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_joining_entry_emptied_waits_for_answer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_failed_join_undoes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_swap_remove_keeps_positions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_table_grows_and_shrinks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_recovering_member, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_recovering_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_recovering_flag_survives_moves, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_sub_failed_join_reports_recovering, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
