/*
 * test_gw_redis_link: the Redis link (and the hiredis adapter under it) against real
 * redis-server processes on loopback ports, stopped and killed by PID: commands and replies in
 * order; kill -9 mid-stream (every command in flight answered NULL exactly once, on_down, then
 * a reconnect once Redis is back); a Redis that hangs (SIGSTOP) hits the command timeout and
 * is treated as down, while a slow one (a queue of DEBUG SLEEPs taking several timeouts in
 * all, replies still coming) is not; the bound on commands in flight; Redis down at start
 * (retries with backoff until it appears); free with commands in flight; AUTH (a wrong
 * password retried, never up; the right one up); a list of addresses tried in turn; a link
 * with no address until it is given one; a link moved to another server at once; and a loop
 * that frees cleanly.
 *
 * The loop runs in the test's thread; waiting is running the loop until a condition holds or a
 * deadline passes (nl_loop_run_once blocks in epoll_wait, never in a sleep).
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
#include "netlib/nl_loop.h"
#include "redis_harness.h"

#define WAIT_MS 10000
#define MAX_REPLIES 4096

typedef struct fx_s {
    nl_loop_t *loop;
    test_redis_t redis;
    gw_redis_link_t *link;
    int ups;
    int downs;
    int last_down_err;
    /* Replies in arrival order: the integer (or -1 for a status/string, -2 for NULL). */
    long long replies[MAX_REPLIES];
    size_t n_replies;
    size_t n_null;
    char last_str[64];
} fx_t;

static void on_up(gw_redis_link_t *l, void *arg)
{
    (void)l;
    ((fx_t *)arg)->ups++;
}

static void on_down(gw_redis_link_t *l, int err, void *arg)
{
    (void)l;
    fx_t *fx = arg;
    fx->downs++;
    fx->last_down_err = err;
}

static void on_reply(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    (void)l;
    fx_t *fx = arg;
    assert_true(fx->n_replies < MAX_REPLIES);
    if (!reply) {
        fx->replies[fx->n_replies++] = -2;
        fx->n_null++;
        return;
    }
    if (reply->type == REDIS_REPLY_INTEGER) {
        fx->replies[fx->n_replies++] = reply->integer;
        return;
    }
    fx->replies[fx->n_replies++] = -1;
    if (reply->str)
        snprintf(fx->last_str, sizeof(fx->last_str), "%.*s", (int)reply->len, reply->str);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the loop until *counter reaches want. */
static void run_until(fx_t *fx, const int *counter, int want, const char *what)
{
    int64_t deadline = now_ms() + WAIT_MS;
    while (*counter < want) {
        if (now_ms() > deadline)
            fail_msg("timed out waiting for %s (%d of %d)", what, *counter, want);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
    }
}

static void run_until_replies(fx_t *fx, size_t want)
{
    int64_t deadline = now_ms() + WAIT_MS;
    while (fx->n_replies < want) {
        if (now_ms() > deadline)
            fail_msg("timed out waiting for replies (%zu of %zu)", fx->n_replies, want);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
    }
}

static void link_open_with(fx_t *fx, gw_redis_link_opts_t o)
{
    o.connect_timeout_ms = 1000;
    o.backoff_min_ms = 20;
    o.backoff_max_ms = 200;
    o.on_up = on_up;
    o.on_down = on_down;
    o.arg = fx;
    assert_int_equal(gw_redis_link_new(&fx->link, fx->loop, &o), 0);
}

static void link_open(fx_t *fx, uint32_t command_timeout_ms, uint32_t max_pending)
{
    gw_redis_link_opts_t o = {
        .host = "127.0.0.1",
        .port = fx->redis.port,
        .connect_timeout_ms = 1000,
        .command_timeout_ms = command_timeout_ms,
        .backoff_min_ms = 20,
        .backoff_max_ms = 200,
        .max_pending = max_pending,
        .on_up = on_up,
        .on_down = on_down,
        .arg = fx,
    };
    assert_int_equal(gw_redis_link_new(&fx->link, fx->loop, &o), 0);
}

static int cmd(fx_t *fx, const char *a0, const char *a1, const char *a2)
{
    const char *argv[3] = {a0, a1, a2};
    int argc = a2 ? 3 : a1 ? 2 : 1;
    return gw_redis_link_command(fx->link, on_reply, fx, argc, argv, NULL);
}

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(nl_loop_new(&fx->loop, &(nl_loop_opts_t){.id = 0}), 0);
    int rc = test_redis_start(&fx->redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    gw_redis_link_free(fx->link);
    (void)nl_loop_run_once(fx->loop, 0); /* closed handles are freed at the iteration's end */
    int rc = nl_loop_free(fx->loop);
    test_redis_kill(&fx->redis);
    free(fx);
    assert_int_equal(rc, 0);
    return 0;
}

static void test_gw_redis_link_commands_in_order(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 2000, 0);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), -ENOTCONN); /* not up yet */
    run_until(fx, &fx->ups, 1, "the connect");
    assert_int_equal(gw_redis_link_state(fx->link), GW_REDIS_UP);
    assert_int_equal(cmd(fx, "SET", "k", "hello"), 0);
    assert_int_equal(cmd(fx, "GET", "k", NULL), 0);
    run_until_replies(fx, 2);
    assert_string_equal(fx->last_str, "hello");
    for (int i = 0; i < 1000; i++)
        assert_int_equal(cmd(fx, "INCR", "n", NULL), 0);
    assert_int_equal(gw_redis_link_pending(fx->link), 1000);
    run_until_replies(fx, 1002);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(fx->replies[2 + i], i + 1);
    assert_int_equal(gw_redis_link_pending(fx->link), 0);
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.commands, 1002);
    assert_int_equal(st.replies, 1002);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(fx->downs, 0);
}

