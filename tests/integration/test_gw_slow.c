/*
 * test_gw_slow: slow consumers on a real herald with a small output high-water mark. A
 * subscriber that stops reading (a small SO_RCVBUF so the kernel stops absorbing quickly)
 * while a publisher keeps going:
 *   - policy disconnect: herald stops queueing for it and queues Disconnect{SLOW_CONSUMER}
 *     behind its backlog; when it reads again it gets an unbroken run of offsets, then the
 *     Disconnect, then EOF, and herald_closed_total{reason="slow_consumer"} counts it. One that
 *     never reads again is closed when the slow_consumer_linger ends. (The reading test gives
 *     it a minute: with a 4 KiB receive window on loopback's 64 KiB segments the client never
 *     announces the window it opens, so herald only learns of it from its zero-window probes,
 *     which back off to seconds on a slow machine.)
 *   - policy drop: the connection stays, herald_slow_consumer_drops_total grows, and once it
 *     reads again it sees a gap in the offsets, then live messages;
 *   - memory: with several subscribers that never read, herald's RSS stays bounded while far
 *     more than the bound is published to them;
 *   - a client that sends requests and never reads the answers is closed as a slow consumer
 *     once they fill its output (under the drop policy too: answers are never dropped).
 * A reading subscriber on the same channel gets every message meanwhile, in order.
 *
 * The publisher runs until herald's metrics show the effect (checked every CHECK_EVERY
 * publishes), up to MAX_PUBLISHES: it waits on herald's answers, never on a clock.
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

#define PAYLOAD_BYTES 1024
#define CHECK_EVERY 256
#define MAX_PUBLISHES 65536
#define SLOW_RCVBUF 4096
/* What the slow client's receive buffer becomes when it reads again. At SLOW_RCVBUF the
 * kernel's backlog for it (herald's send buffer autotunes to megabytes) would trickle in at a
 * few KiB per delayed ACK. */
#define FAST_RCVBUF (4 * 1024 * 1024)

/* linger: --slow-consumer-linger (the disconnect policy's), NULL for the default. */
static test_herald_t *start_linger(void **state, const char *policy, const char *linger)
{
    return gw_start(state, "--insecure", "--io-threads", "2", "--publish-rate", "0", "--max-frame",
                    "2k", "--output-high-water", "4096", "--slow-consumer", policy, "--api-key",
                    GW_API_KEY, linger ? "--slow-consumer-linger" : NULL, linger, NULL);
}

static test_herald_t *start(void **state, const char *policy)
{
    return start_linger(state, policy, NULL);
}

/* Publishes one PAYLOAD_BYTES message and reads it back on the fast subscriber. */
static uint64_t publish_one(test_client_t *pub, test_client_t *fast, uint64_t seq)
{
    static char payload[PAYLOAD_BYTES];
    memcpy(payload, &seq, sizeof(seq));
    uint64_t off = 0;
    GW_OK(test_client_publish(pub, "firehose", payload, sizeof(payload), &off, GW_WAIT_MS), pub);
    GW_OK(test_client_expect_push(fast, "firehose", off, NULL, GW_WAIT_MS), fast);
    return off;
}

/* Connects the publisher, a fast reader and a slow one, all but the publisher subscribed. */
static uint64_t setup_clients(const test_herald_t *h, test_client_t *pub, test_client_t *fast,
                              test_client_t *slow)
{
    GW_OK(test_client_auth(pub, h->port, "pub", GW_WAIT_MS), pub);
    GW_OK(test_client_auth(fast, h->port, "fast", GW_WAIT_MS), fast);
    GW_OK(test_client_open(slow, h->port, GW_WAIT_MS), slow);
    GW_OK(test_client_set_rcvbuf(slow, SLOW_RCVBUF), slow);
    GW_OK(test_client_hello(slow, "slow", GW_WAIT_MS), slow);
    uint64_t base = 0;
    GW_OK(test_client_subscribe(fast, "firehose", &base, GW_WAIT_MS), fast);
    GW_OK(test_client_subscribe(slow, "firehose", NULL, GW_WAIT_MS), slow);
    return base;
}

/* Publishes (reading each message back on the fast subscriber) until herald has acted on the
 * slow one: herald_slow_consumer_drops_total counts the decision under either policy. Returns
 * the last offset published. */
