/*
 * test_nl_wheel: expiry order and the one-tick lateness bound, refresh, cancel, re-adding
 * from the callback, a long stall, and one million entries with refreshes and cancels.
 *
 * The wheel has no clock: each test drives time by hand through nl_wheel_advance, so nothing
 * here sleeps and every run is deterministic.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netlib/nl_common.h"
#include "netlib/nl_wheel.h"

#define TICK_MS 10
#define SLOTS 64
#define START_MS 100003 /* not on a tick boundary, on purpose */

typedef struct {
    nl_wheel_entry_t entry;
    uint64_t fired_at_ms; /* the now_ms of the advance that fired it */
    uint32_t fires;
    uint32_t readds_left; /* re-added from the callback this many more times */
    uint64_t readd_after_ms;
    bool is_cancelled;
} item_t;

typedef struct {
    nl_wheel_t wheel;
    uint64_t now_ms;      /* the now_ms of the advance in progress */
    uint64_t prev_now_ms; /* the now_ms of the advance before it */
    uint64_t tick_ms;
    /* Expiry order is by deadline tick only when no deadline was already past when added,
     * the advances fall on tick boundaries, and no single advance spans a whole round. */
    bool is_order_checked;
    uint64_t last_deadline_tick;
    size_t fired;
    item_t *cancel_in_cb; /* cancelled by the next callback when set */
} ctx_t;

static item_t *item_of(nl_wheel_entry_t *e)
{
    return (item_t *)((char *)e - offsetof(item_t, entry));
}

static uint64_t deadline_tick(const ctx_t *c, uint64_t deadline_ms)
{
    return (deadline_ms + c->tick_ms - 1) / c->tick_ms;
}

/* Checks the contract for every expiry: never early, at most one tick late, in tick order. */
static void on_expire(nl_wheel_t *w, nl_wheel_entry_t *e, void *arg)
{
    ctx_t *c = arg;
    item_t *it = item_of(e);
    assert_ptr_equal(w, &c->wheel);
    assert_false(nl_wheel_is_pending(e));
    assert_false(it->is_cancelled);
    assert_true(e->deadline_ms <= c->now_ms);
    /* Not fired by the previous advance, so that one was less than a tick past the deadline
     * (a deadline already past when added is late from the start). */
    if (e->deadline_ms >= START_MS)
        assert_true(c->prev_now_ms < e->deadline_ms + c->tick_ms);
    if (c->is_order_checked)
        assert_true(deadline_tick(c, e->deadline_ms) >= c->last_deadline_tick);
    c->last_deadline_tick = deadline_tick(c, e->deadline_ms);
    it->fires++;
    it->fired_at_ms = c->now_ms;
    c->fired++;
    if (c->cancel_in_cb != NULL) {
        nl_wheel_cancel(w, &c->cancel_in_cb->entry);
        c->cancel_in_cb->is_cancelled = true;
        c->cancel_in_cb = NULL;
    }
    if (it->readds_left > 0) {
        it->readds_left--;
        nl_wheel_add(w, e, e->deadline_ms + it->readd_after_ms);
    }
}

static size_t advance_to(ctx_t *c, uint64_t now_ms)
{
    c->prev_now_ms = c->now_ms;
    c->now_ms = now_ms;
    c->last_deadline_tick = 0;
    return nl_wheel_advance(&c->wheel, now_ms);
}