/* kill -9 with commands in flight: each answered NULL once, then the link comes back when
 * Redis does (empty: a restart without persistence). */
static void test_gw_redis_link_kill_mid_stream(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 5000, 0);
    run_until(fx, &fx->ups, 1, "the connect");
    assert_int_equal(cmd(fx, "SET", "n", "41"), 0);
    run_until_replies(fx, 1);
    /* Paused, Redis answers nothing: every command below is in flight when it dies. */
    test_redis_pause(&fx->redis);
    for (int i = 0; i < 500; i++)
        assert_int_equal(cmd(fx, "INCR", "n", NULL), 0);
    (void)nl_loop_run_once(fx->loop, 0); /* written out */
    test_redis_kill(&fx->redis);
    run_until(fx, &fx->downs, 1, "on_down");
    assert_int_equal(fx->n_null, 500);
    assert_int_equal(fx->n_replies, 501);
    assert_int_equal(fx->last_down_err, -ECONNRESET);
    assert_int_equal(gw_redis_link_pending(fx->link), 0);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), -ENOTCONN);
    assert_int_equal(test_redis_restart(&fx->redis), 0);
    run_until(fx, &fx->ups, 2, "the reconnect");
    assert_int_equal(cmd(fx, "INCR", "n", NULL), 0);
    run_until_replies(fx, 502);
    assert_int_equal(fx->replies[501], 1); /* the new Redis is empty */
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 1);
    assert_int_equal(st.dropped, 500);
}

/* A Redis that hangs is down once a command waited past the timeout; SIGCONT brings it back. */
static void test_gw_redis_link_command_timeout(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 200, 0);
    run_until(fx, &fx->ups, 1, "the connect");
    test_redis_pause(&fx->redis);
    int64_t t0 = now_ms();
    assert_int_equal(cmd(fx, "PING", NULL, NULL), 0);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), 0);
    run_until(fx, &fx->downs, 1, "the timeout");
    int64_t waited = now_ms() - t0;
    assert_true(waited >= 200);
    assert_true(waited < 2000);
    assert_int_equal(fx->last_down_err, -ETIMEDOUT);
    assert_int_equal(fx->n_null, 2);
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.timeouts, 1);
    /* While paused, reconnects time out too; resumed, the link comes back. */
    test_redis_resume(&fx->redis);
    run_until(fx, &fx->ups, 2, "the reconnect");
    assert_int_equal(cmd(fx, "PING", NULL, NULL), 0);
    run_until_replies(fx, 3);
    assert_string_equal(fx->last_str, "PONG");
}

static void test_gw_redis_link_max_pending(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 5000, 5);
    run_until(fx, &fx->ups, 1, "the connect");
    test_redis_pause(&fx->redis);
    for (int i = 0; i < 5; i++)
        assert_int_equal(cmd(fx, "INCR", "n", NULL), 0);
    assert_int_equal(cmd(fx, "INCR", "n", NULL), -EBUSY);
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.refused_busy, 1);
    test_redis_resume(&fx->redis);
    run_until_replies(fx, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fx->replies[i], i + 1);
    assert_int_equal(cmd(fx, "INCR", "n", NULL), 0); /* room again */
    run_until_replies(fx, 6);
}

