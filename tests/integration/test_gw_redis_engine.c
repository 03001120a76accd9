/*
 * test_gw_redis_engine: herald nodes sharing channels through real redis-server processes
 * (engine redis), each node a real herald with 2 IO loops, every process on loopback ports the
 * test picks and stopped by PID.
 *
 *   - cross-node delivery: a subscriber on node A gets what is published on node B (client and
 *     admin API), on A itself, by a plain Redis PUBLISH (offset 0) and by a backend's FCALL
 *     herald_publish (the next offset), each exactly once;
 *   - one sequence per channel: publishers on both nodes at once, subscribers on both see the
 *     same consecutive offsets;
 *   - recovery across nodes: a client leaves A, messages go by, it comes back to B with its
 *     (epoch, offset) and gets exactly what it missed, then live ones;
 *   - Redis down at start: the node serves its clients, /readyz says degraded (503), a
 *     subscription is answered BUSY; once Redis is up the node is ready and subscribing works;
 *   - kill -9 of Redis mid-stream and a restart: local delivery goes on meanwhile (offset 0),
 *     the nodes reconnect and resubscribe by themselves, the channel's epoch changes (Redis came
 *     back empty), and the counts of what was lost are in /metrics;
 *   - a Redis that hangs (SIGSTOP): past redis_max_pending, publishes are answered BUSY;
 *   - a slow Redis is not a dead one: while another client keeps it busy for 3 s, a thousand
 *     subscriptions queue for over the 500 ms redis_timeout, yet the node keeps its link and
 *     every one is answered; stopped (SIGSTOP), the same Redis is gone within the timeout;
 *   - joins paced by Redis's replies: 300 subscriptions at once with a max_pending of 16, all
 *     answered SubscribeOk, no command refused;
 *   - Redis holding less of a channel than a node delivered (as after a failover to a replica
 *     that missed the last messages): found when the nodes reconnect, and found live from a
 *     message at an offset already delivered; either way the channel starts a new epoch, the
 *     subscriber's next Push is in it, and recovering from the old epoch says so;
 *   - two Redis servers: channels spread over both, delivery unchanged;
 *   - presence, online status and join/leave events seen from every node, and a node killed
 *     with SIGKILL gone from both once its entries expire;
 *   - 300 users connecting and subscribing at once, then active, with a max_pending of 16:
 *     no command refused, every user online and in the channel, every expiry renewed;
 *   - idempotency keys across nodes: a Publish repeating a key on the other node (client frame
 *     or admin API) is answered PublishOk{duplicate} with the first offset, subscribers on both
 *     nodes get the message once, the record lives in Redis for the window and a repeat after
 *     it publishes again;
 *   - a Publish Redis took and never answered (SIGSTOP) is answered OUTCOME_UNKNOWN, not
 *     INTERNAL; its retry with the same key once Redis is back is delivered exactly once;
 *   - a node stopped while Redis hangs with requests in flight exits cleanly.
 *
 * Waiting is on events: /readyz answers, a Pong after everything queued, log lines.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "gwtest_util.h"
#include "proto_frame.h"
#include "redis_harness.h"

#define N_NODES 2

typedef struct fx_s {
    test_redis_t redis[2];
    int n_redis;
    test_herald_t *nodes[N_NODES];
} fx_t;

/* Starts node i on the fixture's Redis servers, with extra flags (NULL-terminated). */
static test_herald_t *node_start(fx_t *fx, int i, const char *const *extra)
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
static int readyz(const test_herald_t *h)
{
    test_http_resp_t r;
    if (test_http_request(h->admin_port, "GET", "/readyz", NULL, NULL, 0, GW_WAIT_MS, &r) != 0)
        return -1;
    int status = r.status;
    test_http_resp_free(&r);
    return status;
}

/* Waits until /readyz answers want (each request is a round trip: that is the pace). */
static void await_readyz(const test_herald_t *h, int want)
{
    int64_t deadline = test_now_ms() + 20000;
    int got;
    while ((got = readyz(h)) != want)
        if (test_ms_left(deadline) == 0)
            fail_msg("/readyz stayed %d, want %d", got, want);
}

static int setup_with(void **state, int n_redis)
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

static int setup(void **state)
{
    return setup_with(state, 1);
}

static int setup2(void **state)
{
    return setup_with(state, 2);
}

static int teardown(void **state)
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
static void nodes_stop(fx_t *fx)
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

