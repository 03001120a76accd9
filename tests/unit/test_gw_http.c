/*
 * test_gw_http: the admin HTTP server on 127.0.0.1, port 0, driven by real HTTP over sockets
 * with a small blocking client (one request per connection, "Connection: close", read to
 * EOF under a 5 s poll deadline). Covers the API key (missing, wrong, right, unconfigured),
 * 404/405/413, 414/431 for a request head past 32 KiB, a POST echo, query and header lookups,
 * answers given later from another thread (strictly after the suspend, and racing it), a stop
 * with a request still waiting, and the probes' reserve of connections (authenticated requests
 * past it are answered 503 at once, idle connections give way to a probe).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_http.h"
#include "netlib/nl_common.h"

#define KEY "test-key-0123456789"
#define MAX_BODY 4096
#define DEADLINE_MS 5000

/* ---- a blocking HTTP/1.1 client ---- */

typedef struct resp_s {
    int status;      /* -1 when nothing arrived before EOF */
    char head[2048]; /* status line and headers */
    char *body;      /* NUL-terminated, malloc'd */
    size_t body_len;
} resp_t;

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Sends everything it can; a server that answers early and closes may refuse the rest. */
static void send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        data += n;
        len -= (size_t)n;
    }
}

/* Reads until EOF (or a reset after the answer), failing the test past the deadline. */
static void read_response(int fd, resp_t *r)
{
    size_t cap = 4096;
    size_t len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    uint64_t deadline = nl_now_ms() + DEADLINE_MS;
    for (;;) {
        uint64_t now = nl_now_ms();
        if (now >= deadline)
            fail_msg("no EOF within %d ms", DEADLINE_MS);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
            continue;
        if (len + 1024 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    r->status = -1;
    r->body = buf;
    r->body_len = 0;
    r->head[0] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (end == NULL)
        return;
    size_t head_len = (size_t)(end - buf);
    assert_true(head_len < sizeof(r->head));
    memcpy(r->head, buf, head_len);
    r->head[head_len] = '\0';
    assert_int_equal(sscanf(buf, "HTTP/1.1 %d", &r->status), 1);
    r->body_len = len - head_len - 4;
    memmove(buf, end + 4, r->body_len + 1);
}

static void request_raw(uint16_t port, const char *req, size_t len, resp_t *r)
{
    int fd = connect_to(port);
    send_all(fd, req, len);
    read_response(fd, r);
    close(fd);
}

/* method path, an optional key and body; the Content-Type is always text/plain. */
static void request(uint16_t port, const char *method, const char *path, const char *key,
                    const char *body, size_t body_len, resp_t *r)
{
    size_t cap = 1024 + body_len;
    char *req = malloc(cap);
    assert_non_null(req);
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "X-Custom: custom value\r\n%s%s%sContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, key ? "X-Api-Key: " : "", key ? key : "", key ? "\r\n" : "",
                     body_len);
    memcpy(req + n, body, body_len);
    request_raw(port, req, (size_t)n + body_len, r);
    free(req);
}

static void resp_free(resp_t *r)
{
    free(r->body);
    r->body = NULL;
}

/* ---- the server under test ---- */

typedef struct fixture_s {
    gw_http_t *srv;
    uint16_t port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gw_http_req_t *parked; /* an async request handed to the responder thread */
    int answered;
} fixture_t;

static void on_hello(gw_http_req_t *req, void *arg)
{
    (void)arg;
    gw_http_respond(req, 200, "text/plain", "hello", 5);
}

static void on_echo(gw_http_req_t *req, void *arg)
{
    (void)arg;
    size_t len = 0;
    const char *body = gw_http_req_body(req, &len);
    /* Handlers run on the server thread, where cmocka cannot fail a test: they answer with
     * what they see and the test checks the answer. */
    if (len == 0 || body[len] != '\0') {
        gw_http_respond_error(req, 400, len == 0 ? "empty \"body\"" : "body not terminated");
        return;
    }
    gw_http_respond(req, 200, gw_http_req_header(req, "content-type"), body, len);
}

static void on_query(gw_http_req_t *req, void *arg)
{
    (void)arg;
    const char *name = gw_http_req_query(req, "name");
    const char *flag = gw_http_req_query(req, "flag");
    const char *missing = gw_http_req_query(req, "missing");
    char out[256];
    int n = snprintf(out, sizeof(out), "%s|%s|%s|%s|%s|%s", gw_http_req_method(req),
                     gw_http_req_path(req), name ? name : "(null)", flag ? flag : "(null)",
                     missing ? missing : "(null)", gw_http_req_header(req, "X-CUSTOM"));
    gw_http_respond(req, 200, "text/plain", out, (size_t)n);
}

/* Parks the request for the responder thread and returns without answering. */
static void on_async(gw_http_req_t *req, void *arg)
{
    fixture_t *f = arg;
    pthread_mutex_lock(&f->mu);
    if (f->parked != NULL)
        abort(); /* two requests in flight: the test itself is broken */
    f->parked = req;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Waits (bounded) for on_async to park a request and takes it. */
static gw_http_req_t *take_parked(fixture_t *f)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += DEADLINE_MS / 1000;
    pthread_mutex_lock(&f->mu);
    while (f->parked == NULL) {
        if (pthread_cond_timedwait(&f->cv, &f->mu, &deadline) == ETIMEDOUT)
            break;
    }
    gw_http_req_t *req = f->parked;
    f->parked = NULL;
    pthread_mutex_unlock(&f->mu);
    return req;
}

/* Waits (bounded) until the server reports n requests suspended and waiting. The count is
 * state, not an event, hence the yield loop; the deadline keeps a failure from hanging. Safe
 * from any thread (no cmocka calls). Returns false on timeout. */
static bool wait_pending(fixture_t *f, uint64_t n)
{
    uint64_t deadline = nl_now_ms() + DEADLINE_MS;
    gw_http_stats_t st;
    for (gw_http_stats(f->srv, &st); st.pending != n; gw_http_stats(f->srv, &st)) {
        if (nl_now_ms() >= deadline)
            return false;
        sched_yield();
    }
    return true;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    gw_http_opts_t opts = {
        .host = "127.0.0.1", .port = 0, .api_key = KEY, .max_body_bytes = MAX_BODY};
    if (gw_http_new(&f->srv, &opts) != 0)
        return -1;
    if (gw_http_route(f->srv, "GET", "/api/hello", on_hello, f) != 0 ||
        gw_http_route(f->srv, "POST", "/api/echo", on_echo, f) != 0 ||
        gw_http_route(f->srv, "GET", "/api/query", on_query, f) != 0 ||
        gw_http_route(f->srv, "GET", "/api/async", on_async, f) != 0 ||
        gw_http_route(f->srv, "DELETE", "/api/async", on_async, f) != 0 ||
        gw_http_route_public(f->srv, "GET", "/readyz", on_hello, f) != 0)
        return -1;
    if (gw_http_start(f->srv) != 0)
        return -1;
    f->port = gw_http_port(f->srv);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    gw_http_free(f->srv);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return 0;
}

static void expect(fixture_t *f, const char *method, const char *path, const char *key, int status,
                   const char *body)
{
    resp_t r;
    request(f->port, method, path, key, "", 0, &r);
    if (r.status != status || strcmp(r.body, body) != 0)
        fail_msg("%s %s: %d '%s', want %d '%s'", method, path, r.status, r.body, status, body);
    resp_free(&r);
}

static void test_gw_http_api_key(void **state)
{
    fixture_t *f = *state;
    assert_true(f->port != 0);
    expect(f, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
    expect(f, "GET", "/readyz", NULL, 200, "hello");
    expect(f, "GET", "/api/hello", NULL, 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/hello", "wrong", 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/hello", KEY "x", 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/hello", "test-key-012345678", 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/hello", "", 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/hello", KEY, 200, "hello");
    /* Unknown paths need the key too: strangers learn nothing about the routes. */
    expect(f, "GET", "/api/nope", NULL, 401, "{\"error\":\"unauthorized\"}");
    expect(f, "GET", "/api/nope", KEY, 404, "{\"error\":\"not found\"}");
    gw_http_stats_t st;
    gw_http_stats(f->srv, &st);
    assert_int_equal(st.requests, 10);
    assert_int_equal(st.unauthorized, 6);
    assert_int_equal(st.not_found, 1);
}

/* GET /api/hello with the extra header lines given (each ending in CRLF): the status. */
static int status_with_headers(const fixture_t *f, const char *headers)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET /api/hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
                     headers);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    resp_t r;
    request_raw(f->port, req, (size_t)n, &r);
    int status = r.status;
    resp_free(&r);
    return status;
}

/* `Authorization: Bearer KEY` stands for X-Api-Key (what Prometheus before 2.55 can send);
 * any other scheme, a wrong key, or a wrong X-Api-Key beside a right Bearer is refused. */
static void test_gw_http_bearer_key(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(status_with_headers(f, "Authorization: Bearer " KEY "\r\n"), 200);
    assert_int_equal(status_with_headers(f, "authorization: bearer " KEY "\r\n"), 200);
    assert_int_equal(status_with_headers(f, "Authorization: Bearer " KEY "x\r\n"), 401);
    assert_int_equal(status_with_headers(f, "Authorization: Bearer\r\n"), 401);
    assert_int_equal(status_with_headers(f, "Authorization: Basic " KEY "\r\n"), 401);
    assert_int_equal(status_with_headers(f, "Authorization: " KEY "\r\n"), 401);
    assert_int_equal(
        status_with_headers(f, "X-Api-Key: wrong\r\nAuthorization: Bearer " KEY "\r\n"), 401);
    assert_int_equal(
        status_with_headers(f, "X-Api-Key: " KEY "\r\nAuthorization: Bearer wrong\r\n"), 200);
    gw_http_stats_t st;
    gw_http_stats(f->srv, &st);
    assert_int_equal(st.requests, 8);
    assert_int_equal(st.unauthorized, 5);
}

static void test_gw_http_method_not_allowed(void **state)
{
    fixture_t *f = *state;
    resp_t r;
    request(f->port, "POST", "/api/async", KEY, "", 0, &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(r.body, "{\"error\":\"method not allowed\"}");
    if (strcasestr(r.head, "\r\nAllow: GET, DELETE") == NULL)
        fail_msg("no Allow header in:\n%s", r.head);
    resp_free(&r);
    expect(f, "GET", "/api/echo", KEY, 405, "{\"error\":\"method not allowed\"}");
}

static void test_gw_http_post_echo(void **state)
{
    fixture_t *f = *state;
    char body[MAX_BODY];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)('a' + i % 26);
    resp_t r;
    request(f->port, "POST", "/api/echo", KEY, body, sizeof(body), &r); /* exactly the limit */
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, sizeof(body));
    assert_memory_equal(r.body, body, sizeof(body));
    assert_non_null(strcasestr(r.head, "\r\nContent-Type: text/plain"));
    resp_free(&r);
    /* A handler's own error, JSON-escaped. */
    expect(f, "POST", "/api/echo", KEY, 400, "{\"error\":\"empty \\\"body\\\"\"}");
}