static int setup_wheel(void **state)
{
    ctx_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -1;
    c->now_ms = START_MS;
    c->prev_now_ms = START_MS;
    c->tick_ms = TICK_MS;
    c->is_order_checked = true;
    if (nl_wheel_init(&c->wheel, TICK_MS, SLOTS, on_expire, c, START_MS) != 0) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown_wheel(void **state)
{
    ctx_t *c = *state;
    nl_wheel_deinit(&c->wheel);
    free(c);
    return 0;
}

static void test_nl_wheel_init_rejects_bad_args(void **state)
{
    NL_UNUSED(state);
    nl_wheel_t w;
    assert_int_equal(nl_wheel_init(&w, 0, 64, on_expire, NULL, 0), -EINVAL);
    assert_int_equal(nl_wheel_init(&w, 10, 0, on_expire, NULL, 0), -EINVAL);
    assert_int_equal(nl_wheel_init(&w, 10, 64, NULL, NULL, 0), -EINVAL);
    assert_int_equal(nl_wheel_init(&w, 10, 100, on_expire, NULL, 0), 0);
    assert_int_equal(w.slot_count, 128);
    assert_int_equal(w.count, 0);
    nl_wheel_deinit(&w);
}

static void test_nl_wheel_expiry_order_and_lateness(void **state)
{
    ctx_t *c = *state;
    /* Offsets from START_MS: inside the first tick, on boundaries, between them, several
     * rounds away (64 slots x 10 ms = 640 ms a round), and in the past. */
    static const uint64_t offsets_ms[] = {0,   1,   7,   9,    10,   11,   19,   20,  333,
                                          639, 640, 641, 1280, 1281, 2000, 5555, 333, 640};
    enum { N = sizeof offsets_ms / sizeof offsets_ms[0] };
    item_t items[N];
    memset(items, 0, sizeof items);
    for (size_t i = 0; i < N; i++)
        nl_wheel_add(&c->wheel, &items[i].entry, START_MS + offsets_ms[i]);
    assert_int_equal(c->wheel.count, N);
    /* Step by 1 ms: each entry fires within one tick of its deadline. */
    for (uint64_t t = START_MS + 1; t <= START_MS + 6000; t++)
        advance_to(c, t);
    assert_int_equal(c->fired, N);
    assert_int_equal(c->wheel.count, 0);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(items[i].fires, 1);
        assert_true(items[i].fired_at_ms >= START_MS + offsets_ms[i]);
        assert_true(items[i].fired_at_ms < START_MS + offsets_ms[i] + TICK_MS);
    }
}

static void test_nl_wheel_past_deadline(void **state)
{
    ctx_t *c = *state;
    c->prev_now_ms = 0; /* the past deadline is "late" before the wheel began */
    c->is_order_checked = false;
    item_t past = {0};
    item_t now = {0};
    nl_wheel_add(&c->wheel, &past.entry, START_MS - 500);
    nl_wheel_add(&c->wheel, &now.entry, START_MS);
    /* Nothing fires within the tick already processed at init. */
    assert_int_equal(advance_to(c, START_MS + 1), 0);
    /* Both fire at the first tick boundary crossed. */
    uint64_t boundary = (START_MS / TICK_MS + 1) * TICK_MS;
    assert_int_equal(advance_to(c, boundary - 1), 0);
    assert_int_equal(advance_to(c, boundary), 2);
    assert_int_equal(past.fires, 1);
    assert_int_equal(now.fires, 1);
    assert_int_equal(c->wheel.count, 0);
}

