/*
 * test_gw_admin: herald's admin HTTP API on a real process. The API key is required (401
 * without it or with a wrong one, and nothing is published then); /healthz and /readyz
 * answer without it; POST /api/publish delivers to subscribers on several IO loops and
 * answers the offset; GET /metrics parses as Prometheus text exposition (every line a comment
 * or `name{labels} value`, HELP/TYPE before samples) with the expected families, and its
 * connections gauge follows the connected clients; GET /api/stats is a JSON object of the
 * same families. Connections that hold a half-sent request, or trickle one a byte at a time,
 * are cut off with 408 at the request deadline, so they cannot keep /healthz from answering;
 * nor can a thousand abandoned half-requests in a row, whose log lines are rate-limited.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gwtest_util.h"
#include "proto_frame.h"

static const char *const key_hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
static const char *const bad_key_hdrs[] = {"X-Api-Key: " GW_API_KEY "x", NULL};

static test_herald_t *start(void **state)
{
    return gw_start(state, "--insecure", "--io-threads", "2", "--api-key", GW_API_KEY, NULL);
}

/* GET or POST on the admin port; fails the test if no HTTP answer comes. */
static void http(const test_herald_t *h, const char *method, const char *path,
                 const char *const *hdrs, const char *body, test_http_resp_t *r)
{
    int rc = test_http_request(h->admin_port, method, path, hdrs, body, body ? strlen(body) : 0,
                               GW_WAIT_MS, r);
    if (rc != 0)
        fail_msg("%s %s: %s", method, path, strerror(-rc));
}

static void expect_status(const test_herald_t *h, const char *method, const char *path,
                          const char *const *hdrs, int status)
{
    test_http_resp_t r;
    http(h, method, path, hdrs, method[0] == 'P' ? "x" : NULL, &r);
    if (r.status != status)
        fail_msg("%s %s: expected %d, got %d %s", method, path, status, r.status, r.body);
    test_http_resp_free(&r);
}

static void test_gw_admin_key_required(void **state)
{
    test_herald_t *h = start(state);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "sub", GW_WAIT_MS), &c);
    uint64_t base = 0;
    GW_OK(test_client_subscribe(&c, "news", &base, GW_WAIT_MS), &c);

    const char *paths[][2] = {{"GET", "/metrics"},
                              {"GET", "/api/stats"},
                              {"POST", "/api/publish?channel=news"},
                              {"GET", "/no/such/path"}};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        expect_status(h, paths[i][0], paths[i][1], NULL, 401);
        expect_status(h, paths[i][0], paths[i][1], bad_key_hdrs, 401);
    }
    /* Nothing was published by the refused requests. */
    GW_OK(test_client_ping(&c, GW_WAIT_MS), &c);
    assert_int_equal(c.n_kept, 0);

    /* /healthz and /readyz (for load balancers) need no key. */
    test_http_resp_t r;
    http(h, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"ok\""));
    test_http_resp_free(&r);
    http(h, "GET", "/readyz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"ready\""));
    test_http_resp_free(&r);
    expect_status(h, "GET", "/no/such/path", key_hdrs, 404);
    expect_status(h, "GET", "/api/publish", key_hdrs, 405);
    test_client_close(&c);
    gw_stop(state);
}

/* Issue 24 (hostile pass): a node without a token secret (and not insecure) refuses every
 * Connect, yet /readyz said ready, so a balancer kept sending it clients. It is not ready now,
 * and says why; a client's Connect is refused as before. */
static void test_gw_admin_not_ready_without_a_secret(void **state)
{
    test_herald_t *h = gw_start(state, "--io-threads", "1", "--api-key", GW_API_KEY, NULL);
    test_http_resp_t r;
    http(h, "GET", "/readyz", NULL, NULL, &r);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "no token secret"));
    test_http_resp_free(&r);
    double ready = -1;
    assert_int_equal(test_metric_sum(h->admin_port, GW_API_KEY, "herald_ready", NULL, &ready), 0);
    assert_true(ready == 0);
    gw_stop(state);
}