static void test_gw_http_too_large(void **state)
{
    fixture_t *f = *state;
    char body[MAX_BODY + 1];
    memset(body, 'x', sizeof(body));
    resp_t r;
    /* Declared too large: refused from the headers alone, the body is never sent. */
    const char *head = "POST /api/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "X-Api-Key: " KEY "\r\nContent-Length: 4097\r\n\r\n";
    request_raw(f->port, head, strlen(head), &r);
    assert_int_equal(r.status, 413);
    assert_string_equal(r.body, "{\"error\":\"request body too large\"}");
    resp_free(&r);
    /* Chunked, with no declared length: refused once the body passes the limit. */
    char req[8192];
    int n = snprintf(req, sizeof(req),
                     "POST /api/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "X-Api-Key: " KEY "\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "800\r\n%.2048s\r\n801\r\n%.2049s\r\n0\r\n\r\n",
                     body, body);
    request_raw(f->port, req, (size_t)n, &r);
    assert_int_equal(r.status, 413);
    resp_free(&r);
    gw_http_stats_t st;
    gw_http_stats(f->srv, &st);
    assert_int_equal(st.too_large, 2);
    /* The same chunked request one byte smaller is accepted whole. */
    n = snprintf(req, sizeof(req),
                 "POST /api/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "X-Api-Key: " KEY "\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "800\r\n%.2048s\r\n800\r\n%.2048s\r\n0\r\n\r\n",
                 body, body);
    request_raw(f->port, req, (size_t)n, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, MAX_BODY);
    resp_free(&r);
}

