/*
 * test_gw_idempotency: Publish's idempotency key through a real herald (memory engine, 2 IO
 * loops, the publisher on one loop and the channel's owner possibly on the other):
 *   - a Publish repeating a key is answered PublishOk{duplicate} with the first offset and
 *     epoch, and its subscriber receives the message once (proven by a Ping answered with
 *     nothing queued ahead of it);
 *   - the key is per channel: the same key on another channel publishes;
 *   - the admin API's Idempotency-Key header shares the records with the client frame;
 *   - a key over 64 bytes is a protocol error (Error{BAD_REQUEST}, then the close);
 *   - [limits] idempotency_keys bounds the records (the oldest forgotten, counted in
 *     herald_publish_idempotency_evicted_total) and idempotency_window ends a record: a repeat
 *     after it publishes again;
 *   - herald_publish_duplicates_total counts the answers given from records.
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

#include "gwtest_util.h"
#include "proto_frame.h"

#define CHANNELS "news,other"

static test_herald_t *start(void **state, const char *window, const char *keys)
{
    return gw_start(state, "--secret", GW_SECRET, "--io-threads", "2", "--publish-rate", "0",
                    "--api-key", GW_API_KEY, "--idempotency-window", window, "--idempotency-keys",
                    keys, NULL);
}

static void connect_as(const test_herald_t *h, test_client_t *c, const char *user)
{
    char tok[GW_TOKEN_CAP];
    gw_token(tok, user, CHANNELS, 3600, 0, GW_SECRET);
    GW_OK(test_client_auth(c, h->port, tok, GW_WAIT_MS), c);
}

/* Asserts that c's next frame is chan's Push at offset with payload. */
static void expect_push(test_client_t *c, const char *chan, uint64_t offset, const char *payload)
{
    Herald__Frame *f = NULL;
    GW_OK(test_client_expect_push(c, chan, offset, &f, GW_WAIT_MS), c);
    assert_int_equal(f->push->payload.len, strlen(payload));
    assert_memory_equal(f->push->payload.data, payload, strlen(payload));
    proto_frame_free(f);
}

/* Asserts that nothing is queued for c ahead of the answer to a Ping. */
static void expect_nothing_more(test_client_t *c)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("an unexpected delivery: %s", test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

/* POST /api/publish?channel=chan with an Idempotency-Key; returns the status, the body into
 * body (cap bytes). */
static int admin_publish(const test_herald_t *h, const char *chan, const char *payload,
                         const char *key, char *body, size_t cap)
{
    char path[128];
    char key_hdr[256];
    snprintf(path, sizeof(path), "/api/publish?channel=%s", chan);
    snprintf(key_hdr, sizeof(key_hdr), "Idempotency-Key: %s", key);
    const char *hdrs[] = {"X-Api-Key: " GW_API_KEY, key_hdr, NULL};
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "POST", path, hdrs, payload, strlen(payload),
                               GW_WAIT_MS, &r);
    assert_int_equal(rc, 0);
    snprintf(body, cap, "%s", r.body ? r.body : "");
    int status = r.status;
    test_http_resp_free(&r);
    return status;
}

static void test_gw_idempotency_repeat_is_answered_not_published(void **state)
{
    test_herald_t *h = start(state, "60s", "1000");
    static test_client_t pub, pub2, sub;
    connect_as(h, &pub, "pub");
    connect_as(h, &pub2, "pub2");
    connect_as(h, &sub, "sub");
    uint64_t base = 0;
    uint64_t other_base = 0;
    GW_OK(test_client_subscribe(&sub, "news", &base, GW_WAIT_MS), &sub);
    GW_OK(test_client_subscribe(&sub, "other", &other_base, GW_WAIT_MS), &sub);

    gw_pub_answer_t first = gw_publish_key(&pub, "news", "hello", "order-17");
    assert_false(first.is_duplicate);
    assert_int_equal(first.offset, base + 1);
    gw_pub_answer_t again = gw_publish_key(&pub, "news", "hello", "order-17");
    assert_true(again.is_duplicate);
    assert_int_equal(again.offset, first.offset);
    assert_string_equal(again.epoch, first.epoch);
    /* Another connection's retry is a retry all the same: the key belongs to the channel. */
    gw_pub_answer_t third = gw_publish_key(&pub2, "news", "hello", "order-17");
    assert_true(third.is_duplicate);
    assert_int_equal(third.offset, first.offset);
    expect_push(&sub, "news", first.offset, "hello");
    expect_nothing_more(&sub);

    /* A new key publishes; so does every Publish without one. */
    gw_pub_answer_t next = gw_publish_key(&pub, "news", "next", "order-18");
    assert_false(next.is_duplicate);
    assert_int_equal(next.offset, first.offset + 1);
    gw_pub_answer_t plain = gw_publish_key(&pub, "news", "plain", "");
    gw_pub_answer_t plain2 = gw_publish_key(&pub, "news", "plain", "");
    assert_false(plain.is_duplicate || plain2.is_duplicate);
    assert_int_equal(plain.offset, next.offset + 1);
    assert_int_equal(plain2.offset, plain.offset + 1);
    /* The same key on another channel is another record. */
    gw_pub_answer_t other = gw_publish_key(&pub, "other", "o", "order-17");
    assert_false(other.is_duplicate);
    assert_int_equal(other.offset, other_base + 1);
    expect_push(&sub, "news", next.offset, "next");
    expect_push(&sub, "news", plain.offset, "plain");
    expect_push(&sub, "news", plain2.offset, "plain");
    expect_push(&sub, "other", other.offset, "o");
    expect_nothing_more(&sub);
    gw_metric_await(h, "herald_publish_duplicates_total", NULL, 2);

    /* The admin API's Idempotency-Key reaches the same records, and its answer says so. */
    char body[256];
    char want[128];
    assert_int_equal(admin_publish(h, "news", "hello", "order-17", body, sizeof(body)), 200);
    snprintf(want, sizeof(want), "{\"offset\":%llu,\"epoch\":\"%s\",\"duplicate\":true}",
             (unsigned long long)first.offset, first.epoch);
    assert_string_equal(body, want);
    assert_int_equal(admin_publish(h, "news", "h1", "http-1", body, sizeof(body)), 200);
    assert_null(strstr(body, "duplicate"));
    assert_int_equal(admin_publish(h, "news", "h1", "http-1", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"duplicate\":true"));
    gw_pub_answer_t from_client = gw_publish_key(&pub, "news", "h1", "http-1");
    assert_true(from_client.is_duplicate);
    assert_int_equal(from_client.offset, plain2.offset + 1);
    expect_push(&sub, "news", plain2.offset + 1, "h1");
    expect_nothing_more(&sub);
    gw_metric_await(h, "herald_publish_duplicates_total", NULL, 5);

    /* Over 64 bytes: 400 from the admin API, a protocol error for a client. */
    char long_key[66];
    memset(long_key, 'k', 65);
    long_key[65] = '\0';
    assert_int_equal(admin_publish(h, "news", "x", long_key, body, sizeof(body)), 400);
    Herald__Publish p = HERALD__PUBLISH__INIT;
    p.channel = (char *)"news";
    p.idempotency_key = long_key;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = ++pub.next_id;
    f.body_case = HERALD__FRAME__BODY_PUBLISH;
    f.publish = &p;
    GW_OK(test_client_send(&pub, &f, GW_WAIT_MS), &pub);
    int disconnect = -1;
    int error = -1;
    GW_OK(test_client_expect_close(&pub, false, &disconnect, &error, GW_WAIT_MS), &pub);
    assert_int_equal(error, HERALD__ERROR__CODE__BAD_REQUEST);
    assert_int_equal(disconnect, HERALD__DISCONNECT__CODE__PROTOCOL_ERROR);
    expect_nothing_more(&sub);
    test_client_close(&pub);
    test_client_close(&pub2);
    test_client_close(&sub);
    gw_stop(state);
}

