/*
 * test_gw_auth: the Connect handshake of a real herald: a good token (ConnectOk with the
 * token's user), an expired one (Error TOKEN_EXPIRED, Disconnect, close), one that expires
 * during the session (Disconnect TOKEN_EXPIRED at its exp, unprompted), one that outlives the
 * idle timeout (idleness closes it), forged ones (another
 * key, tampered claims, alg "none", not a JWT: Error UNAUTHORIZED, Disconnect, close), a
 * channel outside the token's channels claim (Error FORBIDDEN, the session goes on), frames
 * before Connect (Error BAD_REQUEST and close), a second Connect, and --insecure (any token
 * is the user id).
 * Clients that send Subscribe and Ping behind Connect in one write (PROTOCOL.md section 3) get
 * ConnectOk first, then the other two answers, and once idle leave herald holding no input storage
 * for them (herald_input_held_bytes 0): those frames waited while the token was checked and were
 * consumed outside netlib's read, which kept about 1 KiB per connection for good (issue 25).
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
#include <time.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "proto_frame.h"

/* Connects with token and asserts Error{code} answering Connect, then Disconnect{AUTH_FAILED
 * or TOKEN_EXPIRED} and the close. */
static void expect_refused(uint16_t port, const char *token, Herald__Error__Code code)
{
    test_client_t c;
    GW_OK(test_client_open(&c, port, GW_WAIT_MS), &c);
    int rc = test_client_hello(&c, token, GW_WAIT_MS);
    if (rc != -EPROTO || c.last_err_code != (int)code)
        fail_msg("Connect with a bad token: expected Error code %d, got rc %d: %s", (int)code, rc,
                 test_client_what(&c));
    int disc = -1;
    int err = -1;
    GW_OK(test_client_expect_close(&c, false, &disc, &err, GW_WAIT_MS), &c);
    if (disc != HERALD__DISCONNECT__CODE__AUTH_FAILED &&
        disc != HERALD__DISCONNECT__CODE__TOKEN_EXPIRED)
        fail_msg("expected Disconnect AUTH_FAILED/TOKEN_EXPIRED before the close, got %d", disc);
    assert_int_equal(err, -1); /* nothing but the one Error */
    test_client_close(&c);
}

static void test_gw_auth_good_token(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "alice", "news,chat:*", 3600, 0, GW_SECRET);

    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    assert_string_equal(c.user_id, "alice");
    assert_true(c.client_id[0] != '\0');
    assert_true(c.ping_interval_ms > 0);
    assert_true(c.idle_timeout_ms > c.ping_interval_ms);
    assert_true(c.max_frame_bytes > 0);
    GW_OK(test_client_subscribe(&c, "news", NULL, GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "chat:room1", NULL, GW_WAIT_MS), &c);
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);

    /* A second connection of the same user gets its own client id. */
    test_client_t d;
    GW_OK(test_client_auth(&d, h->port, tok, GW_WAIT_MS), &d);
    assert_string_equal(d.user_id, "alice");
    assert_string_not_equal(d.client_id, c.client_id);
    test_client_close(&d);
    test_client_close(&c);
    gw_stop(state);
}