static void expect_nothing_more(test_client_t *c)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("unexpected %s", test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

/* Takes the next Push of channel and checks its offset and payload. */
static void expect_push(test_client_t *c, const char *chan, uint64_t offset, const char *payload)
{
    Herald__Frame *f = NULL;
    GW_OK(test_client_expect_push(c, chan, offset, &f, GW_WAIT_MS), c);
    size_t len = strlen(payload);
    if (f->push->payload.len != len || memcmp(f->push->payload.data, payload, len) != 0)
        fail_msg("offset %llu carries '%.*s', want '%s'", (unsigned long long)offset,
                 (int)f->push->payload.len, (const char *)f->push->payload.data, payload);
    proto_frame_free(f);
}

static void admin_publish(const test_herald_t *h, const char *chan, const char *body,
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
static long long redis_publish(const test_redis_t *redis, const char *chan, const char *payload)
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
static long long redis_fcall_publish(const test_redis_t *redis, const char *chan,
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

/* --- cross-node delivery ------------------------------------------------------------------ */

static void test_gw_redis_engine_cross_node(void **state)
{
    fx_t *fx = *state;
    test_herald_t *a = node_start(fx, 0, NULL);
    test_herald_t *b = node_start(fx, 1, NULL);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sub;
    test_client_t pub_b;
    test_client_t pub_a;
    GW_OK(test_client_auth(&sub, a->port, "sub", GW_WAIT_MS), &sub);
    GW_OK(test_client_auth(&pub_b, b->port, "pb", GW_WAIT_MS), &pub_b);
    GW_OK(test_client_auth(&pub_a, a->port, "pa", GW_WAIT_MS), &pub_a);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&sub, "news", NULL, 0, &ok, GW_WAIT_MS), &sub);
    assert_int_equal(ok.offset, 0);
    uint64_t off = 0;
    char epoch[17];
    GW_OK(test_client_publish_ex(&pub_b, "news", "from-b", 6, &off, epoch, GW_WAIT_MS), &pub_b);
    assert_int_equal(off, 1);
    assert_string_equal(epoch, ok.epoch);
    expect_push(&sub, "news", 1, "from-b");
    admin_publish(b, "news", "admin-b", 200);
    expect_push(&sub, "news", 2, "admin-b");
    GW_OK(test_client_publish(&pub_a, "news", "from-a", 6, &off, GW_WAIT_MS), &pub_a);
    assert_int_equal(off, 3);
    expect_push(&sub, "news", 3, "from-a");
    /* A backend's plain PUBLISH: delivered as it is, outside the sequence. Node a is the one
     * subscribed. */
    assert_int_equal(redis_publish(&fx->redis[0], "news", "plain"), 1);
    expect_push(&sub, "news", 0, "plain");
    expect_nothing_more(&sub);
    /* The sequence goes on after it. */
    GW_OK(test_client_publish(&pub_b, "news", "again", 5, &off, GW_WAIT_MS), &pub_b);
    assert_int_equal(off, 4);
    expect_push(&sub, "news", 4, "again");
    /* A backend's sequenced publish through the function library: the next offset. */
    assert_int_equal(redis_fcall_publish(&fx->redis[0], "news", "backend", ok.epoch), 5);
    expect_push(&sub, "news", 5, "backend");
    expect_nothing_more(&sub);
    assert_true(gw_metric(a, "herald_redis_up", NULL) == 1.0);
    assert_true(gw_metric(a, "herald_redis_unsequenced_total", NULL) == 1.0);
    test_client_close(&sub);
    test_client_close(&pub_a);
    test_client_close(&pub_b);
    nodes_stop(fx);
}

/* --- one sequence ------------------------------------------------------------------------- */

static void test_gw_redis_engine_one_sequence(void **state)
{
    fx_t *fx = *state;
    test_herald_t *a = node_start(fx, 0, NULL);
    test_herald_t *b = node_start(fx, 1, NULL);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sa, sb, pa, pb;
    GW_OK(test_client_auth(&sa, a->port, "sa", GW_WAIT_MS), &sa);
    GW_OK(test_client_auth(&sb, b->port, "sb", GW_WAIT_MS), &sb);
    GW_OK(test_client_auth(&pa, a->port, "pa", GW_WAIT_MS), &pa);
    GW_OK(test_client_auth(&pb, b->port, "pb", GW_WAIT_MS), &pb);
    GW_OK(test_client_subscribe(&sa, "seq", NULL, GW_WAIT_MS), &sa);
    GW_OK(test_client_subscribe(&sb, "seq", NULL, GW_WAIT_MS), &sb);
    /* Both publish, pipelined: 100 frames each in one write, so the two streams interleave. */
    for (int round = 0; round < 2; round++) {
        test_client_t *p = round ? &pb : &pa;
        nl_buf_t out;
        nl_buf_init(&out, 0);
        for (int i = 0; i < 100; i++) {
            Herald__Frame f;
            Herald__Publish body;
            test_frame_publish(&f, &body, "seq", "x", 1);
            f.id = 1000 + (uint64_t)i;
            assert_int_equal(proto_frame_append(&out, &f), 0);
        }
        GW_OK(test_client_send_raw(p, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), p);
        nl_buf_deinit(&out);
    }
    /* Every subscriber sees 1..200 in order, once. */
    for (uint64_t o = 1; o <= 200; o++) {
        GW_OK(test_client_expect_push(&sa, "seq", o, NULL, GW_WAIT_MS), &sa);
        GW_OK(test_client_expect_push(&sb, "seq", o, NULL, GW_WAIT_MS), &sb);
    }
    expect_nothing_more(&sa);
    expect_nothing_more(&sb);
    test_client_close(&sa);
    test_client_close(&sb);
    test_client_close(&pa);
    test_client_close(&pb);
    nodes_stop(fx);
}

/* --- recovery across nodes ---------------------------------------------------------------- */

static void test_gw_redis_engine_recover_on_other_node(void **state)
{
    fx_t *fx = *state;
    test_herald_t *a = node_start(fx, 0, NULL);
    test_herald_t *b = node_start(fx, 1, NULL);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t c;
    test_client_t pub;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    GW_OK(test_client_auth(&pub, b->port, "pub", GW_WAIT_MS), &pub);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "h:room", NULL, 0, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recoverable);
    char payload[32];
    for (int i = 1; i <= 10; i++) {
        int n = snprintf(payload, sizeof(payload), "m%d", i);
        GW_OK(test_client_publish(&pub, "h:room", payload, (size_t)n, NULL, GW_WAIT_MS), &pub);
    }
    for (int i = 1; i <= 10; i++) {
        snprintf(payload, sizeof(payload), "m%d", i);
        expect_push(&c, "h:room", (uint64_t)i, payload);
    }
    test_client_close(&c);
    for (int i = 11; i <= 30; i++) {
        int n = snprintf(payload, sizeof(payload), "m%d", i);
        GW_OK(test_client_publish(&pub, "h:room", payload, (size_t)n, NULL, GW_WAIT_MS), &pub);
    }
    /* Back on node b, which holds nothing of h:room in memory: the Redis stream answers. */
    GW_OK(test_client_auth(&c, b->port, "c", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe_from(&c, "h:room", ok.epoch, 10, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    assert_int_equal(ok.offset, 10);
    for (int i = 11; i <= 30; i++) {
        snprintf(payload, sizeof(payload), "m%d", i);
        expect_push(&c, "h:room", (uint64_t)i, payload);
    }
    GW_OK(test_client_publish(&pub, "h:room", "live", 4, NULL, GW_WAIT_MS), &pub);
    expect_push(&c, "h:room", 31, "live");
    expect_nothing_more(&c);
    assert_true(gw_metric(b, "herald_redis_history_fetches_total", NULL) >= 1);
    /* Too far back for MAXLEN? 1000 kept: from 0 works too. */
    test_client_t d;
    GW_OK(test_client_auth(&d, a->port, "d", GW_WAIT_MS), &d);
    GW_OK(test_client_subscribe_from(&d, "h:room", ok.epoch, 0, &ok, GW_WAIT_MS), &d);
    assert_true(ok.is_recovered);
    for (int i = 1; i <= 31; i++)
        GW_OK(test_client_expect_push(&d, "h:room", (uint64_t)i, NULL, GW_WAIT_MS), &d);
    expect_nothing_more(&d);
    test_client_close(&d);
    test_client_close(&c);
    test_client_close(&pub);
    nodes_stop(fx);
}

/* --- faults ------------------------------------------------------------------------------- */

static json_t *await_presence(const test_herald_t *h, const char *chan, long long want);
static json_t *await_online(const test_herald_t *h, const char *user, bool want);

/* The body of GET /readyz. */
static void expect_readyz_body(const test_herald_t *h, const char *needle)
{
    test_http_resp_t r;
    assert_int_equal(
        test_http_request(h->admin_port, "GET", "/readyz", NULL, NULL, 0, GW_WAIT_MS, &r), 0);
    if (!strstr(r.body, needle))
        fail_msg("/readyz said %d %s", r.status, r.body);
    test_http_resp_free(&r);
}

static void test_gw_redis_engine_down_at_start(void **state)
{
    fx_t *fx = *state;
    test_redis_kill(&fx->redis[0]); /* its port stays the node's Redis address */
    static const char *const extra[] = {"--redis-timeout", "500ms", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    assert_int_equal(readyz(a), 503);
    expect_readyz_body(a, "degraded");
    /* The node serves its own clients. */
    test_client_t c;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    /* A subscription cannot be set up without Redis: BUSY, try again. */
    int rc = test_client_subscribe(&c, "news", NULL, GW_WAIT_MS);
    if (rc != -EPROTO || c.last_err_code != HERALD__ERROR__CODE__BUSY)
        fail_msg("subscribe without Redis: %d, error %d: %s", rc, c.last_err_code,
                 test_client_what(&c));
    assert_true(gw_metric(a, "herald_redis_join_timeouts_total", NULL) >= 1);
    assert_true(gw_metric(a, "herald_redis_up", NULL) == 0.0);
    /* Redis appears: the node becomes ready and subscriptions work. */
    assert_int_equal(test_redis_restart(&fx->redis[0]), 0);
    await_readyz(a, 200);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "news", NULL, 0, &ok, GW_WAIT_MS), &c);
    uint64_t off = 0;
    GW_OK(test_client_publish(&c, "news", "hi", 2, &off, GW_WAIT_MS), &c);
    assert_int_equal(off, 1);
    expect_push(&c, "news", 1, "hi");
    test_client_close(&c);
    nodes_stop(fx);
}

static void test_gw_redis_engine_kill_and_restart(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-timeout", "1s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    test_herald_t *b = node_start(fx, 1, extra);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sub, pub_a, pub_b;
    GW_OK(test_client_auth(&sub, a->port, "sub", GW_WAIT_MS), &sub);
    GW_OK(test_client_auth(&pub_a, a->port, "pa", GW_WAIT_MS), &pub_a);
    GW_OK(test_client_auth(&pub_b, b->port, "pb", GW_WAIT_MS), &pub_b);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&sub, "k", NULL, 0, &ok, GW_WAIT_MS), &sub);
    char epoch1[17];
    snprintf(epoch1, sizeof(epoch1), "%s", ok.epoch);
    for (int i = 1; i <= 5; i++)
        GW_OK(test_client_publish(&pub_b, "k", "before", 6, NULL, GW_WAIT_MS), &pub_b);
    for (int i = 1; i <= 5; i++)
        expect_push(&sub, "k", (uint64_t)i, "before");

    test_redis_kill(&fx->redis[0]);
    await_readyz(a, 503);
    await_readyz(b, 503);
    /* Local delivery goes on: a's subscriber gets a's publish, outside the sequence; b's
     * publishes reach b only (pub/sub is at most once: documented). */
    uint64_t off = 99;
    GW_OK(test_client_publish(&pub_a, "k", "local", 5, &off, GW_WAIT_MS), &pub_a);
    assert_int_equal(off, 0);
    expect_push(&sub, "k", 0, "local");
    for (int i = 0; i < 3; i++)
        GW_OK(test_client_publish(&pub_b, "k", "lost", 4, &off, GW_WAIT_MS), &pub_b);
    expect_nothing_more(&sub);
    assert_int_equal(gw_metric(b, "herald_redis_local_only_publishes_total", NULL), 3);
    assert_int_equal(gw_metric(a, "herald_redis_local_only_publishes_total", NULL), 1);

    /* Redis comes back empty: both nodes reconnect and resubscribe by themselves. */
    assert_int_equal(test_redis_restart(&fx->redis[0]), 0);
    await_readyz(a, 200);
    await_readyz(b, 200);
    /* The node is ready (its command link) before its pub/sub connection has subscribed
     * again; its own publish waits for that, so its subscriber gets offset 1 of the new
     * epoch (sent at once, it went out while the node heard nothing: the first Push of the
     * new epoch was offset 2). */
    GW_OK(test_client_publish(&pub_a, "k", "after", 5, &off, GW_WAIT_MS), &pub_a);
    assert_int_equal(off, 1);
    Herald__Frame *f = NULL;
    GW_OK(test_client_expect_push(&sub, "k", 1, &f, GW_WAIT_MS), &sub);
    assert_string_not_equal(f->push->epoch, epoch1); /* the offsets started over */
    proto_frame_free(f);
    GW_OK(test_client_publish(&pub_b, "k", "on", 2, &off, GW_WAIT_MS), &pub_b);
    assert_int_equal(off, 2);
    expect_push(&sub, "k", off, "on");
    expect_nothing_more(&sub);
    assert_true(gw_metric(a, "herald_redis_reconnects_total", NULL) >= 1);
    assert_true(gw_metric(a, "herald_redis_epoch_changes_total", NULL) >= 1);
    /* Redis came back empty: the nodes told it their users and subscribers again. */
    json_decref(await_presence(b, "k", 1));
    json_decref(await_online(b, "sub", true));
    test_client_close(&sub);
    test_client_close(&pub_a);
    test_client_close(&pub_b);
    nodes_stop(fx);
}

