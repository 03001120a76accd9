/*
 * test_gw_redis_outage: herald nodes when their Redis fails, stalls, is slow or comes back with
 * less than they delivered: real redis-server processes and herald nodes (2 IO loops each) on
 * loopback ports the test picks, stopped by PID (the fixture is redis_engine_fx.h).
 *
 *   - Redis down at start: the node serves its clients, /readyz says degraded (503), a
 *     subscription is answered BUSY; once Redis is up the node is ready and subscribing works;
 *   - kill -9 of Redis mid-stream and a restart: local delivery goes on meanwhile (offset 0),
 *     the nodes reconnect and resubscribe by themselves, the channel's epoch changes (Redis came
 *     back empty), the node's first publish after it is offset 1 of the new epoch, and the
 *     counts of what was lost are in /metrics;
 *   - a Redis that hangs (SIGSTOP): past redis_max_pending, publishes are answered BUSY;
 *   - Redis holding less of a channel than a node delivered (as after a failover to a replica
 *     that missed the last messages): found when the nodes reconnect, and found live from a
 *     message at an offset already delivered; either way the channel starts a new epoch, the
 *     subscriber's next Push is in it, and recovering from the old epoch says so;
 *   - a slow Redis is not a dead one: while another client keeps it busy for 3 s, a thousand
 *     subscriptions queue for over the 500 ms redis_timeout, yet the node keeps its link and
 *     every one is answered; stopped (SIGSTOP), the same Redis is gone within the timeout;
 *   - joins paced by Redis's replies: 300 subscriptions at once with a max_pending of 16, all
 *     answered SubscribeOk, no command refused;
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
#include "redis_engine_fx.h"

/* --- faults ------------------------------------------------------------------------------- */


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
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_down_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_kill_and_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_slow_redis_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_rewound_on_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_rewound_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_slow_is_not_dead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_joins_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_outcome_unknown_then_retry, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gw_redis_engine_stop_with_requests_in_flight, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
