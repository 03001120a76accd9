/*
 * test_gw_presence: online status and channel presence on a real herald with 4 IO loops
 * (issue 17). Clients connect one after another, so the accept loop deals them round-robin
 * over the loops and every test has subscribers and users on several loops.
 *
 *   - Who is in a channel: PresenceRequest (allowed or forbidden by the token) and
 *     GET /api/presence agree on the clients (user, client id as ConnectOk gave it, connected
 *     since) and on the exact counts, a user with two connections on two loops counting once;
 *     Unsubscribe and a closed connection take clients out; a list limit truncates the list
 *     and says so, the counts staying exact.
 *   - Who is online: GET /api/online?user=U through a user's connections coming and going
 *     (online, connections, node, since, then offline with the close as last seen), and
 *     GET /api/online's counts and the /metrics figures with a user connected through two loops.
 *   - Join and leave events: delivered to listeners only, each exactly once and in order, with
 *     the right user and client ids; not a listener's own join, not an event from before its
 *     SubscribeOk; leaves when a client unsubscribes or closes.
 *   - Idle timeout: the closed client leaves the channel (a leave event), and goes offline.
 *   - Refresh batches: many pings make few engine refreshes (a counter), and last seen moves
 *     with the batches of active users only.
 *   - The admin endpoints' 400s and 401s.
 *
 * Nothing sleeps to synchronise: frames are awaited, "nothing else arrived" is a Ping answered
 * with nothing kept before its Pong, and state that herald changes on its own after the test
 * saw the cause (a close) is polled for with a deadline.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gwtest_util.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

#define N_LOOPS "4"
#define CHANNELS "room,other,c:*"

static const char *const key_hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};

/* herald with 4 loops, the test's secret and API key, node id n1, and the extra flags. */
static test_herald_t *start(void **state, const char *const *extra)
{
    const char *args[32] = {"--secret", GW_SECRET,   "--io-threads", N_LOOPS,          "--api-key",
                            GW_API_KEY, "--node-id", "n1",           "--publish-rate", "0"};
    size_t n = 10;
    for (size_t i = 0; extra && extra[i] && n + 1 < 32; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return gw_start_opts(state, &(test_herald_opts_t){.args = args, .cpu = -1});
}

/* Connects c as user with the channel claim chans. */
static void connect_as(const test_herald_t *h, test_client_t *c, const char *user,
                       const char *chans)
{
    char tok[GW_TOKEN_CAP];
    gw_token(tok, user, chans, 3600, 0, GW_SECRET);
    GW_OK(test_client_auth(c, h->port, tok, GW_WAIT_MS), c);
    assert_string_equal(c->user_id, user);
}

/* Subscribes (with join/leave events or not) and waits for SubscribeOk. */
static void subscribe(test_client_t *c, const char *chan, bool join_leave)
{
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, chan);
    body.join_leave = join_leave;
    Herald__Frame *r = NULL;
    int rc = test_client_request(c, &f, &r, GW_WAIT_MS);
    char fs[384];
    if (rc != 1 || r->body_case != HERALD__FRAME__BODY_SUBSCRIBE_OK)
        fail_msg("subscribe %s: rc %d, %s", chan, rc,
                 rc == 1 ? test_frame_str(r, fs, sizeof(fs)) : "no answer");
    proto_frame_free(r);
}

/* Sends PresenceRequest{chan}; returns the answer (PresenceResponse or Error; caller frees). */
static Herald__Frame *presence_request(test_client_t *c, const char *chan)
{
    Herald__PresenceRequest body = HERALD__PRESENCE_REQUEST__INIT;
    body.channel = (char *)(uintptr_t)chan;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_PRESENCE_REQUEST;
    f.presence_request = &body;
    Herald__Frame *r = NULL;
    if (test_client_request(c, &f, &r, GW_WAIT_MS) != 1)
        fail_msg("no answer to PresenceRequest %s", chan);
    return r;
}

static Herald__PresenceResponse *expect_presence(Herald__Frame *r)
{
    char fs[384];
    if (r->body_case != HERALD__FRAME__BODY_PRESENCE_RESPONSE)
        fail_msg("expected presence_response, got %s", test_frame_str(r, fs, sizeof(fs)));
    return r->presence_response;
}

