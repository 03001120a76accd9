/*
 * test_gw_hostile: herald against hostile clients (issue 24), each case the attack that
 * found a problem, with the figure it measured printed (a line starting "hostile:"):
 *   - presence flood: 1,000 subscribers on a channel; 4 connections pipeline 5,000
 *     PresenceRequests each, then 2,000 each again and again for a few seconds, while another
 *     client publishes to itself every 10 ms. herald's RSS moves by less than 16 MiB and the
 *     other client's push p99 stays under 50 ms, or three times its p99 before the attack on
 *     a machine busy with other work (each request takes from the request budget; at most
 *     [presence] max_inflight per connection run at once, the rest wait). ctest runs the
 *     file alone (RUN_SERIAL): tests beside it would distort what it measures;
 *   - join/leave churn: 300 listeners of a channel's join/leave events; one connection
 *     pipelines 20,000 Subscribe/Unsubscribe pairs. The bytes of events about it that reach
 *     the listeners stay below twice the bytes it sent (budget, and the event window);
 *   - pre-authentication flood: three source addresses (127.0.0.2..4) hold 9,000 connections
 *     that never send Connect against a herald limited to 8,192 descriptors, reconnecting
 *     whatever herald closes; 10 of 10 legitimate clients still authenticate;
 *   - per-address cap: the oldest unauthenticated connections of an address give way, the
 *     other addresses are untouched;
 *   - the spec made exact: an undecodable frame's Error carries its id; Disconnect
 *     {TOKEN_EXPIRED} comes within 250 ms of exp (PROTOCOL.md promises a second); a Subscribe
 *     and a Publish (or PresenceRequest) of its channel in one write take effect in that order.
 * Run with TEST_HOSTILE_SECONDS=10 for the 10 s presence attack (default 3), and
 * TEST_HOSTILE_FILTER=<cmocka pattern> for one case.
 * Sanitizer builds check the same things with bounds their slowness allows.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
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
#include <time.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOSTILE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HOSTILE_SANITIZED 1
#endif
#endif
#ifndef HOSTILE_SANITIZED
#define HOSTILE_SANITIZED 0
#endif

#define MIB (1024.0 * 1024.0)

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of v[0..n) in microseconds, sorting v; 0 when empty. */
static uint32_t percentile_us(uint32_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u32);
    size_t k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[k < n ? k : n - 1];
}

/* Descriptors herald has open, or -1. */
static int fd_count(const test_herald_t *h)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)h->pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static double rss_mib(const test_herald_t *h)
{
    long kb = test_proc_rss_kb(h->pid);
    return kb > 0 ? (double)kb / 1024.0 : 0.0;
}

/* Names for fleet slots: "<prefix><i>", kept for the fleet's lifetime. */
typedef struct names_s {
    char (*v)[24];
} names_t;

static const char *name_of(size_t i, void *arg)
{
    return ((names_t *)arg)->v[i];
}

static void names_make(names_t *n, size_t count, const char *prefix)
{
    n->v = calloc(count ? count : 1, sizeof(*n->v));
    assert_non_null(n->v);
    for (size_t i = 0; i < count; i++)
        snprintf(n->v[i], sizeof(n->v[i]), "%s%zu", prefix, i);
}

/* ============================================================================================
 * 1. Presence flood
 * ========================================================================================== */

#define VICTIM_MAX 8192

/* The other client: a publisher and a subscriber of "probe" on their own thread, one message
 * every 10 ms, its latency from the publish's send to the Push's arrival. */
typedef struct victim_s {
    uint16_t port;
    _Atomic bool is_stopping;
    _Atomic int phase; /* 0 before the attack, 1 during it, 2 after: samples go by phase */
    _Atomic bool is_ready;
    uint32_t lat_us[2][VICTIM_MAX];
    size_t n[2];
    uint64_t sent;
    uint64_t received;
    int err;
    char what[256];
} victim_t;

static void *victim_run(void *arg)
{
    victim_t *v = arg;
    test_client_t pub;
    test_client_t sub;
    int rc = test_client_auth(&pub, v->port, "victim-pub", GW_WAIT_MS);
    if (rc == 0)
        rc = test_client_auth(&sub, v->port, "victim-sub", GW_WAIT_MS);
    if (rc == 0)
        rc = test_client_subscribe(&sub, "probe", NULL, GW_WAIT_MS);
    if (rc != 0) {
        v->err = rc;
        snprintf(v->what, sizeof(v->what), "victim setup: %s", test_client_what(&pub));
        atomic_store(&v->is_ready, true);
        return NULL;
    }
    atomic_store(&v->is_ready, true);
    uint64_t id = 1000;
    int64_t next_us = mono_us();
    rc = 0;
    while (!atomic_load(&v->is_stopping)) {
        int64_t now = mono_us();
        if (now >= next_us) {
            /* Paced at one message per 10 ms whatever the latency; each carries its send
             * time, so a late Push is measured from its own publish. */
            Herald__Frame f;
            Herald__Publish body;
            char payload[24];
            int len = snprintf(payload, sizeof(payload), "%lld", (long long)now);
            test_frame_publish(&f, &body, "probe", payload, (size_t)len);
            f.id = id++;
            if ((rc = test_client_send(&pub, &f, GW_WAIT_MS)) != 0)
                break;
            v->sent++;
            next_us += 10000;
            if (next_us < now)
                next_us = now + 10000;
        }
        Herald__Frame *r = NULL;
        int wait_ms = (int)((next_us - mono_us()) / 1000);
        rc = test_client_recv(&sub, &r, wait_ms > 0 ? wait_ms : 0);
        if (rc == 1) {
            int64_t t1 = mono_us();
            if (r->body_case != HERALD__FRAME__BODY_PUSH) {
                snprintf(v->what, sizeof(v->what), "victim: not a push");
                proto_frame_free(r);
                rc = -EPROTO;
                break;
            }
            char text[24] = {0};
            memcpy(text, r->push->payload.data,
                   r->push->payload.len < sizeof(text) - 1 ? r->push->payload.len
                                                           : sizeof(text) - 1);
            int64_t t0 = atoll(text);
            proto_frame_free(r);
            int phase = atomic_load(&v->phase);
            if (phase < 2 && v->n[phase] < VICTIM_MAX)
                v->lat_us[phase][v->n[phase]++] = (uint32_t)(t1 - t0);
            v->received++;
        } else if (rc != -ETIMEDOUT) {
            snprintf(v->what, sizeof(v->what), "victim push: rc %d", rc);
            break;
        }
        rc = 0;
        /* The PublishOks are not waited for; read what came. */
        while (test_client_recv(&pub, &r, 0) == 1)
            proto_frame_free(r);
    }
    v->err = rc;
    test_client_close(&pub);
    test_client_close(&sub);
    return NULL;
}

