/*
 * test_gw_redis_sub: the pub/sub connection against a real redis-server. PUBLISH's reply (how
 * many subscribers received it) proves each wanted channel is subscribed exactly once: after
 * an add, after a remove (0), after a remove and an add in a row (1, not 0 and not 2), and
 * after kill -9 and a restart (the sub resubscribes by itself). Messages reach on_message
 * with their channel and bytes intact.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gw_redis_link.h"
#include "gw_redis_sub.h"
#include "netlib/nl_loop.h"
#include "redis_harness.h"

#define WAIT_MS 10000

typedef struct fx_s {
    nl_loop_t *loop;
    test_redis_t redis;
    gw_redis_link_t *pub; /* PUBLISH goes through an ordinary link */
    gw_redis_sub_t *sub;
    int pub_ups;
    int sub_ups;
    int sub_downs;
    int n_messages;
    int n_subscribed;
    char last_subscribed[64];
    char last_chan[64];
    char last_data[64];
    size_t last_len;
    int published;       /* PUBLISH replies received */
    long long receivers; /* the last one's count */
} fx_t;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void run_until(fx_t *fx, const int *counter, int want, const char *what)
{
    int64_t deadline = now_ms() + WAIT_MS;
    while (*counter < want) {
        if (now_ms() > deadline)
            fail_msg("timed out waiting for %s (%d of %d)", what, *counter, want);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
    }
}

static void on_pub_up(gw_redis_link_t *l, void *arg)
{
    (void)l;
    ((fx_t *)arg)->pub_ups++;
}

static void on_message(gw_redis_sub_t *s, const char *chan, size_t chan_len, const char *data,
                       size_t len, void *arg)
{
    (void)s;
    fx_t *fx = arg;
    fx->n_messages++;
    snprintf(fx->last_chan, sizeof(fx->last_chan), "%.*s", (int)chan_len, chan);
    memcpy(fx->last_data, data, len < sizeof(fx->last_data) ? len : sizeof(fx->last_data));
    fx->last_len = len;
}

static void on_state(gw_redis_sub_t *s, int err, void *arg)
{
    (void)s;
    fx_t *fx = arg;
    if (err == 0)
        fx->sub_ups++;
    else
        fx->sub_downs++;
}

static void on_subscribed(gw_redis_sub_t *s, const char *chan, size_t len, void *arg)
{
    (void)s;
    fx_t *fx = arg;
    fx->n_subscribed++;
    snprintf(fx->last_subscribed, sizeof(fx->last_subscribed), "%.*s", (int)len, chan);
}

static void on_published(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    (void)l;
    fx_t *fx = arg;
    assert_non_null(reply);
    assert_int_equal(reply->type, REDIS_REPLY_INTEGER);
    fx->receivers = reply->integer;
    fx->published++;
}

/* PUBLISHes and returns how many subscribers Redis says received it. */
static long long publish(fx_t *fx, const char *chan, const char *data, size_t len)
{
    const char *argv[] = {"PUBLISH", chan, data};
    size_t lens[] = {7, strlen(chan), len};
    int want = fx->published + 1;
    assert_int_equal(gw_redis_link_command(fx->pub, on_published, fx, 3, argv, lens), 0);
    run_until(fx, &fx->published, want, "the PUBLISH reply");
    return fx->receivers;
}

/* Publishes until Redis counts want receivers: a SUBSCRIBE's effect is awaited through
 * Redis's own count, not a delay. */
static void await_receivers(fx_t *fx, const char *chan, long long want)
{
    int64_t deadline = now_ms() + WAIT_MS;
    while (publish(fx, chan, "probe", 5) != want)
        if (now_ms() > deadline)
            fail_msg("%s never had %lld subscribers (last %lld)", chan, want, fx->receivers);
}

/* Runs the loop until the latest message is data on chan (probes may come before it). */
static void await_message(fx_t *fx, const char *chan, const char *data, size_t len)
{
    int64_t deadline = now_ms() + WAIT_MS;
    while (strcmp(fx->last_chan, chan) != 0 || fx->last_len != len ||
           memcmp(fx->last_data, data, len) != 0) {
        if (now_ms() > deadline)
            fail_msg("message on %s never arrived", chan);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
    }
}

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(nl_loop_new(&fx->loop, &(nl_loop_opts_t){.id = 0}), 0);
    int rc = test_redis_start(&fx->redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    gw_redis_link_opts_t lo = {.host = "127.0.0.1",
                               .port = fx->redis.port,
                               .backoff_min_ms = 20,
                               .backoff_max_ms = 100,
                               .on_up = on_pub_up,
                               .arg = fx};
    assert_int_equal(gw_redis_link_new(&fx->pub, fx->loop, &lo), 0);
    gw_redis_sub_opts_t so = {.host = "127.0.0.1",
                              .port = fx->redis.port,
                              .backoff_min_ms = 20,
                              .backoff_max_ms = 100,
                              .on_message = on_message,
                              .on_state = on_state,
                              .on_subscribed = on_subscribed,
                              .arg = fx};
    assert_int_equal(gw_redis_sub_new(&fx->sub, fx->loop, &so), 0);
    run_until(fx, &fx->pub_ups, 1, "the publisher's connect");
    run_until(fx, &fx->sub_ups, 1, "the subscriber's connect");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    gw_redis_sub_free(fx->sub);
    gw_redis_link_free(fx->pub);
    (void)nl_loop_run_once(fx->loop, 0);
    int rc = nl_loop_free(fx->loop);
    test_redis_kill(&fx->redis);
    free(fx);
    assert_int_equal(rc, 0);
    return 0;
}

