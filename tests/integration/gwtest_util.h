/*
 * gwtest_util: what every gateway integration test (tests/integration/test_gw_*.c) shares: the
 * secret and API key its herald runs with, start/stop helpers that keep the herald handle in
 * cmocka's state so a failing test's teardown kills it (and prints its stderr), and assertion
 * macros that print what the test client saw.
 *
 * Thread: the test's. Ownership: the state owns the herald handle until gw_stop.
 * Include after <cmocka.h>.
 */
#ifndef HERALD_TESTS_GWTEST_UTIL_H
#define HERALD_TESTS_GWTEST_UTIL_H

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "herald_client.h"
#include "proto_frame.h"
#include "herald_harness.h"

#define GW_SECRET "gwtest-secret-0123456789abcdef"
#define GW_API_KEY "gwtest-api-key"
#define GW_WAIT_MS 10000
#define GW_TOKEN_CAP 4096

/* Fails the test unless expr (a test_client call) returned 0, printing the client's view. */
#define GW_OK(expr, c)                                                                             \
    do {                                                                                           \
        int gw_rc_ = (expr);                                                                       \
        if (gw_rc_ != 0)                                                                           \
            fail_msg("%s:%d: %s returned %d (%s): %s", __FILE__, __LINE__, #expr, gw_rc_,          \
                     gw_rc_ < 0 ? strerror(-gw_rc_) : "?", test_client_what(c));                   \
    } while (0)

/* Fails the test unless the fleet call returned 0. */
#define GW_FLEET_OK(expr, fl)                                                                      \
    do {                                                                                           \
        int gw_rc_ = (expr);                                                                       \
        if (gw_rc_ != 0)                                                                           \
            fail_msg("%s:%d: %s returned %d (%s): %s", __FILE__, __LINE__, #expr, gw_rc_,          \
                     gw_rc_ < 0 ? strerror(-gw_rc_) : "?", test_fleet_what(fl));                   \
    } while (0)

/* Starts herald with opts and keeps the handle in *state; fails the test if it cannot. */
static inline test_herald_t *gw_start_opts(void **state, const test_herald_opts_t *opts)
{
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, opts);
    if (rc != 0)
        fail_msg("herald did not start: %s", strerror(-rc));
    *state = h;
    return h;
}

/* Starts herald with the flags given (NULL-terminated). */
static inline test_herald_t *gw_start(void **state, const char *flag, ...)
{
    const char *args[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, flag);
    for (const char *a = flag; a && n + 1 < 64; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    test_herald_opts_t opts = {.args = args, .cpu = -1};
    return gw_start_opts(state, &opts);
}

/* Stops the herald in *state (SIGTERM) and asserts a clean exit. */
static inline void gw_stop(void **state)
{
    test_herald_t *h = *state;
    *state = NULL;
    int rc = test_herald_stop(h, 0);
    if (rc != 0)
        fail_msg("herald did not exit cleanly after SIGTERM: %d", rc);
}

/* Teardown: kills a herald a failed test left running. */
static inline int gw_teardown(void **state)
{
    test_herald_abort(*state);
    *state = NULL;
    return 0;
}

/* Mints a token into buf (GW_TOKEN_CAP bytes) and returns buf; fails the test if it cannot. */
static inline const char *gw_token(char *buf, const char *user, const char *channels, int64_t ttl_s,
                                   int64_t age_s, const char *secret)
{
    int n = test_token(buf, GW_TOKEN_CAP, user, channels, ttl_s, age_s, secret);
    if (n <= 0)
        fail_msg("cannot mint a token for %s: %d", user, n);
    return buf;
}

/* Scrapes GET /metrics (herald must run with --api-key GW_API_KEY) and returns the sum of the
 * samples named exactly family whose label text contains label (NULL: any). Fails the test
 * when the scrape fails. */
static inline double gw_metric(const test_herald_t *h, const char *family, const char *label)
{
    static const char *const hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "GET", "/metrics", hdrs, NULL, 0, GW_WAIT_MS, &r);
    if (rc != 0 || r.status != 200)
        fail_msg("GET /metrics: rc %d status %d", rc, r.status);
    double sum = 0;
    size_t flen = strlen(family);
    for (const char *line = r.body; line && *line; line = strchr(line, '\n'), line += !!line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len <= flen || strncmp(line, family, flen) != 0 ||
            (line[flen] != ' ' && line[flen] != '{'))
            continue;
        const char *sp = memchr(line, ' ', len);
        if (!sp)
            continue;
        if (label) {
            char labels[512];
            size_t ll = (size_t)(sp - line) < sizeof(labels) - 1 ? (size_t)(sp - line) : 0;
            memcpy(labels, line, ll);
            labels[ll] = '\0';
            if (!strstr(labels, label))
                continue;
        }
        sum += strtod(sp + 1, NULL);
    }
    test_http_resp_free(&r);
    return sum;
}

/* Scrapes until the metric reads want, for a count that herald's loop updates on its own
 * schedule after the test saw the cause (a close is counted when herald's side of the
 * connection finishes, after the client saw the Disconnect and hung up): there is no event
 * the test could await, so it watches the figure, 10 ms between scrapes, and fails the test
 * if it does not get there within GW_WAIT_MS. */
static inline void gw_metric_await(const test_herald_t *h, const char *family, const char *label,
                                   double want)
{
    double got = 0;
    for (int64_t until = test_now_ms() + GW_WAIT_MS;; poll(NULL, 0, 10)) {
        got = gw_metric(h, family, label);
        if (got == want || test_now_ms() >= until)
            break;
    }
    if (got != want)
        fail_msg("%s{%s} is %g after %d ms, want %g", family, label ? label : "", got, GW_WAIT_MS,
                 want);
}

/* A Publish with idempotency key (NULL: none), and the answer: the frame (the caller frees it
 * with proto_frame_free); fails the test when none comes within GW_WAIT_MS. */
static inline Herald__Frame *gw_publish_key_frame(test_client_t *c, const char *chan,
                                                  const char *payload, const char *key)
{
    Herald__Publish p = HERALD__PUBLISH__INIT;
    p.channel = (char *)chan;
    p.payload.data = (uint8_t *)payload;
    p.payload.len = strlen(payload);
    p.idempotency_key = (char *)(key ? key : "");
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = ++c->next_id;
    f.body_case = HERALD__FRAME__BODY_PUBLISH;
    f.publish = &p;
    Herald__Frame *r = NULL;
    int rc = test_client_request(c, &f, &r, GW_WAIT_MS);
    if (rc != 1)
        fail_msg("publish %s/%s: rc %d %s", chan, key ? key : "", rc, test_client_what(c));
    return r;
}

/* What a PublishOk said. */
typedef struct gw_pub_answer_s {
    uint64_t offset;
    char epoch[17];
    bool is_duplicate;
} gw_pub_answer_t;

/* gw_publish_key_frame that fails the test unless the answer is a PublishOk. */
static inline gw_pub_answer_t gw_publish_key(test_client_t *c, const char *chan,
                                             const char *payload, const char *key)
{
    Herald__Frame *r = gw_publish_key_frame(c, chan, payload, key);
    char fs[384];
    if (r->body_case != HERALD__FRAME__BODY_PUBLISH_OK)
        fail_msg("publish %s/%s: %s", chan, key ? key : "", test_frame_str(r, fs, sizeof(fs)));
    gw_pub_answer_t a = {.offset = r->publish_ok->offset, .is_duplicate = r->publish_ok->duplicate};
    snprintf(a.epoch, sizeof(a.epoch), "%s", r->publish_ok->epoch);
    proto_frame_free(r);
    return a;
}

#endif