/* Makes Redis hold only offsets 1..keep of chan's epoch, as a replica that had not received
 * the last messages would once promoted: the offset set back, the stream's tail removed. */
static void redis_rewind(const test_redis_t *redis, const char *chan, long long keep, long long had)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, "HSET herald:m:%s o %lld", chan, keep);
    assert_true(r && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    for (long long o = keep + 1; o <= had; o++) {
        r = redisCommand(c, "XDEL herald:h:%s %lld-0", chan, o);
        assert_true(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        freeReplyObject(r);
    }
    r = redisCommand(c, "XSETID herald:h:%s %lld-0", chan, keep); /* the replica's last id */
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
}

/* Cuts every client connection of Redis, as Sentinel does to a demoted master. */
static void redis_kill_clients(const test_redis_t *redis)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, "CLIENT KILL TYPE normal");
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 2)
        fail_msg("CLIENT KILL TYPE normal: %lld", r ? r->integer : -1);
    freeReplyObject(r);
    r = redisCommand(c, "CLIENT KILL TYPE pubsub");
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 1)
        fail_msg("CLIENT KILL TYPE pubsub: %lld", r ? r->integer : -1);
    freeReplyObject(r);
    redisFree(c);
}

/* Publishes on p until s hears a Push of chan; returns it (the caller frees it). The first
 * publish's offset and epoch go to *first_offset and first_epoch. */
static Herald__Frame *publish_until_heard(test_client_t *p, test_client_t *s, const char *chan,
                                          uint64_t *first_offset, char first_epoch[17])
{
    int64_t deadline = test_now_ms() + 20000;
    for (int i = 0;; i++) {
        uint64_t off = 0;
        char epoch[17];
        GW_OK(test_client_publish_ex(p, chan, "after", 5, &off, epoch, GW_WAIT_MS), p);
        if (i == 0) {
            *first_offset = off;
            memcpy(first_epoch, epoch, 17);
        }
        GW_OK(test_client_ping(s, GW_WAIT_MS), s);
        if (s->n_kept > 0)
            break;
        if (test_ms_left(deadline) == 0)
            fail_msg("the subscriber never heard from %s again", chan);
    }
    Herald__Frame *f = NULL;
    assert_int_equal(test_client_recv(s, &f, GW_WAIT_MS), 1);
    assert_int_equal(f->body_case, HERALD__FRAME__BODY_PUSH);
    return f;
}