static void test_gw_auth_expired_token(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    char tok[GW_TOKEN_CAP];
    /* Issued two hours ago for one hour. */
    gw_token(tok, "alice", "news", 3600, 7200, GW_SECRET);
    expect_refused(h->port, tok, HERALD__ERROR__CODE__TOKEN_EXPIRED);
    gw_stop(state);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A session lives as long as its token: one minted with two seconds to live works, and at its
 * exp herald ends it on its own while the client sends nothing: Disconnect{TOKEN_EXPIRED},
 * not before exp and within a wheel tick (at most 1 s) of it, counted as token_expired. */
static void test_gw_auth_token_expires_in_session(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--api-key", GW_API_KEY, NULL);
    char tok[GW_TOKEN_CAP];
    int64_t before_s = time(NULL);
    gw_token(tok, "alice", "news", 2, 0, GW_SECRET);
    int64_t exp_lo_ms = (before_s + 2) * 1000;            /* exp is the minting second + 2 */
    int64_t exp_hi_ms = ((int64_t)time(NULL) + 2) * 1000; /* the second may have ticked */
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "news", NULL, GW_WAIT_MS), &c);
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    /* From here the client only listens: the awaited event is herald's Disconnect. */
    int code = -1;
    GW_OK(test_client_expect_close(&c, false, &code, NULL, GW_WAIT_MS), &c);
    int64_t closed_ms = wall_ms();
    assert_int_equal(code, HERALD__DISCONNECT__CODE__TOKEN_EXPIRED);
    if (closed_ms < exp_lo_ms)
        fail_msg("closed %lld ms before the token's exp", (long long)(exp_lo_ms - closed_ms));
    /* A tick of at most 1 s, plus room for a slow (sanitizer) build. */
    if (closed_ms > exp_hi_ms + 3000)
        fail_msg("closed %lld ms after the token's exp", (long long)(closed_ms - exp_hi_ms));
    test_client_close(&c);
    gw_metric_await(h, "herald_closed_total", "token_expired", 1);
    assert_true(gw_metric(h, "herald_closed_total", "idle_timeout") == 0);
    gw_stop(state);
}

/* A token that outlives the idle timeout leaves idleness in charge: a silent client is closed
 * with Disconnect{IDLE_TIMEOUT}, not TOKEN_EXPIRED. */
static void test_gw_auth_long_token_idle_timeout(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, "--api-key", GW_API_KEY,
                                "--ping-interval", "1s", "--idle-timeout", "2s", NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "alice", "news", 3600, 0, GW_SECRET);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    int code = -1;
    GW_OK(test_client_expect_close(&c, false, &code, NULL, GW_WAIT_MS), &c);
    assert_int_equal(code, HERALD__DISCONNECT__CODE__IDLE_TIMEOUT);
    test_client_close(&c);
    gw_metric_await(h, "herald_closed_total", "idle_timeout", 1);
    assert_true(gw_metric(h, "herald_closed_total", "token_expired") == 0);
    gw_stop(state);
}

/* Replaces the first dot-separated part of token with head (base64url). */
static void with_header(char *out, size_t cap, const char *token, const char *head)
{
    const char *dot = strchr(token, '.');
    assert_non_null(dot);
    snprintf(out, cap, "%s%s", head, dot);
}

static void test_gw_auth_forged_token(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    char tok[GW_TOKEN_CAP];
    char other[GW_TOKEN_CAP];
    char forged[GW_TOKEN_CAP * 2];

    /* Signed with another key. */
    gw_token(other, "alice", "news", 3600, 0, "not-the-server-secret");
    expect_refused(h->port, other, HERALD__ERROR__CODE__UNAUTHORIZED);

    /* Claims of one token under the signature of another. */
    gw_token(tok, "alice", "news", 3600, 0, GW_SECRET);
    gw_token(other, "mallory", "*", 3600, 0, GW_SECRET);
    const char *tok_sig = strrchr(tok, '.');
    const char *other_sig = strrchr(other, '.');
    snprintf(forged, sizeof(forged), "%.*s%s", (int)(other_sig - other), other, tok_sig);
    expect_refused(h->port, forged, HERALD__ERROR__CODE__UNAUTHORIZED);

    /* {"alg":"none","typ":"JWT"} with the real claims and signature. */
    with_header(forged, sizeof(forged), tok, "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0");
    expect_refused(h->port, forged, HERALD__ERROR__CODE__UNAUTHORIZED);

    expect_refused(h->port, "not-a-jwt", HERALD__ERROR__CODE__UNAUTHORIZED);
    expect_refused(h->port, "", HERALD__ERROR__CODE__UNAUTHORIZED);

    /* The server is still fine: a good token connects. */
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    assert_string_equal(c.user_id, "alice");
    test_client_close(&c);
    gw_stop(state);
}

