/*
 * test_gw_pubsub: subscribe, publish and receive through a real herald with 4 IO loops. Enough
 * clients connect that every loop holds some (checked in /metrics, herald_connections per
 * loop); a publish from one client reaches the subscribers on every loop; PublishOk offsets
 * grow by one per message on a channel; every subscriber sees Push offsets consecutive, with
 * the published payloads, in order. Channels are isolated, Unsubscribe stops delivery, a
 * pipelined burst of publishes keeps its order, and a Subscribe withdrawn by an Unsubscribe
 * before the engine answered it is still answered (Error{CANCELLED}).
 *
 * With --pin-io-threads each IO loop thread may run on exactly one CPU, the i-th of the CPUs
 * herald inherited (read back from /proc/<pid>/task/<tid>/status); without it, on all of them.
 * --io-threads 0 starts one loop per CPU herald may run on: one when started on one CPU.
 *
 * "Nothing else arrived" is proven without waiting for silence: a Ping is answered after
 * everything queued before it, so a Pong with no frame kept ahead of it means nothing was.
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
#include <dirent.h>
#include <sched.h>

#include "gwtest_util.h"
#include "proto_frame.h"

#define N_SUBS 16
#define N_LOOPS "4"
#define N_MSGS 50
#define N_BURST 500
#define CHANNELS "room,other,c:*"

static test_herald_t *start(void **state)
{
    return gw_start(state, "--secret", GW_SECRET, "--io-threads", N_LOOPS, "--publish-rate", "0",
                    "--api-key", GW_API_KEY, NULL);
}

/* Connects n clients as users u0..u(n-1) with the CHANNELS claim. */
static void connect_all(const test_herald_t *h, test_client_t *cs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char user[32];
        char tok[GW_TOKEN_CAP];
        snprintf(user, sizeof(user), "u%zu", i);
        gw_token(tok, user, CHANNELS, 3600, 0, GW_SECRET);
        GW_OK(test_client_auth(&cs[i], h->port, tok, GW_WAIT_MS), &cs[i]);
        assert_string_equal(cs[i].user_id, user);
    }
}

static void close_all(test_client_t *cs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        test_client_close(&cs[i]);
}

/* Asserts that c has nothing queued before the answer to a Ping. */
static void expect_nothing_more(test_client_t *c, size_t who)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("client %zu received an unexpected %s", who,
                 test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

/* Reads GET /metrics and counts the loops whose herald_connections gauge is positive. */
static int loops_with_connections(const test_herald_t *h)
{
    test_http_resp_t r;
    const char *hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
    int rc = test_http_request(h->admin_port, "GET", "/metrics", hdrs, NULL, 0, GW_WAIT_MS, &r);
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, 200);
    int loops = 0;
    for (const char *p = r.body; (p = strstr(p, "\nherald_connections{")) != NULL; p++) {
        const char *v = strchr(p + 1, ' ');
        if (v && strtod(v + 1, NULL) > 0)
            loops++;
    }
    test_http_resp_free(&r);
    return loops;
}

static void test_gw_pubsub_across_loops(void **state)
{
    test_herald_t *h = start(state);
    static test_client_t subs[N_SUBS];
    connect_all(h, subs, N_SUBS);
    /* Connections are dealt round-robin, so 16 of them cover all 4 loops. */
    assert_int_equal(loops_with_connections(h), 4);

    uint64_t base[N_SUBS];
    for (size_t i = 0; i < N_SUBS; i++)
        GW_OK(test_client_subscribe(&subs[i], "room", &base[i], GW_WAIT_MS), &subs[i]);
    for (size_t i = 1; i < N_SUBS; i++)
        assert_int_equal(base[i], base[0]);

    /* The last subscriber publishes; it hears its own messages too. */
    test_client_t *pub = &subs[N_SUBS - 1];
    uint64_t prev = base[0];
    for (int m = 1; m <= N_MSGS; m++) {
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "msg-%d", m);
        uint64_t off = 0;
        GW_OK(test_client_publish(pub, "room", payload, (size_t)len, &off, GW_WAIT_MS), pub);
        assert_int_equal(off, prev + 1);
        prev = off;
    }
    for (size_t i = 0; i < N_SUBS; i++) {
        for (int m = 1; m <= N_MSGS; m++) {
            Herald__Frame *f = NULL;
            GW_OK(test_client_expect_push(&subs[i], "room", base[i] + (uint64_t)m, &f, GW_WAIT_MS),
                  &subs[i]);
            char payload[32];
            int len = snprintf(payload, sizeof(payload), "msg-%d", m);
            assert_int_equal(f->push->payload.len, (size_t)len);
            assert_memory_equal(f->push->payload.data, payload, (size_t)len);
            assert_true(f->push->publish_time_ms > 0);
            proto_frame_free(f);
        }
        expect_nothing_more(&subs[i], i);
    }
    close_all(subs, N_SUBS);
    gw_stop(state);
}

