/*
 * test_gw_recovery: channel history and Subscribe{recover} through a real herald with 4 IO
 * loops, so subscribers, publishers and channel owners sit on different loops.
 *
 *   - recover while publishing: a subscriber leaves, a publisher thread keeps publishing (it
 *     never pauses), the subscriber comes back with its last (epoch, offset) once 500 messages
 *     went by, and must get every missed message and then the live ones: consecutive offsets,
 *     each payload the publisher's, no gap, no duplicate, up to the publisher's last message;
 *   - bounds: past the count bound, or with another epoch, SubscribeOk says recovered = false
 *     with the live offset; within it, exactly the missed messages follow; a channel without
 *     history is not recoverable (yet a client that missed nothing is told so);
 *   - a channel keeps its history with nobody subscribed; messages age out (awaited through
 *     herald_history_messages, not slept on) and the state goes with them;
 *   - the memory cap evicts, and a recovery that would pass the output limit is refused;
 *   - an Unsubscribe pipelined behind a Subscribe{recover} withdraws it (CANCELLED), and a new
 *     Subscribe{recover} right behind gets its own, exact answer;
 *   - a restarted herald answers with a new epoch.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "proto_frame.h"

#define RULES "h:*=5000/5m,small:*=10,aged:*=100/1s,big:*=1000"
#define MISSED 500
/* The publisher's bounds, whatever happens to the test. */
#define PUB_MAX 200000
#define PUB_MAX_MS 60000
#define PUB_BURST 32
/* Subscribers that keep the channel live on every loop (4), so a recovering subscriber waits
 * for its history answer on a live entry, with messages passing it meanwhile. */
#define N_KEEPERS 8

/* high_water is also the largest frame a client may send (herald wants max_frame <= it). */
static test_herald_t *start_with(void **state, const char *max_bytes, const char *high_water)
{
    return gw_start(state, "--insecure", "--io-threads", "4", "--publish-rate", "0", "--api-key",
                    GW_API_KEY, "--history-rules", RULES, "--history-max-bytes", max_bytes,
                    "--output-high-water", high_water, "--max-frame", high_water, NULL);
}

static test_herald_t *start(void **state)
{
    return start_with(state, "64MiB", "1MiB");
}

static void client(test_client_t *c, const test_herald_t *h, const char *user)
{
    GW_OK(test_client_auth(c, h->port, user, GW_WAIT_MS), c);
}

/* Reads Pushes of channel with offsets first..last. */
static void expect_run(test_client_t *c, const char *channel, uint64_t first, uint64_t last)
{
    for (uint64_t o = first; o <= last; o++) {
        Herald__Frame *f = NULL;
        GW_OK(test_client_expect_push(c, channel, o, &f, GW_WAIT_MS), c);
        proto_frame_free(f);
    }
}

/* Nothing is queued for c ahead of a Pong. */
static void expect_nothing_more(test_client_t *c)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("unexpected %s", test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

static void publish_n(test_client_t *c, const char *channel, int n, uint64_t *last, char *epoch)
{
    for (int i = 0; i < n; i++) {
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "m%d", i);
        GW_OK(test_client_publish_ex(c, channel, payload, (size_t)len, last, epoch, GW_WAIT_MS), c);
    }
}

/* --- recovery while publishing ------------------------------------------------------------ */

typedef struct publisher_s {
    uint16_t port;
    const char *channel;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t last_offset; /* guarded by mu */
    uint64_t first_offset;
    int err;
    atomic_bool is_stop;
} publisher_t;

/* Sends PUB_BURST publishes in one write, payload "<offset>" each, and reads their PublishOks:
 * returns 0 with the last offset in *last, or a negative errno (-EPROTO: an offset was not the
 * one its payload promised). */