static uint64_t publish_until_slow(test_client_t *pub, test_client_t *fast, const test_herald_t *h)
{
    uint64_t last = 0;
    int n = 0;
    while (gw_metric(h, "herald_slow_consumer_drops_total", NULL) < 1) {
        if (n >= MAX_PUBLISHES)
            fail_msg("no slow-consumer action after %d publishes of %d bytes", n, PAYLOAD_BYTES);
        for (int k = 0; k < CHECK_EVERY; k++, n++)
            last = publish_one(pub, fast, (uint64_t)n);
    }
    return last;
}

static void test_gw_slow_disconnect(void **state)
{
    test_herald_t *h = start_linger(state, "disconnect", "60s");
    test_client_t pub, fast, slow;
    uint64_t base = setup_clients(h, &pub, &fast, &slow);

    uint64_t last = publish_until_slow(&pub, &fast, h);
    /* Told to go, not gone: it still has its backlog and the Disconnect to read. */
    assert_true(gw_metric(h, "herald_closed_total", "slow_consumer") == 0);
    /* More publishes are not queued for it. */
    for (int k = 0; k < CHECK_EVERY; k++)
        last = publish_one(&pub, &fast, (uint64_t)k);

    /* Now the slow client reads (with a window that lets the backlog through quickly):
     * consecutive offsets, then Disconnect{SLOW_CONSUMER}, then EOF. */
    GW_OK(test_client_set_rcvbuf(&slow, FAST_RCVBUF), &slow);
    uint64_t expect = base + 1;
    int disc = -1;
    for (;;) {
        Herald__Frame *f = NULL;
        int rc = test_client_recv(&slow, &f, GW_WAIT_MS);
        if (rc == 0)
            break;
        if (rc < 0)
            fail_msg("slow client: %d %s", rc, test_client_what(&slow));
        char fs[384];
        if (f->body_case == HERALD__FRAME__BODY_DISCONNECT) {
            disc = (int)f->disconnect->code;
        } else if (f->body_case != HERALD__FRAME__BODY_PUSH || disc != -1 ||
                   f->push->offset != expect) {
            fail_msg("slow client expected push %llu, got %s", (unsigned long long)expect,
                     test_frame_str(f, fs, sizeof(fs)));
        } else {
            expect++;
        }
        proto_frame_free(f);
    }
    assert_int_equal(disc, HERALD__DISCONNECT__CODE__SLOW_CONSUMER);
    assert_true(expect - 1 < last); /* it did miss the end */
    test_client_close(&slow);
    gw_metric_await(h, "herald_closed_total", "slow_consumer", 1);

    /* The publisher and the fast reader were not affected. */
    uint64_t off = publish_one(&pub, &fast, 0);
    assert_int_equal(off, last + 1);
    test_client_close(&fast);
    test_client_close(&pub);
    gw_stop(state);
}

/* Policy disconnect, and the slow client never reads again: herald closes it when the linger
 * (2 s here) ends, without waiting for the client, and the others are not affected. */
static void test_gw_slow_disconnect_never_reads(void **state)
{
    test_herald_t *h = start_linger(state, "disconnect", "2s");
    test_client_t pub, fast, slow;
    (void)setup_clients(h, &pub, &fast, &slow);
    uint64_t last = publish_until_slow(&pub, &fast, h);
    int64_t told = test_now_ms();
    /* Its subscription went with the decision, its connection not yet: only the fast reader's
     * subscription remains. */
    assert_true(gw_metric(h, "herald_subscriptions", NULL) == 1);
    assert_true(gw_metric(h, "herald_closed_total", "slow_consumer") == 0);
    /* gw_metric_await waits up to GW_WAIT_MS (10 s); the wheel fires the 2 s linger up to
     * two 1 s ticks late, never early. */
    gw_metric_await(h, "herald_closed_total", "slow_consumer", 1);
    /* Not at once: told is taken after the scrape that saw the decision, so allow for the
     * publishes and scrape between the two. */
    assert_true(test_now_ms() - told >= 1000);
    assert_int_equal(publish_one(&pub, &fast, 0), last + 1);
    test_client_close(&slow);
    test_client_close(&fast);
    test_client_close(&pub);
    gw_stop(state);
}