/* Nothing listens at first: connects fail and are retried with backoff until Redis appears. */
static void test_gw_redis_link_down_at_start(void **state)
{
    fx_t *fx = *state;
    uint16_t port = fx->redis.port;
    test_redis_kill(&fx->redis);
    link_open(fx, 2000, 0);
    gw_redis_link_stats_t st;
    int64_t deadline = now_ms() + WAIT_MS;
    do {
        assert_true(now_ms() < deadline);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
        gw_redis_link_get_stats(fx->link, &st);
    } while (st.connect_failures < 4);
    assert_int_equal(fx->ups, 0);
    assert_int_not_equal(gw_redis_link_state(fx->link), GW_REDIS_UP);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), -ENOTCONN);
    fx->redis.port = port;
    assert_int_equal(test_redis_restart(&fx->redis), 0);
    run_until(fx, &fx->ups, 1, "the first connect");
    assert_int_equal(fx->downs, 0); /* it was never up before */
}

/* Freed with commands in flight: each answered NULL once, no on_down. */
static void test_gw_redis_link_free_with_pending(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 5000, 0);
    run_until(fx, &fx->ups, 1, "the connect");
    test_redis_pause(&fx->redis);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cmd(fx, "PING", NULL, NULL), 0);
    gw_redis_link_free(fx->link);
    fx->link = NULL;
    assert_int_equal(fx->n_null, 3);
    assert_int_equal(fx->downs, 0);
    test_redis_resume(&fx->redis);
}

/* A script that keeps Redis busy for 100 ms. It is padded far past Redis's 16 KiB read, so
 * that Redis takes one or two per event-loop turn and answers them before it starts the next,
 * as it does a busy node's queue (small commands arrive many per read, and their replies
 * leave together at the end of the turn). */
static char *busy_script(void)
{
    static const char body[] = "local function us() local t = redis.call('TIME') "
                               "return t[1] * 1000000 + t[2] end "
                               "local s = us() repeat until us() - s >= 100000 return 1 --";
    size_t pad = 100000;
    char *s = malloc(sizeof(body) + pad);
    assert_non_null(s);
    memcpy(s, body, sizeof(body) - 1);
    memset(s + sizeof(body) - 1, 'x', pad);
    s[sizeof(body) - 1 + pad] = '\0';
    return s;
}

/* A slow Redis is not a dead one: fifteen 100 ms scripts queued at once take 1.5 s, three
 * times the timeout, but replies keep arriving (every 100-200 ms), so the link stays up and
 * every command is answered. The wait that counts is the oldest command's since the previous
 * reply. (Counted from its sending, as before, the link went down after 500 ms.) */
static void test_gw_redis_link_slow_is_not_dead(void **state)
{
    fx_t *fx = *state;
    link_open(fx, 500, 0);
    run_until(fx, &fx->ups, 1, "the connect");
    char *script = busy_script();
    int64_t t0 = now_ms();
    for (int i = 0; i < 15; i++)
        assert_int_equal(cmd(fx, "EVAL", script, "0"), 0);
    free(script);
    assert_int_equal(cmd(fx, "INCR", "n", NULL), 0);
    run_until_replies(fx, 16);
    assert_true(now_ms() - t0 >= 1500);
    assert_int_equal(fx->replies[15], 1);
    assert_int_equal(fx->n_null, 0);
    assert_int_equal(fx->downs, 0);
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.timeouts, 0);
    assert_int_equal(st.disconnects, 0);
    /* One command that alone outlasts the timeout is a Redis that answers nothing: down. */
    assert_int_equal(cmd(fx, "DEBUG", "SLEEP", "1"), 0);
    run_until(fx, &fx->downs, 1, "the timeout");
    assert_int_equal(fx->last_down_err, -ETIMEDOUT);
    run_until(fx, &fx->ups, 2, "the reconnect");
}