/* What the attackers got back. */
typedef struct attack_s {
    uint64_t answered[4];
    uint64_t responses;
    uint64_t rate_limited;
    uint64_t busy;
    uint64_t other;
    uint64_t answer_bytes;
} attack_t;

static void attack_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    attack_t *a = arg;
    if (!f || f->id == 0)
        return;
    a->answered[i]++;
    a->answer_bytes += proto_frame_encoded_size(f);
    if (f->body_case == HERALD__FRAME__BODY_PRESENCE_RESPONSE)
        a->responses++;
    else if (f->body_case == HERALD__FRAME__BODY_ERROR &&
             f->error->code == HERALD__ERROR__CODE__RATE_LIMITED)
        a->rate_limited++;
    else if (f->body_case == HERALD__FRAME__BODY_ERROR &&
             f->error->code == HERALD__ERROR__CODE__BUSY)
        a->busy++;
    else
        a->other++;
}

static void attack_queue(test_fleet_t *fl, size_t i, size_t count, uint64_t *next_id)
{
    for (size_t k = 0; k < count; k++) {
        Herald__Frame f = HERALD__FRAME__INIT;
        Herald__PresenceRequest pr = HERALD__PRESENCE_REQUEST__INIT;
        pr.channel = (char *)"room";
        f.body_case = HERALD__FRAME__BODY_PRESENCE_REQUEST;
        f.presence_request = &pr;
        f.id = (*next_id)++;
        assert_int_equal(test_fleet_send(fl, i, &f), 0);
    }
}

static int hostile_seconds(void)
{
    const char *s = getenv("TEST_HOSTILE_SECONDS");
    int n = s ? atoi(s) : 0;
    return n > 0 && n <= 60 ? n : 3;
}