/* The next frame on c must be a PresenceEvent of chan saying that who joined (or left). */
static void expect_event(test_client_t *c, const char *chan, bool is_join, const test_client_t *who)
{
    Herald__Frame *f = NULL;
    int rc = test_client_recv(c, &f, GW_WAIT_MS);
    if (rc != 1)
        fail_msg("%s: no event (%s %s expected): %d", c->user_id, is_join ? "join of" : "leave of",
                 who->client_id, rc);
    char fs[384];
    const Herald__PresenceEvent *e =
        f->body_case == HERALD__FRAME__BODY_PRESENCE_EVENT ? f->presence_event : NULL;
    const Herald__ClientInfo *info = NULL;
    if (e && e->n_joined + e->n_left == 1)
        info = e->n_joined ? e->joined[0] : e->left[0];
    if (!e || f->id != 0 || strcmp(e->channel, chan) != 0 || (e->n_joined == 1) != is_join ||
        !info || strcmp(info->user_id, who->user_id) != 0 ||
        strcmp(info->client_id, who->client_id) != 0 || info->connected_at_ms == 0)
        fail_msg("%s expected %s of %s/%s on %s, got %s", c->client_id, is_join ? "join" : "leave",
                 who->user_id, who->client_id, chan, test_frame_str(f, fs, sizeof(fs)));
    proto_frame_free(f);
}

/* Asserts that c has nothing queued before the answer to a Ping. */
static void expect_nothing_more(test_client_t *c)
{
    GW_OK(test_client_ping(c, GW_WAIT_MS), c);
    if (c->n_kept != 0) {
        char fs[384];
        fail_msg("%s received an unexpected %s", c->client_id,
                 test_frame_str(c->kept[0], fs, sizeof(fs)));
    }
}

/* GET path on the admin port with the key; returns the status and, for JSON, *out. */
static int admin_get(const test_herald_t *h, const char *path, const char *const *hdrs,
                     json_t **out)
{
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "GET", path, hdrs, NULL, 0, GW_WAIT_MS, &r);
    if (rc != 0)
        fail_msg("GET %s: %s", path, strerror(-rc));
    json_error_t err;
    json_t *j = json_loads(r.body, 0, &err);
    if (!j)
        fail_msg("GET %s: %d, not JSON: %s (%s)", path, r.status, r.body, err.text);
    int status = r.status;
    test_http_resp_free(&r);
    if (out)
        *out = j;
    else
        json_decref(j);
    return status;
}

/* GET path, which must answer 200 with a JSON object. The caller json_decrefs it. */
static json_t *admin_json(const test_herald_t *h, const char *path)
{
    json_t *j = NULL;
    int status = admin_get(h, path, key_hdrs, &j);
    if (status != 200 || !json_is_object(j)) {
        char *text = json_dumps(j, 0);
        fail_msg("GET %s: %d %s", path, status, text);
    }
    return j;
}

static json_int_t json_int_of(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("\"%s\" is not an integer", key);
    return json_integer_value(v);
}

/* Polls GET /api/presence?channel=chan until it reports want clients and users (herald removes
 * a closed client when its side of the connection finishes, after the test closed it). */
static void await_presence(const test_herald_t *h, const char *chan, json_int_t clients,
                           json_int_t users)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/presence?channel=%s", chan);
    json_int_t got_c = -1;
    json_int_t got_u = -1;
    for (int64_t until = test_now_ms() + GW_WAIT_MS;; poll(NULL, 0, 10)) {
        json_t *j = admin_json(h, path);
        got_c = json_int_of(j, "num_clients");
        got_u = json_int_of(j, "num_users");
        json_decref(j);
        if ((got_c == clients && got_u == users) || test_now_ms() >= until)
            break;
    }
    if (got_c != clients || got_u != users)
        fail_msg("%s: %lld clients, %lld users; want %lld, %lld", chan, (long long)got_c,
                 (long long)got_u, (long long)clients, (long long)users);
}

/* GET /api/online?user=user, polled until its "connections" is want. Returns the object. */
static json_t *await_online(const test_herald_t *h, const char *user, json_int_t want)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/online?user=%s", user);
    for (int64_t until = test_now_ms() + GW_WAIT_MS;; poll(NULL, 0, 10)) {
        json_t *j = admin_json(h, path);
        if (json_int_of(j, "connections") == want)
            return j;
        json_decref(j);
        if (test_now_ms() >= until)
            fail_msg("%s never had %lld connections", user, (long long)want);
    }
}