/* The CPUs thread tid of pid may run on (Cpus_allowed_list in its status), into set. */
static void thread_cpus(pid_t pid, const char *tid, cpu_set_t *set)
{
    char path[320];
    snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid, tid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    CPU_ZERO(set);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Cpus_allowed_list:", 18) != 0)
            continue;
        /* "0-3,6" */
        for (char *p = line + 18; *p && *p != '\n';) {
            char *end;
            long a = strtol(p, &end, 10);
            long b = *end == '-' ? strtol(end + 1, &end, 10) : a;
            for (long c = a; c <= b; c++)
                CPU_SET((int)c, set);
            p = *end == ',' ? end + 1 : end;
        }
    }
    fclose(f);
}

/* h's IO loop threads (comm herald-io<i>): up to max of them, each as its loop index and its
 * tid (a /proc/<pid>/task entry). Returns how many there are. */
typedef struct loop_thread_s {
    int loop;
    char tid[24];
} loop_thread_t;

static int loop_threads(const test_herald_t *h, loop_thread_t *out, int max)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)h->pid);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[352];
        char comm[32] = "";
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(out->tid))
            continue;
        snprintf(path, sizeof(path), "%s/%s/comm", dir, e->d_name);
        FILE *f = fopen(path, "r");
        bool is_loop = f && fgets(comm, sizeof(comm), f) && strncmp(comm, "herald-io", 9) == 0;
        if (f)
            fclose(f);
        if (!is_loop)
            continue;
        if (n < max) {
            out[n].loop = atoi(comm + 9);
            snprintf(out[n].tid, sizeof(out[n].tid), "%s", e->d_name);
        }
        n++;
    }
    closedir(d);
    return n;
}

/* Checks every herald-io<i> thread of h: pinned to the i-th CPU of this process's affinity
 * set (which herald inherited), or allowed all of that set. Returns the loop threads seen. */
static int check_loop_affinity(const test_herald_t *h, bool is_pinned)
{
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    int cpus[CPU_SETSIZE];
    int n_cpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            cpus[n_cpus++] = c;
    loop_thread_t ts[64];
    int n = loop_threads(h, ts, 64);
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        cpu_set_t got;
        thread_cpus(h->pid, ts[i].tid, &got);
        int want = cpus[ts[i].loop % n_cpus];
        if (is_pinned && (CPU_COUNT(&got) != 1 || !CPU_ISSET(want, &got)))
            fail_msg("herald-io%d may run on %d CPUs, not only CPU %d", ts[i].loop, CPU_COUNT(&got),
                     want);
        if (!is_pinned && !CPU_EQUAL(&got, &mine))
            fail_msg("herald-io%d is pinned though pin_io_threads is off", ts[i].loop);
    }
    return n;
}

static void test_gw_pubsub_pinned_loops(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--io-threads", N_LOOPS,
                                "--pin-io-threads", "--api-key", GW_API_KEY, NULL);
    assert_int_equal(check_loop_affinity(h, true), atoi(N_LOOPS));
    /* Pinned loops still serve: a subscriber on each loop hears a publish. */
    static test_client_t subs[4];
    connect_all(h, subs, 4);
    assert_int_equal(loops_with_connections(h), 4);
    uint64_t base[4];
    for (size_t i = 0; i < 4; i++)
        GW_OK(test_client_subscribe(&subs[i], "room", &base[i], GW_WAIT_MS), &subs[i]);
    uint64_t off = 0;
    GW_OK(test_client_publish(&subs[0], "room", "pinned", 6, &off, GW_WAIT_MS), &subs[0]);
    for (size_t i = 0; i < 4; i++) {
        Herald__Frame *f = NULL;
        GW_OK(test_client_expect_push(&subs[i], "room", base[i] + 1, &f, GW_WAIT_MS), &subs[i]);
        proto_frame_free(f);
    }
    close_all(subs, 4);
    gw_stop(state);

    h = start(state);
    assert_int_equal(check_loop_affinity(h, false), atoi(N_LOOPS));
    gw_stop(state);
}

/* io_threads 0 means one loop per CPU herald may run on, not per CPU of the machine: started
 * on one CPU (as under taskset or a one-CPU cpuset), herald runs one loop. */
