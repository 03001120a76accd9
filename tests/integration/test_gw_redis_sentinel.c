/*
 * test_gw_redis_sentinel: the Sentinel client against real redis-server and redis-sentinel
 * processes on loopback ports, stopped by PID: it finds the master of a name (passing over a
 * sentinel address where nothing listens), follows a failover (the master killed with
 * SIGKILL: the +switch-master events, from every sentinel, name the replica, promoted), asks
 * again when told to,
 * authenticates to sentinels that have a password (and gets nothing with a wrong one), and
 * says so when no sentinel knows the name.
 *
 * The loop runs in the test's thread; waiting is running the loop until a condition holds or
 * a deadline passes. Sentinels run with down-after-milliseconds 1000, so a failover takes a
 * few seconds.
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

#include "gw_redis_sentinel.h"
#include "netlib/nl_loop.h"
#include "redis_harness.h"

#define WAIT_MS 20000
#define N_SENTINELS 3
#define MASTER "herald"

typedef struct fx_s {
    nl_loop_t *loop;
    test_redis_t master;
    test_redis_t replica;
    test_sentinel_t sentinels[N_SENTINELS];
    const char *password;
    gw_redis_sentinel_t *client;
    int answers;
    int switches;
    char host[64];
    uint16_t port;
    uint32_t index;
} fx_t;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_master(gw_redis_sentinel_t *s, uint32_t index, const char *host, uint16_t port,
                      bool is_switch, void *arg)
{
    (void)s;
    fx_t *fx = arg;
    if (is_switch)
        fx->switches++;
    else
        fx->answers++;
    snprintf(fx->host, sizeof(fx->host), "%s", host);
    fx->port = port;
    fx->index = index;
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

/* A master, a replica in sync, and three sentinels that know each other and the replica. */
static int setup_with(void **state, const char *password)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->password = password;
    assert_int_equal(nl_loop_new(&fx->loop, &(nl_loop_opts_t){.id = 0}), 0);
    int rc = test_redis_start(&fx->master, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    static char port[8];
    snprintf(port, sizeof(port), "%u", fx->master.port);
    const char *replica[] = {"--replicaof", "127.0.0.1", port, NULL};
    assert_int_equal(test_redis_start_args(&fx->replica, 0, replica), 0);
    assert_int_equal(test_redis_await_replicas(fx->master.port, 1, WAIT_MS), 0);
    test_sentinel_opts_t so = {.master_name = MASTER,
                               .master_port = fx->master.port,
                               .quorum = 2,
                               .down_after_ms = 1000,
                               .failover_timeout_ms = 3000,
                               .password = password};
    for (int i = 0; i < N_SENTINELS; i++) {
        rc = test_sentinel_start(&fx->sentinels[i], &so);
        if (rc != 0)
            fail_msg("redis-sentinel did not start: %s", strerror(-rc));
    }
    for (int i = 0; i < N_SENTINELS; i++)
        assert_int_equal(
            test_sentinel_await(&fx->sentinels[i], MASTER, password, N_SENTINELS - 1, 1, WAIT_MS),
            0);
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, NULL);
}

static int setup_password(void **state)
{
    return setup_with(state, "sentinel-pass");
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    gw_redis_sentinel_free(fx->client);
    (void)nl_loop_run_once(fx->loop, 0);
    int rc = nl_loop_free(fx->loop);
    for (int i = 0; i < N_SENTINELS; i++)
        test_sentinel_kill(&fx->sentinels[i]);
    test_redis_kill(&fx->replica);
    test_redis_kill(&fx->master);
    free(fx);
    assert_int_equal(rc, 0);
    return 0;
}