static void test_gw_hostile_presence_flood(void **state)
{
    const size_t n_subs = HOSTILE_SANITIZED ? 300 : 1000;
    const size_t first = HOSTILE_SANITIZED ? 1500 : 5000; /* the RSS attack, per connection */
    const size_t rounds = HOSTILE_SANITIZED ? 600 : 2000; /* the latency attack, per round */
    test_herald_t *h =
        gw_start(state, "--insecure", "--io-threads", "2", "--api-key", GW_API_KEY, NULL);
    names_t users;
    names_make(&users, n_subs, "u");
    test_fleet_t *subs = NULL;
    assert_int_equal(test_fleet_new(&subs, n_subs), 0);
    GW_FLEET_OK(test_fleet_open_hello(subs, &h->port, 1, 256, NULL, name_of, &users, GW_WAIT_MS),
                subs);
    GW_FLEET_OK(test_fleet_subscribe_all(subs, "room", NULL, NULL, NULL, GW_WAIT_MS), subs);

    victim_t *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    v->port = h->port;
    pthread_t vt;
    assert_int_equal(pthread_create(&vt, NULL, victim_run, v), 0);
    while (!atomic_load(&v->is_ready))
        poll(NULL, 0, 5);
    test_fleet_t *att = NULL;
    assert_int_equal(test_fleet_new(&att, 4), 0);
    GW_FLEET_OK(test_fleet_open(att, h->port, 4, GW_WAIT_MS), att);
    GW_FLEET_OK(test_fleet_hello_all(att, "attacker", NULL, NULL, GW_WAIT_MS), att);
    /* The victim's baseline: a second of pushes with nothing else going on. */
    for (int64_t until = test_now_ms() + 1000; test_now_ms() < until;)
        poll(NULL, 0, 50);
    double rss_base = rss_mib(h);
    double rss_peak = rss_base;
    attack_t a = {0};
    uint64_t next_id = 1;

    /* Phase 1: 4 x first PresenceRequests in one go (the issue: 4 x 5,000, 220 KB). The
     * victim's samples count as under attack from here to the end of phase 2. */
    atomic_store(&v->phase, 1);
    for (size_t i = 0; i < 4; i++)
        attack_queue(att, i, first, &next_id);
    int64_t t_start = test_now_ms();
    int64_t deadline = t_start + 30000;
    while (a.answered[0] + a.answered[1] + a.answered[2] + a.answered[3] < 4 * first &&
           test_now_ms() < deadline) {
        assert_true(test_fleet_poll(att, 20, attack_cb, &a) >= 0);
        double r = rss_mib(h);
        rss_peak = r > rss_peak ? r : rss_peak;
    }
    int64_t phase1_ms = test_now_ms() - t_start;
    bool is_phase1_done =
        a.answered[0] + a.answered[1] + a.answered[2] + a.answered[3] == 4 * first;

    /* Phase 2: rounds of 2,000 per connection, each sent as soon as the last is answered. */
    uint64_t sent[4];
    for (size_t i = 0; i < 4; i++)
        sent[i] = a.answered[i];
    int64_t phase2_end = test_now_ms() + 1000 * hostile_seconds();
    while (test_now_ms() < phase2_end) {
        for (size_t i = 0; i < 4; i++) {
            if (a.answered[i] >= sent[i] && test_fleet_is_open(att, i)) {
                attack_queue(att, i, rounds, &next_id);
                sent[i] += rounds;
            }
        }
        assert_true(test_fleet_poll(att, 20, attack_cb, &a) >= 0);
        double r = rss_mib(h);
        rss_peak = r > rss_peak ? r : rss_peak;
    }
    atomic_store(&v->phase, 2);
    size_t open_attackers = test_fleet_open_count(att);
    test_fleet_free(att);
    /* herald has seen the attackers go once a new client's round trip is done after it. */
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "after", GW_WAIT_MS), &c);
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    double rss_after = rss_mib(h);
    test_client_close(&c);
    atomic_store(&v->is_stopping, true);
    pthread_join(vt, NULL);
    if (v->err != 0)
        fail_msg("the other client failed: %d %s", v->err, v->what);

    uint32_t p99_base = percentile_us(v->lat_us[0], v->n[0], 99);
    uint32_t p99 = percentile_us(v->lat_us[1], v->n[1], 99);
    uint32_t p50 = percentile_us(v->lat_us[1], v->n[1], 50);
    printf("hostile: presence flood: %zu subscribers, 4 x %zu pipelined (%s in %lld ms), then "
           "4 x %zu per round for %d s\n",
           n_subs, first, is_phase1_done ? "all answered" : "NOT all answered",
           (long long)phase1_ms, rounds, hostile_seconds());
    printf("hostile: presence flood: answers %llu presence, %llu rate_limited, %llu busy, %llu "
           "other, %.1f MiB; attackers still open %zu\n",
           (unsigned long long)a.responses, (unsigned long long)a.rate_limited,
           (unsigned long long)a.busy, (unsigned long long)a.other, (double)a.answer_bytes / MIB,
           open_attackers);
    printf("hostile: presence flood: rss %.1f MiB before, peak +%.1f MiB, after +%.1f MiB\n",
           rss_base, rss_peak - rss_base, rss_after - rss_base);
    printf("hostile: presence flood: other client's push p99 %.1f ms (p50 %.1f ms, %zu pushes) "
           "under attack; %.1f ms before (%zu); %llu of %llu published arrived\n",
           p99 / 1000.0, p50 / 1000.0, v->n[1], p99_base / 1000.0, v->n[0],
           (unsigned long long)v->received, (unsigned long long)v->sent);
    fflush(stdout);

    assert_true(v->n[1] > 0);
    /* The targets (issue 24): RSS moves by under 16 MiB, the other client's p99 under 50 ms.
     * A machine whose own p99 is already high (the sandbox's 2 CPUs are shared with other
     * work) is held to three times its baseline instead: the bug was ten times that and more.
     * Sanitizers run several times slower, with a looser latency bound that still tells the
     * fix from the bug (687 ms), and their RSS says nothing (ASan keeps 256 MiB of freed
     * memory in quarantine; both keep shadow memory): it is printed, not checked. */
    uint32_t p99_bound = HOSTILE_SANITIZED ? 500000 : 50000;
    if (p99_bound < 3 * p99_base)
        p99_bound = 3 * p99_base;
    double rss_bound = 16.0;
    if (!HOSTILE_SANITIZED && rss_peak - rss_base >= rss_bound)
        fail_msg("presence flood moved RSS by %.1f MiB (bound %.0f)", rss_peak - rss_base,
                 rss_bound);
    if (p99 >= p99_bound)
        fail_msg("other client's p99 %.1f ms under the presence flood (bound %.1f)", p99 / 1000.0,
                 p99_bound / 1000.0);
    /* Every request was answered; those past the budget were refused, and nobody was cut
     * off for it. */
    assert_true(is_phase1_done);
    assert_true(a.rate_limited > 0);
    assert_int_equal(open_attackers, 4);
    test_fleet_free(subs);
    free(users.v);
    free(v);
    gw_stop(state);
}

/* ============================================================================================
 * 2. Join/leave churn
 * ========================================================================================== */

#define N_LISTENERS 300
#define CHURN_PAIRS 20000

/* What the listeners got. */
typedef struct listen_s {
    size_t subscribed;
    uint64_t churn_bytes;  /* bytes of event frames about the churner */
    uint64_t churn_events; /* such frames */
    uint64_t other_bytes;  /* other event frames */
    bool *has_marker;      /* listener i saw the marker's join */
    size_t markers;
} listen_t;

static bool event_is_about(const Herald__PresenceEvent *pe, const char *user)
{
    for (size_t k = 0; k < pe->n_joined; k++)
        if (strcmp(pe->joined[k]->user_id, user) == 0)
            return true;
    for (size_t k = 0; k < pe->n_left; k++)
        if (strcmp(pe->left[k]->user_id, user) == 0)
            return true;
    return false;
}