/* Reads {"offset":N,...} from a publish answer. */
static uint64_t answer_offset(const test_http_resp_t *r)
{
    json_error_t jerr;
    json_t *j = json_loadb(r->body, r->body_len, 0, &jerr);
    if (!j)
        fail_msg("publish answer is not JSON: %s (%s)", r->body, jerr.text);
    json_t *off = json_object_get(j, "offset");
    json_t *epoch = json_object_get(j, "epoch");
    if (!json_is_integer(off) || !json_is_string(epoch))
        fail_msg("publish answer lacks offset/epoch: %s", r->body);
    uint64_t v = (uint64_t)json_integer_value(off);
    json_decref(j);
    return v;
}

static void test_gw_admin_publish(void **state)
{
    test_herald_t *h = start(state);
    enum { N = 6 };
    static test_client_t cs[N];
    uint64_t base = 0;
    for (size_t i = 0; i < N; i++) {
        GW_OK(test_client_auth(&cs[i], h->port, "sub", GW_WAIT_MS), &cs[i]);
        GW_OK(test_client_subscribe(&cs[i], "chat:room", &base, GW_WAIT_MS), &cs[i]);
    }
    uint64_t prev = base;
    for (int m = 0; m < 3; m++) {
        char body[32];
        snprintf(body, sizeof(body), "hello-%d", m);
        test_http_resp_t r;
        http(h, "POST", "/api/publish?channel=chat:room", key_hdrs, body, &r);
        if (r.status != 200)
            fail_msg("publish: %d %s", r.status, r.body);
        uint64_t off = answer_offset(&r);
        assert_int_equal(off, prev + 1);
        prev = off;
        test_http_resp_free(&r);
        for (size_t i = 0; i < N; i++) {
            Herald__Frame *f = NULL;
            GW_OK(test_client_expect_push(&cs[i], "chat:room", off, &f, GW_WAIT_MS), &cs[i]);
            assert_int_equal(f->push->payload.len, strlen(body));
            assert_memory_equal(f->push->payload.data, body, strlen(body));
            proto_frame_free(f);
        }
    }
    /* A bad or missing channel is a 400 and publishes nothing. */
    expect_status(h, "POST", "/api/publish", key_hdrs, 400);
    expect_status(h, "POST", "/api/publish?channel=", key_hdrs, 400);
    expect_status(h, "POST", "/api/publish?channel=a%20b", key_hdrs, 400);
    /* A NUL decoded from the query is part of the name (and forbidden in it): the request must
     * not publish to the name's prefix, chat:room, as a strlen of the value would. */
    expect_status(h, "POST", "/api/publish?channel=chat:room%00x", key_hdrs, 400);
    for (size_t i = 0; i < N; i++) {
        GW_OK(test_client_ping(&cs[i], GW_WAIT_MS), &cs[i]);
        assert_int_equal(cs[i].n_kept, 0);
        test_client_close(&cs[i]);
    }
    gw_stop(state);
}

/* Parses one Prometheus sample line: name, optional {labels}, a space, a value, optionally a
 * timestamp. Fails the test with the line on any deviation. */
static void parse_sample(const char *line, char *name, size_t cap, double *value)
{
    const char *p = line;
    size_t n = 0;
    if (!(isalpha((unsigned char)*p) || *p == '_' || *p == ':'))
        fail_msg("bad metric name in line: %s", line);
    while (isalnum((unsigned char)*p) || *p == '_' || *p == ':') {
        if (n + 1 < cap)
            name[n++] = *p;
        p++;
    }
    name[n] = '\0';
    if (*p == '{') {
        p++;
        while (*p != '}') {
            if (!(isalpha((unsigned char)*p) || *p == '_'))
                fail_msg("bad label name in line: %s", line);
            while (isalnum((unsigned char)*p) || *p == '_')
                p++;
            if (p[0] != '=' || p[1] != '"')
                fail_msg("bad label in line: %s", line);
            p += 2;
            while (*p && *p != '"')
                p += (*p == '\\' && p[1]) ? 2 : 1;
            if (*p != '"')
                fail_msg("unterminated label value in line: %s", line);
            p++;
            if (*p == ',')
                p++;
            else if (*p != '}')
                fail_msg("bad label list in line: %s", line);
        }
        p++;
    }
    if (*p != ' ')
        fail_msg("no space before the value in line: %s", line);
    char *end;
    *value = strtod(p + 1, &end);
    if (end == p + 1 || (*end != '\0' && *end != ' '))
        fail_msg("bad value in line: %s", line);
}

