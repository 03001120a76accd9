/*
 * test_gw_broadcast: 10,000 connections subscribed to one channel of a real herald, and a
 * broadcast of 1,000 messages published by one more client. Every connection must receive
 * every message exactly once and in order: offsets first+1 .. first+1000 with no gap and no
 * duplicate, each carrying the payload published at that offset. Afterwards a Ping on every
 * connection is answered by a Pong with nothing in front of it, so nothing extra was queued.
 *
 * The publisher keeps at most WINDOW messages ahead of the slowest delivery in aggregate
 * (published * N - delivered < WINDOW * N), so the subscribers keep up and no slow-consumer
 * policy comes into play; the high-water mark is raised as well, as a second guard.
 *
 * Sizes: GWTEST_BCAST_CONNS and GWTEST_BCAST_MSGS override 10000 and 1000 (for a quick run or
 * a slow sanitizer build). The test process holds N + 1 sockets and herald N + a few, each
 * under the 20,000 descriptors one process may have; RLIMIT_NOFILE is raised to fit.
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

#define DEFAULT_CONNS 10000
#define DEFAULT_MSGS 1000
#define WINDOW 32
#define PAYLOAD_BYTES 32
#define DEADLINE_MS 240000
#define SETUP_MS 120000
/* Subscribers ping like real clients (ConnectOk's interval is 25 s by default), or a slow
 * (sanitizer) run would outlast herald's idle timeout. */
#define PING_EVERY_MS 10000
#define PING_ID 0xffffffu

typedef struct bcast_s {
    size_t n;
    uint64_t msgs;
    uint64_t base;      /* the channel's offset when everyone had subscribed */
    uint64_t *next;     /* per connection: the offset expected next */
    uint64_t delivered; /* pushes received in order, all connections */
    uint64_t bad;       /* anything else */
    uint64_t extra;     /* frames in front of the final Pongs */
    uint64_t pongs_due; /* keep-alive Pings not yet answered, all connections */
    char what[512];
} bcast_t;

static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? (size_t)strtoull(v, NULL, 10) : dflt;
}