/* A request head (request line and headers) past the per-connection memory, 32 KiB: 414 for
 * a long URL, 431 for long headers, then the close; memory per admin connection is bounded
 * whatever the client sends, and the server goes on. */
static void test_gw_http_oversized_head(void **state)
{
    fixture_t *f = *state;
    enum { BIG = 40 * 1024 };
    char *req = malloc(BIG + 1024);
    assert_non_null(req);
    char *filler = malloc(BIG + 1);
    assert_non_null(filler);
    memset(filler, 'a', BIG);
    filler[BIG] = '\0';
    int n = snprintf(req, BIG + 1024, "GET /api/hello?x=%s HTTP/1.1\r\nHost: x\r\n\r\n", filler);
    resp_t r;
    request_raw(f->port, req, (size_t)n, &r);
    assert_int_equal(r.status, 414);
    resp_free(&r);
    n = snprintf(req, BIG + 1024,
                 "GET /api/hello HTTP/1.1\r\nHost: x\r\nX-Api-Key: " KEY "\r\nX-Big: %s\r\n\r\n",
                 filler);
    request_raw(f->port, req, (size_t)n, &r);
    assert_int_equal(r.status, 431);
    resp_free(&r);
    free(filler);
    free(req);
    expect(f, "GET", "/api/hello", KEY, 200, "hello");
}