/* The clients of a PresenceResponse: each of cs appears once with its user and connected
 * since, and nothing else does. */
static void check_clients(Herald__ClientInfo **list, size_t n, test_client_t *const *cs, size_t ncs,
                          int64_t t0_ms)
{
    assert_int_equal(n, ncs);
    for (size_t k = 0; k < ncs; k++) {
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(list[i]->client_id, cs[k]->client_id) != 0)
                continue;
            hits++;
            assert_string_equal(list[i]->user_id, cs[k]->user_id);
            /* Connected since: whole seconds, at or after the second the test began. */
            assert_true((int64_t)list[i]->connected_at_ms >= t0_ms - 1000);
            assert_true((int64_t)list[i]->connected_at_ms <= (int64_t)nl_wall_ms());
        }
        if (hits != 1)
            fail_msg("client %s listed %zu times", cs[k]->client_id, hits);
    }
}

static void test_gw_presence_channel(void **state)
{
    int64_t t0 = (int64_t)nl_wall_ms();
    test_herald_t *h = start(state, NULL);
    static test_client_t c[6];
    /* u0 twice, on loops 0 and 2; c5's token does not allow "room". */
    static const char *const users[] = {"u0", "u1", "u0", "u2", "u3", "u4"};
    for (int i = 0; i < 6; i++)
        connect_as(h, &c[i], users[i], i == 5 ? "other" : CHANNELS);
    for (int i = 0; i < 4; i++)
        subscribe(&c[i], "room", false);
    subscribe(&c[4], "other", false);

    /* A member and a client that is not subscribed but allowed see the same answer. */
    for (int who = 1; who <= 4; who += 3) {
        Herald__Frame *r = presence_request(&c[who], "room");
        Herald__PresenceResponse *p = expect_presence(r);
        assert_string_equal(p->channel, "room");
        assert_int_equal(p->num_clients, 4);
        assert_int_equal(p->num_users, 3);
        assert_false(p->truncated);
        test_client_t *const in[] = {&c[0], &c[1], &c[2], &c[3]};
        check_clients(p->clients, p->n_clients, in, 4, t0);
        proto_frame_free(r);
    }
    /* Not allowed by the token, and not a channel name. */
    Herald__Frame *r = presence_request(&c[5], "room");
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_ERROR);
    assert_int_equal(r->error->code, HERALD__ERROR__CODE__FORBIDDEN);
    proto_frame_free(r);
    r = presence_request(&c[5], "bad name");
    assert_int_equal(r->body_case, HERALD__FRAME__BODY_ERROR);
    assert_int_equal(r->error->code, HERALD__ERROR__CODE__BAD_CHANNEL);
    proto_frame_free(r);
    /* The session goes on after those errors. */
    r = presence_request(&c[5], "other");
    assert_int_equal(expect_presence(r)->num_clients, 1);
    proto_frame_free(r);

    /* The admin API says the same. */
    json_t *j = admin_json(h, "/api/presence?channel=room");
    assert_string_equal(json_string_value(json_object_get(j, "channel")), "room");
    assert_int_equal(json_int_of(j, "num_clients"), 4);
    assert_int_equal(json_int_of(j, "num_users"), 3);
    assert_true(json_is_false(json_object_get(j, "truncated")));
    json_t *list = json_object_get(j, "clients");
    assert_int_equal(json_array_size(list), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(list, i);
        const char *id = json_string_value(json_object_get(e, "client_id"));
        const char *user = json_string_value(json_object_get(e, "user"));
        int k = 0;
        while (k < 4 && strcmp(c[k].client_id, id) != 0)
            k++;
        if (k == 4)
            fail_msg("admin lists unknown client %s", id);
        assert_string_equal(user, c[k].user_id);
        assert_true(json_int_of(e, "connected_at_ms") >= t0 - 1000);
    }
    json_decref(j);

    /* Unsubscribe takes a client out at once; a closed connection shortly after. */
    GW_OK(test_client_unsubscribe(&c[3], "room", GW_WAIT_MS), &c[3]);
    r = presence_request(&c[0], "room");
    Herald__PresenceResponse *p = expect_presence(r);
    assert_int_equal(p->num_clients, 3);
    assert_int_equal(p->num_users, 2);
    test_client_t *const left3[] = {&c[0], &c[1], &c[2]};
    check_clients(p->clients, p->n_clients, left3, 3, t0);
    proto_frame_free(r);
    test_client_close(&c[2]);
    await_presence(h, "room", 2, 2);
    test_client_close(&c[0]);
    await_presence(h, "room", 1, 1);

    /* /metrics: visible subscriptions (c1 in room, c4 in other) and channels. */
    gw_metric_await(h, "herald_presence_entries", NULL, 2);
    assert_int_equal((int)gw_metric(h, "herald_channels", NULL), 2);
    for (int i = 0; i < 6; i++)
        test_client_close(&c[i]);
    gw_stop(state);
}