/* Subscribes 10 messages deep into chan on a (published on b) and returns its epoch. */
static void ten_delivered(test_client_t *sub, test_client_t *pub, const char *chan, char epoch[17])
{
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(sub, chan, NULL, 0, &ok, GW_WAIT_MS), sub);
    assert_true(ok.is_recoverable);
    snprintf(epoch, 17, "%s", ok.epoch);
    for (int i = 1; i <= 10; i++)
        GW_OK(test_client_publish(pub, chan, "before", 6, NULL, GW_WAIT_MS), pub);
    for (int i = 1; i <= 10; i++)
        expect_push(sub, chan, (uint64_t)i, "before");
}

/* After the nodes reconnect to a Redis holding 7 of the 10 messages node a delivered: node a's
 * fence starts a new epoch before anything else is sent, so no offset is given out twice;
 * the subscriber's next Push is offset 1 of the new epoch, and a client recovering from the
 * old epoch is told it cannot. */
static void test_gw_redis_engine_rewound_on_reconnect(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-timeout", "1s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    test_herald_t *b = node_start(fx, 1, extra);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sub, pub;
    GW_OK(test_client_auth(&sub, a->port, "sub", GW_WAIT_MS), &sub);
    GW_OK(test_client_auth(&pub, b->port, "pub", GW_WAIT_MS), &pub);
    char epoch1[17];
    ten_delivered(&sub, &pub, "h:f", epoch1);
    redis_rewind(&fx->redis[0], "h:f", 7, 10);
    redis_kill_clients(&fx->redis[0]);
    int64_t deadline = test_now_ms() + 20000;
    while (gw_metric(a, "herald_redis_epoch_resets_total", NULL) < 1)
        if (test_ms_left(deadline) == 0)
            fail_msg("node a never reset h:f's epoch");
    await_readyz(a, 200);
    await_readyz(b, 200);
    uint64_t first = 0;
    char epoch2[17];
    Herald__Frame *f = publish_until_heard(&pub, &sub, "h:f", &first, epoch2);
    assert_int_equal(first, 1); /* not 8: no offset of the old epoch given out again */
    assert_string_not_equal(epoch2, epoch1);
    /* Node a may have resubscribed after the first few: what it hears is in the new epoch. */
    assert_string_equal(f->push->epoch, epoch2);
    assert_true(f->push->offset >= 1);
    proto_frame_free(f);
    /* From the old epoch, at its end or before: not recoverable, the new epoch instead. */
    test_client_t late;
    GW_OK(test_client_auth(&late, b->port, "late", GW_WAIT_MS), &late);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&late, "h:f", epoch1, 10, &ok, GW_WAIT_MS), &late);
    assert_false(ok.is_recovered);
    assert_string_not_equal(ok.epoch, epoch1);
    expect_nothing_more(&late);
    assert_int_equal(gw_metric(b, "herald_redis_epoch_resets_total", NULL), 0);
    assert_true(gw_metric(a, "herald_redis_reconnects_total", NULL) >= 1);
    test_client_close(&late);
    test_client_close(&sub);
    test_client_close(&pub);
    nodes_stop(fx);
}

/* Redis set back under a connected node: the next publish gets offset 8 again, which node a
 * has delivered already. It drops it and fences the channel, which starts a new epoch; the
 * subscriber never sees an old-epoch offset twice, and its next Push is in the new epoch. */
static void test_gw_redis_engine_rewound_live(void **state)
{
    fx_t *fx = *state;
    test_herald_t *a = node_start(fx, 0, NULL);
    test_herald_t *b = node_start(fx, 1, NULL);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sub, pub;
    GW_OK(test_client_auth(&sub, a->port, "sub", GW_WAIT_MS), &sub);
    GW_OK(test_client_auth(&pub, b->port, "pub", GW_WAIT_MS), &pub);
    char epoch1[17];
    ten_delivered(&sub, &pub, "h:g", epoch1);
    redis_rewind(&fx->redis[0], "h:g", 7, 10);
    uint64_t off = 0;
    char epoch[17];
    GW_OK(test_client_publish_ex(&pub, "h:g", "again", 5, &off, epoch, GW_WAIT_MS), &pub);
    assert_int_equal(off, 8); /* what Redis now says; node a knows better */
    assert_string_equal(epoch, epoch1);
    int64_t deadline = test_now_ms() + 20000;
    while (gw_metric(a, "herald_redis_epoch_resets_total", NULL) < 1)
        if (test_ms_left(deadline) == 0)
            fail_msg("node a never reset h:g's epoch");
    uint64_t first = 0;
    char epoch2[17];
    Herald__Frame *f = publish_until_heard(&pub, &sub, "h:g", &first, epoch2);
    assert_int_equal(first, 1);
    assert_string_not_equal(epoch2, epoch1);
    assert_string_equal(f->push->epoch, epoch2);
    assert_int_equal(f->push->offset, 1);
    proto_frame_free(f);
    assert_true(gw_metric(a, "herald_redis_duplicates_total", NULL) >= 1);
    test_client_close(&sub);
    test_client_close(&pub);
    nodes_stop(fx);
}

/* Another client keeping Redis busy: n scripts of 100 ms each, padded past Redis's 16 KiB read
 * so that Redis takes one or two per event-loop turn and serves its other clients in between,
 * as a loaded Redis does. */
typedef struct hog_s {
    uint16_t port;
    int n;
    int replies;
    pthread_t thread;
} hog_t;