/* Checks the whole exposition and returns the sum of the samples of family want. */
static double check_exposition(char *text, const char *want, int *families)
{
    double sum = 0;
    char typed[160] = "";
    *families = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            char fam[160];
            char type[32];
            if (sscanf(line, "# TYPE %159s %31s", fam, type) == 2) {
                snprintf(typed, sizeof(typed), "%s", fam);
                (*families)++;
                if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))
                    fail_msg("unknown type in line: %s", line);
            } else if (strncmp(line, "# HELP ", 7) != 0) {
                fail_msg("bad comment line: %s", line);
            }
            continue;
        }
        char name[160];
        double v;
        parse_sample(line, name, sizeof(name), &v);
        /* A sample belongs to the family typed last (histograms add suffixes). */
        if (!typed[0] || strncmp(name, typed, strlen(typed)) != 0)
            fail_msg("sample %s outside its family %s", name, typed);
        if (strcmp(name, want) == 0)
            sum += v;
    }
    return sum;
}

/* Scrapes /metrics and returns the sum of family want's samples (checking the format). */
static double scrape(const test_herald_t *h, const char *want, char **keep)
{
    test_http_resp_t r;
    http(h, "GET", "/metrics", key_hdrs, NULL, &r);
    assert_int_equal(r.status, 200);
    char ct[128];
    assert_non_null(test_http_resp_header(&r, "Content-Type", ct, sizeof(ct)));
    assert_non_null(strstr(ct, "text/plain"));
    if (keep)
        *keep = strdup(r.body);
    int families = 0;
    double v = check_exposition(r.body, want, &families);
    assert_true(families >= 10);
    test_http_resp_free(&r);
    return v;
}

static void test_gw_admin_metrics(void **state)
{
    test_herald_t *h = start(state);
    enum { N = 5 };
    static test_client_t cs[N];
    for (size_t i = 0; i < N; i++) {
        GW_OK(test_client_auth(&cs[i], h->port, "m", GW_WAIT_MS), &cs[i]);
        GW_OK(test_client_subscribe(&cs[i], "news", NULL, GW_WAIT_MS), &cs[i]);
    }
    uint64_t off = 0;
    GW_OK(test_client_publish(&cs[0], "news", "x", 1, &off, GW_WAIT_MS), &cs[0]);
    for (size_t i = 0; i < N; i++)
        GW_OK(test_client_expect_push(&cs[i], "news", off, NULL, GW_WAIT_MS), &cs[i]);

    char *text = NULL;
    assert_true(scrape(h, "herald_connections", &text) == N);
    static const char *const families[] = {
        "herald_connections",         "herald_sessions_authenticated",
        "herald_accepted_total",      "herald_closed_total",
        "herald_auth_ok_total",       "herald_frames_in_total",
        "herald_deliveries_total",    "herald_publishes_total",
        "herald_subscriptions",       "herald_slow_consumer_drops_total",
        "herald_pool_rejected_total", "herald_ready",
        "herald_pool_queue_capacity", "herald_pool_queue_high_water"};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char needle[160];
        snprintf(needle, sizeof(needle), "# TYPE %s ", families[i]);
        if (!strstr(text, needle))
            fail_msg("family %s missing from /metrics", families[i]);
    }
    free(text);
    assert_true(scrape(h, "herald_sessions_authenticated", NULL) == N);
    assert_true(scrape(h, "herald_subscriptions", NULL) == N);
    assert_true(scrape(h, "herald_deliveries_total", NULL) >= N);
    assert_true(scrape(h, "herald_publishes_total", NULL) >= 1);
    /* The default [server] worker_queue. */
    assert_true(scrape(h, "herald_pool_queue_capacity", NULL) == 4096);
    /* Every subscriber got the Push, so the loops that wrote it have taken their sample: one
     * per (message, loop with subscribers). */
    double flushed = scrape(h, "herald_publish_to_flush_seconds_count", NULL);
    assert_true(flushed >= 1 && flushed <= N);

    /* Two clients leave: the gauge follows once herald has seen the closes. */
    test_client_close(&cs[3]);
    test_client_close(&cs[4]);
    int64_t deadline = test_now_ms() + GW_WAIT_MS;
    double conns = N;
    while (conns != N - 2 && test_now_ms() < deadline)
        conns = scrape(h, "herald_connections", NULL);
    assert_true(conns == N - 2);
    for (size_t i = 0; i < 3; i++)
        test_client_close(&cs[i]);
    gw_stop(state);
}