/* A list limit of 2: the list is cut and says so, the counts stay exact. */
static void test_gw_presence_truncated(void **state)
{
    static const char *const extra[] = {"--presence-max-clients", "2", NULL};
    test_herald_t *h = start(state, extra);
    static test_client_t c[5];
    for (int i = 0; i < 5; i++) {
        char user[8];
        snprintf(user, sizeof(user), "t%d", i % 4);
        connect_as(h, &c[i], user, CHANNELS);
        subscribe(&c[i], "c:big", false);
    }
    Herald__Frame *r = presence_request(&c[0], "c:big");
    Herald__PresenceResponse *p = expect_presence(r);
    assert_int_equal(p->num_clients, 5);
    assert_int_equal(p->num_users, 4);
    assert_int_equal(p->n_clients, 2);
    assert_true(p->truncated);
    proto_frame_free(r);
    json_t *j = admin_json(h, "/api/presence?channel=c:big");
    assert_int_equal(json_int_of(j, "num_clients"), 5);
    assert_int_equal(json_int_of(j, "num_users"), 4);
    assert_int_equal(json_array_size(json_object_get(j, "clients")), 2);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);
    for (int i = 0; i < 5; i++)
        test_client_close(&c[i]);
    gw_stop(state);
}

static void test_gw_presence_online(void **state)
{
    test_herald_t *h = start(state, NULL);
    int64_t t0 = (int64_t)nl_wall_ms();
    static test_client_t c[4];
    /* "al" through loops 0 and 1, "bo" and "cy" once each. */
    connect_as(h, &c[0], "al", CHANNELS);
    connect_as(h, &c[1], "al", CHANNELS);
    connect_as(h, &c[2], "bo", CHANNELS);
    connect_as(h, &c[3], "cy", CHANNELS);

    json_t *j = admin_json(h, "/api/online?user=al");
    assert_string_equal(json_string_value(json_object_get(j, "user")), "al");
    assert_true(json_is_true(json_object_get(j, "online")));
    assert_int_equal(json_int_of(j, "connections"), 2);
    json_t *nodes = json_object_get(j, "nodes");
    assert_int_equal(json_array_size(nodes), 1);
    assert_string_equal(json_string_value(json_array_get(nodes, 0)), "n1");
    json_int_t since = json_int_of(j, "since_ms");
    assert_true(since >= t0 - 1000 && since <= (json_int_t)nl_wall_ms());
    json_int_t seen = json_int_of(j, "last_seen_ms");
    assert_true(seen >= t0 - 2000 && seen <= (json_int_t)nl_wall_ms());
    json_decref(j);

    /* Counts: al once though it is on two loops. */
    j = admin_json(h, "/api/online");
    assert_int_equal(json_int_of(j, "users"), 3);
    assert_int_equal(json_int_of(j, "connections"), 4);
    json_decref(j);
    assert_int_equal((int)gw_metric(h, "herald_users_online", NULL), 3);

    /* A user nobody has seen. */
    j = admin_json(h, "/api/online?user=nobody");
    assert_true(json_is_false(json_object_get(j, "online")));
    assert_int_equal(json_int_of(j, "connections"), 0);
    assert_int_equal(json_array_size(json_object_get(j, "nodes")), 0);
    assert_true(json_is_null(json_object_get(j, "last_seen_ms")));
    assert_null(json_object_get(j, "since_ms"));
    json_decref(j);

    /* One of al's connections goes: still online. Then the other: offline, last seen when it
     * closed. */
    test_client_close(&c[0]);
    j = await_online(h, "al", 1);
    assert_true(json_is_true(json_object_get(j, "online")));
    json_decref(j);
    int64_t before_close = (int64_t)nl_wall_ms();
    test_client_close(&c[1]);
    j = await_online(h, "al", 0);
    int64_t after_close = (int64_t)nl_wall_ms();
    assert_true(json_is_false(json_object_get(j, "online")));
    assert_int_equal(json_array_size(json_object_get(j, "nodes")), 0);
    seen = json_int_of(j, "last_seen_ms");
    if (seen < before_close || seen > after_close)
        fail_msg("last seen %lld, closed between %lld and %lld", (long long)seen,
                 (long long)before_close, (long long)after_close);
    json_decref(j);
    j = admin_json(h, "/api/online");
    assert_int_equal(json_int_of(j, "users"), 2);
    assert_int_equal(json_int_of(j, "connections"), 2);
    json_decref(j);
    gw_metric_await(h, "herald_users_online", NULL, 2);
    gw_metric_await(h, "herald_last_seen_records", NULL, 1);
    for (int i = 0; i < 4; i++)
        test_client_close(&c[i]);
    gw_stop(state);
}