static void listen_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    listen_t *l = arg;
    if (!f)
        return;
    if (f->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK) {
        l->subscribed++;
        return;
    }
    if (f->body_case != HERALD__FRAME__BODY_PRESENCE_EVENT)
        return;
    size_t bytes = proto_frame_encoded_size(f);
    if (event_is_about(f->presence_event, "churner")) {
        l->churn_bytes += bytes;
        l->churn_events++;
    } else {
        l->other_bytes += bytes;
    }
    if (!l->has_marker[i] && event_is_about(f->presence_event, "marker") &&
        f->presence_event->n_joined > 0) {
        l->has_marker[i] = true;
        l->markers++;
    }
}

typedef struct churn_s {
    uint64_t answered;
    uint64_t rate_limited;
} churn_t;

static void churn_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    NL_UNUSED(i);
    churn_t *c = arg;
    if (!f || f->id == 0)
        return;
    c->answered++;
    if (f->body_case == HERALD__FRAME__BODY_ERROR &&
        f->error->code == HERALD__ERROR__CODE__RATE_LIMITED)
        c->rate_limited++;
}

static void test_gw_hostile_churn(void **state)
{
    test_herald_t *h =
        gw_start(state, "--insecure", "--io-threads", "2", "--api-key", GW_API_KEY, NULL);
    names_t users;
    names_make(&users, N_LISTENERS, "l");
    listen_t l = {.has_marker = calloc(N_LISTENERS, sizeof(bool))};
    assert_non_null(l.has_marker);
    test_fleet_t *lis = NULL;
    assert_int_equal(test_fleet_new(&lis, N_LISTENERS), 0);
    GW_FLEET_OK(test_fleet_open_hello(lis, &h->port, 1, 256, NULL, name_of, &users, GW_WAIT_MS),
                lis);
    for (size_t i = 0; i < N_LISTENERS; i++) {
        Herald__Frame f;
        Herald__Subscribe sub;
        test_frame_subscribe(&f, &sub, "room");
        sub.join_leave = true;
        f.id = 1;
        assert_int_equal(test_fleet_send(lis, i, &f), 0);
    }
    for (int64_t until = test_now_ms() + GW_WAIT_MS;
         l.subscribed < N_LISTENERS && test_now_ms() < until;)
        assert_true(test_fleet_poll(lis, 50, listen_cb, &l) >= 0);
    assert_int_equal(l.subscribed, N_LISTENERS);

    /* The churner: 20,000 Subscribe/Unsubscribe pairs in one go (the issue: 500 KB). */
    test_fleet_t *ch = NULL;
    assert_int_equal(test_fleet_new(&ch, 1), 0);
    GW_FLEET_OK(test_fleet_open(ch, h->port, 1, GW_WAIT_MS), ch);
    GW_FLEET_OK(test_fleet_hello_all(ch, "churner", NULL, NULL, GW_WAIT_MS), ch);
    uint64_t in_bytes = 0;
    for (uint64_t k = 0; k < CHURN_PAIRS; k++) {
        Herald__Frame f;
        Herald__Subscribe sub;
        Herald__Unsubscribe unsub;
        test_frame_subscribe(&f, &sub, "room");
        f.id = 2 * k + 1;
        in_bytes += proto_frame_encoded_size(&f);
        assert_int_equal(test_fleet_send(ch, 0, &f), 0);
        test_frame_unsubscribe(&f, &unsub, "room");
        f.id = 2 * k + 2;
        in_bytes += proto_frame_encoded_size(&f);
        assert_int_equal(test_fleet_send(ch, 0, &f), 0);
    }
    churn_t c = {0};
    int64_t t0 = test_now_ms();
    int64_t deadline = t0 + 60000;
    while (c.answered < 2 * CHURN_PAIRS && test_now_ms() < deadline) {
        assert_true(test_fleet_poll(ch, 5, churn_cb, &c) >= 0);
        assert_true(test_fleet_poll(lis, 5, listen_cb, &l) >= 0);
    }
    int64_t churn_ms = test_now_ms() - t0;
    bool is_churn_done = c.answered == 2 * CHURN_PAIRS;
    /* Everything herald will send about the churner is out once no event waits for its
     * window (a gauge) and a join published after that has reached every listener: a
     * channel's events reach a listener in the order herald published them. */
    for (int64_t until = test_now_ms() + 30000; test_now_ms() < until;) {
        assert_true(test_fleet_poll(lis, 20, listen_cb, &l) >= 0);
        if (gw_metric(h, "herald_presence_events_held", NULL) == 0)
            break;
    }
    test_client_t marker;
    GW_OK(test_client_auth(&marker, h->port, "marker", GW_WAIT_MS), &marker);
    GW_OK(test_client_subscribe(&marker, "room", NULL, GW_WAIT_MS), &marker);
    for (int64_t until = test_now_ms() + 30000; l.markers < N_LISTENERS && test_now_ms() < until;)
        assert_true(test_fleet_poll(lis, 20, listen_cb, &l) >= 0);
    double ratio = (double)l.churn_bytes / (double)in_bytes;
    printf("hostile: churn: %d pairs, %.1f KB in (%s in %lld ms, %llu rate_limited); "
           "listeners got %llu events about it, %.1f KB: %.3f x the input; markers %zu/%d\n",
           CHURN_PAIRS, in_bytes / 1000.0, is_churn_done ? "all answered" : "NOT all answered",
           (long long)churn_ms, (unsigned long long)c.rate_limited,
           (unsigned long long)l.churn_events, l.churn_bytes / 1000.0, ratio, l.markers,
           N_LISTENERS);
    fflush(stdout);
    assert_true(is_churn_done);
    assert_int_equal(l.markers, N_LISTENERS);
    if (ratio > 2.0)
        fail_msg("churn: listeners got %.2f x the churner's input", ratio);
    /* The churn was refused past the budget, and the listeners still saw its net result. */
    assert_true(c.rate_limited > 0);
    assert_true(l.churn_events >= N_LISTENERS);
    assert_int_equal(test_fleet_open_count(lis), N_LISTENERS);
    test_client_close(&marker);
    test_fleet_free(ch);
    test_fleet_free(lis);
    free(l.has_marker);
    free(users.v);
    gw_stop(state);
}