/* Sends a request and asserts that an Error{code} answers it (same id). */
static void expect_request_error(test_client_t *c, Herald__Frame *f, Herald__Error__Code code)
{
    Herald__Frame *r = NULL;
    uint64_t id = c->next_id;
    int rc = test_client_request(c, f, &r, GW_WAIT_MS);
    if (rc != 1)
        fail_msg("no answer: %d %s", rc, test_client_what(c));
    char fs[384];
    if (r->body_case != HERALD__FRAME__BODY_ERROR || r->error->code != code || r->id != id)
        fail_msg("expected Error code %d id %llu, got %s", (int)code, (unsigned long long)id,
                 test_frame_str(r, fs, sizeof(fs)));
    proto_frame_free(r);
}

static void test_gw_auth_wrong_channel(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "alice", "news,chat:*", 3600, 0, GW_SECRET);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);

    Herald__Frame f;
    Herald__Subscribe sub;
    test_frame_subscribe(&f, &sub, "sport");
    expect_request_error(&c, &f, HERALD__ERROR__CODE__FORBIDDEN);
    test_frame_subscribe(&f, &sub, "chat"); /* "chat:*" does not cover "chat" itself */
    expect_request_error(&c, &f, HERALD__ERROR__CODE__FORBIDDEN);
    Herald__Publish pub;
    test_frame_publish(&f, &pub, "sport", "x", 1);
    expect_request_error(&c, &f, HERALD__ERROR__CODE__FORBIDDEN);

    /* The session goes on. */
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    uint64_t off = 0;
    GW_OK(test_client_subscribe(&c, "chat:lobby", &off, GW_WAIT_MS), &c);
    uint64_t pub_off = 0;
    GW_OK(test_client_publish(&c, "chat:lobby", "hi", 2, &pub_off, GW_WAIT_MS), &c);
    assert_int_equal(pub_off, off + 1);
    GW_OK(test_client_expect_push(&c, "chat:lobby", pub_off, NULL, GW_WAIT_MS), &c);

    /* A token without a channels claim grants no channel at all. */
    char bare[GW_TOKEN_CAP];
    gw_token(bare, "bob", "", 3600, 0, GW_SECRET);
    test_client_t b;
    GW_OK(test_client_auth(&b, h->port, bare, GW_WAIT_MS), &b);
    test_frame_subscribe(&f, &sub, "news");
    expect_request_error(&b, &f, HERALD__ERROR__CODE__FORBIDDEN);
    GW_OK(test_client_ping(&b, GW_WAIT_MS), &b);
    test_client_close(&b);
    test_client_close(&c);
    gw_stop(state);
}

/* Sends f as the first frame of a new connection and expects Error{BAD_REQUEST} and the
 * close. */
static void expect_out_of_order(uint16_t port, Herald__Frame *f)
{
    test_client_t c;
    GW_OK(test_client_open(&c, port, GW_WAIT_MS), &c);
    f->id = 7;
    GW_OK(test_client_send(&c, f, GW_WAIT_MS), &c);
    int disc = -1;
    int err = -1;
    GW_OK(test_client_expect_close(&c, false, &disc, &err, GW_WAIT_MS), &c);
    if (err != HERALD__ERROR__CODE__BAD_REQUEST)
        fail_msg("%s before Connect: expected Error BAD_REQUEST, got %d (disconnect %d)",
                 proto_body_name(f->body_case), err, disc);
    if (disc != -1 && disc != HERALD__DISCONNECT__CODE__PROTOCOL_ERROR)
        fail_msg("expected Disconnect PROTOCOL_ERROR (or none), got %d", disc);
    test_client_close(&c);
}

static void test_gw_auth_frame_before_connect(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    Herald__Frame f;
    Herald__Subscribe sub;
    test_frame_subscribe(&f, &sub, "news");
    expect_out_of_order(h->port, &f);
    Herald__Ping ping;
    test_frame_ping(&f, &ping);
    expect_out_of_order(h->port, &f);
    Herald__Publish pub;
    test_frame_publish(&f, &pub, "news", "x", 1);
    expect_out_of_order(h->port, &f);
    /* A server-only frame from the client. */
    Herald__Pong pong;
    herald__frame__init(&f);
    herald__pong__init(&pong);
    f.body_case = HERALD__FRAME__BODY_PONG;
    f.pong = &pong;
    expect_out_of_order(h->port, &f);
    gw_stop(state);
}