static void *hog_main(void *arg)
{
    hog_t *h = arg;
    static const char body[] = "local function us() local t = redis.call('TIME') "
                               "return t[1] * 1000000 + t[2] end "
                               "local s = us() repeat until us() - s >= 100000 return 1 --";
    size_t pad = 100000;
    char *script = malloc(sizeof(body) + pad);
    if (!script)
        return NULL;
    memcpy(script, body, sizeof(body) - 1);
    memset(script + sizeof(body) - 1, 'x', pad);
    script[sizeof(body) - 1 + pad] = '\0';
    struct timeval tv = {20, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", h->port, tv);
    for (int i = 0; c && !c->err && i < h->n; i++) {
        const char *argv[] = {"EVAL", script, "0"};
        redisAppendCommandArgv(c, 3, argv, NULL);
    }
    for (int i = 0; c && !c->err && i < h->n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK)
            break;
        h->replies += r->type == REDIS_REPLY_INTEGER;
        freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    free(script);
    return NULL;
}

/* Subscribes c to n channels "<prefix><i>", pipelined, and expects n SubscribeOk. */
static void subscribe_many(test_client_t *c, const char *prefix, int n)
{
    nl_buf_t out;
    nl_buf_init(&out, 0);
    char chan[32];
    for (int i = 0; i < n; i++) {
        snprintf(chan, sizeof(chan), "%s%d", prefix, i);
        Herald__Frame f;
        Herald__Subscribe body;
        test_frame_subscribe(&f, &body, chan);
        f.id = 1 + (uint64_t)i;
        assert_int_equal(proto_frame_append(&out, &f), 0);
    }
    GW_OK(test_client_send_raw(c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), c);
    nl_buf_deinit(&out);
    for (int i = 0; i < n; i++) {
        Herald__Frame *r = NULL;
        assert_int_equal(test_client_recv(c, &r, GW_WAIT_MS), 1);
        if (r->body_case != HERALD__FRAME__BODY_SUBSCRIBE_OK) {
            char fs[384];
            fail_msg("subscription %d of %d: %s", i + 1, n, test_frame_str(r, fs, sizeof(fs)));
        }
        proto_frame_free(r);
    }
}

/* A slow Redis is not a dead one. Another client keeps Redis busy for 3 s (30 scripts of
 * 100 ms); meanwhile a client subscribes to 1,000 channels at once, whose joins queue on the
 * node's link for about a second, twice its redis_timeout of 500 ms, while Redis answers a
 * batch every turn. The node keeps its link (counted from their sending, the commands'
 * waits took it down) and every subscription is answered. Stopped with SIGSTOP, the same
 * Redis answers nothing: the node calls it gone within the timeout. */
static void test_gw_redis_engine_slow_is_not_dead(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-timeout", "500ms", "--max-subscriptions", "2000",
                                        NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    await_readyz(a, 200);
    test_client_t c;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    hog_t hog = {.port = fx->redis[0].port, .n = 30};
    assert_int_equal(pthread_create(&hog.thread, NULL, hog_main, &hog), 0);
    int64_t t0 = test_now_ms();
    subscribe_many(&c, "slow:", 1000);
    int64_t took = test_now_ms() - t0;
    pthread_join(hog.thread, NULL);
    assert_int_equal(hog.replies, 30);
    fprintf(stderr, "1000 subscriptions took %lld ms against a busy Redis\n", (long long)took);
    assert_true(gw_metric(a, "herald_redis_reconnects_total", NULL) == 0.0);
    assert_true(gw_metric(a, "herald_redis_join_timeouts_total", NULL) == 0.0);
    assert_true(gw_metric(a, "herald_redis_refused_commands_total", NULL) == 0.0);
    uint64_t off = 0;
    GW_OK(test_client_publish(&c, "slow:7", "x", 1, &off, GW_WAIT_MS), &c);
    assert_int_equal(off, 1);
    expect_push(&c, "slow:7", 1, "x");
    /* Stopped: a command waits and no reply comes. */
    test_redis_pause(&fx->redis[0]);
    t0 = test_now_ms();
    Herald__Frame f;
    Herald__Publish body;
    test_frame_publish(&f, &body, "slow:7", "y", 1);
    f.id = 9999;
    GW_OK(test_client_send(&c, &f, GW_WAIT_MS), &c);
    await_readyz(a, 503);
    took = test_now_ms() - t0;
    assert_true(took < 3000); /* the timeout, plus the link's check interval and a scrape */
    assert_true(gw_metric(a, "herald_redis_reconnects_total", NULL) >= 1.0);
    test_redis_resume(&fx->redis[0]);
    await_readyz(a, 200);
    test_client_close(&c);
    nodes_stop(fx);
}

/* Joins paced by Redis's replies: 300 subscriptions at once through a link that takes 16
 * commands in flight. Each waits its turn; none is refused, none times out. (Sent at once, the
 * joins past the 16th were refused and their clients got BUSY after redis_timeout.) */
static void test_gw_redis_engine_joins_paced(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-max-pending", "16", "--max-subscriptions", "400",
                                        NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    await_readyz(a, 200);
    test_client_t c;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    subscribe_many(&c, "paced:", 300);
    assert_true(gw_metric(a, "herald_redis_refused_commands_total", NULL) == 0.0);
    assert_true(gw_metric(a, "herald_redis_join_timeouts_total", NULL) == 0.0);
    uint64_t off = 0;
    GW_OK(test_client_publish(&c, "paced:299", "z", 1, &off, GW_WAIT_MS), &c);
    expect_push(&c, "paced:299", off, "z");
    test_client_close(&c);
    nodes_stop(fx);
}

/* A Redis that hangs: commands pile up to redis_max_pending, then publishes get BUSY. */
static void test_gw_redis_engine_slow_redis_busy(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-max-pending", "16", "--redis-timeout", "30s",
                                        NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    await_readyz(a, 200);
    test_client_t c;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    test_redis_pause(&fx->redis[0]);
    nl_buf_t out;
    nl_buf_init(&out, 0);
    for (int i = 0; i < 40; i++) {
        Herald__Frame f;
        Herald__Publish body;
        test_frame_publish(&f, &body, "slow", "x", 1);
        f.id = 1 + (uint64_t)i;
        assert_int_equal(proto_frame_append(&out, &f), 0);
    }
    GW_OK(test_client_send_raw(&c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), &c);
    nl_buf_deinit(&out);
    /* Past the pending bound the answers come at once, BUSY; the rest wait in Redis. (The
     * bound is the server connection's: the node's own presence writes take slots too.) */
    int64_t deadline = test_now_ms() + GW_WAIT_MS;
    while (gw_metric(a, "herald_redis_busy_publishes_total", NULL) < 20)
        assert_true(test_ms_left(deadline) > 0);
    test_redis_resume(&fx->redis[0]);
    int busy = 0;
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        Herald__Frame *r = NULL;
        assert_int_equal(test_client_recv(&c, &r, GW_WAIT_MS), 1);
        if (r->body_case == HERALD__FRAME__BODY_ERROR &&
            r->error->code == HERALD__ERROR__CODE__BUSY && r->error->retry_after_ms > 0)
            busy++;
        ok += r->body_case == HERALD__FRAME__BODY_PUBLISH_OK;
        proto_frame_free(r);
    }
    assert_int_equal(busy + ok, 40);
    assert_true(busy >= 24 && ok >= 8);
    assert_int_equal(gw_metric(a, "herald_redis_busy_publishes_total", NULL), busy);
    test_client_close(&c);
    nodes_stop(fx);
}

/* Two Redis servers: channels land on both, and delivery does not notice. */
static void test_gw_redis_engine_two_servers(void **state)
{
    fx_t *fx = *state;
    test_herald_t *a = node_start(fx, 0, NULL);
    test_herald_t *b = node_start(fx, 1, NULL);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sub, pub;
    GW_OK(test_client_auth(&sub, a->port, "sub", GW_WAIT_MS), &sub);
    GW_OK(test_client_auth(&pub, b->port, "pub", GW_WAIT_MS), &pub);
    char chan[16];
    for (int i = 0; i < 20; i++) {
        snprintf(chan, sizeof(chan), "c%d", i);
        GW_OK(test_client_subscribe(&sub, chan, NULL, GW_WAIT_MS), &sub);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(chan, sizeof(chan), "c%d", i);
        uint64_t off = 0;
        GW_OK(test_client_publish(&pub, chan, chan, strlen(chan), &off, GW_WAIT_MS), &pub);
        assert_int_equal(off, 1);
        expect_push(&sub, chan, 1, chan);
    }
    expect_nothing_more(&sub);
    /* Each server holds some of the channels (their pub/sub channels and offsets). */
    int total = 0;
    for (int r = 0; r < 2; r++) {
        struct timeval tv = {5, 0};
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", fx->redis[r].port, tv);
        assert_true(rc && !rc->err);
        redisReply *rep = redisCommand(rc, "PUBSUB CHANNELS herald:*");
        assert_non_null(rep);
        if (rep->elements < 3)
            fail_msg("server %d holds %zu of 20 channels", r, rep->elements);
        total += (int)rep->elements;
        freeReplyObject(rep);
        redisFree(rc);
    }
    assert_int_equal(total, 20);
    assert_int_equal(gw_metric(a, "herald_redis_up", NULL), 2);
    test_client_close(&sub);
    test_client_close(&pub);
    nodes_stop(fx);
}