static int publisher_burst(test_client_t *c, const char *channel, uint64_t next, uint64_t *last)
{
    nl_buf_t out;
    nl_buf_init(&out, 0);
    for (int i = 0; i < PUB_BURST; i++) {
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "%llu", (unsigned long long)(next + i));
        Herald__Frame f;
        Herald__Publish body;
        test_frame_publish(&f, &body, channel, payload, (size_t)len);
        f.id = next + i;
        (void)proto_frame_append(&out, &f);
    }
    int rc = test_client_send_raw(c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS);
    nl_buf_deinit(&out);
    for (int i = 0; rc == 0 && i < PUB_BURST; i++) {
        Herald__Frame *r = NULL;
        rc = test_client_recv(c, &r, GW_WAIT_MS);
        if (rc == 1 && r->body_case == HERALD__FRAME__BODY_PUBLISH_OK && r->id == next + i &&
            r->publish_ok->offset == next + i)
            rc = 0;
        else
            rc = rc == 1 ? -EPROTO : rc < 0 ? rc : -ECONNRESET;
        if (r)
            proto_frame_free(r);
    }
    *last = next + PUB_BURST - 1;
    return rc;
}

/* Publishes until told to stop (or its bounds), in pipelined bursts so that messages are
 * always in flight, each payload naming the offset it must get, so a subscriber can check
 * every one. */
static void *publisher_main(void *arg)
{
    publisher_t *p = arg;
    test_client_t c;
    int rc = test_client_auth(&c, p->port, "publisher", GW_WAIT_MS);
    int64_t deadline = test_now_ms() + PUB_MAX_MS;
    uint64_t next = 1; /* the subscribers made the channel's state: offsets start at 1 */
    for (int i = 0; rc == 0 && i < PUB_MAX && !atomic_load(&p->is_stop); i += PUB_BURST) {
        if (test_ms_left(deadline) == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        uint64_t off = 0;
        rc = publisher_burst(&c, p->channel, next, &off);
        next = off + 1;
        pthread_mutex_lock(&p->mu);
        p->last_offset = off;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    test_client_close(&c);
    pthread_mutex_lock(&p->mu);
    p->err = rc;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Waits until the publisher's last offset reaches at least want; returns it. */
static uint64_t publisher_wait(publisher_t *p, uint64_t want)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
    pthread_mutex_lock(&p->mu);
    while (p->last_offset < want && p->err == 0)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &deadline) == ETIMEDOUT)
            break;
    uint64_t last = p->last_offset;
    int err = p->err;
    pthread_mutex_unlock(&p->mu);
    if (err != 0)
        fail_msg("the publisher failed: %d", err);
    if (last < want)
        fail_msg("the publisher reached offset %llu, not %llu", (unsigned long long)last,
                 (unsigned long long)want);
    return last;
}

/* Reads Pushes from first on, each with the payload the publisher gave its offset, until the
 * offset last (inclusive). */
static void expect_published(test_client_t *c, const char *channel, uint64_t first, uint64_t last)
{
    for (uint64_t o = first; o <= last; o++) {
        Herald__Frame *f = NULL;
        GW_OK(test_client_expect_push(c, channel, o, &f, GW_WAIT_MS), c);
        char want[32];
        int len = snprintf(want, sizeof(want), "%llu", (unsigned long long)o);
        const ProtobufCBinaryData *pl = &f->push->payload;
        if (pl->len != (size_t)len || memcmp(pl->data, want, (size_t)len) != 0)
            fail_msg("offset %llu carries '%.*s'", (unsigned long long)o, (int)pl->len,
                     (const char *)pl->data);
        proto_frame_free(f);
    }
}