static void test_gw_presence_admin_errors(void **state)
{
    test_herald_t *h = start(state, NULL);
    static const char *const bad[] = {
        "/api/presence",
        "/api/presence?channel=",
        "/api/presence?channel=a%00b",
        "/api/presence?channel=no%20spaces",
        "/api/presence?chan=room",
        "/api/online?user=",
        "/api/online?user=a%00b",
        "/api/online?user=%ff%fe",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = NULL;
        int status = admin_get(h, bad[i], key_hdrs, &j);
        if (status != 400 || !json_is_string(json_object_get(j, "error")))
            fail_msg("GET %s: %d, want 400 with an error", bad[i], status);
        json_decref(j);
    }
    /* Too long a user id (a token's sub is at most 128 bytes). */
    char path[300];
    int n = snprintf(path, sizeof(path), "/api/online?user=");
    memset(path + n, 'x', 129);
    path[n + 129] = '\0';
    assert_int_equal(admin_get(h, path, key_hdrs, NULL), 400);
    /* The API key is required. */
    assert_int_equal(admin_get(h, "/api/presence?channel=room", NULL, NULL), 401);
    assert_int_equal(admin_get(h, "/api/online", NULL, NULL), 401);
    assert_int_equal(admin_get(h, "/api/online?user=al", NULL, NULL), 401);
    gw_stop(state);
}