/* --- presence and online status across nodes ---------------------------------------------- */

/* GET path on h's admin API as JSON (the caller frees it). */
static json_t *admin_json(const test_herald_t *h, const char *path)
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

static long long json_int(const json_t *j, const char *key)
{
    const json_t *v = json_object_get(j, key);
    if (!json_is_integer(v))
        fail_msg("no integer %s", key);
    return (long long)json_integer_value(v);
}

/* Clients the presence test keeps alive while it waits: the node's idle timeout is short (so
 * that a dead node's entries expire quickly), and a test client pings only when told. */
static test_client_t *keep_alive[4];

static void ping_kept_alive(void)
{
    for (size_t i = 0; i < sizeof(keep_alive) / sizeof(keep_alive[0]); i++)
        if (keep_alive[i])
            GW_OK(test_client_ping(keep_alive[i], GW_WAIT_MS), keep_alive[i]);
}

/* Waits until h's presence of chan counts want clients (queries are the pace). */
static json_t *await_presence(const test_herald_t *h, const char *chan, long long want)
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

static json_t *await_online(const test_herald_t *h, const char *user, bool want)
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

/* The next frame must be a PresenceEvent about a user joining (or leaving) chan; its user id is
 * copied into user_out (64 bytes). */
static void next_event(test_client_t *c, const char *chan, bool is_join, char *user_out)
{
    Herald__Frame *f = NULL;
    assert_int_equal(test_client_recv(c, &f, GW_WAIT_MS), 1);
    if (f->body_case != HERALD__FRAME__BODY_PRESENCE_EVENT) {
        char fs[384];
        fail_msg("expected a presence event, got %s", test_frame_str(f, fs, sizeof(fs)));
    }
    const Herald__PresenceEvent *pe = f->presence_event;
    assert_string_equal(pe->channel, chan);
    size_t n = is_join ? pe->n_joined : pe->n_left;
    Herald__ClientInfo **list = is_join ? pe->joined : pe->left;
    assert_int_equal(n, 1);
    snprintf(user_out, 64, "%s", list[0]->user_id);
    proto_frame_free(f);
}

static void expect_event(test_client_t *c, const char *chan, const char *user, bool is_join)
{
    char got[64];
    next_event(c, chan, is_join, got);
    assert_string_equal(got, user);
}

static void test_gw_redis_engine_presence_across_nodes(void **state)
{
    fx_t *fx = *state;
    /* Short timeouts, so that a killed node's entries expire within the test. */
    static const char *const extra[] = {
        "--idle-timeout", "2s", "--ping-interval", "1s", "--presence-refresh-interval", "1s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    test_herald_t *b = node_start(fx, 1, extra);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t listener, x, y;
    GW_OK(test_client_auth(&listener, a->port, "lis", GW_WAIT_MS), &listener);
    /* The listener asks for join/leave events of "room". */
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, "room");
    body.join_leave = true;
    Herald__Frame *r = NULL;
    assert_int_equal(test_client_request(&listener, &f, &r, GW_WAIT_MS), 1);
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_SUBSCRIBE_OK);
    proto_frame_free(r);
    GW_OK(test_client_auth(&x, a->port, "xavier", GW_WAIT_MS), &x);
    GW_OK(test_client_auth(&y, b->port, "yara", GW_WAIT_MS), &y);
    keep_alive[0] = &listener;
    keep_alive[1] = &x;
    keep_alive[2] = &y;
    GW_OK(test_client_subscribe(&x, "room", NULL, GW_WAIT_MS), &x);
    GW_OK(test_client_subscribe(&y, "room", NULL, GW_WAIT_MS), &y);
    /* The listener on a hears both joins, y's from node b: two nodes' events come in either
     * order. */
    char first[64];
    char second[64];
    next_event(&listener, "room", true, first);
    next_event(&listener, "room", true, second);
    if (!((strcmp(first, "xavier") == 0 && strcmp(second, "yara") == 0) ||
          (strcmp(first, "yara") == 0 && strcmp(second, "xavier") == 0)))
        fail_msg("joins heard: %s, %s", first, second);

    /* Presence and online status agree on both nodes. */
    for (int n = 0; n < 2; n++) {
        test_herald_t *h = n ? b : a;
        json_t *p = await_presence(h, "room", 3);
        assert_int_equal(json_int(p, "num_users"), 3);
        json_decref(p);
        json_t *o = await_online(h, "yara", true);
        assert_int_equal(json_int(o, "connections"), 1);
        const json_t *nodes = json_object_get(o, "nodes");
        assert_int_equal(json_array_size(nodes), 1);
        assert_string_equal(json_string_value(json_array_get(nodes, 0)), "nodeb");
        assert_true(json_int(o, "since_ms") > 1700000000000ll);
        json_decref(o);
    }
    /* Counts: users at once, connections as each node's heartbeat reports them. */
    int64_t deadline = test_now_ms() + 20000;
    for (;;) {
        ping_kept_alive();
        json_t *counts = admin_json(a, "/api/online");
        bool is_done = json_int(counts, "users") == 3 && json_int(counts, "connections") == 3;
        json_decref(counts);
        if (is_done)
            break;
        if (test_ms_left(deadline) == 0)
            fail_msg("the counts never reached 3 users and 3 connections");
    }

    /* y leaves: the listener hears it; presence drops it everywhere. */
    GW_OK(test_client_unsubscribe(&y, "room", GW_WAIT_MS), &y);
    expect_event(&listener, "room", "yara", false);
    json_decref(await_presence(a, "room", 2));

    /* Node b dies with y connected and subscribed again: after the expiry, gone. */
    GW_OK(test_client_subscribe(&y, "room", NULL, GW_WAIT_MS), &y);
    expect_event(&listener, "room", "yara", true);
    json_decref(await_presence(a, "room", 3));
    kill(b->pid, SIGKILL);
    test_herald_abort(b);
    fx->nodes[1] = NULL;
    keep_alive[2] = NULL;
    test_client_close(&y);
    int64_t t0 = test_now_ms();
    json_decref(await_presence(a, "room", 2));
    json_t *o = await_online(a, "yara", false);
    json_decref(o);
    int64_t took = test_now_ms() - t0;
    assert_true(took < 15000);
    memset(keep_alive, 0, sizeof(keep_alive));
    test_client_close(&x);
    test_client_close(&listener);
    nodes_stop(fx);
}