static void test_gw_admin_stats_json(void **state)
{
    test_herald_t *h = start(state);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, "s", GW_WAIT_MS), &c);
    test_http_resp_t r;
    http(h, "GET", "/api/stats", key_hdrs, NULL, &r);
    assert_int_equal(r.status, 200);
    json_error_t jerr;
    json_t *j = json_loadb(r.body, r.body_len, 0, &jerr);
    if (!j || !json_is_object(j))
        fail_msg("/api/stats is not a JSON object: %s", jerr.text);
    json_t *fam = json_object_get(j, "herald_connections");
    json_t *samples = json_object_get(fam, "samples");
    assert_true(json_is_array(samples));
    double total = 0;
    size_t i;
    json_t *s;
    json_array_foreach(samples, i, s)
    {
        total += json_number_value(json_object_get(s, "value"));
    }
    assert_true(total == 1);
    assert_non_null(json_object_get(j, "herald_deliveries_total"));
    json_decref(j);
    test_http_resp_free(&r);
    test_client_close(&c);
    gw_stop(state);
}

/* One less than the admin port's 64 connections: with the probe, the port is full, and
 * nothing has to be shed (test_gw_admin_hostile covers shedding); these go by the deadline. */
#define HOLD_CONNS 63
#define TRICKLE_EVERY_MS 200

/* A blocking TCP connection to 127.0.0.1:port that has sent the first bytes of a request. */
static int open_partial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    static const char part[] = "GET /metr";
    assert_int_equal(send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(part) - 1);
    return fd;
}

/* Reads fd until EOF (or a reset), waiting at most timeout_ms in all; returns the bytes in out
 * (NUL-terminated), or -1 when no EOF came in time. Sends one byte of request line every
 * TRICKLE_EVERY_MS while waiting when is_trickling. */
static ssize_t read_to_eof(int fd, char *out, size_t cap, int timeout_ms, bool is_trickling)
{
    size_t n = 0;
    for (int64_t until = test_now_ms() + timeout_ms; test_now_ms() < until;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, is_trickling ? TRICKLE_EVERY_MS : test_ms_left(until)) == 0) {
            (void)send(fd, "x", 1, MSG_NOSIGNAL);
            continue;
        }
        ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
        if (r <= 0) {
            out[n] = '\0';
            return (ssize_t)n;
        }
        n += (size_t)r;
    }
    return -1;
}

/* Connections that send part of a request and stop, as many as the admin server takes at
 * once with the probe, and one that trickles a byte every 200 ms: libmicrohttpd's own timeout
 * is reset by every byte and lasts 30 s, so they held the admin API, /healthz included. The
 * request deadline (1 s here, below the header timeout) cuts each off with 408, and /healthz
 * is answered meanwhile. One address may hold them all here (--admin-max-per-address 64). */