static void note_bad(bcast_t *b, size_t i, const Herald__Frame *f, const char *why)
{
    if (b->bad++ == 0) {
        char fs[384];
        snprintf(b->what, sizeof(b->what), "connection %zu expected offset %llu: %s: %s", i,
                 (unsigned long long)b->next[i], why,
                 f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
    }
}

static void on_frame(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    bcast_t *b = arg;
    (void)fl;
    if (f && f->body_case == HERALD__FRAME__BODY_PONG && f->id == PING_ID) {
        if (b->pongs_due == 0)
            note_bad(b, i, f, "a keep-alive Pong nobody asked for");
        else
            b->pongs_due--;
        return;
    }
    if (!f || f->body_case != HERALD__FRAME__BODY_PUSH || strcmp(f->push->channel, "bcast")) {
        note_bad(b, i, f, "not a push on bcast");
        return;
    }
    if (f->push->offset != b->next[i] || b->next[i] > b->base + b->msgs) {
        note_bad(b, i, f, "out of sequence");
        return;
    }
    uint64_t seq = 0;
    if (f->push->payload.len != PAYLOAD_BYTES ||
        (memcpy(&seq, f->push->payload.data, sizeof(seq)), seq != b->next[i] - b->base)) {
        note_bad(b, i, f, "wrong payload");
        return;
    }
    b->next[i]++;
    b->delivered++;
}

static void on_extra(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    bcast_t *b = arg;
    (void)fl;
    if (b->extra++ == 0) {
        char fs[384];
        snprintf(b->what, sizeof(b->what), "connection %zu got %s after the broadcast", i,
                 f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
    }
}

/* Queues a keep-alive Ping on every connection; on_frame counts their Pongs off. */
static void ping_all_async(test_fleet_t *fl, bcast_t *b)
{
    Herald__Frame f;
    Herald__Ping body;
    test_frame_ping(&f, &body);
    f.id = PING_ID;
    for (size_t i = 0; i < test_fleet_size(fl); i++)
        if (test_fleet_send(fl, i, &f) == 0)
            b->pongs_due++;
}

/* Sends Publish number seq (1-based) with a request id equal to seq. */
static void publish(test_client_t *pub, uint64_t seq)
{
    char payload[PAYLOAD_BYTES] = {0};
    memcpy(payload, &seq, sizeof(seq));
    Herald__Frame f;
    Herald__Publish body;
    test_frame_publish(&f, &body, "bcast", payload, sizeof(payload));
    f.id = seq;
    GW_OK(test_client_send(pub, &f, GW_WAIT_MS), pub);
}

/* Reads the publisher's PublishOk answers: one per message, offsets base+1.. in id order. */
static void check_publish_answers(test_client_t *pub, const bcast_t *b)
{
    for (uint64_t k = 0; k < b->msgs; k++) {
        Herald__Frame *r = NULL;
        assert_int_equal(test_client_recv(pub, &r, GW_WAIT_MS), 1);
        char fs[384];
        if (r->body_case != HERALD__FRAME__BODY_PUBLISH_OK || r->id < 1 || r->id > b->msgs ||
            r->publish_ok->offset != b->base + r->id)
            fail_msg("publish answer: %s", test_frame_str(r, fs, sizeof(fs)));
        proto_frame_free(r);
    }
}

static void test_gw_broadcast_10k(void **state)
{
    bcast_t b = {.n = env_size("GWTEST_BCAST_CONNS", DEFAULT_CONNS),
                 .msgs = env_size("GWTEST_BCAST_MSGS", DEFAULT_MSGS)};
    long nofile = test_raise_nofile((rlim_t)b.n + 64);
    if (nofile < (long)b.n + 64)
        fail_msg("RLIMIT_NOFILE %ld is too low for %zu connections", nofile, b.n);
    /* Each connection sends its Connect as soon as it is open; the generous connect timeout
     * is for sanitizer builds, where 10,000 connects take their time. */
    test_herald_t *h = gw_start(state, "--insecure", "--publish-rate", "0", "--output-high-water",
                                "4m", "--connect-timeout", "5m", NULL);
    int64_t t0 = test_now_ms();
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, b.n), 0);
    GW_FLEET_OK(test_fleet_open_hello(fl, &h->port, 1, 256, "sub", NULL, NULL, SETUP_MS), fl);
    b.next = calloc(b.n, sizeof(*b.next));
    GW_FLEET_OK(test_fleet_subscribe_all(fl, "bcast", b.next, on_frame, &b, SETUP_MS), fl);
    b.base = b.next[0];
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.next[i], b.base);
        b.next[i] = b.base + 1;
    }
    test_client_t pub;
    GW_OK(test_client_auth(&pub, h->port, "pub", GW_WAIT_MS), &pub);
    pub.next_id = 1u << 30; /* Publish ids are 1..msgs; the keep-alive Pings use others */
    int64_t t1 = test_now_ms();

    uint64_t published = 0;
    uint64_t want = (uint64_t)b.n * b.msgs;
    int64_t deadline = t1 + DEADLINE_MS;
    int64_t next_ping = t1 + PING_EVERY_MS;
    while (b.delivered < want && b.bad == 0 && test_now_ms() < deadline) {
        if (test_now_ms() >= next_ping) {
            ping_all_async(fl, &b);
            GW_OK(test_client_ping(&pub, GW_WAIT_MS), &pub);
            next_ping += PING_EVERY_MS;
        }
        while (published < b.msgs && published * b.n - b.delivered < (uint64_t)WINDOW * b.n)
            publish(&pub, ++published);
        assert_true(test_fleet_poll(fl, 100, on_frame, &b) >= 0);
    }
    int64_t t2 = test_now_ms();
    if (b.bad)
        fail_msg("%llu bad frames; first: %s", (unsigned long long)b.bad, b.what);
    if (b.delivered < want)
        fail_msg("%llu of %llu deliveries in %d s (%zu connections open)",
                 (unsigned long long)b.delivered, (unsigned long long)want, DEADLINE_MS / 1000,
                 test_fleet_open_count(fl));
    check_publish_answers(&pub, &b);
    /* Keep-alive Pongs still on their way would otherwise count as frames in front of the
     * final ones. */
    while (b.pongs_due > 0 && b.bad == 0 && test_now_ms() < deadline)
        assert_true(test_fleet_poll(fl, 100, on_frame, &b) >= 0);
    if (b.bad || b.pongs_due)
        fail_msg("keep-alive: %llu Pongs missing, %llu bad frames (%s)",
                 (unsigned long long)b.pongs_due, (unsigned long long)b.bad, b.what);
    GW_FLEET_OK(test_fleet_ping_all(fl, on_extra, &b, SETUP_MS), fl);
    if (b.extra)
        fail_msg("%llu extra frames; first: %s", (unsigned long long)b.extra, b.what);
    assert_int_equal(test_fleet_open_count(fl), b.n);
    print_message("%zu connections x %llu messages: setup %lld ms, broadcast %lld ms "
                  "(%.0f deliveries/s)\n",
                  b.n, (unsigned long long)b.msgs, (long long)(t1 - t0), (long long)(t2 - t1),
                  (double)want * 1000.0 / (double)(t2 - t1 + 1));
    test_client_close(&pub);
    test_fleet_free(fl);
    free(b.next);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_broadcast_10k, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