static void test_gw_slow_drop(void **state)
{
    test_herald_t *h = start(state, "drop");
    test_client_t pub, fast, slow;
    uint64_t base = setup_clients(h, &pub, &fast, &slow);

    uint64_t last = base;
    int n = 0;
    while (gw_metric(h, "herald_slow_consumer_drops_total", NULL) < 1) {
        if (n >= MAX_PUBLISHES)
            fail_msg("no drop after %d publishes of %d bytes", n, PAYLOAD_BYTES);
        for (int k = 0; k < CHECK_EVERY; k++, n++)
            last = publish_one(&pub, &fast, (uint64_t)n);
    }
    /* Keep publishing a while past the first drop, so many messages are dropped. */
    for (int k = 0; k < CHECK_EVERY; k++)
        last = publish_one(&pub, &fast, (uint64_t)k);
    assert_true(gw_metric(h, "herald_closed_total", "slow_consumer") == 0);

    /* The slow client reads again: a Ping's Pong comes after everything queued before it. */
    GW_OK(test_client_set_rcvbuf(&slow, FAST_RCVBUF), &slow);
    GW_OK(test_client_ping(&slow, GW_WAIT_MS), &slow);
    uint64_t prev = base;
    uint64_t got = 0;
    uint64_t gaps = 0;
    Herald__Frame *f;
    while (test_client_recv(&slow, &f, 0) == 1) {
        char fs[384];
        if (f->body_case != HERALD__FRAME__BODY_PUSH || f->push->offset <= prev ||
            f->push->offset > last)
            fail_msg("after offset %llu: %s", (unsigned long long)prev,
                     test_frame_str(f, fs, sizeof(fs)));
        gaps += f->push->offset != prev + 1;
        prev = f->push->offset;
        got++;
        proto_frame_free(f);
    }
    /* Still subscribed: the next message arrives, after a gap (inside the backlog or at its
     * end: the drops were the messages published while its queue was full). */
    uint64_t off = publish_one(&pub, &fast, 1);
    GW_OK(test_client_expect_push(&slow, "firehose", off, NULL, GW_WAIT_MS), &slow);
    gaps += off != prev + 1;
    if (gaps == 0 || got >= last - base)
        fail_msg("expected a gap: got %llu of %llu pushes, %llu gaps", (unsigned long long)got,
                 (unsigned long long)(last - base), (unsigned long long)gaps);
    double drops = gw_metric(h, "herald_slow_consumer_drops_total", NULL);
    assert_true(drops >= (double)(last - base - got));
    test_client_close(&slow);
    test_client_close(&fast);
    test_client_close(&pub);
    gw_stop(state);
}

#define MEM_SLOW_CLIENTS 4
#define MEM_PAYLOAD (16 * 1024)
#define MEM_MESSAGES 4096 /* 64 MiB published to each silent subscriber */
#define MEM_BOUND_KB (24 * 1024)

static void test_gw_slow_memory_bounded(void **state)
{
    /* ASan's quarantine would hold freed messages and hide the bound: keep it small. */
    const char *args[] = {
        "--insecure",      "--io-threads", "2", "--publish-rate", "0", "--output-high-water", "64k",
        "--slow-consumer", "drop",         NULL};
    const char *env[] = {"ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=1", NULL};
    test_herald_opts_t opts = {.args = args, .env = env, .cpu = -1};
    test_herald_t *h = gw_start_opts(state, &opts);
    test_client_t pub;
    GW_OK(test_client_auth(&pub, h->port, "pub", GW_WAIT_MS), &pub);
    test_client_t silent[MEM_SLOW_CLIENTS];
    for (int i = 0; i < MEM_SLOW_CLIENTS; i++) {
        GW_OK(test_client_open(&silent[i], h->port, GW_WAIT_MS), &silent[i]);
        GW_OK(test_client_set_rcvbuf(&silent[i], SLOW_RCVBUF), &silent[i]);
        GW_OK(test_client_hello(&silent[i], "silent", GW_WAIT_MS), &silent[i]);
        GW_OK(test_client_subscribe(&silent[i], "bulk", NULL, GW_WAIT_MS), &silent[i]);
    }
    static char payload[MEM_PAYLOAD];
    /* Warm up (allocator arenas, buffers), then measure. */
    for (int m = 0; m < 64; m++)
        GW_OK(test_client_publish(&pub, "bulk", payload, sizeof(payload), NULL, GW_WAIT_MS), &pub);
    long rss0 = test_proc_rss_kb(h->pid);
    assert_true(rss0 > 0);
    long peak = rss0;
    for (int m = 0; m < MEM_MESSAGES; m++) {
        memcpy(payload, &m, sizeof(m));
        GW_OK(test_client_publish(&pub, "bulk", payload, sizeof(payload), NULL, GW_WAIT_MS), &pub);
        if (m % 64 == 0) {
            long rss = test_proc_rss_kb(h->pid);
            peak = rss > peak ? rss : peak;
        }
    }
    if (peak - rss0 > MEM_BOUND_KB)
        fail_msg("herald's RSS grew %ld KiB (from %ld KiB) while %d MiB went to %d silent "
                 "subscribers; bound %d KiB",
                 peak - rss0, rss0, MEM_MESSAGES * (MEM_PAYLOAD / 1024) / 1024, MEM_SLOW_CLIENTS,
                 MEM_BOUND_KB);
    /* Every silent subscriber is still connected, and herald still answers. */
    for (int i = 0; i < MEM_SLOW_CLIENTS; i++) {
        assert_false(test_client_is_closed(&silent[i], 0));
        test_client_close(&silent[i]);
    }
    GW_OK(test_client_ping(&pub, GW_WAIT_MS), &pub);
    test_client_close(&pub);
    gw_stop(state);
}