/* ============================================================================================
 * 3. Pre-authentication flood at the descriptor limit
 * ========================================================================================== */

/* herald's descriptors: 8,192 (8,112 for clients; unauthenticated ones get 3,000, the sum of
 * the per-address caps, within the quarter of that that the node-wide cap allows), and
 * a flood of 9,000 from three addresses, all in this process (at most 20,000 descriptors). */
#define FLOOD_SOURCES 3
#define FLOOD_SLOTS 3000
#define FLOOD_NOFILE 8192
#define LEGIT_CLIENTS 10

/* One source address's flood: connections that never send a byte, each reconnected when
 * herald closes it, FLOOD_RECONNECTS every 10 ms at most (2,000 a second per address, which
 * keeps a run inside the address's port range). */
typedef struct flood_s {
    char src[16];
    uint16_t port;
    _Atomic bool is_stopping;
    _Atomic size_t resolved; /* slots whose first connect finished (open or closed) */
    _Atomic uint64_t connects;
    bool is_closed_once[FLOOD_SLOTS];
    size_t closed[FLOOD_SLOTS];
    size_t n_closed;
    int err;
} flood_t;

#define FLOOD_RECONNECTS 20

static void flood_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    flood_t *fd = arg;
    if (f)
        return; /* a Disconnect before the close */
    if (!fd->is_closed_once[i])
        fd->is_closed_once[i] = true;
    if (fd->n_closed < FLOOD_SLOTS)
        fd->closed[fd->n_closed++] = i;
}

static void *flood_run(void *arg)
{
    flood_t *fd = arg;
    test_fleet_t *fl = NULL;
    if ((fd->err = test_fleet_new(&fl, FLOOD_SLOTS)) != 0)
        return NULL;
    if ((fd->err = test_fleet_set_source(fl, fd->src)) != 0) {
        test_fleet_free(fl);
        return NULL;
    }
    size_t started = 0;
    bool *is_ever_open = calloc(FLOOD_SLOTS, sizeof(bool));
    if (!is_ever_open) {
        fd->err = -ENOMEM;
        test_fleet_free(fl);
        return NULL;
    }
    size_t resolved = 0;
    size_t budget = 0;
    int64_t next_ms = 0;
    int64_t deadline = test_now_ms() + 120000;
    while (!atomic_load(&fd->is_stopping) && test_now_ms() < deadline) {
        for (int k = 0; k < 64 && started < FLOOD_SLOTS; k++, started++) {
            if (test_fleet_connect(fl, started, fd->port) == 0)
                atomic_fetch_add(&fd->connects, 1);
        }
        if (test_fleet_poll(fl, 5, flood_cb, fd) < 0)
            break;
        for (size_t i = 0; resolved < FLOOD_SLOTS && i < started; i++) {
            if (!is_ever_open[i] && (test_fleet_is_open(fl, i) || fd->is_closed_once[i])) {
                is_ever_open[i] = true;
                resolved++;
            }
        }
        atomic_store(&fd->resolved, resolved);
        /* What herald closed comes back, FLOOD_RECONNECTS per 10 ms. */
        int64_t now = test_now_ms();
        if (now >= next_ms) {
            budget = FLOOD_RECONNECTS;
            next_ms = now + 10;
        }
        size_t n = fd->n_closed < budget ? fd->n_closed : budget;
        budget -= n;
        for (size_t k = 0; k < n; k++) {
            if (test_fleet_connect(fl, fd->closed[k], fd->port) == 0)
                atomic_fetch_add(&fd->connects, 1);
        }
        memmove(fd->closed, fd->closed + n, (fd->n_closed - n) * sizeof(fd->closed[0]));
        fd->n_closed -= n;
    }
    free(is_ever_open);
    test_fleet_free(fl);
    return NULL;
}