static void test_gw_presence_events(void **state)
{
    test_herald_t *h = start(state, NULL);
    /* Round-robin: L on loop 0, A 1, B 2, C 3, Z 0, M 1, W 2. */
    static test_client_t L, A, B, C, Z, M, W;
    connect_as(h, &L, "lu", CHANNELS);
    connect_as(h, &A, "au", CHANNELS);
    connect_as(h, &B, "bu", CHANNELS);
    connect_as(h, &C, "cu", CHANNELS);
    connect_as(h, &Z, "zu", CHANNELS);
    connect_as(h, &M, "mu", CHANNELS);
    connect_as(h, &W, "wu", CHANNELS);
    subscribe(&L, "room", true);
    double joins0 = gw_metric(h, "herald_presence_events_total", "join");
    double leaves0 = gw_metric(h, "herald_presence_events_total", "leave");

    subscribe(&A, "room", false);
    expect_event(&L, "room", true, &A);
    subscribe(&C, "room", false);
    expect_event(&L, "room", true, &C);
    GW_OK(test_client_unsubscribe(&A, "room", GW_WAIT_MS), &A);
    expect_event(&L, "room", false, &A);
    /* A second listener: it does not hear its own join; the first does. */
    subscribe(&B, "room", true);
    expect_event(&L, "room", true, &B);
    subscribe(&A, "room", false);
    expect_event(&L, "room", true, &A);
    expect_event(&B, "room", true, &A);
    /* Other channels' joins are not room's. */
    subscribe(&A, "other", false);
    /* A closed connection leaves. */
    test_client_close(&C);
    expect_event(&L, "room", false, &C);
    expect_event(&B, "room", false, &C);
    /* Listeners only, each event once. */
    expect_nothing_more(&L);
    expect_nothing_more(&B);
    expect_nothing_more(&A);
    /* Joins: A, C, B, A in room, A in other (built, though nobody listens there). */
    assert_int_equal(gw_metric(h, "herald_presence_events_total", "join") - joins0, 5);
    assert_int_equal(gw_metric(h, "herald_presence_events_total", "leave") - leaves0, 2);
    assert_int_equal(gw_metric(h, "herald_presence_listeners", NULL), 2);
    /* Listener channels are neither channels nor subscriptions: room, other; L, A twice, B. */
    assert_int_equal(gw_metric(h, "herald_channels", NULL), 2);
    assert_int_equal(gw_metric(h, "herald_subscriptions", NULL), 4);

    /* An event from before a listener's SubscribeOk does not reach it: Z joins, and once both
     * listeners heard it (so it is on no loop's way any more), M subscribes. */
    subscribe(&Z, "room", false);
    expect_event(&L, "room", true, &Z);
    expect_event(&B, "room", true, &Z);
    subscribe(&M, "room", true);
    expect_event(&L, "room", true, &M);
    expect_event(&B, "room", true, &M);
    subscribe(&W, "room", false);
    expect_event(&M, "room", true, &W); /* its first event: not Z's join, not its own */
    expect_event(&L, "room", true, &W);
    expect_event(&B, "room", true, &W);
    /* A listener that leaves hears nothing more; the others hear it leave. */
    GW_OK(test_client_unsubscribe(&B, "room", GW_WAIT_MS), &B);
    expect_event(&L, "room", false, &B);
    expect_event(&M, "room", false, &B);
    GW_OK(test_client_unsubscribe(&W, "room", GW_WAIT_MS), &W);
    expect_event(&L, "room", false, &W);
    expect_event(&M, "room", false, &W);
    expect_nothing_more(&B);
    expect_nothing_more(&L);
    expect_nothing_more(&M);
    expect_nothing_more(&Z);
    gw_metric_await(h, "herald_presence_listeners", NULL, 2);

    test_client_close(&L);
    expect_event(&M, "room", false, &L);
    test_client_close(&M);
    gw_metric_await(h, "herald_presence_listeners", NULL, 0);
    /* No listener left: a join builds no event. */
    double joins1 = gw_metric(h, "herald_presence_events_total", "join");
    subscribe(&W, "room", false);
    assert_int_equal(gw_metric(h, "herald_presence_events_total", "join"), joins1);
    test_client_close(&A);
    test_client_close(&B);
    test_client_close(&Z);
    test_client_close(&W);
    gw_stop(state);
}

/* A client closed for idleness leaves its channels (a leave event) and goes offline. */
static void test_gw_presence_idle_timeout(void **state)
{
    /* Long enough that the listener, silent until it starts pinging, outlives a slow start
     * (a sanitizer build beside the fuzzers). */
    static const char *const extra[] = {"--ping-interval", "2s", "--idle-timeout", "5s", NULL};
    test_herald_t *h = start(state, extra);
    static test_client_t L, S;
    connect_as(h, &L, "listener", CHANNELS);
    connect_as(h, &S, "silent", CHANNELS);
    subscribe(&L, "room", true);
    subscribe(&S, "room", false);
    expect_event(&L, "room", true, &S);
    /* L pings (its events are kept meanwhile) while the silent client waits for its close. */
    int64_t deadline = test_now_ms() + 2 * 5000 + GW_WAIT_MS;
    while (!test_client_is_closed(&S, 300)) {
        if (test_now_ms() > deadline)
            fail_msg("the silent client was not closed");
        GW_OK(test_client_ping(&L, GW_WAIT_MS), &L);
    }
    int disc = -1;
    GW_OK(test_client_expect_close(&S, false, &disc, NULL, GW_WAIT_MS), &S);
    assert_int_equal(disc, HERALD__DISCONNECT__CODE__IDLE_TIMEOUT);
    expect_event(&L, "room", false, &S);
    Herald__Frame *r = presence_request(&L, "room");
    assert_int_equal(expect_presence(r)->num_clients, 1);
    proto_frame_free(r);
    json_t *j = await_online(h, "silent", 0);
    assert_true(json_is_false(json_object_get(j, "online")));
    assert_true(json_int_of(j, "last_seen_ms") > 0);
    json_decref(j);
    test_client_close(&L);
    test_client_close(&S);
    gw_stop(state);
}

