/*
 * test_gw_evgate: the per-loop gate of join/leave events (gateway/state/gw_evgate.c): a key's
 * first event goes out at once, later ones within a window are held as their net change
 * (opposite events cancel), each tick sends what is held, and a key quiet for a whole window
 * is forgotten, so its next event goes out at once again. Keys (connection, channel) do not
 * affect each other.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gw_state.h"

/* What a tick sent. */
typedef struct sent_s {
    int joins;
    int leaves;
    uint64_t last_conn;
} sent_t;

static void on_emit(gw_event_t *ev, bool is_join, void *arg)
{
    sent_t *s = arg;
    if (is_join)
        s->joins++;
    else
        s->leaves++;
    s->last_conn = ev->subject_conn;
    gw_event_unref(ev);
}

static gw_event_t *event(const char *chan, uint64_t conn, bool is_join)
{
    gw_event_client_t who = {.user = "u", .client_id = "n-1", .connected_at_ms = 1000};
    gw_event_t *ev = gw_event_new(chan, strlen(chan), is_join, &who, 0, conn);
    assert_non_null(ev);
    return ev;
}

/* Offers an event; returns whether it went out at once (and drops that reference). */
static bool offer(gw_evgate_t *g, const char *chan, uint64_t conn, bool is_join)
{
    gw_event_t *ev = gw_evgate_offer(g, event(chan, conn, is_join), is_join);
    if (!ev)
        return false;
    gw_event_unref(ev);
    return true;
}

static int setup(void **state)
{
    gw_evgate_t *g = test_malloc(sizeof(*g));
    assert_int_equal(gw_evgate_init(g), 0);
    *state = g;
    return 0;
}

static int teardown(void **state)
{
    gw_evgate_t *g = *state;
    gw_evgate_deinit(g);
    test_free(g);
    return 0;
}

static void test_gw_evgate_first_goes_out(void **state)
{
    gw_evgate_t *g = *state;
    assert_true(offer(g, "room", 1, true));
    assert_int_equal(gw_evgate_count(g), 1);
    assert_int_equal(g->held, 0);
}

static void test_gw_evgate_opposite_cancels(void **state)
{
    gw_evgate_t *g = *state;
    assert_true(offer(g, "room", 1, true));
    /* 1,000 leave/join pairs within the window: nothing goes out, nothing stays held. */
    for (int i = 0; i < 1000; i++) {
        assert_false(offer(g, "room", 1, false));
        assert_int_equal(g->held, 1);
        assert_false(offer(g, "room", 1, true));
        assert_int_equal(g->held, 0);
    }
    assert_int_equal(g->coalesced, 2000);
    sent_t sent = {0};
    gw_evgate_tick(g, on_emit, &sent);
    assert_int_equal(sent.joins + sent.leaves, 0);
}

static void test_gw_evgate_tick_sends_net_change(void **state)
{
    gw_evgate_t *g = *state;
    assert_true(offer(g, "room", 1, true));
    assert_false(offer(g, "room", 1, false));
    assert_false(offer(g, "room", 1, true));
    assert_false(offer(g, "room", 1, false));
    sent_t sent = {0};
    gw_evgate_tick(g, on_emit, &sent);
    assert_int_equal(sent.leaves, 1);
    assert_int_equal(sent.joins, 0);
    assert_int_equal(sent.last_conn, 1);
    assert_int_equal(g->held, 0);
    /* Still within the next window: a change waits for its end. */
    assert_false(offer(g, "room", 1, true));
    gw_evgate_tick(g, on_emit, &sent);
    assert_int_equal(sent.joins, 1);
}

static void test_gw_evgate_quiet_key_forgotten(void **state)
{
    gw_evgate_t *g = *state;
    sent_t sent = {0};
    assert_true(offer(g, "room", 1, true));
    gw_evgate_tick(g, on_emit, &sent); /* the window of the event ends */
    assert_int_equal(gw_evgate_count(g), 1);
    gw_evgate_tick(g, on_emit, &sent); /* a whole window without one */
    assert_int_equal(gw_evgate_count(g), 0);
    assert_true(offer(g, "room", 1, false));
    assert_int_equal(sent.joins + sent.leaves, 0);
}

static void test_gw_evgate_keys_independent(void **state)
{
    gw_evgate_t *g = *state;
    assert_true(offer(g, "room", 1, true));
    assert_true(offer(g, "room", 2, true));
    assert_true(offer(g, "hall", 1, true));
    assert_false(offer(g, "room", 1, false));
    assert_true(offer(g, "roomb", 1, true));
    assert_int_equal(gw_evgate_count(g), 4);
    sent_t sent = {0};
    gw_evgate_tick(g, on_emit, &sent);
    assert_int_equal(sent.leaves, 1);
    assert_int_equal(sent.joins, 0);
}

/* Held events are dropped with the gate (their references freed: the test allocator and ASan
 * would see a leak). */
static void test_gw_evgate_deinit_drops_held(void **state)
{
    gw_evgate_t *g = *state;
    for (uint64_t c = 1; c <= 100; c++) {
        assert_true(offer(g, "room", c, true));
        assert_false(offer(g, "room", c, false));
    }
    assert_int_equal(g->held, 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_evgate_first_goes_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_evgate_opposite_cancels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_evgate_tick_sends_net_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_evgate_quiet_key_forgotten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_evgate_keys_independent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_evgate_deinit_drops_held, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