static void test_gw_admin_slow_requests(void **state)
{
    test_herald_t *h =
        gw_start(state, "--insecure", "--api-key", GW_API_KEY, "--admin-request-timeout", "1s",
                 "--admin-max-per-address", "64", NULL);
    int fds[HOLD_CONNS];
    for (int i = 0; i < HOLD_CONNS; i++)
        fds[i] = open_partial(h->admin_port);
    int64_t t0 = test_now_ms();
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "GET", "/healthz", NULL, NULL, 0, GW_WAIT_MS, &r);
    if (rc != 0 || r.status != 200)
        fail_msg("/healthz behind %d held connections: rc %d status %d after %lld ms", HOLD_CONNS,
                 rc, rc == 0 ? r.status : 0, (long long)(test_now_ms() - t0));
    test_http_resp_free(&r);
    char buf[512];
    for (int i = 0; i < HOLD_CONNS; i++) {
        ssize_t n = read_to_eof(fds[i], buf, sizeof(buf), GW_WAIT_MS, false);
        if (n < 0 || strncmp(buf, "HTTP/1.1 408", 12) != 0)
            fail_msg("held connection %d: %s", i, n < 0 ? "not closed" : buf);
        close(fds[i]);
    }
    /* Bytes keep coming, the request never completes: cut off all the same. */
    int fd = open_partial(h->admin_port);
    t0 = test_now_ms();
    ssize_t n = read_to_eof(fd, buf, sizeof(buf), GW_WAIT_MS, true);
    if (n < 0 || strncmp(buf, "HTTP/1.1 408", 12) != 0)
        fail_msg("trickling connection after %lld ms: %s", (long long)(test_now_ms() - t0),
                 n < 0 ? "not closed" : buf);
    close(fd);
    /* Each cut-off is counted; requests that arrive whole in time (these scrapes) are not. */
    gw_metric_await(h, "herald_admin_request_timeouts_total", NULL, HOLD_CONNS + 1);
    gw_stop(state);
}

#define ABANDONED 1000
#define ABANDONED_WAIT_MS 5000

/* Occurrences of needle in herald's log so far. */
static size_t log_count(test_herald_t *h, const char *needle)
{
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    for (const char *p = h->log; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* Clients that connect, send half a request and hang up at once, a thousand in a row. Under
 * libmicrohttpd's epoll mode a connection whose bytes and FIN were both waiting when it was
 * accepted never had its close noticed: 64 of them held the admin port until their 30 s timeout
 * (the request deadline is set beyond that here), with the rest in the listen backlog. Each
 * abandoned request also made libmicrohttpd log a line: those are limited to a few a second. */
static void test_gw_admin_abandoned_requests(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--api-key", GW_API_KEY,
                                "--admin-request-timeout", "1m", NULL);
    int64_t t0 = test_now_ms();
    for (int i = 0; i < ABANDONED; i++)
        close(open_partial(h->admin_port));
    test_http_resp_t r;
    int rc =
        test_http_request(h->admin_port, "GET", "/healthz", NULL, NULL, 0, ABANDONED_WAIT_MS, &r);
    if (rc != 0 || r.status != 200)
        fail_msg("/healthz after %d abandoned requests: rc %d status %d", ABANDONED, rc,
                 rc == 0 ? r.status : 0);
    test_http_resp_free(&r);
    int64_t took_ms = test_now_ms() - t0;
    /* At most ten lines a second, plus one summary a second, over the time it took. */
    size_t lines = log_count(h, "ev=http_error ");
    size_t cap = (size_t)(took_ms / 1000 + 2) * 11;
    print_message("%d abandoned requests in %lld ms: %zu http_error lines\n", ABANDONED,
                  (long long)took_ms, lines);
    if (lines > cap)
        fail_msg("%zu http_error lines for %d abandoned requests in %lld ms (cap %zu)", lines,
                 ABANDONED, (long long)took_ms, cap);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_admin_key_required, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_not_ready_without_a_secret, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_publish, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_metrics, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_stats_json, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_slow_requests, gw_teardown),
        cmocka_unit_test_teardown(test_gw_admin_abandoned_requests, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