/* Requests whose answers the client never reads: bounded by the request bytes sent. */
#define FLOOD_CHUNK_REQUESTS 1024
#define FLOOD_MAX_BYTES (256u * 1024 * 1024)

/* A client that keeps sending requests and never reads the answers. Answers cannot be dropped
 * like Pushes, so once they fill the output's hard cap (twice the high-water mark, past the
 * kernel's buffers) herald closes the connection as a slow consumer, under the drop policy
 * too, instead of queueing without bound or answering some requests and not others. */
static void test_gw_slow_unread_answers(void **state)
{
    test_herald_t *h = start(state, "drop");
    test_client_t c;
    /* The default receive buffer, not SLOW_RCVBUF: with a few KiB against loopback's 64 KiB
     * segments the client's kernel drops herald's segments whole, ACKs included, and both
     * sides sit in TCP retransmission back-off (13 s observed) with the flood stalled. */
    GW_OK(test_client_open(&c, h->port, GW_WAIT_MS), &c);
    GW_OK(test_client_hello(&c, "deaf", GW_WAIT_MS), &c);
    /* Unsubscribe from a channel it is not in: a few bytes in, an Error of ~40 bytes out. */
    nl_buf_t chunk;
    nl_buf_init(&chunk, 0);
    for (int k = 0; k < FLOOD_CHUNK_REQUESTS; k++) {
        Herald__Frame f;
        Herald__Unsubscribe body;
        test_frame_unsubscribe(&f, &body, "nope");
        f.id = 100 + (uint64_t)k;
        assert_int_equal(proto_frame_append(&chunk, &f), 0);
    }
    size_t sent = 0;
    int rc = 0;
    while (sent < FLOOD_MAX_BYTES) {
        rc = test_client_send_raw(&c, nl_buf_peek(&chunk), nl_buf_readable(&chunk), GW_WAIT_MS);
        if (rc != 0)
            break;
        sent += nl_buf_readable(&chunk);
    }
    nl_buf_deinit(&chunk);
    /* herald closed it while the client was still sending: the send failed on the reset. */
    if (rc != -ECONNRESET && rc != -EPIPE)
        fail_msg("after %zu bytes of requests: %d %s", sent, rc, test_client_what(&c));
    gw_metric_await(h, "herald_closed_total", "slow_consumer", 1);
    assert_true(gw_metric(h, "herald_slow_consumer_drops_total", NULL) == 0);
    test_client_close(&c);
    /* The node goes on serving. */
    test_client_t d;
    GW_OK(test_client_auth(&d, h->port, "next", GW_WAIT_MS), &d);
    GW_OK(test_client_ping(&d, GW_WAIT_MS), &d);
    test_client_close(&d);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_slow_disconnect, gw_teardown),
        cmocka_unit_test_teardown(test_gw_slow_disconnect_never_reads, gw_teardown),
        cmocka_unit_test_teardown(test_gw_slow_drop, gw_teardown),
        cmocka_unit_test_teardown(test_gw_slow_memory_bounded, gw_teardown),
        cmocka_unit_test_teardown(test_gw_slow_unread_answers, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