static void test_gw_auth_second_connect(void **state)
{
    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "alice", "news", 3600, 0, GW_SECRET);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    /* A second Connect on an authenticated session is out of order. */
    int rc = test_client_hello(&c, tok, GW_WAIT_MS);
    if (rc != -EPROTO || c.last_err_code != HERALD__ERROR__CODE__BAD_REQUEST)
        fail_msg("second Connect: expected Error BAD_REQUEST, got %d: %s", rc,
                 test_client_what(&c));
    test_client_close(&c);
    gw_stop(state);
}

static void test_gw_auth_insecure(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "bob", GW_WAIT_MS), &c);
    assert_string_equal(c.user_id, "bob");
    GW_OK(test_client_subscribe(&c, "any:channel", NULL, GW_WAIT_MS), &c);
    test_client_t d;
    GW_OK(test_client_auth(&d, h->port, "", GW_WAIT_MS), &d);
    assert_string_equal(d.user_id, "anonymous");
    /* A forged JWT is just a user name here. */
    char other[GW_TOKEN_CAP];
    gw_token(other, "carol", "news", 3600, 0, "whatever");
    test_client_t e;
    GW_OK(test_client_auth(&e, h->port, other, GW_WAIT_MS), &e);
    GW_OK(test_client_subscribe(&e, "news", NULL, GW_WAIT_MS), &e);
    test_client_close(&e);
    test_client_close(&d);
    test_client_close(&c);
    gw_stop(state);
}

#define PIPE_CLIENTS 100

/* Per connection: the answers seen so far, a bit per request id. */
typedef struct pipe_s {
    uint8_t *seen;
    size_t done;  /* connections with all three answers */
    size_t wrong; /* an answer out of place, or a close */
    char what[256];
} pipe_t;

static const Herald__Frame__BodyCase pipe_answers[3] = {
    HERALD__FRAME__BODY_CONNECT_OK, HERALD__FRAME__BODY_SUBSCRIBE_OK, HERALD__FRAME__BODY_PONG};

/* Whether f answers request id 1, 2 or 3 as it should, given the answers seen (a bit each):
 * ConnectOk comes first (the other two are handled after it); SubscribeOk may follow Pong,
 * since the engine's answer to the join comes back later than a Ping's. */
static bool pipe_answer_ok(const Herald__Frame *f, uint8_t *seen)
{
    if (!f || f->id < 1 || f->id > 3 || f->body_case != pipe_answers[f->id - 1])
        return false;
    uint8_t bit = (uint8_t)(1u << (f->id - 1));
    if ((*seen & bit) || (f->id > 1 && !(*seen & 1u)))
        return false;
    *seen |= bit;
    return true;
}

static void pipe_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    (void)fl;
    pipe_t *p = arg;
    if (pipe_answer_ok(f, &p->seen[i])) {
        p->done += p->seen[i] == 7;
        return;
    }
    if (p->wrong++ == 0) {
        char fs[192];
        snprintf(p->what, sizeof(p->what), "connection %zu, after answers 0x%x: %s", i, p->seen[i],
                 f ? test_frame_str(f, fs, sizeof(fs)) : "closed");
    }
}

/* Connect{token} id 1, Subscribe{news} id 2, Ping id 3, delimited, into b. */
static void pipe_frames(nl_buf_t *b, const char *token)
{
    Herald__Frame f;
    Herald__Connect conn;
    Herald__Subscribe sub;
    Herald__Ping ping;
    test_frame_connect(&f, &conn, token);
    f.id = 1;
    assert_int_equal(proto_frame_append(b, &f), 0);
    test_frame_subscribe(&f, &sub, "news");
    f.id = 2;
    assert_int_equal(proto_frame_append(b, &f), 0);
    test_frame_ping(&f, &ping);
    f.id = 3;
    assert_int_equal(proto_frame_append(b, &f), 0);
}