/* --- online status in bulk ---------------------------------------------------------------- */

#define BULK_USERS 300

static const char *bulk_user(size_t i, void *arg)
{
    static char name[32];
    (void)arg;
    snprintf(name, sizeof(name), "bulk%03zu", i);
    return name;
}

/* Each bulk user's hash's remaining time to live (PTTL, ms; negative: no key, no expiry). */
static void bulk_pttl(redisContext *rc, long long *out)
{
    for (size_t i = 0; i < BULK_USERS; i++)
        redisAppendCommand(rc, "PTTL herald:u:%s", bulk_user(i, NULL));
    for (size_t i = 0; i < BULK_USERS; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(rc, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        out[i] = r->integer;
        freeReplyObject(r);
    }
}

/* 300 users connecting and subscribing at once, then all active, with a max_pending of 16:
 * their first connections and refreshes go out a few commands per 128 users, their
 * subscriptions' presence writes are held back while half the link is busy, so nothing is
 * refused. Every user is online and in the channel, and the refresh renews every user's
 * expiry. (One command per user and field, sent at once, had most of them refused, and left
 * those users to expire while connected.) */
static void test_gw_redis_engine_online_in_bulk(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-max-pending", "16", "--presence-refresh-interval",
                                        "1s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    await_readyz(a, 200);
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, BULK_USERS), 0);
    assert_int_equal(test_fleet_open(fl, a->port, 0, GW_WAIT_MS), 0);
    if (test_fleet_hello_all(fl, NULL, bulk_user, NULL, GW_WAIT_MS) != 0 ||
        test_fleet_subscribe_all(fl, "bulk", NULL, NULL, NULL, GW_WAIT_MS) != 0)
        fail_msg("hello, subscribe: %s", test_fleet_what(fl));
    json_decref(await_presence(a, "bulk", BULK_USERS));
    int64_t deadline = test_now_ms() + 20000;
    for (;;) {
        json_t *counts = admin_json(a, "/api/online");
        bool is_all = json_int(counts, "users") == BULK_USERS;
        json_decref(counts);
        if (is_all)
            break;
        if (test_ms_left(deadline) == 0)
            fail_msg("/api/online never counted %d users", BULK_USERS);
    }
    struct timeval tv = {5, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", fx->redis[0].port, tv);
    assert_true(rc && !rc->err);
    static long long before[BULK_USERS];
    static long long after[BULK_USERS];
    bulk_pttl(rc, before);
    for (size_t i = 0; i < BULK_USERS; i++)
        if (before[i] <= 0)
            fail_msg("%s has no expiring hash in Redis (PTTL %lld)", bulk_user(i, NULL), before[i]);
    /* All active: once their activity stamps move on (GW_ONLINE_STAMP_MS), a refresh carries
     * all 300 and renews every expiry. */
    deadline = test_now_ms() + 20000;
    for (;;) {
        assert_int_equal(test_fleet_ping_all(fl, NULL, NULL, GW_WAIT_MS), 0);
        bulk_pttl(rc, after);
        size_t renewed = 0;
        for (size_t i = 0; i < BULK_USERS; i++)
            renewed += after[i] > before[i];
        if (renewed == BULK_USERS)
            break;
        if (test_ms_left(deadline) == 0)
            fail_msg("the refresh renewed %zu of %d users", renewed, BULK_USERS);
    }
    assert_true(gw_metric(a, "herald_redis_refused_commands_total", NULL) == 0.0);
    redisFree(rc);
    test_fleet_free(fl);
    nodes_stop(fx);
}

/* --- idempotency keys ---------------------------------------------------------------------- */

/* PTTL of key on redis (-2: no such key). */
static long long redis_pttl(const test_redis_t *redis, const char *key)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, "PTTL %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long ms = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return ms;
}

/* POST /api/publish with an Idempotency-Key; asserts 200 and that the body has want_in. */
static void admin_publish_key(const test_herald_t *h, const char *chan, const char *body,
                              const char *key, const char *want_in)
{
    char path[128];
    char key_hdr[128];
    snprintf(path, sizeof(path), "/api/publish?channel=%s", chan);
    snprintf(key_hdr, sizeof(key_hdr), "Idempotency-Key: %s", key);
    const char *hdrs[] = {"X-Api-Key: " GW_API_KEY, key_hdr, NULL};
    test_http_resp_t r;
    assert_int_equal(
        test_http_request(h->admin_port, "POST", path, hdrs, body, strlen(body), GW_WAIT_MS, &r),
        0);
    if (r.status != 200 || !r.body || !strstr(r.body, want_in))
        fail_msg("POST %s (key %s): %d %s, want 200 with %s", path, key, r.status,
                 r.body ? r.body : "", want_in);
    test_http_resp_free(&r);
}

/* The key names the publish on every node: the first node's publish is the only one. */
static void test_gw_redis_engine_idempotency_across_nodes(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--idempotency-window", "2s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    test_herald_t *b = node_start(fx, 1, extra);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sa, sb, pa, pb;
    GW_OK(test_client_auth(&sa, a->port, "sa", GW_WAIT_MS), &sa);
    GW_OK(test_client_auth(&sb, b->port, "sb", GW_WAIT_MS), &sb);
    GW_OK(test_client_auth(&pa, a->port, "pa", GW_WAIT_MS), &pa);
    GW_OK(test_client_auth(&pb, b->port, "pb", GW_WAIT_MS), &pb);
    GW_OK(test_client_subscribe(&sa, "idem", NULL, GW_WAIT_MS), &sa);
    GW_OK(test_client_subscribe(&sb, "idem", NULL, GW_WAIT_MS), &sb);

    gw_pub_answer_t first = gw_publish_key(&pa, "idem", "m1", "order-1");
    assert_false(first.is_duplicate);
    assert_int_equal(first.offset, 1);
    /* Retried on the other node, with another payload (the first one stands). */
    gw_pub_answer_t again = gw_publish_key(&pb, "idem", "m1-retry", "order-1");
    assert_true(again.is_duplicate);
    assert_int_equal(again.offset, first.offset);
    assert_string_equal(again.epoch, first.epoch);
    admin_publish_key(b, "idem", "m1-admin", "order-1", "\"duplicate\":true");
    /* The same key on another channel is another publish. */
    gw_pub_answer_t other = gw_publish_key(&pb, "idem2", "o1", "order-1");
    assert_false(other.is_duplicate);
    /* A new key publishes. */
    gw_pub_answer_t next = gw_publish_key(&pb, "idem", "m2", "order-2");
    assert_false(next.is_duplicate);
    assert_int_equal(next.offset, 2);
    expect_push(&sa, "idem", 1, "m1");
    expect_push(&sa, "idem", 2, "m2");
    expect_nothing_more(&sa);
    expect_push(&sb, "idem", 1, "m1");
    expect_push(&sb, "idem", 2, "m2");
    expect_nothing_more(&sb);
    assert_true(gw_metric(b, "herald_publish_duplicates_total", NULL) == 2.0);
    assert_true(gw_metric(a, "herald_publish_duplicates_total", NULL) == 0.0);

    /* The record is in Redis for the window, and a repeat after it publishes again. */
    long long ttl = redis_pttl(&fx->redis[0], "herald:i:idem order-1");
    assert_true(ttl > 0 && ttl <= 2000);
    int64_t deadline = test_now_ms() + 5000;
    while (redis_pttl(&fx->redis[0], "herald:i:idem order-1") != -2 && test_ms_left(deadline) > 0)
        poll(NULL, 0, 50); /* Redis expires the key on its own clock: nothing to await */
    gw_pub_answer_t late = gw_publish_key(&pa, "idem", "m1-late", "order-1");
    assert_false(late.is_duplicate);
    assert_int_equal(late.offset, 3);
    expect_push(&sb, "idem", 3, "m1-late");
    test_client_close(&sa);
    test_client_close(&sb);
    test_client_close(&pa);
    test_client_close(&pb);
    nodes_stop(fx);
}