static void test_gw_hostile_preauth_flood(void **state)
{
    static const char *const args[] = {"--secret", GW_SECRET, "--io-threads", "2", "--api-key",
                                       GW_API_KEY, NULL};
    test_herald_opts_t opts = {.args = args, .cpu = -1, .nofile = FLOOD_NOFILE};
    test_herald_t *h = gw_start_opts(state, &opts);
    flood_t *fds = calloc(FLOOD_SOURCES, sizeof(*fds));
    assert_non_null(fds);
    pthread_t th[FLOOD_SOURCES];
    for (int k = 0; k < FLOOD_SOURCES; k++) {
        snprintf(fds[k].src, sizeof(fds[k].src), "127.0.0.%d", 2 + k);
        fds[k].port = h->port;
        assert_int_equal(pthread_create(&th[k], NULL, flood_run, &fds[k]), 0);
    }
    /* At the limit: every flood connection has been through herald once (9,000 > 8,192). */
    size_t resolved = 0;
    int fds_peak = 0;
    for (int64_t until = test_now_ms() + 60000; test_now_ms() < until; poll(NULL, 0, 20)) {
        int nfd = fd_count(h);
        fds_peak = nfd > fds_peak ? nfd : fds_peak;
        resolved = 0;
        for (int k = 0; k < FLOOD_SOURCES; k++)
            resolved += atomic_load(&fds[k].resolved);
        if (resolved == FLOOD_SOURCES * FLOOD_SLOTS)
            break;
    }
    double unauth_before = gw_metric(h, "herald_unauthenticated_connections", NULL);
    test_client_t legit[LEGIT_CLIENTS];
    int ok = 0;
    int64_t worst_ms = 0;
    char why[LEGIT_CLIENTS][160];
    for (int i = 0; i < LEGIT_CLIENTS; i++) {
        char token[GW_TOKEN_CAP];
        char user[16];
        snprintf(user, sizeof(user), "legit%d", i);
        gw_token(token, user, "news", 3600, 0, GW_SECRET);
        int64_t t0 = test_now_ms();
        int nfd = fd_count(h);
        fds_peak = nfd > fds_peak ? nfd : fds_peak;
        int rc = test_client_auth(&legit[i], h->port, token, 5000);
        int64_t took = test_now_ms() - t0;
        worst_ms = took > worst_ms ? took : worst_ms;
        snprintf(why[i], sizeof(why[i]), "%s", rc == 0 ? "ok" : test_client_what(&legit[i]));
        ok += rc == 0;
    }
    double unauth = gw_metric(h, "herald_unauthenticated_connections", NULL);
    double evicted = gw_metric(h, "herald_unauthenticated_evicted_total", NULL);
    double emfile = gw_metric(h, "herald_emfile_events_total", NULL);
    uint64_t connects = 0;
    for (int k = 0; k < FLOOD_SOURCES; k++) {
        atomic_store(&fds[k].is_stopping, true);
        pthread_join(th[k], NULL);
        connects += atomic_load(&fds[k].connects);
    }
    printf("hostile: preauth flood: %d x %d idle connections from 127.0.0.2.., herald nofile "
           "%d, %zu through herald before the test; flood connects %llu\n",
           FLOOD_SOURCES, FLOOD_SLOTS, FLOOD_NOFILE, resolved, (unsigned long long)connects);
    printf("hostile: preauth flood: legitimate connects %d/%d (slowest %lld ms); "
           "unauthenticated %g -> %g, evicted %g, emfile events %g, herald fds peak %d\n",
           ok, LEGIT_CLIENTS, (long long)worst_ms, unauth_before, unauth, evicted, emfile,
           fds_peak);
    for (int i = 0; i < LEGIT_CLIENTS; i++)
        if (strcmp(why[i], "ok") != 0)
            printf("hostile: preauth flood: legit %d: %s\n", i, why[i]);
    fflush(stdout);
    assert_int_equal(resolved, FLOOD_SOURCES * FLOOD_SLOTS);
    assert_int_equal(ok, LEGIT_CLIENTS);
    if (test_herald_has_exited(h))
        fail_msg("herald exited during the flood");
    /* They stay: authenticated connections are not what gives way. */
    for (int i = 0; i < LEGIT_CLIENTS; i++) {
        GW_OK(test_client_ping(&legit[i], GW_WAIT_MS), &legit[i]);
        test_client_close(&legit[i]);
    }
    free(fds);
    gw_stop(state);
}

static void count_connect_ok(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    NL_UNUSED(i);
    if (f && f->body_case == HERALD__FRAME__BODY_CONNECT_OK)
        ++*(size_t *)arg;
}

/* Per source address: the oldest of that address give way, other addresses are untouched. */
static void test_gw_hostile_preauth_per_address(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--io-threads", "2", "--api-key",
                                GW_API_KEY, "--max-unauthenticated-per-address", "4", NULL);
    enum { N = 10 };
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, N), 0);
    assert_int_equal(test_fleet_set_source(fl, "127.0.0.2"), 0);
    /* One at a time, so herald accepts them in this order (round robin over its 2 loops). */
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(test_fleet_connect(fl, i, h->port), 0);
        for (int64_t until = test_now_ms() + GW_WAIT_MS;
             !test_fleet_is_open(fl, i) && test_now_ms() < until;)
            assert_true(test_fleet_poll(fl, 20, NULL, NULL) >= 0);
        assert_true(test_fleet_is_open(fl, i) || test_fleet_close_reason(fl, i) != 0);
    }
    /* Each loop keeps its share (2) of the cap: the 6 oldest go. */
    for (int64_t until = test_now_ms() + GW_WAIT_MS;
         test_fleet_open_count(fl) > 4 && test_now_ms() < until;)
        assert_true(test_fleet_poll(fl, 20, NULL, NULL) >= 0);
    char open_set[N + 1];
    for (size_t i = 0; i < N; i++)
        open_set[i] = test_fleet_is_open(fl, i) ? 'o' : '-';
    open_set[N] = '\0';
    printf("hostile: per address cap 4: connections oldest first %s (o: open)\n", open_set);
    fflush(stdout);
    assert_int_equal(test_fleet_open_count(fl), 4);
    assert_false(test_fleet_is_open(fl, 0));
    assert_true(test_fleet_is_open(fl, N - 1));
    gw_metric_await(h, "herald_unauthenticated_evicted_total", "cap=\"address\"", 6);

    /* Another address is not affected, and the survivors authenticate. */
    test_fleet_t *other = NULL;
    assert_int_equal(test_fleet_new(&other, 1), 0);
    assert_int_equal(test_fleet_set_source(other, "127.0.0.3"), 0);
    GW_FLEET_OK(test_fleet_open(other, h->port, 1, GW_WAIT_MS), other);
    char token[GW_TOKEN_CAP];
    gw_token(token, "someone", "news", 3600, 0, GW_SECRET);
    GW_FLEET_OK(test_fleet_hello_all(other, token, NULL, NULL, GW_WAIT_MS), other);
    size_t connected = 0;
    for (size_t i = 0; i < N; i++) {
        if (!test_fleet_is_open(fl, i))
            continue;
        Herald__Frame f;
        Herald__Connect body;
        test_frame_connect(&f, &body, token);
        f.id = 1;
        assert_int_equal(test_fleet_send(fl, i, &f), 0);
    }
    for (int64_t until = test_now_ms() + GW_WAIT_MS; connected < 4 && test_now_ms() < until;)
        assert_true(test_fleet_poll(fl, 20, count_connect_ok, &connected) >= 0);
    assert_int_equal(connected, 4);
    GW_FLEET_OK(test_fleet_ping_all(other, NULL, NULL, GW_WAIT_MS), other);
    gw_metric_await(h, "herald_unauthenticated_connections", NULL, 0);
    assert_int_equal(test_fleet_open_count(fl), 4);
    test_fleet_free(other);
    test_fleet_free(fl);
    gw_stop(state);
}