static void test_gw_http_query_and_headers(void **state)
{
    fixture_t *f = *state;
    expect(f, "GET", "/api/query?name=bob%20b&flag", KEY, 200,
           "GET|/api/query|bob b||(null)|custom value");
    expect(f, "GET", "/api/query", KEY, 200, "GET|/api/query|(null)|(null)|(null)|custom value");
}

/* The responder thread: answers the parked request once the server has suspended it. */
static void *answer_after_suspend(void *arg)
{
    fixture_t *f = arg;
    gw_http_req_t *req = take_parked(f);
    if (req == NULL)
        return NULL;
    bool is_suspended = wait_pending(f, 1);
    char body[64];
    int n =
        snprintf(body, sizeof(body), "async %s %s", gw_http_req_method(req), gw_http_req_path(req));
    gw_http_respond(req, 202, "text/plain", body, (size_t)n);
    return is_suspended ? (void *)1 : NULL;
}

static void test_gw_http_async_after_suspend(void **state)
{
    fixture_t *f = *state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, answer_after_suspend, f), 0);
    resp_t r;
    request(f->port, "DELETE", "/api/async", KEY, "", 0, &r);
    void *ok = NULL;
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_ptr_equal(ok, (void *)1);
    assert_int_equal(r.status, 202);
    assert_string_equal(r.body, "async DELETE /api/async");
    resp_free(&r);
    gw_http_stats_t st;
    gw_http_stats(f->srv, &st);
    assert_int_equal(st.suspended, 1);
    assert_int_equal(st.pending, 0);
}