/* Redis took the publish and answered nothing (stopped): OUTCOME_UNKNOWN, not INTERNAL. The
 * retry with the key, once Redis is back, is delivered once in all: either the first publish
 * ran (the retry says duplicate) or it did not (the retry publishes). A history channel, so
 * that the subscriber on the other node recovers what went by while its link was down. */
static void test_gw_redis_engine_outcome_unknown_then_retry(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-timeout", "500ms", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    test_herald_t *b = node_start(fx, 1, extra);
    await_readyz(a, 200);
    await_readyz(b, 200);
    test_client_t sb, pa;
    GW_OK(test_client_auth(&sb, b->port, "sb", GW_WAIT_MS), &sb);
    GW_OK(test_client_auth(&pa, a->port, "pa", GW_WAIT_MS), &pa);
    uint64_t at = 0;
    GW_OK(test_client_subscribe(&sb, "h:idem", &at, GW_WAIT_MS), &sb);
    assert_int_equal(at, 0);

    test_redis_pause(&fx->redis[0]);
    Herald__Frame *r = gw_publish_key_frame(&pa, "h:idem", "once", "order-9");
    char fs[384];
    if (r->body_case != HERALD__FRAME__BODY_ERROR ||
        r->error->code != HERALD__ERROR__CODE__OUTCOME_UNKNOWN)
        fail_msg("a publish Redis never answered: %s, want Error{OUTCOME_UNKNOWN}",
                 test_frame_str(r, fs, sizeof(fs)));
    proto_frame_free(r);
    test_redis_resume(&fx->redis[0]);
    await_readyz(a, 200);
    await_readyz(b, 200);

    /* The retry, as a client makes it: BUSY (not applied: the link may still be settling
     * after Redis came back) is sent again after its retry_after_ms, with the same key. */
    Herald__Frame *ok = NULL;
    for (int64_t deadline = test_now_ms() + GW_WAIT_MS;;) {
        ok = gw_publish_key_frame(&pa, "h:idem", "once-retry", "order-9");
        if (ok->body_case != HERALD__FRAME__BODY_ERROR ||
            ok->error->code != HERALD__ERROR__CODE__BUSY || test_ms_left(deadline) == 0)
            break;
        poll(NULL, 0, (int)ok->error->retry_after_ms); /* the server's own advice */
        proto_frame_free(ok);
    }
    if (ok->body_case != HERALD__FRAME__BODY_PUBLISH_OK)
        fail_msg("the retry: %s", test_frame_str(ok, fs, sizeof(fs)));
    gw_pub_answer_t retry = {.offset = ok->publish_ok->offset,
                             .is_duplicate = ok->publish_ok->duplicate};
    proto_frame_free(ok);
    fprintf(stderr, "the retry: offset %llu, duplicate %d\n", (unsigned long long)retry.offset,
            retry.is_duplicate);
    assert_int_equal(retry.offset, 1);
    expect_push(&sb, "h:idem", 1, retry.is_duplicate ? "once" : "once-retry");
    expect_nothing_more(&sb);
    test_client_close(&sb);
    test_client_close(&pa);
    nodes_stop(fx);
}

/* A node stopped while Redis hangs with a publish and a presence query of its clients in
 * flight: the closing link answers them as the engine stops, after the IO loops have gone, and
 * those answers must not be posted to the loops (they were, into freed memory: the node
 * crashed at exit, seen once as status 139 right after a Redis stall). */
static void test_gw_redis_engine_stop_with_requests_in_flight(void **state)
{
    fx_t *fx = *state;
    static const char *const extra[] = {"--redis-timeout", "30s", NULL};
    test_herald_t *a = node_start(fx, 0, extra);
    await_readyz(a, 200);
    test_client_t c;
    GW_OK(test_client_auth(&c, a->port, "c", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "hang", NULL, GW_WAIT_MS), &c);
    double before = gw_metric(a, "herald_redis_pending_commands", NULL);
    test_redis_pause(&fx->redis[0]);
    Herald__Frame f;
    Herald__Publish body;
    test_frame_publish(&f, &body, "hang", "x", 1);
    f.id = 9001;
    GW_OK(test_client_send(&c, &f, GW_WAIT_MS), &c);
    Herald__PresenceRequest pr = HERALD__PRESENCE_REQUEST__INIT;
    pr.channel = (char *)"hang";
    Herald__Frame q = HERALD__FRAME__INIT;
    q.id = 9002;
    q.body_case = HERALD__FRAME__BODY_PRESENCE_REQUEST;
    q.presence_request = &pr;
    GW_OK(test_client_send(&c, &q, GW_WAIT_MS), &c);
    /* Both are with Redis once the node counts them in flight (mirrored every 250 ms). */
    int64_t deadline = test_now_ms() + GW_WAIT_MS; /* a figure, not an event: watched */
    while (gw_metric(a, "herald_redis_pending_commands", NULL) < before + 2)
        if (test_ms_left(deadline) == 0 || poll(NULL, 0, 10) < 0)
            fail_msg("the publish and the query never reached Redis");
    test_client_close(&c);
    nodes_stop(fx); /* asserts a clean exit, status 0 */
    test_redis_resume(&fx->redis[0]);
}

int main(void)
{
    if (!test_redis_available()) {
        fprintf(stderr, "redis-server is not installed: scripts/install-deps.sh installs it\n");
        return 1;
    }
    test_raise_nofile(4096);
    if (getenv("TEST_FILTER")) /* one case, e.g. TEST_FILTER='*slow_is_not_dead' */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_cross_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_one_sequence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_recover_on_other_node, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_down_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_kill_and_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_slow_redis_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_rewound_on_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_rewound_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_slow_is_not_dead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_joins_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_two_servers, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_presence_across_nodes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_online_in_bulk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_idempotency_across_nodes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_outcome_unknown_then_retry, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_stop_with_requests_in_flight, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