/* ============================================================================================
 * 4. The spec made exact
 * ========================================================================================== */

/* An Error about a frame names the frame by its id whenever herald could read one, the
 * undecodable ones included (PROTOCOL.md section 7); a bad length prefix leaves none: 0. */
static void expect_error_id(uint16_t port, const uint8_t *bytes, size_t len, uint64_t want_id,
                            const char *what)
{
    test_client_t c;
    GW_OK(test_client_auth(&c, port, "u", GW_WAIT_MS), &c);
    GW_OK(test_client_send_raw(&c, bytes, len, GW_WAIT_MS), &c);
    Herald__Frame *f = NULL;
    assert_int_equal(test_client_recv(&c, &f, GW_WAIT_MS), 1);
    char s[384];
    printf("hostile: %s: %s\n", what, test_frame_str(f, s, sizeof(s)));
    fflush(stdout);
    if (f->body_case != HERALD__FRAME__BODY_ERROR || f->id != want_id ||
        f->error->code != HERALD__ERROR__CODE__BAD_REQUEST)
        fail_msg("%s: want Error{BAD_REQUEST} id %llu, got %s", what, (unsigned long long)want_id,
                 s);
    proto_frame_free(f);
    int disc = -1;
    GW_OK(test_client_expect_close(&c, false, &disc, NULL, GW_WAIT_MS), &c);
    assert_int_equal(disc, HERALD__DISCONNECT__CODE__PROTOCOL_ERROR);
    test_client_close(&c);
}

static void test_gw_hostile_error_ids(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", NULL);
    /* Subscribe{channel: "\xff"} with id 7: the string is not UTF-8. */
    static const uint8_t bad_utf8[] = {0x07, 0x08, 0x07, 0x22, 0x03, 0x0a, 0x01, 0xff};
    expect_error_id(h->port, bad_utf8, sizeof(bad_utf8), 7, "undecodable frame id 7");
    /* Field 2 (connect) with wire type varint: a known field of the wrong type, id 300. */
    static const uint8_t bad_type[] = {0x05, 0x08, 0xac, 0x02, 0x10, 0x01};
    expect_error_id(h->port, bad_type, sizeof(bad_type), 300, "wrong wire type id 300");
    /* A server-only frame (Pong) with id 9: decodable, refused. */
    static const uint8_t pong[] = {0x04, 0x08, 0x09, 0x62, 0x00};
    expect_error_id(h->port, pong, sizeof(pong), 9, "server-only frame id 9");
    /* A length prefix of 11 bytes: no frame to take an id from. */
    static const uint8_t bad_prefix[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                         0x80, 0x80, 0x80, 0x80, 0x00};
    expect_error_id(h->port, bad_prefix, sizeof(bad_prefix), 0, "bad length prefix");
    gw_stop(state);
}

/* Disconnect{TOKEN_EXPIRED} at exp: PROTOCOL.md promises a second; this server keeps within
 * 250 ms (the wheel's 1 s tick and its phase made it 0.33-1.28 s late). Tokens of several
 * exps, on both loops. */
#define EXP_CLIENTS 8

static void exp_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    NL_UNUSED(fl);
    int64_t *at = arg;
    if (f && f->body_case == HERALD__FRAME__BODY_DISCONNECT &&
        f->disconnect->code == HERALD__DISCONNECT__CODE__TOKEN_EXPIRED && at[i] == 0)
        at[i] = wall_ms();
}

typedef struct exp_tokens_s {
    char tok[EXP_CLIENTS][GW_TOKEN_CAP];
    int64_t exp_s[EXP_CLIENTS];
} exp_tokens_t;

static const char *exp_token_of(size_t i, void *arg)
{
    return ((exp_tokens_t *)arg)->tok[i];
}

