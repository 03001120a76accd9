/*
 * test_gw_redis_engine: herald nodes sharing channels through real redis-server processes
 * (engine redis), each node a real herald with 2 IO loops, every process on loopback ports the
 * test picks and stopped by PID (the fixture is redis_engine_fx.h). What happens when Redis
 * fails, stalls or comes back with less is test_gw_redis_outage.c.
 *
 *   - cross-node delivery: a subscriber on node A gets what is published on node B (client and
 *     admin API), on A itself, by a plain Redis PUBLISH (offset 0) and by a backend's FCALL
 *     herald_publish (the next offset), each exactly once;
 *   - one sequence per channel: publishers on both nodes at once, subscribers on both see the
 *     same consecutive offsets;
 *   - recovery across nodes: a client leaves A, messages go by, it comes back to B with its
 *     (epoch, offset) and gets exactly what it missed, then live ones;
 *   - two Redis servers: channels spread over both, delivery unchanged;
 *   - presence, online status and join/leave events seen from every node, and a node killed
 *     with SIGKILL gone from both once its entries expire;
 *   - 300 users connecting and subscribing at once, then active, with a max_pending of 16:
 *     no command refused, every user online and in the channel, every expiry renewed;
 *   - idempotency keys across nodes: a Publish repeating a key on the other node (client frame
 *     or admin API) is answered PublishOk{duplicate} with the first offset, subscribers on both
 *     nodes get the message once, the record lives in Redis for the window and a repeat after
 *     it publishes again.
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
#include "redis_engine_fx.h"

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
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_two_servers, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_presence_across_nodes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_online_in_bulk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_idempotency_across_nodes, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