/* Scrapes until herald_input_held_bytes is above 0 (a frame cut short waits in some input
 * buffer); fails the test after GW_WAIT_MS. */
static void await_input_held(const test_herald_t *h)
{
    for (int64_t until = test_now_ms() + GW_WAIT_MS; test_now_ms() < until; poll(NULL, 0, 10))
        if (gw_metric(h, "herald_input_held_bytes", NULL) > 0)
            return;
    fail_msg("herald_input_held_bytes stayed 0 with a frame cut short in the input");
}

static void test_gw_auth_pipelined_frames_hold_no_input(void **state)
{
    test_herald_t *h =
        gw_start(state, "--secret", GW_SECRET, "--api-key", GW_API_KEY, "--io-threads", "2", NULL);
    char tok[GW_TOKEN_CAP];
    gw_token(tok, "piper", "news", 3600, 0, GW_SECRET);
    nl_buf_t b;
    nl_buf_init(&b, 0);
    pipe_frames(&b, tok);

    /* The gauge counts what waits: half of the three frames, sent alone, holds storage. */
    test_client_t half;
    GW_OK(test_client_open(&half, h->port, GW_WAIT_MS), &half);
    size_t cut = nl_buf_readable(&b) / 2;
    GW_OK(test_client_send_raw(&half, nl_buf_peek(&b), cut, GW_WAIT_MS), &half);
    await_input_held(h);
    GW_OK(test_client_send_raw(&half, nl_buf_peek(&b) + cut, nl_buf_readable(&b) - cut, GW_WAIT_MS),
          &half);
    uint8_t seen = 0;
    for (size_t k = 0; k < 3; k++) {
        Herald__Frame *f = NULL;
        GW_OK(test_client_recv(&half, &f, GW_WAIT_MS) == 1 ? 0 : -EPROTO, &half);
        char fs[192];
        if (!pipe_answer_ok(f, &seen))
            fail_msg("answer %zu: %s", k, test_frame_str(f, fs, sizeof(fs)));
        proto_frame_free(f);
    }

    /* Each connection writes all three at once: herald reads them in one go, verifies the
     * token on a worker meanwhile, and handles Subscribe and Ping after ConnectOk. */
    test_fleet_t *fl = NULL;
    assert_int_equal(test_fleet_new(&fl, PIPE_CLIENTS), 0);
    GW_FLEET_OK(test_fleet_open(fl, h->port, PIPE_CLIENTS, GW_WAIT_MS), fl);
    for (size_t i = 0; i < PIPE_CLIENTS; i++)
        GW_FLEET_OK(test_fleet_send_raw(fl, i, nl_buf_peek(&b), nl_buf_readable(&b)), fl);
    nl_buf_deinit(&b);
    pipe_t p = {.seen = calloc(PIPE_CLIENTS, 1)};
    assert_non_null(p.seen);
    int64_t deadline = test_now_ms() + GW_WAIT_MS;
    while (p.done < PIPE_CLIENTS && p.wrong == 0 && test_now_ms() < deadline)
        assert_true(test_fleet_poll(fl, 100, pipe_cb, &p) >= 0);
    if (p.wrong)
        fail_msg("pipelined answers: %s", p.what);
    assert_int_equal(p.done, PIPE_CLIENTS);
    assert_true(gw_metric(h, "herald_subscriptions", NULL) == PIPE_CLIENTS + 1);
    /* Every connection is idle now and answered: none holds input storage. Deterministic:
     * herald gave the storage back before it queued the answers the clients just read. */
    double held = gw_metric(h, "herald_input_held_bytes", NULL);
    if (held != 0)
        fail_msg("%d idle connections hold %.0f bytes of input storage", PIPE_CLIENTS + 1, held);
    free(p.seen);
    test_fleet_free(fl);
    test_client_close(&half);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_auth_good_token, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_expired_token, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_token_expires_in_session, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_long_token_idle_timeout, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_forged_token, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_wrong_channel, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_frame_before_connect, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_second_connect, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_insecure, gw_teardown),
        cmocka_unit_test_teardown(test_gw_auth_pipelined_frames_hold_no_input, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
