/*
 * redis_engine_fx: what the Redis-engine integration tests (test_gw_redis_engine.c,
 * test_gw_redis_outage.c) share: a fixture of one or two real redis-server processes and up to
 * two herald nodes on them (stopped by PID in teardown), node start/stop, /readyz waits, push
 * and delivery checks, publishing by the admin API and straight into Redis, and the admin
 * API's presence and online queries polled until they say what a test waits for.
 *
 * Thread: the test's. Include after <cmocka.h>, gwtest_util.h and redis_harness.h.
 */
#ifndef HERALD_TESTS_REDIS_ENGINE_FX_H
#define HERALD_TESTS_REDIS_ENGINE_FX_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#define N_NODES 2

typedef struct fx_s {
    test_redis_t redis[2];
    int n_redis;
    test_herald_t *nodes[N_NODES];
} fx_t;

/* Starts node i on the fixture's Redis servers, with extra flags (NULL-terminated). */
static inline test_herald_t *node_start(fx_t *fx, int i, const char *const *extra)
{
    char list[128];
    size_t len = 0;
    for (int r = 0; r < fx->n_redis; r++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s127.0.0.1:%u", r ? "," : "",
                                fx->redis[r].port);
    char node_id[16];
    snprintf(node_id, sizeof(node_id), "node%c", 'a' + i);
    const char *args[40] = {"--insecure", "--engine",        "redis",      "--redis",
                            list,         "--io-threads",    "2",          "--api-key",
                            GW_API_KEY,   "--publish-rate",  "0",          "--node-id",
                            node_id,      "--history-rules", "h:*=1000/5m"};
    size_t n = 15;
    for (size_t k = 0; extra && extra[k] && n + 1 < 40; k++)
        args[n++] = extra[k];
    args[n] = NULL;
    test_herald_opts_t o = {.args = args, .cpu = -1};
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, &o);
    if (rc != 0)
        fail_msg("herald did not start: %s", strerror(-rc));
    fx->nodes[i] = h;
    return h;
}

/* GET /readyz's status code. */
static inline int readyz(const test_herald_t *h)
{
    test_http_resp_t r;
    if (test_http_request(h->admin_port, "GET", "/readyz", NULL, NULL, 0, GW_WAIT_MS, &r) != 0)
        return -1;
    int status = r.status;
    test_http_resp_free(&r);
    return status;
}

/* Waits until /readyz answers want (each request is a round trip: that is the pace). */
static inline void await_readyz(const test_herald_t *h, int want)
{
    int64_t deadline = test_now_ms() + 20000;
    int got;
    while ((got = readyz(h)) != want)
        if (test_ms_left(deadline) == 0)
            fail_msg("/readyz stayed %d, want %d", got, want);
}

static inline int setup_with(void **state, int n_redis)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->n_redis = n_redis;
    for (int r = 0; r < n_redis; r++) {
        int rc = test_redis_start(&fx->redis[r], 0);
        if (rc != 0)
            fail_msg("redis-server did not start: %s", strerror(-rc));
    }
    *state = fx;
    return 0;
}

static inline int setup(void **state)
{
    return setup_with(state, 1);
}

static inline int setup2(void **state)
{
    return setup_with(state, 2);
}

static inline int teardown(void **state)
{
    fx_t *fx = *state;
    for (int i = 0; i < N_NODES; i++)
        test_herald_abort(fx->nodes[i]);
    for (int r = 0; r < fx->n_redis; r++)
        test_redis_kill(&fx->redis[r]);
    free(fx);
    return 0;
}

/* Stops every node, asserting clean exits. */
static inline void nodes_stop(fx_t *fx)
{
    for (int i = 0; i < N_NODES; i++) {
        if (!fx->nodes[i])
            continue;
        int rc = test_herald_stop(fx->nodes[i], 0);
        fx->nodes[i] = NULL;
        if (rc != 0)
            fail_msg("node %d did not exit cleanly: %d", i, rc);
    }
}