/* The responder answers as soon as it gets the request: before, during or after the suspend. */
static void *answer_at_once(void *arg)
{
    fixture_t *f = arg;
    for (int i = 0; i < 40; i++) {
        gw_http_req_t *req = take_parked(f);
        if (req == NULL)
            return NULL;
        gw_http_respond(req, 200, "text/plain", "raced", 5);
        pthread_mutex_lock(&f->mu);
        f->answered++;
        pthread_mutex_unlock(&f->mu);
    }
    return (void *)1;
}

static void test_gw_http_async_races_suspend(void **state)
{
    fixture_t *f = *state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, answer_at_once, f), 0);
    for (int i = 0; i < 40; i++)
        expect(f, "GET", "/api/async", KEY, 200, "raced");
    void *ok = NULL;
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_ptr_equal(ok, (void *)1);
    assert_int_equal(f->answered, 40);
    gw_http_stats_t st;
    gw_http_stats(f->srv, &st);
    assert_int_equal(st.pending, 0);
}

/* Stopping with a request waiting answers it 503 before closing, and the late answer that
 * arrives after the server is freed is accepted and dropped. */
static void test_gw_http_stop_with_pending(void **state)
{
    fixture_t *f = *state;
    int fd = connect_to(f->port);
    const char *req = "GET /api/async HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "X-Api-Key: " KEY "\r\n\r\n";
    send_all(fd, req, strlen(req));
    gw_http_req_t *parked = take_parked(f);
    assert_non_null(parked);
    assert_true(wait_pending(f, 1));
    gw_http_free(f->srv);
    f->srv = NULL;
    resp_t r;
    read_response(fd, &r);
    close(fd);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "{\"error\":\"server stopping\"}");
    resp_free(&r);
    assert_int_equal(gw_http_respond(parked, 200, NULL, "late", 4), 0);
}

static void test_gw_http_registration_rules(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(gw_http_start(f->srv), -EBUSY);
    assert_int_equal(gw_http_route(f->srv, "GET", "/x", on_hello, NULL), -EBUSY);

    gw_http_t *s2;
    gw_http_opts_t opts = {.host = "127.0.0.1", .port = f->port};
    assert_int_equal(gw_http_new(&s2, &opts), 0);
    assert_int_equal(gw_http_route(s2, "GET", "/x", on_hello, NULL), 0);
    assert_int_equal(gw_http_route(s2, "GET", "/x", on_hello, NULL), -EEXIST);
    assert_int_equal(gw_http_route(s2, "GET", "no-slash", on_hello, NULL), -EINVAL);
    assert_int_equal(gw_http_route(s2, "GET", "/y", NULL, NULL), -EINVAL);
    assert_int_equal(gw_http_route(s2, "AVERYLONGMETHODNAME", "/y", on_hello, NULL), -EINVAL);
    assert_int_equal(gw_http_port(s2), 0);
    /* The port is taken by the fixture's server. */
    assert_int_equal(gw_http_start(s2), -EADDRINUSE);
    gw_http_free(s2);

    opts.host = "no.such.host.invalid";
    opts.port = 0;
    assert_int_equal(gw_http_new(&s2, &opts), 0);
    assert_int_equal(gw_http_start(s2), -EINVAL);
    gw_http_free(s2);
}

/* Without an API key configured, only public paths answer. */
static void test_gw_http_no_key_configured(void **state)
{
    (void)state;
    fixture_t f = {0};
    gw_http_opts_t opts = {.host = "127.0.0.1", .port = 0};
    assert_int_equal(gw_http_new(&f.srv, &opts), 0);
    assert_int_equal(gw_http_route(f.srv, "GET", "/api/hello", on_hello, NULL), 0);
    assert_int_equal(gw_http_route(f.srv, "GET", "/healthz", on_hello, NULL), 0);
    assert_int_equal(gw_http_start(f.srv), 0);
    f.port = gw_http_port(f.srv);
    expect(&f, "GET", "/healthz", NULL, 200, "hello"); /* a registered /healthz is public */
    expect(&f, "GET", "/api/hello", "anything", 401,
           "{\"error\":\"admin api key not configured\"}");
    expect(&f, "GET", "/api/hello", "", 401, "{\"error\":\"admin api key not configured\"}");
    gw_http_free(f.srv);
}