static void test_nl_wheel_uneven_steps(void **state)
{
    ctx_t *c = *state;
    enum { N = 500 };
    item_t *items = calloc(N, sizeof *items);
    assert_non_null(items);
    for (size_t i = 0; i < N; i++)
        nl_wheel_add(&c->wheel, &items[i].entry, START_MS + (i * 37) % 3000);
    /* Steps of 1 to 29 ms, never aligned to the tick: the callback checks both bounds. */
    uint64_t t = START_MS;
    for (int step = 1; t < START_MS + 3100; step = step % 29 + 1) {
        t += (uint64_t)step;
        advance_to(c, t);
    }
    assert_int_equal(c->fired, N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(items[i].fires, 1);
    free(items);
}

static void test_nl_wheel_refresh_postpones(void **state)
{
    ctx_t *c = *state;
    item_t a = {0};
    item_t b = {0};
    nl_wheel_add(&c->wheel, &a.entry, START_MS + 100);
    nl_wheel_add(&c->wheel, &b.entry, START_MS + 100);
    advance_to(c, START_MS + 50);
    /* Later, and later again, past a whole round: the entry stays in its slot. */
    nl_wheel_refresh(&c->wheel, &a.entry, START_MS + 300);
    nl_wheel_refresh(&c->wheel, &a.entry, START_MS + 2000);
    assert_int_equal(a.entry.deadline_ms, START_MS + 2000);
    /* Earlier than its current deadline: moved, so it fires earlier. */
    nl_wheel_refresh(&c->wheel, &b.entry, START_MS + 60);
    assert_int_equal(c->wheel.count, 2);
    for (uint64_t t = START_MS + 51; t < START_MS + 2000; t++)
        advance_to(c, t);
    assert_int_equal(a.fires, 0);
    assert_int_equal(b.fires, 1);
    assert_true(b.fired_at_ms >= START_MS + 60 && b.fired_at_ms < START_MS + 70);
    advance_to(c, START_MS + 2000 + TICK_MS);
    assert_int_equal(a.fires, 1);
    assert_int_equal(c->wheel.count, 0);
    /* Refresh of an entry not in the wheel adds it. */
    nl_wheel_refresh(&c->wheel, &b.entry, START_MS + 3000);
    assert_true(nl_wheel_is_pending(&b.entry));
    assert_int_equal(c->wheel.count, 1);
    advance_to(c, START_MS + 3000 + TICK_MS);
    assert_int_equal(b.fires, 2);
}

static void test_nl_wheel_cancel(void **state)
{
    ctx_t *c = *state;
    item_t a = {0};
    item_t b = {0};
    nl_wheel_entry_init(&a.entry);
    assert_false(nl_wheel_is_pending(&a.entry));
    nl_wheel_cancel(&c->wheel, &a.entry); /* not in the wheel: a no-op */
    nl_wheel_add(&c->wheel, &a.entry, START_MS + 100);
    nl_wheel_add(&c->wheel, &b.entry, START_MS + 100);
    assert_true(nl_wheel_is_pending(&a.entry));
    nl_wheel_cancel(&c->wheel, &a.entry);
    a.is_cancelled = true;
    nl_wheel_cancel(&c->wheel, &a.entry);
    assert_false(nl_wheel_is_pending(&a.entry));
    assert_int_equal(c->wheel.count, 1);
    assert_int_equal(advance_to(c, START_MS + 5000), 1);
    assert_int_equal(a.fires, 0);
    assert_int_equal(b.fires, 1);
    assert_int_equal(c->wheel.count, 0);
}

static void test_nl_wheel_cancel_inside_callback(void **state)
{
    ctx_t *c = *state;
    item_t a = {0};
    item_t b = {0};
    /* Same slot: b sits on the list the wheel is walking when a's callback cancels it. */
    nl_wheel_add(&c->wheel, &a.entry, START_MS + 100);
    nl_wheel_add(&c->wheel, &b.entry, START_MS + 100);
    c->cancel_in_cb = &b;
    assert_int_equal(advance_to(c, START_MS + 200), 1);
    assert_int_equal(a.fires, 1);
    assert_int_equal(b.fires, 0);
    assert_int_equal(c->wheel.count, 0);
    assert_int_equal(advance_to(c, START_MS + 5000), 0);
}

static void test_nl_wheel_readd_inside_callback(void **state)
{
    ctx_t *c = *state;
    item_t a = {.readds_left = 5, .readd_after_ms = 25};
    item_t far = {.readds_left = 2, .readd_after_ms = 1000};
    nl_wheel_add(&c->wheel, &a.entry, START_MS + 10);
    nl_wheel_add(&c->wheel, &far.entry, START_MS + 10);
    for (uint64_t t = START_MS + 1; t <= START_MS + 3000; t++)
        advance_to(c, t);
    assert_int_equal(a.fires, 6);
    assert_int_equal(far.fires, 3);
    assert_int_equal(c->wheel.count, 0);
    /* In one big step the re-added entry fires again within the same advance. */
    item_t d = {.readds_left = 3, .readd_after_ms = 20};
    nl_wheel_add(&c->wheel, &d.entry, START_MS + 3010);
    assert_int_equal(advance_to(c, START_MS + 3300), 4);
    assert_int_equal(d.fires, 4);
}

static void test_nl_wheel_long_stall(void **state)
{
    ctx_t *c = *state;
    c->is_order_checked = false; /* one pass over all slots: rounds mix */
    enum { N = 1000 };
    item_t *items = calloc(N, sizeof *items);
    assert_non_null(items);
    for (size_t i = 0; i < N; i++)
        nl_wheel_add(&c->wheel, &items[i].entry, START_MS + i * 97);
    /* An hour later in one call: the wheel visits each slot once, not 360,000 ticks. */
    assert_int_equal(advance_to(c, START_MS + 3600 * 1000), N);
    assert_int_equal(c->wheel.count, 0);
    assert_int_equal(c->wheel.current_tick, (START_MS + 3600 * 1000) / TICK_MS);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(items[i].fires, 1);
    free(items);
}

/* xorshift64: a fixed sequence, so a failure reproduces. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_nl_wheel_one_million(void **state)
{
    ctx_t *c = *state;
    /* A wheel shaped like a loop's idle wheel: 100 ms ticks, 512 slots (51.2 s a round). */
    nl_wheel_deinit(&c->wheel);
    const uint64_t tick = 100;
    assert_int_equal(nl_wheel_init(&c->wheel, 100, 512, on_expire, c, START_MS), 0);
    c->tick_ms = tick;
    enum { N = 1000 * 1000 };
    const uint64_t spread_ms = 120 * 1000; /* past two rounds */
    item_t *items = calloc(N, sizeof *items);
    assert_non_null(items);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < N; i++)
        nl_wheel_add(&c->wheel, &items[i].entry, START_MS + 1 + next_rand(&seed) % spread_ms);
    /* Half are refreshed: most later, every fourth of those earlier. A quarter cancelled. */
    for (size_t i = 0; i < N; i += 2) {
        uint64_t d = items[i].entry.deadline_ms;
        uint64_t r = next_rand(&seed) % spread_ms;
        nl_wheel_refresh(&c->wheel, &items[i].entry,
                         i % 8 == 0 ? START_MS + 1 + r % (d - START_MS) : d + r);
    }
    for (size_t i = 1; i < N; i += 4) {
        nl_wheel_cancel(&c->wheel, &items[i].entry);
        items[i].is_cancelled = true;
    }
    assert_int_equal(c->wheel.count, N - N / 4);
    /* The clock moves a tick at a time, on tick boundaries so that expiry order is exact too
     * (with now inside a tick, a refreshed entry due in the part of the next tick already
     * passed may fire first). on_expire checks every expiry against the clock. */
    size_t fired = 0;
    uint64_t first = (START_MS / tick + 1) * tick;
    for (uint64_t t = first; t <= START_MS + 2 * spread_ms + tick; t += tick)
        fired += advance_to(c, t);
    assert_int_equal(fired, N - N / 4);
    assert_int_equal(c->wheel.count, 0);
    for (size_t i = 0; i < N; i++) {
        const item_t *it = &items[i];
        if (it->is_cancelled) {
            assert_int_equal(it->fires, 0);
            continue;
        }
        assert_int_equal(it->fires, 1);
        assert_true(it->fired_at_ms >= it->entry.deadline_ms);
        assert_true(it->fired_at_ms - it->entry.deadline_ms < tick);
    }
    free(items);
}

#define WHEEL_TEST(f) cmocka_unit_test_setup_teardown(f, setup_wheel, teardown_wheel)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_wheel_init_rejects_bad_args),
        WHEEL_TEST(test_nl_wheel_expiry_order_and_lateness),
        WHEEL_TEST(test_nl_wheel_past_deadline),
        WHEEL_TEST(test_nl_wheel_uneven_steps),
        WHEEL_TEST(test_nl_wheel_refresh_postpones),
        WHEEL_TEST(test_nl_wheel_cancel),
        WHEEL_TEST(test_nl_wheel_cancel_inside_callback),
        WHEEL_TEST(test_nl_wheel_readd_inside_callback),
        WHEEL_TEST(test_nl_wheel_long_stall),
        WHEEL_TEST(test_nl_wheel_one_million),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