static void test_gw_pubsub_loops_follow_affinity(void **state)
{
    const char *args[] = {"--secret", GW_SECRET, "--io-threads", "0", "--api-key",
                          GW_API_KEY, NULL};
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    int first = 0;
    while (!CPU_ISSET(first, &mine))
        first++;
    test_herald_t *h = gw_start_opts(state, &(test_herald_opts_t){.args = args, .cpu = first});
    loop_thread_t ts[4];
    assert_int_equal(loop_threads(h, ts, 4), 1);
    gw_stop(state);
}

static void test_gw_pubsub_channels_isolated(void **state)
{
    test_herald_t *h = start(state);
    static test_client_t cs[8];
    connect_all(h, cs, 8);
    uint64_t room_base = 0;
    uint64_t other_base = 0;
    /* 0..3 on room, 4..7 on other, 0 and 4 on both. */
    for (size_t i = 0; i < 8; i++) {
        const char *ch = i < 4 ? "room" : "other";
        GW_OK(test_client_subscribe(&cs[i], ch, i < 4 ? &room_base : &other_base, GW_WAIT_MS),
              &cs[i]);
    }
    GW_OK(test_client_subscribe(&cs[0], "other", NULL, GW_WAIT_MS), &cs[0]);
    GW_OK(test_client_subscribe(&cs[4], "room", NULL, GW_WAIT_MS), &cs[4]);

    uint64_t off_other = 0;
    GW_OK(test_client_publish(&cs[7], "other", "o", 1, &off_other, GW_WAIT_MS), &cs[7]);
    assert_int_equal(off_other, other_base + 1);
    uint64_t off_room = 0;
    GW_OK(test_client_publish(&cs[1], "room", "r", 1, &off_room, GW_WAIT_MS), &cs[1]);
    assert_int_equal(off_room, room_base + 1);

    for (size_t i = 0; i < 8; i++) {
        bool is_room = i < 4 || i == 4;
        bool is_other = i >= 4 || i == 0;
        /* Pushes of different channels may interleave; collect both by channel. */
        for (int k = 0; k < (int)is_room + (int)is_other; k++) {
            Herald__Frame *f = NULL;
            assert_int_equal(test_client_recv(&cs[i], &f, GW_WAIT_MS), 1);
            char fs[384];
            if (f->body_case != HERALD__FRAME__BODY_PUSH)
                fail_msg("client %zu: %s", i, test_frame_str(f, fs, sizeof(fs)));
            bool ok =
                (strcmp(f->push->channel, "room") == 0 && is_room && f->push->offset == off_room) ||
                (strcmp(f->push->channel, "other") == 0 && is_other &&
                 f->push->offset == off_other);
            if (!ok)
                fail_msg("client %zu got %s", i, test_frame_str(f, fs, sizeof(fs)));
            proto_frame_free(f);
        }
        expect_nothing_more(&cs[i], i);
    }

    /* After Unsubscribe, room no longer reaches client 2; client 3 still hears it. */
    GW_OK(test_client_unsubscribe(&cs[2], "room", GW_WAIT_MS), &cs[2]);
    GW_OK(test_client_publish(&cs[1], "room", "r2", 2, &off_room, GW_WAIT_MS), &cs[1]);
    GW_OK(test_client_expect_push(&cs[3], "room", off_room, NULL, GW_WAIT_MS), &cs[3]);
    expect_nothing_more(&cs[2], 2);
    /* Unsubscribing twice is an error that keeps the session. */
    int rc = test_client_unsubscribe(&cs[2], "room", GW_WAIT_MS);
    if (rc != -EPROTO || cs[2].last_err_code != HERALD__ERROR__CODE__NOT_SUBSCRIBED)
        fail_msg("second Unsubscribe: expected NOT_SUBSCRIBED, got %d %s", rc,
                 test_client_what(&cs[2]));
    rc = test_client_subscribe(&cs[3], "room", NULL, GW_WAIT_MS);
    if (rc != -EPROTO || cs[3].last_err_code != HERALD__ERROR__CODE__ALREADY_SUBSCRIBED)
        fail_msg("second Subscribe: expected ALREADY_SUBSCRIBED, got %d %s", rc,
                 test_client_what(&cs[3]));
    expect_nothing_more(&cs[2], 2);
    close_all(cs, 8);
    gw_stop(state);
}

