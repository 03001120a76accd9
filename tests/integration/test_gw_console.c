/*
 * test_gw_console: the admin console's routes on a real herald (issue 26). The page and its
 * files are served without the API key, with a Content-Security-Policy that keeps the page
 * to its own origin; GET /api/console needs the key (X-Api-Key or Bearer) and answers the
 * documented JSON shape, whose figures are /metrics' own: connections per loop and in all,
 * and the new queue figures, which a subscriber that stops reading moves (output queued past
 * the high-water mark, one slow consumer) and its close takes back to zero. GET /api/nodes is
 * 501 on the memory engine; on the Redis engine (real redis-server processes, skipped when
 * there is none) it lists both nodes with their connections, and /api/console lists the Redis
 * server with its commands in flight.
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

#include <cmocka.h>
#include <jansson.h>

#include "gwtest_util.h"
#include "redis_harness.h"

static const char *const key_hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};

static test_herald_t *start(void **state)
{
    return gw_start(state, "--insecure", "--io-threads", "2", "--api-key", GW_API_KEY,
                    "--output-high-water", "64KiB", NULL);
}

static void get(const test_herald_t *h, const char *path, const char *const *hdrs,
                test_http_resp_t *r)
{
    int rc = test_http_request(h->admin_port, "GET", path, hdrs, NULL, 0, GW_WAIT_MS, r);
    if (rc != 0)
        fail_msg("GET %s: %s", path, strerror(-rc));
}

/* GET path with the key, as JSON (fails the test unless 200 and an object). */
static json_t *get_json(const test_herald_t *h, const char *path)
{
    test_http_resp_t r;
    get(h, path, key_hdrs, &r);
    if (r.status != 200)
        fail_msg("GET %s: %d %s", path, r.status, r.body);
    json_error_t jerr;
    json_t *j = json_loadb(r.body, r.body_len, 0, &jerr);
    if (!json_is_object(j))
        fail_msg("GET %s is not a JSON object: %s (%s)", path, r.body, jerr.text);
    test_http_resp_free(&r);
    return j;
}

/* j[key] (a dotted path: "pool.queue_depth"), which must be a non-negative integer. */
static long long num(const json_t *j, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    const json_t *v = j;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        fail_msg("%s is not a count: %s", path, v ? json_dumps(v, JSON_ENCODE_ANY) : "missing");
    return (long long)json_integer_value(v);
}

/* Sums field over the "loops" array. */
static long long loops_sum(const json_t *j, const char *field)
{
    long long total = 0;
    size_t i;
    const json_t *l;
    json_array_foreach(json_object_get(j, "loops"), i, l)
    {
        total += num(l, field);
    }
    return total;
}