static inline void expect_nothing_more(test_client_t *c)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("unexpected %s", test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

/* Takes the next Push of channel and checks its offset and payload. */
static inline void expect_push(test_client_t *c, const char *chan, uint64_t offset, const char *payload)
{
    Herald__Frame *f = NULL;
    GW_OK(test_client_expect_push(c, chan, offset, &f, GW_WAIT_MS), c);
    size_t len = strlen(payload);
    if (f->push->payload.len != len || memcmp(f->push->payload.data, payload, len) != 0)
        fail_msg("offset %llu carries '%.*s', want '%s'", (unsigned long long)offset,
                 (int)f->push->payload.len, (const char *)f->push->payload.data, payload);
    proto_frame_free(f);
}

static inline void admin_publish(const test_herald_t *h, const char *chan, const char *body,
                          int want_status)
{
    static const char *const hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
    char path[128];
    snprintf(path, sizeof(path), "/api/publish?channel=%s", chan);
    test_http_resp_t r;
    assert_int_equal(
        test_http_request(h->admin_port, "POST", path, hdrs, body, strlen(body), GW_WAIT_MS, &r),
        0);
    if (r.status != want_status)
        fail_msg("POST %s: %d %s", path, r.status, r.body);
    test_http_resp_free(&r);
}

/* A plain PUBLISH on herald:<chan>, as a backend would send it. Returns the receivers. */
static inline long long redis_publish(const test_redis_t *redis, const char *chan, const char *payload)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, "PUBLISH herald:%s %s", chan, payload);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* A sequenced publish by a backend, as the README shows it: FCALL herald_publish 2
 * herald:m:<chan> herald:h:<chan> <chan> <payload>. Returns the offset it was given and checks
 * the epoch it reports. */
static inline long long redis_fcall_publish(const test_redis_t *redis, const char *chan,
                                     const char *payload, const char *epoch)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, "FCALL herald_publish 2 herald:m:%s herald:h:%s %s %s", chan,
                                 chan, chan, payload);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4); /* offset, epoch, time, duplicate */
    assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING);
    assert_string_equal(r->element[1]->str, epoch);
    assert_int_equal(r->element[3]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[3]->integer, 0);
    long long off = r->element[0]->integer;
    freeReplyObject(r);
    redisFree(c);
    return off;
}

/* --- presence and online status through the admin API ----------------------------------- */

/* GET path on h's admin API as JSON (the caller frees it). */
static inline json_t *admin_json(const test_herald_t *h, const char *path)
{
    static const char *const hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
    test_http_resp_t r;
    assert_int_equal(test_http_request(h->admin_port, "GET", path, hdrs, NULL, 0, GW_WAIT_MS, &r),
                     0);
    if (r.status != 200)
        fail_msg("GET %s: %d %s", path, r.status, r.body);
    json_error_t err;
    json_t *j = json_loads(r.body, 0, &err);
    if (!j)
        fail_msg("GET %s: not JSON: %s", path, r.body);
    test_http_resp_free(&r);
    return j;
}

static inline long long json_int(const json_t *j, const char *key)
{
    const json_t *v = json_object_get(j, key);
    if (!json_is_integer(v))
        fail_msg("no integer %s", key);
    return (long long)json_integer_value(v);
}

/* Clients the presence test keeps alive while it waits: the node's idle timeout is short (so
 * that a dead node's entries expire quickly), and a test client pings only when told. */
static test_client_t *keep_alive[4];

static inline void ping_kept_alive(void)
{
    for (size_t i = 0; i < sizeof(keep_alive) / sizeof(keep_alive[0]); i++)
        if (keep_alive[i])
            GW_OK(test_client_ping(keep_alive[i], GW_WAIT_MS), keep_alive[i]);
}

/* Waits until h's presence of chan counts want clients (queries are the pace). */
static inline json_t *await_presence(const test_herald_t *h, const char *chan, long long want)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/presence?channel=%s", chan);
    int64_t deadline = test_now_ms() + 20000;
    for (;;) {
        ping_kept_alive();
        json_t *j = admin_json(h, path);
        if (json_int(j, "num_clients") == want)
            return j;
        if (test_ms_left(deadline) > 0)
            json_decref(j);
        if (test_ms_left(deadline) == 0) {
            char *txt = json_dumps(j, 0);
            fail_msg("presence of %s never counted %lld: %s", chan, want, txt);
        }
    }
}

static inline json_t *await_online(const test_herald_t *h, const char *user, bool want)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/online?user=%s", user);
    int64_t deadline = test_now_ms() + 20000;
    for (;;) {
        ping_kept_alive();
        json_t *j = admin_json(h, path);
        if (json_is_true(json_object_get(j, "online")) == want)
            return j;
        json_decref(j);
        if (test_ms_left(deadline) == 0)
            fail_msg("%s never became %s", user, want ? "online" : "offline");
    }
}

#endif