/* GET /api/online?user=user's last_seen_ms. */
static json_int_t last_seen(const test_herald_t *h, const char *user)
{
    char path[64];
    snprintf(path, sizeof(path), "/api/online?user=%s", user);
    json_t *j = admin_json(h, path);
    json_int_t v = json_int_of(j, "last_seen_ms");
    json_decref(j);
    return v;
}

#define PINGS 100

/* Heartbeats refresh status in batches: 4 clients on 4 loops ping 100 times each, and the
 * engine gets at most one batch per loop per refresh interval (1 s here). Last seen moves with
 * those batches, for active users only. */
static void test_gw_presence_refresh_batching(void **state)
{
    static const char *const extra[] = {"--presence-refresh-interval", "1s", NULL};
    test_herald_t *h = start(state, extra);
    static test_client_t p[4];
    for (int i = 0; i < 4; i++) {
        char user[8];
        snprintf(user, sizeof(user), "p%d", i);
        connect_as(h, &p[i], user, CHANNELS);
    }
    double pings0 = gw_metric(h, "herald_frames_in_total", "ping");
    double batches0 = gw_metric(h, "herald_presence_refreshes_total", NULL);
    int64_t t0 = test_now_ms();
    for (int k = 0; k < PINGS; k++)
        for (int i = 0; i < 4; i++)
            GW_OK(test_client_ping(&p[i], GW_WAIT_MS), &p[i]);
    /* The pings' batches follow within an interval. */
    double batches1 = batches0;
    for (int64_t until = test_now_ms() + GW_WAIT_MS;; poll(NULL, 0, 10)) {
        batches1 = gw_metric(h, "herald_presence_refreshes_total", NULL);
        if (batches1 >= batches0 + 4 || test_now_ms() >= until)
            break;
    }
    int64_t elapsed_ms = test_now_ms() - t0;
    double pings = gw_metric(h, "herald_frames_in_total", "ping") - pings0;
    double batches = batches1 - batches0;
    assert_int_equal(pings, 4 * PINGS);
    /* Each loop: at most one batch per started interval, plus one already due. */
    double most = 4.0 * ((double)elapsed_ms / 1000.0 + 2.0);
    if (batches < 4 || batches > most)
        fail_msg("%g pings made %g refresh batches in %lld ms (want 4..%g)", pings, batches,
                 (long long)elapsed_ms, most);
    assert_true(gw_metric(h, "herald_presence_refreshed_users_total", NULL) >= 4);

    /* p1 stays active and p0 idle: p1's last seen moves with its loop's batches, p0's does
     * not, however many batches go by. p0's loop stamps p0 at its first tick after p0's last
     * ping, within the interval: p0's last seen is read once more than that has passed. Time
     * passes in p1's pings. */
    int64_t p0_last_ping_ms = test_now_ms();
    json_int_t idle0 = -1;
    json_int_t active0 = 0;
    json_int_t active = 0;
    double b0 = 0;
    for (int64_t until = test_now_ms() + GW_WAIT_MS;;) {
        GW_OK(test_client_ping(&p[1], GW_WAIT_MS), &p[1]);
        if (idle0 < 0 && test_now_ms() >= p0_last_ping_ms + 1500) {
            idle0 = last_seen(h, "p0");
            active0 = last_seen(h, "p1");
            b0 = gw_metric(h, "herald_presence_refreshes_total", NULL);
        }
        if (idle0 >= 0) {
            active = last_seen(h, "p1");
            if (active > active0 && gw_metric(h, "herald_presence_refreshes_total", NULL) >= b0 + 3)
                break;
        }
        if (test_now_ms() >= until)
            fail_msg("p1's last seen stayed at %lld through its batches", (long long)active0);
    }
    assert_int_equal(last_seen(h, "p0"), idle0);
    for (int i = 0; i < 4; i++)
        test_client_close(&p[i]);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_presence_channel, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_truncated, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_online, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_admin_errors, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_events, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_idle_timeout, gw_teardown),
        cmocka_unit_test_teardown(test_gw_presence_refresh_batching, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