static void test_gw_console_page_is_public(void **state)
{
    test_herald_t *h = start(state);
    static const struct {
        const char *path;
        const char *type;
        const char *needle;
    } files[] = {
        {"/console", "text/html", "/console/console.js"},
        {"/console/", "text/html", "/console/console.css"},
        {"/console/console.js", "text/javascript", "/api/console"},
        {"/console/console.css", "text/css", ".tile"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        test_http_resp_t r;
        get(h, files[i].path, NULL, &r);
        if (r.status != 200)
            fail_msg("GET %s without a key: %d", files[i].path, r.status);
        char v[512];
        assert_non_null(test_http_resp_header(&r, "Content-Type", v, sizeof(v)));
        assert_non_null(strstr(v, files[i].type));
        assert_non_null(test_http_resp_header(&r, "Content-Security-Policy", v, sizeof(v)));
        assert_non_null(strstr(v, "default-src 'none'"));
        assert_non_null(strstr(v, "connect-src 'self'"));
        assert_null(strstr(v, "unsafe"));
        assert_non_null(test_http_resp_header(&r, "X-Content-Type-Options", v, sizeof(v)));
        if (!strstr(r.body, files[i].needle))
            fail_msg("%s does not hold %s", files[i].path, files[i].needle);
        /* Self-contained: nothing from another origin. */
        assert_null(strstr(r.body, "https://"));
        test_http_resp_free(&r);
    }
    /* The page's data is not public. */
    test_http_resp_t r;
    get(h, "/api/console", NULL, &r);
    assert_int_equal(r.status, 401);
    test_http_resp_free(&r);
    get(h, "/console/no-such-file.js", NULL, &r);
    assert_int_equal(r.status, 401); /* an unknown path needs the key, as everywhere */
    test_http_resp_free(&r);
    gw_stop(state);
}

static void test_gw_console_data_needs_the_key(void **state)
{
    test_herald_t *h = start(state);
    static const char *const wrong[] = {"X-Api-Key: " GW_API_KEY "x", NULL};
    static const char *const bearer[] = {"Authorization: Bearer " GW_API_KEY, NULL};
    static const char *const paths[] = {"/api/console", "/api/nodes"};
    for (size_t i = 0; i < 2; i++) {
        test_http_resp_t r;
        get(h, paths[i], NULL, &r);
        assert_int_equal(r.status, 401);
        test_http_resp_free(&r);
        get(h, paths[i], wrong, &r);
        assert_int_equal(r.status, 401);
        assert_non_null(strstr(r.body, "\"error\""));
        test_http_resp_free(&r);
    }
    test_http_resp_t r;
    get(h, "/api/console", bearer, &r);
    assert_int_equal(r.status, 200);
    char v[128];
    assert_non_null(test_http_resp_header(&r, "Cache-Control", v, sizeof(v)));
    assert_string_equal(v, "no-store");
    test_http_resp_free(&r);
    /* No cluster on the memory engine. */
    get(h, "/api/nodes", key_hdrs, &r);
    assert_int_equal(r.status, 501);
    test_http_resp_free(&r);
    gw_stop(state);
}

/* Every documented field, with its type; the counts are /metrics' own. */
static void test_gw_console_data_shape(void **state)
{
    test_herald_t *h = start(state);
    enum { N = 3 };
    static test_client_t cs[N];
    for (size_t i = 0; i < N; i++) {
        GW_OK(test_client_auth(&cs[i], h->port, i ? "ann" : "bob", GW_WAIT_MS), &cs[i]);
        GW_OK(test_client_subscribe(&cs[i], "news", NULL, GW_WAIT_MS), &cs[i]);
    }
    uint64_t off = 0;
    GW_OK(test_client_publish(&cs[0], "news", "x", 1, &off, GW_WAIT_MS), &cs[0]);
    for (size_t i = 0; i < N; i++)
        GW_OK(test_client_expect_push(&cs[i], "news", off, NULL, GW_WAIT_MS), &cs[i]);

    json_t *j = get_json(h, "/api/console");
    assert_true(num(j, "time_ms") > 1700000000000ll);
    assert_true(num(j, "uptime_ms") < 600000);
    assert_true(json_is_string(json_object_get(j, "node")));
    assert_string_equal(json_string_value(json_object_get(j, "engine")), "memory");
    assert_true(json_is_true(json_object_get(j, "ready")));
    assert_true(json_is_false(json_object_get(j, "draining")));
    assert_int_equal(num(j, "connections"), N);
    assert_int_equal(num(j, "max_connections"), 1000000);
    assert_int_equal(num(j, "users_online"), 2);
    assert_int_equal(num(j, "channels"), 1);
    assert_int_equal(num(j, "subscriptions"), N);
    assert_int_equal(num(j, "publishes_total"), 1);
    assert_int_equal(num(j, "deliveries_total"), N);
    assert_int_equal(num(j, "slow_consumer_drops_total"), 0);
    assert_int_equal(num(j, "queue_depth"), loops_sum(j, "queue_depth"));
    assert_int_equal(num(j, "output_queued_bytes"), 0);
    assert_int_equal(num(j, "slow_consumers"), 0);
    assert_int_equal(num(j, "pool.queue_depth"), 0);
    assert_int_equal(num(j, "pool.capacity"), 4096);
    assert_true(num(j, "pool.threads") >= 1);
    assert_int_equal(num(j, "pool.rejected_total"), 0);
    const json_t *loops = json_object_get(j, "loops");
    assert_int_equal(json_array_size(loops), 2);
    assert_int_equal(loops_sum(j, "connections"), N);
    assert_int_equal(loops_sum(j, "deliveries_total"), N);
    assert_int_equal(loops_sum(j, "output_queued_bytes"), 0);
    assert_int_equal(loops_sum(j, "slow_consumers"), 0);
    assert_true(json_is_array(json_object_get(j, "engine_servers")));
    assert_int_equal(json_array_size(json_object_get(j, "engine_servers")), 0);
    /* Per loop, as /metrics labels them. */
    for (size_t i = 0; i < 2; i++) {
        char label[32];
        snprintf(label, sizeof(label), "loop=\"%zu\"", i);
        const json_t *l = json_array_get(loops, i);
        assert_true(gw_metric(h, "herald_connections", label) == num(l, "connections"));
    }
    assert_true(gw_metric(h, "herald_users_online", NULL) == 2);
    json_decref(j);
    /* The next sample, within GW_ADMIN_CONSOLE_USERS_MS, skips the merge over the loops and
     * shows the last count. */
    j = get_json(h, "/api/console");
    assert_int_equal(num(j, "users_online"), 2);
    json_decref(j);
    for (size_t i = 0; i < N; i++)
        test_client_close(&cs[i]);
    gw_stop(state);
}

/* Polls /api/console until its output figures read slow consumers == want_slow and output
 * queued bytes at least want_bytes (want_bytes 0: exactly 0). Returns the last answer. */
static json_t *await_queue(const test_herald_t *h, long long want_slow, long long want_bytes)
{
    int64_t until = test_now_ms() + GW_WAIT_MS;
    for (;;) {
        json_t *j = get_json(h, "/api/console");
        long long slow = num(j, "slow_consumers");
        long long bytes = num(j, "output_queued_bytes");
        if (slow == want_slow && (want_bytes ? bytes >= want_bytes : bytes == 0))
            return j;
        if (test_ms_left(until) == 0)
            fail_msg("slow consumers %lld, output queued %lld B; want %lld, %lld B", slow, bytes,
                     want_slow, want_bytes);
        json_decref(j);
    }
}

/* A subscriber that stops reading: herald holds its output past the mark (64 KiB here), and
 * the figures say so, per loop as in all, as /metrics does; its close takes them to zero. */
static void test_gw_console_slow_consumer(void **state)
{
    test_herald_t *h = start(state);
    test_client_t slow;
    GW_OK(test_client_open(&slow, h->port, GW_WAIT_MS), &slow);
    assert_int_equal(test_client_set_rcvbuf(&slow, 4096), 0);
    GW_OK(test_client_hello(&slow, "slow", GW_WAIT_MS), &slow);
    GW_OK(test_client_subscribe(&slow, "big", NULL, GW_WAIT_MS), &slow);
    static char payload[60000];
    memset(payload, 'p', sizeof(payload));
    for (int i = 0; i < 100; i++) {
        test_http_resp_t r;
        assert_int_equal(test_http_request(h->admin_port, "POST", "/api/publish?channel=big",
                                           key_hdrs, payload, sizeof(payload), GW_WAIT_MS, &r),
                         0);
        assert_int_equal(r.status, 200);
        test_http_resp_free(&r);
    }
    json_t *j = await_queue(h, 1, 65536);
    assert_int_equal(loops_sum(j, "slow_consumers"), 1);
    assert_int_equal(loops_sum(j, "output_queued_bytes"), num(j, "output_queued_bytes"));
    assert_true(num(j, "slow_consumer_drops_total") > 0);
    /* Nothing moves while the subscriber reads nothing: /metrics reads the same. */
    assert_true(gw_metric(h, "herald_slow_consumers", NULL) == 1);
    assert_true(gw_metric(h, "herald_output_queued_bytes", NULL) == num(j, "output_queued_bytes"));
    json_decref(j);
    test_client_close(&slow);
    json_decref(await_queue(h, 0, 0));
    gw_metric_await(h, "herald_slow_consumers", NULL, 0);
    gw_stop(state);
}

/* --- the Redis engine ------------------------------------------------------------------------ */

typedef struct redis_fx_s {
    test_redis_t redis;
    test_herald_t *nodes[2];
} redis_fx_t;

static int redis_setup(void **state)
{
    redis_fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    *state = fx;
    if (!test_redis_available())
        return 0;
    int rc = test_redis_start(&fx->redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    return 0;
}

static int redis_teardown(void **state)
{
    redis_fx_t *fx = *state;
    for (int i = 0; i < 2; i++)
        test_herald_abort(fx->nodes[i]);
    test_redis_kill(&fx->redis);
    free(fx);
    return 0;
}

static test_herald_t *redis_node(redis_fx_t *fx, int i)
{
    char redis[32];
    snprintf(redis, sizeof(redis), "127.0.0.1:%u", fx->redis.port);
    const char *args[] = {"--insecure",
                          "--engine",
                          "redis",
                          "--redis",
                          redis,
                          "--io-threads",
                          "2",
                          "--api-key",
                          GW_API_KEY,
                          "--node-id",
                          i ? "nodeb" : "nodea",
                          "--presence-refresh-interval",
                          "1s",
                          NULL};
    test_herald_opts_t o = {.args = args, .cpu = -1};
    int rc = test_herald_start(&fx->nodes[i], &o);
    if (rc != 0)
        fail_msg("herald did not start: %s", strerror(-rc));
    return fx->nodes[i];
}

/* The connections /api/nodes on h lists for node, or -1 when it is not listed. */
static long long listed(const json_t *n, const char *node)
{
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(n, "nodes"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "node")), node) == 0)
            return num(e, "connections");
    }
    return -1;
}