/* AUTH before on_up: a wrong password is refused (never up, retried), the right one works. */
static void test_gw_redis_link_auth(void **state)
{
    fx_t *fx = *state;
    test_redis_kill(&fx->redis);
    static const char *const pass[] = {"--requirepass", "s3cret-pass", NULL};
    assert_int_equal(test_redis_start_args(&fx->redis, 0, pass), 0);
    link_open_with(fx, (gw_redis_link_opts_t){
                           .host = "127.0.0.1", .port = fx->redis.port, .password = "wrong"});
    gw_redis_link_stats_t st;
    int64_t deadline = now_ms() + WAIT_MS;
    do {
        assert_true(now_ms() < deadline);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
        gw_redis_link_get_stats(fx->link, &st);
    } while (st.auth_failures < 2);
    assert_int_equal(fx->ups, 0);
    assert_int_equal(fx->downs, 0);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), -ENOTCONN);
    gw_redis_link_free(fx->link);
    link_open_with(fx, (gw_redis_link_opts_t){
                           .host = "127.0.0.1", .port = fx->redis.port, .password = "s3cret-pass"});
    run_until(fx, &fx->ups, 1, "the connect with the right password");
    assert_int_equal(cmd(fx, "SET", "k", "v"), 0);
    run_until_replies(fx, 1);
    assert_int_equal(fx->replies[0], -1);
    assert_string_equal(fx->last_str, "OK");
}

/* Several addresses: a dead one is passed over for the next. */
static void test_gw_redis_link_address_list(void **state)
{
    fx_t *fx = *state;
    test_redis_t dead;
    assert_int_equal(test_redis_start(&dead, 0), 0);
    uint16_t dead_port = dead.port;
    test_redis_kill(&dead); /* nothing listens there now */
    gw_redis_addr_t addrs[] = {
        {"127.0.0.1", dead_port}, {"127.0.0.1", fx->redis.port}, {"127.0.0.1", dead_port}};
    link_open_with(fx, (gw_redis_link_opts_t){.addrs = addrs, .n_addrs = 3});
    run_until(fx, &fx->ups, 1, "the connect to the live address");
    assert_int_equal(gw_redis_link_addr(fx->link).port, fx->redis.port);
    assert_int_equal(cmd(fx, "PING", NULL, NULL), 0);
    run_until_replies(fx, 1);
    assert_string_equal(fx->last_str, "PONG");
}

/* No address: nothing happens until one is given, then the link connects at once; moved to
 * another server, it leaves the first (-ENOTCONN, commands in flight answered NULL) and is
 * up at the second, which its commands now reach. */
static void test_gw_redis_link_set_addr(void **state)
{
    fx_t *fx = *state;
    test_redis_t other;
    assert_int_equal(test_redis_start(&other, 0), 0);
    link_open_with(fx, (gw_redis_link_opts_t){.host = NULL});
    for (int i = 0; i < 5; i++)
        assert_true(nl_loop_run_once(fx->loop, 20) >= 0);
    gw_redis_link_stats_t st;
    gw_redis_link_get_stats(fx->link, &st);
    assert_int_equal(st.connect_failures, 0);
    assert_int_equal(fx->ups, 0);
    assert_null(gw_redis_link_addr(fx->link).host);
    assert_int_equal(gw_redis_link_set_addr(fx->link, "127.0.0.1", fx->redis.port), 1);
    run_until(fx, &fx->ups, 1, "the connect");
    assert_int_equal(gw_redis_link_set_addr(fx->link, "127.0.0.1", fx->redis.port), 0);
    assert_int_equal(cmd(fx, "SET", "where", "first"), 0);
    run_until_replies(fx, 1);
    test_redis_pause(&fx->redis);
    assert_int_equal(cmd(fx, "GET", "where", NULL), 0); /* in flight when the link moves */
    (void)nl_loop_run_once(fx->loop, 0);
    int64_t t0 = now_ms();
    assert_int_equal(gw_redis_link_set_addr(fx->link, "127.0.0.1", other.port), 1);
    assert_int_equal(fx->downs, 1);
    assert_int_equal(fx->last_down_err, -ENOTCONN);
    assert_int_equal(fx->n_null, 1);
    run_until(fx, &fx->ups, 2, "the connect to the other server");
    assert_true(now_ms() - t0 < 1000); /* at once, not after a backoff */
    assert_int_equal(gw_redis_link_addr(fx->link).port, other.port);
    assert_int_equal(cmd(fx, "GET", "where", NULL), 0);
    run_until_replies(fx, 3);
    assert_int_equal(fx->replies[2], -1);
    test_redis_resume(&fx->redis);
    test_redis_kill(&other);
}

int main(void)
{
    if (!test_redis_available()) {
        fprintf(stderr, "redis-server is not installed: scripts/install-deps.sh installs it\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_redis_link_commands_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_kill_mid_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_command_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_max_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_down_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_free_with_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_slow_is_not_dead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_address_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_link_set_addr, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