static void test_gw_pubsub_pipelined_burst(void **state)
{
    test_herald_t *h = start(state);
    static test_client_t cs[8];
    connect_all(h, cs, 8);
    uint64_t base = 0;
    for (size_t i = 1; i < 8; i++)
        GW_OK(test_client_subscribe(&cs[i], "c:burst", &base, GW_WAIT_MS), &cs[i]);

    /* N_BURST publishes written back to back, then their answers read in order. */
    test_client_t *pub = &cs[0];
    for (uint64_t m = 1; m <= N_BURST; m++) {
        Herald__Frame f;
        Herald__Publish body;
        test_frame_publish(&f, &body, "c:burst", &m, sizeof(m));
        f.id = 1000 + m;
        GW_OK(test_client_send(pub, &f, GW_WAIT_MS), pub);
    }
    for (uint64_t m = 1; m <= N_BURST; m++) {
        Herald__Frame *r = NULL;
        assert_int_equal(test_client_recv(pub, &r, GW_WAIT_MS), 1);
        char fs[384];
        if (r->body_case != HERALD__FRAME__BODY_PUBLISH_OK || r->id != 1000 + m ||
            r->publish_ok->offset != base + m)
            fail_msg("publish %llu: got %s", (unsigned long long)m,
                     test_frame_str(r, fs, sizeof(fs)));
        proto_frame_free(r);
    }
    for (size_t i = 1; i < 8; i++) {
        for (uint64_t m = 1; m <= N_BURST; m++) {
            Herald__Frame *f = NULL;
            GW_OK(test_client_expect_push(&cs[i], "c:burst", base + m, &f, GW_WAIT_MS), &cs[i]);
            assert_int_equal(f->push->payload.len, sizeof(m));
            assert_memory_equal(f->push->payload.data, &m, sizeof(m));
            proto_frame_free(f);
        }
        expect_nothing_more(&cs[i], i);
    }
    close_all(cs, 8);
    gw_stop(state);
}

/* Reads the next frame and fails unless it has this body and id. */
static void expect_frame(test_client_t *c, Herald__Frame__BodyCase body, uint64_t id,
                         Herald__Error__Code code)
{
    Herald__Frame *r = NULL;
    GW_OK(test_client_recv(c, &r, GW_WAIT_MS) == 1 ? 0 : -EIO, c);
    char fs[384];
    if (r->body_case != body || r->id != id ||
        (body == HERALD__FRAME__BODY_ERROR && r->error->code != code))
        fail_msg("expected %s id %llu, got %s", proto_body_name(body), (unsigned long long)id,
                 test_frame_str(r, fs, sizeof(fs)));
    proto_frame_free(r);
}

/* Subscribe, Unsubscribe of the same channel and a Ping in one write: the engine answers the
 * join only after the Unsubscribe ran, and the Subscribe must still get its answer. */
static void test_gw_pubsub_unsubscribe_while_joining(void **state)
{
    test_herald_t *h = start(state);
    static test_client_t cs[1];
    connect_all(h, cs, 1);
    nl_buf_t out;
    nl_buf_init(&out, 0);
    Herald__Frame f;
    Herald__Subscribe sub;
    test_frame_subscribe(&f, &sub, "c:withdrawn");
    f.id = 2;
    assert_int_equal(proto_frame_append(&out, &f), 0);
    Herald__Unsubscribe unsub;
    test_frame_unsubscribe(&f, &unsub, "c:withdrawn");
    f.id = 3;
    assert_int_equal(proto_frame_append(&out, &f), 0);
    Herald__Ping ping;
    test_frame_ping(&f, &ping);
    f.id = 4;
    assert_int_equal(proto_frame_append(&out, &f), 0);
    GW_OK(test_client_send_raw(&cs[0], nl_buf_peek(&out), nl_buf_readable(&out), GW_WAIT_MS),
          &cs[0]);
    nl_buf_deinit(&out);
    expect_frame(&cs[0], HERALD__FRAME__BODY_ERROR, 2, HERALD__ERROR__CODE__CANCELLED);
    expect_frame(&cs[0], HERALD__FRAME__BODY_UNSUBSCRIBE_OK, 3, 0);
    expect_frame(&cs[0], HERALD__FRAME__BODY_PONG, 4, 0);
    /* The late join answer is dropped, and the channel works as before. */
    expect_nothing_more(&cs[0], 0);
    uint64_t offset = 0;
    GW_OK(test_client_subscribe(&cs[0], "c:withdrawn", &offset, GW_WAIT_MS), &cs[0]);
    GW_OK(test_client_unsubscribe(&cs[0], "c:withdrawn", GW_WAIT_MS), &cs[0]);
    expect_nothing_more(&cs[0], 0);
    close_all(cs, 1);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_pubsub_across_loops, gw_teardown),
        cmocka_unit_test_teardown(test_gw_pubsub_channels_isolated, gw_teardown),
        cmocka_unit_test_teardown(test_gw_pubsub_pinned_loops, gw_teardown),
        cmocka_unit_test_teardown(test_gw_pubsub_loops_follow_affinity, gw_teardown),
        cmocka_unit_test_teardown(test_gw_pubsub_pipelined_burst, gw_teardown),
        cmocka_unit_test_teardown(test_gw_pubsub_unsubscribe_while_joining, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