/* idempotency_keys 4 over 2 loops: 2 records per shard. Ten keys on one channel (one shard)
 * leave only the last two; the first is forgotten and publishes again. */
static void test_gw_idempotency_keys_bounded(void **state)
{
    test_herald_t *h = start(state, "60s", "4");
    static test_client_t pub, sub;
    connect_as(h, &pub, "pub");
    connect_as(h, &sub, "sub"); /* a subscribed channel keeps its offsets */
    GW_OK(test_client_subscribe(&sub, "news", NULL, GW_WAIT_MS), &sub);
    gw_pub_answer_t a[10];
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        a[i] = gw_publish_key(&pub, "news", "x", key);
        assert_false(a[i].is_duplicate);
    }
    gw_metric_await(h, "herald_publish_idempotency_evicted_total", NULL, 8);
    assert_true(gw_metric(h, "herald_publish_idempotency_keys", NULL) <= 4);
    gw_pub_answer_t last = gw_publish_key(&pub, "news", "x", "k9");
    assert_true(last.is_duplicate);
    assert_int_equal(last.offset, a[9].offset);
    gw_pub_answer_t forgotten = gw_publish_key(&pub, "news", "x", "k0");
    assert_false(forgotten.is_duplicate);
    assert_int_equal(forgotten.offset, a[9].offset + 1);
    test_client_close(&pub);
    test_client_close(&sub);
    gw_stop(state);
}

/* idempotency_window 1 s: a repeat inside it is a duplicate; once it has passed, the same key
 * publishes again. The window is time itself, so the test waits for time to pass, by polling
 * (each poll is a retry that must keep the first offset until the one that publishes). */
static void test_gw_idempotency_window_ends(void **state)
{
    test_herald_t *h = start(state, "1s", "1000");
    static test_client_t pub, sub;
    connect_as(h, &pub, "pub");
    connect_as(h, &sub, "sub");
    GW_OK(test_client_subscribe(&sub, "news", NULL, GW_WAIT_MS), &sub);
    int64_t t0 = test_now_ms();
    gw_pub_answer_t first = gw_publish_key(&pub, "news", "x", "w");
    gw_pub_answer_t again = gw_publish_key(&pub, "news", "x", "w");
    int64_t t1 = test_now_ms();
    if (t1 - t0 < 1000) {
        assert_true(again.is_duplicate);
        assert_int_equal(again.offset, first.offset);
    }
    gw_pub_answer_t later;
    int64_t deadline = t0 + GW_WAIT_MS;
    do {
        GW_OK(test_client_ping(&pub, GW_WAIT_MS), &pub);
        later = gw_publish_key(&pub, "news", "x", "w");
        assert_int_equal(later.offset, first.offset + !later.is_duplicate);
    } while (later.is_duplicate && test_now_ms() < deadline);
    int64_t t2 = test_now_ms();
    assert_false(later.is_duplicate);
    assert_true(later.offset > first.offset);
    /* Not before the window ended (measured from before the first publish was sent). */
    assert_true(t2 - t0 >= 1000);
    printf("window 1 s: the key published again %lld ms after its first use\n",
           (long long)(t2 - t0));
    test_client_close(&pub);
    test_client_close(&sub);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_idempotency_repeat_is_answered_not_published,
                                  gw_teardown),
        cmocka_unit_test_teardown(test_gw_idempotency_keys_bounded, gw_teardown),
        cmocka_unit_test_teardown(test_gw_idempotency_window_ends, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