static void test_gw_hostile_token_expiry_on_time(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--io-threads", "2", NULL);
    exp_tokens_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    int64_t now_s = (int64_t)time(NULL);
    for (size_t i = 0; i < EXP_CLIENTS; i++) {
        /* exp = now_s + 2 + i % 3: whole seconds, 2 to 4 s ahead. */
        t->exp_s[i] = now_s + 2 + (int64_t)(i % 3);
        char user[16];
        snprintf(user, sizeof(user), "e%zu", i);
        gw_token(t->tok[i], user, "news", t->exp_s[i] - now_s, 0, GW_SECRET);
    }
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, EXP_CLIENTS), 0);
    GW_FLEET_OK(test_fleet_open(fl, h->port, EXP_CLIENTS, GW_WAIT_MS), fl);
    GW_FLEET_OK(test_fleet_hello_all(fl, NULL, exp_token_of, t, GW_WAIT_MS), fl);
    int64_t at[EXP_CLIENTS] = {0};
    for (int64_t until = test_now_ms() + 15000;
         test_fleet_open_count(fl) > 0 && test_now_ms() < until;)
        assert_true(test_fleet_poll(fl, 5, exp_cb, at) >= 0);
    int64_t worst = INT64_MIN;
    int64_t best = INT64_MAX;
    char list[256];
    size_t off = 0;
    for (size_t i = 0; i < EXP_CLIENTS; i++) {
        if (at[i] == 0)
            fail_msg("client %zu got no Disconnect{TOKEN_EXPIRED}", i);
        int64_t late = at[i] - t->exp_s[i] * 1000;
        worst = late > worst ? late : worst;
        best = late < best ? late : best;
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%lld", i ? " " : "",
                                (long long)late);
    }
    printf("hostile: token expiry: Disconnect{TOKEN_EXPIRED} after exp by (ms) %s\n", list);
    fflush(stdout);
    /* Not before exp (a millisecond of clock reading aside), and within the bound. */
    assert_true(best >= -5);
    int64_t bound = HOSTILE_SANITIZED ? 1000 : 250;
    if (worst > bound)
        fail_msg("TOKEN_EXPIRED came %lld ms after exp (bound %lld)", (long long)worst,
                 (long long)bound);
    test_fleet_free(fl);
    free(t);
    gw_stop(state);
}

/* A Subscribe and a Publish of its channel in one write: SubscribeOk first, then the Push of
 * the client's own message, then (any time) its PublishOk; and a PresenceRequest behind a
 * Subscribe sees the client in the channel. 24 channels, so that some are owned by the
 * client's own IO loop (where a publish ran at once while the join was still posted). */
static void test_gw_hostile_pipelined_order(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--io-threads", "2", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "pipeliner", GW_WAIT_MS), &c);
    int wrong = 0;
    for (int k = 0; k < 24; k++) {
        char chan[16];
        snprintf(chan, sizeof(chan), "order%d", k);
        nl_buf_t out;
        nl_buf_init(&out, 0);
        Herald__Frame f;
        Herald__Subscribe sub;
        Herald__Publish pub;
        test_frame_subscribe(&f, &sub, chan);
        f.id = 100 + 3 * (uint64_t)k;
        assert_int_equal(proto_frame_append(&out, &f), 0);
        test_frame_publish(&f, &pub, chan, "mine", 4);
        f.id = 101 + 3 * (uint64_t)k;
        assert_int_equal(proto_frame_append(&out, &f), 0);
        Herald__PresenceRequest pr = HERALD__PRESENCE_REQUEST__INIT;
        pr.channel = chan;
        Herald__Frame q = HERALD__FRAME__INIT;
        q.body_case = HERALD__FRAME__BODY_PRESENCE_REQUEST;
        q.presence_request = &pr;
        q.id = 102 + 3 * (uint64_t)k;
        assert_int_equal(proto_frame_append(&out, &q), 0);
        GW_OK(test_client_send_raw(&c, nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS), &c);
        nl_buf_deinit(&out);
        bool has_sub_ok = false;
        bool has_pub_ok = false;
        bool has_push = false;
        bool has_presence = false;
        uint64_t pub_offset = 0;
        uint64_t push_offset = 0;
        bool is_wrong = false;
        while (!(has_sub_ok && has_pub_ok && has_push && has_presence)) {
            Herald__Frame *r = NULL;
            int rc = test_client_recv(&c, &r, 3000);
            if (rc != 1) {
                is_wrong = true; /* the Push never came */
                break;
            }
            if (r->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK) {
                has_sub_ok = true;
            } else if (r->body_case == HERALD__FRAME__BODY_PUBLISH_OK) {
                has_pub_ok = true;
                pub_offset = r->publish_ok->offset;
                is_wrong |= !has_sub_ok; /* took effect before the Subscribe */
            } else if (r->body_case == HERALD__FRAME__BODY_PUSH) {
                has_push = true;
                push_offset = r->push->offset;
                is_wrong |= !has_sub_ok;
            } else if (r->body_case == HERALD__FRAME__BODY_PRESENCE_RESPONSE) {
                has_presence = true;
                is_wrong |= r->presence_response->num_clients != 1;
            } else {
                char s[384];
                fail_msg("%s: unexpected %s", chan, test_frame_str(r, s, sizeof(s)));
            }
            proto_frame_free(r);
        }
        is_wrong |= has_push && has_pub_ok && push_offset != pub_offset;
        wrong += is_wrong;
    }
    printf("hostile: pipelined Subscribe+Publish+PresenceRequest: %d of 24 channels out of "
           "order\n",
           wrong);
    fflush(stdout);
    assert_int_equal(wrong, 0);
    test_client_close(&c);
    gw_stop(state);
}

int main(void)
{
    test_raise_nofile(20000);
    /* TEST_HOSTILE_FILTER=*churn* runs one case (for figures: bench commands in README). */
    const char *filter = getenv("TEST_HOSTILE_FILTER");
    if (filter && filter[0])
        cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_hostile_error_ids, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_pipelined_order, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_token_expiry_on_time, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_preauth_per_address, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_preauth_flood, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_churn, gw_teardown),
        cmocka_unit_test_teardown(test_gw_hostile_presence_flood, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