static void test_gw_recovery_recover_while_publishing(void **state)
{
    test_herald_t *h = start(state);
    const char *chan = "h:live";
    static test_client_t keepers[N_KEEPERS];
    for (int i = 0; i < N_KEEPERS; i++) {
        client(&keepers[i], h, "keeper");
        GW_OK(test_client_subscribe(&keepers[i], chan, NULL, GW_WAIT_MS), &keepers[i]);
        /* They never read: their socket buffers fill and herald drops their Pushes (the drop
         * policy), which does not matter here. */
    }
    test_client_t sub;
    client(&sub, h, "sub");
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&sub, chan, NULL, 0, &ok, GW_WAIT_MS), &sub);
    assert_true(ok.is_recoverable);
    assert_false(ok.is_recovered);
    assert_int_equal(ok.offset, 0);

    publisher_t p = {.port = h->port, .channel = chan};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    assert_int_equal(pthread_create(&p.thread, NULL, publisher_main, &p), 0);

    /* The subscriber reads a while, then goes away at an offset it knows. */
    uint64_t seen = publisher_wait(&p, 50);
    expect_published(&sub, chan, 1, seen);
    test_client_close(&sub);

    /* Publishing goes on; the subscriber comes back once MISSED more went by. */
    publisher_wait(&p, seen + MISSED);
    client(&sub, h, "sub");
    GW_OK(test_client_subscribe_from(&sub, chan, ok.epoch, seen, &ok, GW_WAIT_MS), &sub);
    assert_true(ok.is_recovered);
    assert_int_equal(ok.offset, seen);

    /* Everything after seen: the missed ones and then live ones, while publishing goes on. */
    uint64_t now = publisher_wait(&p, seen + MISSED + 200);
    expect_published(&sub, chan, seen + 1, now);
    atomic_store(&p.is_stop, true);
    assert_int_equal(pthread_join(p.thread, NULL), 0);
    assert_int_equal(p.err, 0);
    expect_published(&sub, chan, now + 1, p.last_offset);
    expect_nothing_more(&sub);
    assert_true(gw_metric(h, "herald_recoveries_total", "result=\"recovered\"") >= 1);
    test_client_close(&sub);
    for (int i = 0; i < N_KEEPERS; i++)
        test_client_close(&keepers[i]);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    gw_stop(state);
}

/* --- bounds -------------------------------------------------------------------------------- */