/* The client over every sentinel, a dead address first (it is passed over). */
static void client_open(fx_t *fx, const char *const *masters, uint32_t n, const char *password)
{
    gw_redis_addr_t addrs[N_SENTINELS + 1];
    test_redis_t dead;
    assert_int_equal(test_redis_start(&dead, 0), 0);
    addrs[0] = (gw_redis_addr_t){"127.0.0.1", dead.port};
    test_redis_kill(&dead);
    for (int i = 0; i < N_SENTINELS; i++)
        addrs[i + 1] = (gw_redis_addr_t){"127.0.0.1", fx->sentinels[i].port};
    gw_redis_sentinel_opts_t o = {
        .sentinels = addrs,
        .n_sentinels = N_SENTINELS + 1,
        .masters = masters,
        .n_masters = n,
        .password = password,
        .timeout_ms = 1000,
        .backoff_max_ms = 200,
        .on_master = on_master,
        .arg = fx,
    };
    assert_int_equal(gw_redis_sentinel_new(&fx->client, fx->loop, &o), 0);
}

/* The master's address, then the replica's once the master is killed and Sentinel promoted
 * it; asked again afterwards, every sentinel says the same. */
static void test_gw_redis_sentinel_follows_failover(void **state)
{
    fx_t *fx = *state;
    static const char *const masters[] = {"other", MASTER};
    client_open(fx, masters, 2, NULL);
    run_until(fx, &fx->answers, 1, "the first answer");
    assert_int_equal(fx->index, 1);
    assert_string_equal(fx->host, "127.0.0.1");
    assert_int_equal(fx->port, fx->master.port);
    gw_redis_sentinel_stats_t st;
    gw_redis_sentinel_get_stats(fx->client, &st);
    assert_true(st.is_up);
    assert_true(st.unknown >= 1); /* "other" is nobody's */
    int64_t t0 = now_ms();
    test_redis_kill(&fx->master);
    run_until(fx, &fx->switches, 1, "+switch-master");
    int64_t took = now_ms() - t0;
    assert_int_equal(fx->index, 1);
    assert_int_equal(fx->port, fx->replica.port);
    /* down-after 1000 ms, then the election and the promotion: well under failover-timeout
     * plus the down-after. */
    assert_true(took >= 1000);
    assert_true(took < 1000 + 3000 + 2000);
    /* Asked again, as the engine does while it has no master: a sentinel that has not heard
     * of the failover yet (it learns from the others' hellos, every 2 s) answers from the old
     * configuration, which is stale and passed over, so the question is asked until a current
     * answer comes; it names the new master. */
    int before = fx->answers;
    int64_t deadline = now_ms() + WAIT_MS;
    while (fx->answers == before) {
        if (now_ms() > deadline)
            fail_msg("no current answer after the failover (%d stale)", (int)st.stale);
        gw_redis_sentinel_ask(fx->client, 1);
        gw_redis_sentinel_ask(fx->client, 1); /* one question in flight at a time */
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
        gw_redis_sentinel_get_stats(fx->client, &st);
    }
    assert_int_equal(fx->port, fx->replica.port);
    /* Each sentinel announces the switch (the leader first): one event per sentinel heard. */
    gw_redis_sentinel_get_stats(fx->client, &st);
    assert_true(st.switches >= 1 && st.switches <= N_SENTINELS);
}

/* Sentinels with a password: the right one gets the answer, a wrong one nothing. */
static void test_gw_redis_sentinel_password(void **state)
{
    fx_t *fx = *state;
    static const char *const masters[] = {MASTER};
    client_open(fx, masters, 1, "wrong-pass");
    gw_redis_sentinel_stats_t st;
    int64_t deadline = now_ms() + WAIT_MS;
    do {
        assert_true(now_ms() < deadline);
        assert_true(nl_loop_run_once(fx->loop, 50) >= 0);
        gw_redis_sentinel_get_stats(fx->client, &st);
    } while (st.auth_failures < 3);
    assert_false(st.is_up);
    assert_int_equal(fx->answers, 0);
    gw_redis_sentinel_free(fx->client);
    fx->client = NULL;
    client_open(fx, masters, 1, fx->password);
    run_until(fx, &fx->answers, 1, "the answer with the password");
    assert_int_equal(fx->port, fx->master.port);
}

int main(void)
{
    if (!test_redis_available() || !test_sentinel_available()) {
        fprintf(stderr, "redis-server or redis-sentinel is not installed: "
                        "scripts/install-deps.sh installs them\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_redis_sentinel_follows_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_sentinel_password, setup_password, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
