/*
 * test_gw_history: a channel's history ring and the store over all of a loop's histories:
 * eviction by count (and the ring's wrap-around in gw_history_since), by age, by the store's
 * memory cap (least recently published channel first), rule changes, the sweep's report of
 * empty histories, and the byte accounting returning to zero. Every message's reference count
 * is checked where the history should hold it or have let it go.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gw_fanout.h"
#include "gw_state.h"

#define MS 1000000ull

static gw_msg_t *msg(const char *chan, uint64_t offset, uint64_t publish_ns)
{
    char payload[32];
    int n = snprintf(payload, sizeof(payload), "m%llu", (unsigned long long)offset);
    gw_msg_t *m = gw_msg_new(chan, strlen(chan), 0, offset, 7, payload, (size_t)n, 0);
    assert_non_null(m);
    m->publish_ns = publish_ns;
    return m;
}

/* Publishes offsets first..last (each at now_ns) into h; the history keeps its own refs. */
static void publish(gw_history_store_t *st, gw_history_t *h, const char *chan, uint64_t first,
                    uint64_t last, uint64_t now_ns)
{
    for (uint64_t o = first; o <= last; o++) {
        gw_msg_t *m = msg(chan, o, now_ns);
        gw_history_add(st, h, m, now_ns);
        gw_msg_unref(m);
    }
}

static gw_history_rule_t rule(uint32_t count, uint64_t age_ms)
{
    return (gw_history_rule_t){.count = count, .age_ms = age_ms};
}

/* The offsets gw_history_since hands out after since, into out; returns how many. */
static uint32_t since_offsets(const gw_history_t *h, uint64_t since, uint64_t *out)
{
    gw_msg_t *const *a;
    gw_msg_t *const *b;
    uint32_t n0;
    uint32_t n;
    uint64_t bytes;
    gw_history_since(h, since, &a, &n0, &b, &n, &bytes);
    uint64_t want_bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        const gw_msg_t *m = i < n0 ? a[i] : b[i - n0];
        out[i] = m->offset;
        want_bytes += gw_history_msg_bytes(m);
    }
    assert_int_equal(bytes, want_bytes);
    return n;
}

static void test_gw_history_count_and_wrap(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *h = NULL;
    gw_history_rule_t r = rule(5, 0);
    assert_int_equal(gw_history_new(&st, &h, &r, NULL), 0);
    assert_true(gw_history_is_empty(h));
    assert_true(gw_history_covers(h, 0, 0));  /* nothing published, nothing missed */
    assert_false(gw_history_covers(h, 0, 3)); /* messages the history never saw */
    publish(&st, h, "c", 1, 12, 1);
    /* Five kept: 8..12; the ring (8 slots) has wrapped. */
    assert_int_equal(h->count, 5);
    assert_int_equal(st.messages, 5);
    assert_int_equal(st.evicted[GW_HISTORY_EVICT_COUNT], 7);
    assert_true(gw_history_covers(h, 7, 12));
    assert_true(gw_history_covers(h, 11, 12));
    assert_true(gw_history_covers(h, 12, 12));
    assert_false(gw_history_covers(h, 6, 12));  /* 7 is gone */
    assert_false(gw_history_covers(h, 13, 12)); /* from the future */
    assert_false(gw_history_covers(h, 7, 13));  /* the history lacks the latest */
    uint64_t offs[8];
    assert_int_equal(since_offsets(h, 7, offs), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(offs[i], 8 + i);
    assert_int_equal(since_offsets(h, 10, offs), 2);
    assert_int_equal(offs[0], 11);
    assert_int_equal(offs[1], 12);
    assert_int_equal(since_offsets(h, 12, offs), 0);
    gw_history_free(&st, h);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.messages, 0);
    assert_int_equal(st.histories, 0);
}

static void test_gw_history_holds_references(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *h = NULL;
    gw_history_rule_t r = rule(2, 0);
    assert_int_equal(gw_history_new(&st, &h, &r, NULL), 0);
    gw_msg_t *m1 = msg("c", 1, 1);
    gw_history_add(&st, h, m1, 1);
    assert_int_equal(atomic_load(&m1->refs), 2);
    gw_msg_t *m2 = msg("c", 2, 1);
    gw_history_add(&st, h, m2, 1);
    gw_msg_t *m3 = msg("c", 3, 1);
    gw_history_add(&st, h, m3, 1); /* m1 leaves by count */
    assert_int_equal(atomic_load(&m1->refs), 1);
    assert_int_equal(atomic_load(&m3->refs), 2);
    gw_history_free(&st, h);
    assert_int_equal(atomic_load(&m2->refs), 1);
    assert_int_equal(atomic_load(&m3->refs), 1);
    gw_msg_unref(m1);
    gw_msg_unref(m2);
    gw_msg_unref(m3);
}