static void test_gw_redis_sub_add_remove(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(gw_redis_sub_add(fx->sub, "herald:a", 8), 0);
    assert_int_equal(gw_redis_sub_add(fx->sub, "herald:a", 8), 0); /* idempotent */
    run_until(fx, &fx->n_subscribed, 1, "the confirmation");
    assert_string_equal(fx->last_subscribed, "herald:a");
    /* Confirmed means subscribed: a PUBLISH right now reaches it. */
    assert_int_equal(publish(fx, "herald:a", "now", 3), 1);
    static const char bin[] = {'x', '\0', 'y', '\n'};
    assert_int_equal(publish(fx, "herald:a", bin, sizeof(bin)), 1);
    await_message(fx, "herald:a", bin, sizeof(bin));
    assert_int_equal(gw_redis_sub_remove(fx->sub, "herald:a", 8), 0);
    assert_int_equal(gw_redis_sub_remove(fx->sub, "herald:a", 8), -ENOENT);
    await_receivers(fx, "herald:a", 0);
    gw_redis_sub_stats_t st;
    gw_redis_sub_get_stats(fx->sub, &st);
    assert_int_equal(st.wanted, 0);
}

/* Remove then add before Redis confirmed the UNSUBSCRIBE: still subscribed, once. */
static void test_gw_redis_sub_remove_then_add(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(gw_redis_sub_add(fx->sub, "herald:b", 8), 0);
    await_receivers(fx, "herald:b", 1);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(gw_redis_sub_remove(fx->sub, "herald:b", 8), 0);
        assert_int_equal(gw_redis_sub_add(fx->sub, "herald:b", 8), 0);
    }
    /* Let the confirmations land: a round trip on the sub's connection is not observable
     * from here, but PUBLISH counts are; wait until three in a row say 1. */
    int ones = 0;
    int64_t deadline = now_ms() + WAIT_MS;
    while (ones < 3) {
        assert_true(now_ms() < deadline);
        ones = publish(fx, "herald:b", "p", 1) == 1 ? ones + 1 : 0;
    }
    assert_int_equal(publish(fx, "herald:b", "last", 4), 1);
    await_message(fx, "herald:b", "last", 4);
}

/* kill -9 and a restart: the sub reconnects and subscribes its channels again. */
static void test_gw_redis_sub_resubscribes(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(gw_redis_sub_add(fx->sub, "herald:c", 8), 0);
    assert_int_equal(gw_redis_sub_add(fx->sub, "herald:d", 8), 0);
    await_receivers(fx, "herald:c", 1);
    await_receivers(fx, "herald:d", 1);
    test_redis_kill(&fx->redis);
    run_until(fx, &fx->sub_downs, 1, "the subscriber's disconnect");
    /* Removed while down: not subscribed after the reconnect. */
    assert_int_equal(gw_redis_sub_remove(fx->sub, "herald:d", 8), 0);
    assert_int_equal(test_redis_restart(&fx->redis), 0);
    run_until(fx, &fx->pub_ups, 2, "the publisher's reconnect");
    run_until(fx, &fx->sub_ups, 2, "the subscriber's reconnect");
    run_until(fx, &fx->n_subscribed, 3, "the confirmation after the reconnect");
    assert_string_equal(fx->last_subscribed, "herald:c");
    assert_int_equal(publish(fx, "herald:c", "now", 3), 1);
    assert_int_equal(publish(fx, "herald:d", "x", 1), 0);
    assert_int_equal(publish(fx, "herald:c", "again", 5), 1);
    await_message(fx, "herald:c", "again", 5);
}

int main(void)
{
    if (!test_redis_available()) {
        fprintf(stderr, "redis-server is not installed: scripts/install-deps.sh installs it\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_redis_sub_add_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_sub_remove_then_add, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_sub_resubscribes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