/* ---- the probes' reserve ---- */

#define PARK_MAX 64

typedef struct park_s {
    pthread_mutex_t mu;
    gw_http_req_t *reqs[PARK_MAX]; /* authenticated requests never answered until the end */
    int n;
} park_t;

static void on_park(gw_http_req_t *req, void *arg)
{
    park_t *p = arg;
    pthread_mutex_lock(&p->mu);
    if (p->n == PARK_MAX)
        abort(); /* more than the test sends: the test itself is broken */
    p->reqs[p->n++] = req;
    pthread_mutex_unlock(&p->mu);
}

/* Reads what fd has within DEADLINE_MS, up to EOF, into out; fails the test without EOF. */
static void read_all(int fd, char *out, size_t cap)
{
    size_t n = 0;
    uint64_t deadline = nl_now_ms() + DEADLINE_MS;
    for (;;) {
        uint64_t now = nl_now_ms();
        if (now >= deadline)
            fail_msg("no EOF within %d ms", DEADLINE_MS);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
            continue;
        ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    out[n] = '\0';
}

/*
 * Authenticated requests that take long (60, waiting for their handlers) fill the port up to
 * the probes' reserve: the next one is answered 503 "admin port busy" at once, and idle
 * connections then shed one another, so /healthz still answers. The per-address cap is
 * lifted (one test address), so only the total and the reserve are at work.
 */
static void test_gw_http_busy_keeps_reserve(void **state)
{
    (void)state;
    enum { BUSY = 64 - 4, IDLE = 5 };
    park_t park = {.n = 0};
    pthread_mutex_init(&park.mu, NULL);
    fixture_t f = {0};
    gw_http_opts_t opts = {.host = "127.0.0.1", .port = 0, .api_key = KEY, .max_per_address = 64};
    assert_int_equal(gw_http_new(&f.srv, &opts), 0);
    assert_int_equal(gw_http_route(f.srv, "GET", "/api/park", on_park, &park), 0);
    assert_int_equal(gw_http_start(f.srv), 0);
    f.port = gw_http_port(f.srv);
    static const char park_req[] = "GET /api/park HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                   "X-Api-Key: " KEY "\r\n\r\n";
    int busy[BUSY];
    for (int i = 0; i < BUSY; i++) {
        busy[i] = connect_to(f.port);
        send_all(busy[i], park_req, sizeof(park_req) - 1);
    }
    assert_true(wait_pending(&f, BUSY));
    expect(&f, "GET", "/api/park", KEY, 503, "{\"error\":\"admin port busy\"}");
    /* 60 busy + 5 idle is one over the 64: the oldest idle one gives way, with a 503. Each
     * sends the start of a request, or the kernel would hold it back (TCP_DEFER_ACCEPT) and
     * hand them over in any order. */
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        idle[i] = connect_to(f.port);
        send_all(idle[i], "GET /he", 7);
    }
    char out[1024];
    read_all(idle[0], out, sizeof(out));
    if (strncmp(out, "HTTP/1.1 503", 12) != 0 || strstr(out, "admin connections full") == NULL)
        fail_msg("the oldest idle connection got: %s", out);
    /* The probe is the newcomer now: the next oldest idle one makes room for it. */
    expect(&f, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
    read_all(idle[1], out, sizeof(out));
    assert_true(strncmp(out, "HTTP/1.1 503", 12) == 0);
    gw_http_stats_t st;
    gw_http_stats(f.srv, &st);
    assert_int_equal(st.busy, 1);
    assert_int_equal(st.shed, 2);
    assert_int_equal(st.refused, 0);
    for (int i = 0; i < BUSY; i++)
        assert_int_equal(gw_http_respond(park.reqs[i], 200, "text/plain", "done", 4), 0);
    for (int i = 0; i < BUSY; i++) {
        resp_t r;
        read_response(busy[i], &r);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        close(busy[i]);
    }
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    gw_http_free(f.srv);
    pthread_mutex_destroy(&park.mu);
}

/*
 * One address (everybody, with the admin port on loopback) whose connections at its cap all
 * serve authenticated requests: a probe from it is admitted all the same, by the total, and
 * of two idle newcomers past the cap the older gives way to the newer.
 */
static void test_gw_http_probe_beside_busy_address(void **state)
{
    (void)state;
    enum { BUSY = 8 };
    park_t park = {.n = 0};
    pthread_mutex_init(&park.mu, NULL);
    fixture_t f = {0};
    gw_http_opts_t opts = {.host = "127.0.0.1", .port = 0, .api_key = KEY, .max_per_address = BUSY};
    assert_int_equal(gw_http_new(&f.srv, &opts), 0);
    assert_int_equal(gw_http_route(f.srv, "GET", "/api/park", on_park, &park), 0);
    assert_int_equal(gw_http_start(f.srv), 0);
    f.port = gw_http_port(f.srv);
    static const char park_req[] = "GET /api/park HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                   "X-Api-Key: " KEY "\r\n\r\n";
    int busy[BUSY];
    for (int i = 0; i < BUSY; i++) {
        busy[i] = connect_to(f.port);
        send_all(busy[i], park_req, sizeof(park_req) - 1);
    }
    assert_true(wait_pending(&f, BUSY));
    expect(&f, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
    int idle[2];
    for (int i = 0; i < 2; i++) {
        idle[i] = connect_to(f.port);
        send_all(idle[i], "GET /he", 7);
    }
    char out[1024];
    read_all(idle[0], out, sizeof(out));
    assert_true(strncmp(out, "HTTP/1.1 503", 12) == 0);
    gw_http_stats_t st;
    gw_http_stats(f.srv, &st);
    assert_int_equal(st.refused, 0);
    assert_int_equal(st.shed, 1);
    for (int i = 0; i < BUSY; i++) {
        assert_int_equal(gw_http_respond(park.reqs[i], 200, "text/plain", "done", 4), 0);
        resp_t r;
        read_response(busy[i], &r);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        close(busy[i]);
    }
    close(idle[0]);
    close(idle[1]);
    gw_http_free(f.srv);
    pthread_mutex_destroy(&park.mu);
}

/* The caps must fit: one address may not be allowed more than all, and the probes' reserve
 * needs room. */
static void test_gw_http_caps_checked(void **state)
{
    (void)state;
    gw_http_t *srv = NULL;
    gw_http_opts_t opts = {.host = "127.0.0.1", .max_connections = 16, .max_per_address = 17};
    assert_int_equal(gw_http_new(&srv, &opts), -EINVAL);
    opts.max_connections = 4;
    opts.max_per_address = 0;
    assert_int_equal(gw_http_new(&srv, &opts), -EINVAL);
    opts.max_connections = 8; /* the per-address default follows, at most the total */
    assert_int_equal(gw_http_new(&srv, &opts), 0);
    gw_http_free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gw_http_api_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_bearer_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_method_not_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_post_echo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_oversized_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_query_and_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_async_after_suspend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_async_races_suspend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_stop_with_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gw_http_registration_rules, setup, teardown),
        cmocka_unit_test(test_gw_http_no_key_configured),
        cmocka_unit_test(test_gw_http_busy_keeps_reserve),
        cmocka_unit_test(test_gw_http_probe_beside_busy_address),
        cmocka_unit_test(test_gw_http_caps_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