static void test_gw_history_age(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *h = NULL;
    gw_history_rule_t r = rule(100, 1000); /* 1 s */
    assert_int_equal(gw_history_new(&st, &h, &r, NULL), 0);
    publish(&st, h, "c", 1, 3, 10000 * MS);
    publish(&st, h, "c", 4, 5, 10600 * MS);
    gw_history_trim_age(&st, h, 10999 * MS);
    assert_int_equal(h->count, 5);
    gw_history_trim_age(&st, h, 11001 * MS); /* 1..3 are past a second old */
    assert_int_equal(h->count, 2);
    assert_int_equal(st.evicted[GW_HISTORY_EVICT_AGE], 3);
    assert_false(gw_history_covers(h, 2, 5));
    assert_true(gw_history_covers(h, 3, 5));
    /* A publish trims what has aged out by then. */
    publish(&st, h, "c", 6, 6, 11700 * MS);
    assert_int_equal(h->count, 1);
    gw_history_free(&st, h);
    assert_int_equal(st.bytes, 0);
}

static int n_reported;
static gw_history_t *reported[4];

static void on_empty(gw_history_t *h, void *arg)
{
    gw_history_store_t *st = arg;
    reported[n_reported++] = h;
    gw_history_free(st, h);
}

static void test_gw_history_sweep_reports_empty(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *old = NULL;
    gw_history_t *young = NULL;
    gw_history_t *unused = NULL;
    gw_history_rule_t r = rule(10, 1000);
    assert_int_equal(gw_history_new(&st, &old, &r, NULL), 0);
    assert_int_equal(gw_history_new(&st, &young, &r, NULL), 0);
    assert_int_equal(gw_history_new(&st, &unused, &r, NULL), 0);
    publish(&st, old, "a", 1, 2, 1000 * MS);
    publish(&st, young, "b", 1, 2, 1900 * MS);
    n_reported = 0;
    gw_history_store_sweep(&st, 2500 * MS, on_empty, &st);
    /* "old" aged out and the never-used one is empty: both reported, "young" kept. */
    assert_int_equal(n_reported, 2);
    assert_true((reported[0] == old && reported[1] == unused) ||
                (reported[0] == unused && reported[1] == old));
    assert_int_equal(st.histories, 1);
    assert_int_equal(young->count, 2);
    gw_history_free(&st, young);
    assert_int_equal(st.bytes, 0);
}

static void test_gw_history_memory_cap_evicts_least_recent(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *a = NULL;
    gw_history_t *b = NULL;
    gw_history_rule_t r = rule(100, 0);
    assert_int_equal(gw_history_new(&st, &a, &r, NULL), 0);
    assert_int_equal(gw_history_new(&st, &b, &r, NULL), 0);
    publish(&st, a, "a", 1, 10, 1);
    publish(&st, b, "b", 1, 10, 2);
    publish(&st, a, "a", 11, 11, 3); /* a is now the most recently published */
    uint64_t per_msg = gw_history_msg_bytes(a->ring[a->head]);
    /* Shrinking the cap by three messages' worth takes them from b, the least recent. */
    gw_history_store_set_max(&st, st.bytes - 3 * per_msg);
    assert_int_equal(b->count, 7);
    assert_int_equal(a->count, 11);
    assert_int_equal(st.evicted[GW_HISTORY_EVICT_MEMORY], 3);
    assert_true(gw_history_covers(b, 3, 10));
    assert_false(gw_history_covers(b, 2, 10));
    /* Past all of b's messages it takes a's oldest. */
    gw_history_store_set_max(&st, st.bytes - 9 * per_msg);
    assert_int_equal(b->count, 0);
    assert_int_equal(a->count, 9);
    assert_true(st.bytes <= st.max_bytes);
    gw_history_free(&st, a);
    gw_history_free(&st, b);
    assert_int_equal(st.bytes, 0);
}

static void test_gw_history_rule_change(void **state)
{
    (void)state;
    gw_history_store_t st;
    gw_history_store_init(&st, 1u << 30);
    gw_history_t *h = NULL;
    gw_history_rule_t r = rule(50, 0);
    assert_int_equal(gw_history_new(&st, &h, &r, NULL), 0);
    publish(&st, h, "c", 1, 40, 1);
    gw_history_rule_t smaller = rule(10, 0);
    gw_history_set_rule(&st, h, &smaller);
    assert_int_equal(h->count, 10);
    assert_true(gw_history_covers(h, 30, 40));
    assert_false(gw_history_covers(h, 29, 40));
    publish(&st, h, "c", 41, 45, 1);
    assert_int_equal(h->count, 10);
    gw_history_free(&st, h);
    assert_int_equal(st.bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_history_count_and_wrap),
        cmocka_unit_test(test_gw_history_holds_references),
        cmocka_unit_test(test_gw_history_age),
        cmocka_unit_test(test_gw_history_sweep_reports_empty),
        cmocka_unit_test(test_gw_history_memory_cap_evicts_least_recent),
        cmocka_unit_test(test_gw_history_rule_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