static void test_gw_console_redis_nodes(void **state)
{
    redis_fx_t *fx = *state;
    if (!test_redis_available())
        skip();
    test_herald_t *a = redis_node(fx, 0);
    test_herald_t *b = redis_node(fx, 1);
    test_client_t cs[3];
    GW_OK(test_client_auth(&cs[0], a->port, "u0", GW_WAIT_MS), &cs[0]);
    GW_OK(test_client_auth(&cs[1], a->port, "u1", GW_WAIT_MS), &cs[1]);
    GW_OK(test_client_auth(&cs[2], b->port, "u2", GW_WAIT_MS), &cs[2]);
    /* Each node writes its connections with its heartbeat, once per refresh interval. */
    int64_t until = test_now_ms() + GW_WAIT_MS;
    json_t *n = NULL;
    for (;;) {
        n = get_json(a, "/api/nodes");
        if (listed(n, "nodea") == 2 && listed(n, "nodeb") == 1)
            break;
        if (test_ms_left(until) == 0)
            fail_msg("/api/nodes never listed nodea with 2 and nodeb with 1: %s", json_dumps(n, 0));
        json_decref(n);
    }
    assert_string_equal(json_string_value(json_object_get(n, "node")), "nodea");
    const json_t *nodes = json_object_get(n, "nodes");
    assert_int_equal(json_array_size(nodes), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "node")),
                        "nodea"); /* sorted */
    for (size_t i = 0; i < 2; i++)
        assert_true(num(json_array_get(nodes, i), "expires_ms") > 1700000000000ll);
    json_decref(n);

    json_t *j = get_json(a, "/api/console");
    assert_string_equal(json_string_value(json_object_get(j, "engine")), "redis");
    const json_t *servers = json_object_get(j, "engine_servers");
    assert_int_equal(json_array_size(servers), 1);
    const json_t *s = json_array_get(servers, 0);
    char name[32];
    snprintf(name, sizeof(name), "127.0.0.1:%u", fx->redis.port);
    assert_string_equal(json_string_value(json_object_get(s, "server")), name);
    assert_true(json_is_true(json_object_get(s, "up")));
    assert_true(num(s, "pending_commands") >= 0);
    assert_int_equal(num(s, "max_pending"), 10000);
    json_decref(j);
    for (size_t i = 0; i < 3; i++)
        test_client_close(&cs[i]);
    for (int i = 0; i < 2; i++) {
        int rc = test_herald_stop(fx->nodes[i], 0);
        fx->nodes[i] = NULL;
        assert_int_equal(rc, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_console_page_is_public, gw_teardown),
        cmocka_unit_test_teardown(test_gw_console_data_needs_the_key, gw_teardown),
        cmocka_unit_test_teardown(test_gw_console_data_shape, gw_teardown),
        cmocka_unit_test_teardown(test_gw_console_slow_consumer, gw_teardown),
        cmocka_unit_test_setup_teardown(test_gw_console_redis_nodes, redis_setup, redis_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