static void test_gw_recovery_bounds(void **state)
{
    test_herald_t *h = start(state);
    test_client_t pub;
    test_client_t c;
    client(&pub, h, "pub");
    client(&c, h, "c");
    uint64_t last = 0;
    char epoch[17];
    publish_n(&pub, "small:x", 50, &last, epoch);
    assert_int_equal(last, 50);

    /* Within the last 10: exactly the missed ones. */
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "small:x", epoch, 43, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    assert_int_equal(ok.offset, 43);
    assert_string_equal(ok.epoch, epoch);
    expect_run(&c, "small:x", 44, 50);
    expect_nothing_more(&c);
    GW_OK(test_client_unsubscribe(&c, "small:x", GW_WAIT_MS), &c);

    /* Past the count bound: cannot recover; the live offset to continue from. */
    GW_OK(test_client_subscribe_from(&c, "small:x", epoch, 39, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_true(ok.is_recoverable);
    assert_int_equal(ok.offset, 50);
    expect_nothing_more(&c);
    GW_OK(test_client_publish(&pub, "small:x", "n", 1, &last, GW_WAIT_MS), &pub);
    expect_run(&c, "small:x", 51, 51);
    GW_OK(test_client_unsubscribe(&c, "small:x", GW_WAIT_MS), &c);

    /* Another epoch, and an epoch that is not one. */
    GW_OK(test_client_subscribe_from(&c, "small:x", "0123456789abcdef", 45, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_int_equal(ok.offset, 51);
    GW_OK(test_client_unsubscribe(&c, "small:x", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe_from(&c, "small:x", "nope", 45, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    GW_OK(test_client_unsubscribe(&c, "small:x", GW_WAIT_MS), &c);

    /* While another subscriber keeps the channel live on this loop: the shortcuts. */
    test_client_t keep;
    client(&keep, h, "keep");
    GW_OK(test_client_subscribe_from(&keep, "small:x", NULL, 0, &ok, GW_WAIT_MS), &keep);
    GW_OK(test_client_subscribe_from(&c, "small:x", epoch, 51, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    assert_int_equal(ok.offset, 51);
    GW_OK(test_client_unsubscribe(&c, "small:x", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe_from(&c, "small:x", epoch, 60, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered); /* an offset from the future */
    assert_int_equal(ok.offset, 51);
    test_client_close(&keep);

    /* A channel without history: not recoverable, unless nothing was missed. */
    test_client_t d;
    client(&d, h, "d");
    GW_OK(test_client_subscribe_from(&d, "plain", NULL, 0, &ok, GW_WAIT_MS), &d);
    assert_false(ok.is_recoverable);
    GW_OK(test_client_publish_ex(&pub, "plain", "x", 1, &last, epoch, GW_WAIT_MS), &pub);
    expect_run(&d, "plain", last, last);
    GW_OK(test_client_subscribe_from(&c, "plain", epoch, last, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    GW_OK(test_client_unsubscribe(&c, "plain", GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe_from(&c, "plain", epoch, last - 1, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_false(ok.is_recoverable);
    assert_int_equal(ok.offset, last);
    assert_true(gw_metric(h, "herald_recoveries_total", "result=\"no_history\"") >= 1);
    assert_true(gw_metric(h, "herald_recoveries_total", "result=\"not_covered\"") >= 1);
    assert_true(gw_metric(h, "herald_recoveries_total", "result=\"epoch_changed\"") >= 1);
    test_client_close(&d);
    test_client_close(&c);
    test_client_close(&pub);
    gw_stop(state);
}

/* --- lifetime ------------------------------------------------------------------------------ */

/* Waits until the gauge family falls to want or below. */
static void await_metric_at_most(const test_herald_t *h, const char *family, double want)
{
    int64_t deadline = test_now_ms() + 15000;
    double v;
    while ((v = gw_metric(h, family, NULL)) > want) {
        if (test_ms_left(deadline) == 0)
            fail_msg("%s stayed at %g, want <= %g", family, v, want);
        /* Each scrape is a round trip through every loop; that is the pace of this wait. */
    }
}

static void test_gw_recovery_without_subscribers_and_ageing(void **state)
{
    test_herald_t *h = start(state);
    test_client_t pub;
    test_client_t c;
    client(&pub, h, "pub");
    client(&c, h, "c");
    uint64_t last = 0;
    char epoch[17];
    /* Nobody subscribes: the channel keeps its messages all the same. */
    publish_n(&pub, "h:quiet", 20, &last, epoch);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "h:quiet", epoch, 0, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    assert_int_equal(ok.offset, 0);
    expect_run(&c, "h:quiet", 1, 20);
    expect_nothing_more(&c);
    assert_int_equal(gw_metric(h, "herald_history_messages", NULL), 20);

    /* A second's age bound: the messages go, and the state with them (nobody subscribes). */
    publish_n(&pub, "aged:x", 5, &last, epoch);
    assert_int_equal(gw_metric(h, "herald_history_messages", NULL), 25);
    await_metric_at_most(h, "herald_history_messages", 20);
    assert_true(gw_metric(h, "herald_history_evicted_total", "reason=\"age\"") >= 5);
    await_metric_at_most(h, "herald_history_channels", 1);
    GW_OK(test_client_subscribe_from(&c, "aged:x", epoch, 2, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_string_not_equal(ok.epoch, epoch); /* the offsets started over */
    assert_int_equal(ok.offset, 0);
    test_client_close(&c);
    test_client_close(&pub);
    gw_stop(state);
}

static void test_gw_recovery_memory_and_output_bounds(void **state)
{
    /* 256 KiB over 4 loops: 64 KiB per loop, about 30 messages of 2 KiB; output 16 KiB. */
    test_herald_t *h = start_with(state, "256KiB", "16KiB");
    test_client_t pub;
    test_client_t c;
    client(&pub, h, "pub");
    client(&c, h, "c");
    char payload[2048];
    memset(payload, 'b', sizeof(payload));
    uint64_t last = 0;
    char epoch[17];
    for (int i = 0; i < 100; i++)
        GW_OK(test_client_publish_ex(&pub, "big:x", payload, sizeof(payload), &last, epoch,
                                     GW_WAIT_MS),
              &pub);
    assert_true(gw_metric(h, "herald_history_bytes", NULL) <=
                gw_metric(h, "herald_history_max_bytes", NULL));
    assert_true(gw_metric(h, "herald_history_evicted_total", "reason=\"memory\"") >= 60);
    double kept = gw_metric(h, "herald_history_messages", NULL);
    assert_true(kept >= 8 && kept <= 40);
    test_sub_ok_t ok;
    /* The oldest are gone. */
    GW_OK(test_client_subscribe_from(&c, "big:x", epoch, 1, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    GW_OK(test_client_unsubscribe(&c, "big:x", GW_WAIT_MS), &c);
    /* Kept, but 16 KiB of output cannot take 10 of them. */
    GW_OK(test_client_subscribe_from(&c, "big:x", epoch, last - 10, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_int_equal(ok.offset, last);
    GW_OK(test_client_unsubscribe(&c, "big:x", GW_WAIT_MS), &c);
    /* Three fit. */
    GW_OK(test_client_subscribe_from(&c, "big:x", epoch, last - 3, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    expect_run(&c, "big:x", last - 2, last);
    assert_true(gw_metric(h, "herald_recoveries_total", "result=\"too_large\"") >= 1);
    test_client_close(&c);
    test_client_close(&pub);
    gw_stop(state);
}

/* --- withdrawn recoveries ------------------------------------------------------------------ */

static void test_gw_recovery_withdrawn_recovery(void **state)
{
    test_herald_t *h = start(state);
    test_client_t pub;
    test_client_t c;
    client(&pub, h, "pub");
    client(&c, h, "c");
    uint64_t last = 0;
    char epoch[17];
    publish_n(&pub, "h:w", 30, &last, epoch);

    /* Subscribe{recover from 10}, Unsubscribe, Subscribe{recover from 25}, in one write: the
     * first is withdrawn before its answer can arrive, whose answer must then be dropped. */
    Herald__Frame f[3];
    Herald__Subscribe s1, s3;
    Herald__Unsubscribe u2;
    test_frame_subscribe(&f[0], &s1, "h:w");
    s1.recover = true;
    s1.epoch = epoch;
    s1.offset = 10;
    f[0].id = 101;
    test_frame_unsubscribe(&f[1], &u2, "h:w");
    f[1].id = 102;
    test_frame_subscribe(&f[2], &s3, "h:w");
    s3.recover = true;
    s3.epoch = epoch;
    s3.offset = 25;
    f[2].id = 103;
    nl_buf_t out;
    nl_buf_init(&out, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(proto_frame_append(&out, &f[i]), 0);
    GW_OK(test_client_send_raw(&c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), &c);
    nl_buf_deinit(&out);

    Herald__Frame *r = NULL;
    assert_int_equal(test_client_recv(&c, &r, GW_WAIT_MS), 1);
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_ERROR);
    assert_int_equal(r->id, 101);
    assert_int_equal(r->error->code, HERALD__ERROR__CODE__CANCELLED);
    proto_frame_free(r);
    assert_int_equal(test_client_recv(&c, &r, GW_WAIT_MS), 1);
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_UNSUBSCRIBE_OK);
    assert_int_equal(r->id, 102);
    proto_frame_free(r);
    assert_int_equal(test_client_recv(&c, &r, GW_WAIT_MS), 1);
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_SUBSCRIBE_OK);
    assert_int_equal(r->id, 103);
    assert_true(r->subscribe_ok->recovered);
    assert_int_equal(r->subscribe_ok->offset, 25);
    proto_frame_free(r);
    expect_run(&c, "h:w", 26, 30);
    expect_nothing_more(&c);
    /* Live messages follow. */
    GW_OK(test_client_publish(&pub, "h:w", "z", 1, &last, GW_WAIT_MS), &pub);
    expect_run(&c, "h:w", 31, 31);
    test_client_close(&c);
    test_client_close(&pub);
    gw_stop(state);
}

/* --- epochs -------------------------------------------------------------------------------- */

static void test_gw_recovery_restart_changes_epoch(void **state)
{
    test_herald_t *h = start(state);
    test_client_t pub;
    client(&pub, h, "pub");
    uint64_t last = 0;
    char epoch1[17];
    publish_n(&pub, "h:e", 5, &last, epoch1);
    test_client_close(&pub);
    gw_stop(state);

    h = start(state);
    test_client_t c;
    client(&c, h, "c");
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "h:e", epoch1, last, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_true(ok.is_recoverable);
    assert_int_equal(strlen(ok.epoch), 16);
    assert_string_not_equal(ok.epoch, epoch1);
    assert_int_equal(ok.offset, 0);
    test_client_close(&c);
    gw_stop(state);
}

int main(void)
{
    test_raise_nofile(4096);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_recovery_recover_while_publishing, gw_teardown),
        cmocka_unit_test_teardown(test_gw_recovery_bounds, gw_teardown),
        cmocka_unit_test_teardown(test_gw_recovery_without_subscribers_and_ageing, gw_teardown),
        cmocka_unit_test_teardown(test_gw_recovery_memory_and_output_bounds, gw_teardown),
        cmocka_unit_test_teardown(test_gw_recovery_withdrawn_recovery, gw_teardown),
        cmocka_unit_test_teardown(test_gw_recovery_restart_changes_epoch, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
