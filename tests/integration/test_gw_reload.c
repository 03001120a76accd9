/*
 * test_gw_reload: SIGHUP reloads herald's config file while clients stay connected.
 *
 *   - limits: max_subscriptions raised and publish_rate lowered apply to a session that was
 *     connected before the reload, whose subscriptions go on receiving; a session connected
 *     after gets them too.
 *   - token rotation: secret A; then secret B with previous_secrets A, where tokens signed by
 *     either connect (and `herald token` signs with B); then B alone, where A's tokens are
 *     refused. The session that authenticated with A at the start stays. No secret reaches the
 *     log.
 *   - a bad file (and a cross-setting error) is refused with error lines; the node runs on
 *     with its old limits and takes new clients.
 *   - a setting that needs a restart (io_threads) is logged as such and keeps its value,
 *     while the reloadable one beside it applies.
 *   - history rules: a channel a reload gives history starts keeping messages (recoverable);
 *     one a reload takes it from drops them (and its state: the next epoch differs); a smaller
 *     max_bytes evicts at once.
 *
 * Each reload is awaited through herald's own log line (ev=reload_done or reload_failed),
 * never by sleeping.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_auth.h"
#include "gwtest_util.h"
#include "test_file.h"

#define SECRET_A "rotation-secret-A-0123456789"
#define SECRET_B "rotation-secret-B-9876543210"

/* What a test keeps besides its herald: the config file and how far the log was read. */
typedef struct reload_s {
    char path[64];
    size_t pos;
} reload_t;

/* Replaces the file's text in place, as an editor would. */
static void rewrite(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* Starts herald on the file holding text, with the admin key and the flags given. */
static test_herald_t *start_with(void **state, reload_t *r, const char *text)
{
    test_write_temp(r->path, text);
    r->pos = 0;
    return gw_start(state, "--config", r->path, "--api-key", GW_API_KEY, NULL);
}

/* Writes text into the file, sends SIGHUP and waits for the outcome's log line. The log from
 * the reload's first line on is then searched by expect_log. */
static void reload(test_herald_t *h, reload_t *r, const char *text, bool is_ok)
{
    rewrite(r->path, text);
    size_t begin = r->pos;
    assert_int_equal(kill(h->pid, SIGHUP), 0);
    int rc = test_herald_wait_log(h, "ev=reload_begin", &begin, GW_WAIT_MS);
    if (rc != 0)
        fail_msg("no ev=reload_begin after SIGHUP: %s", strerror(-rc));
    size_t end = begin;
    const char *want = is_ok ? "ev=reload_done" : "ev=reload_failed";
    rc = test_herald_wait_log(h, want, &end, GW_WAIT_MS);
    if (rc != 0) {
        test_herald_dump_log(h, 4096);
        fail_msg("no %s after SIGHUP: %s", want, strerror(-rc));
    }
    r->pos = begin;
}

/* Fails unless the log holds needle since the last reload began. */
static void expect_log(test_herald_t *h, const reload_t *r, const char *needle)
{
    size_t pos = r->pos;
    if (test_herald_wait_log(h, needle, &pos, 0) != 0) {
        test_herald_dump_log(h, 4096);
        fail_msg("herald did not log %s", needle);
    }
}

static void expect_subscribe_refused(test_client_t *c, const char *channel,
                                     Herald__Error__Code code)
{
    int rc = test_client_subscribe(c, channel, NULL, GW_WAIT_MS);
    if (rc != -EPROTO || c->last_err_code != (int)code)
        fail_msg("subscribe %s: %d, error %d (want %d): %s", channel, rc, c->last_err_code,
                 (int)code, test_client_what(c));
}

static void admin_publish(const test_herald_t *h, const char *channel, uint64_t *offset)
{
    static const char *const hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};
    char path[128];
    snprintf(path, sizeof(path), "/api/publish?channel=%s", channel);
    test_http_resp_t resp;
    assert_int_equal(
        test_http_request(h->admin_port, "POST", path, hdrs, "x", 1, GW_WAIT_MS, &resp), 0);
    assert_int_equal(resp.status, 200);
    const char *o = strstr(resp.body, "\"offset\":");
    assert_non_null(o);
    *offset = strtoull(o + 9, NULL, 10);
    test_http_resp_free(&resp);
}

static void test_gw_reload_limits(void **state)
{
    reload_t r;
    test_herald_t *h = start_with(state, &r,
                                  "[auth]\ninsecure = true\n"
                                  "[limits]\nmax_subscriptions = 2\npublish_rate = 0\n");
    test_client_t a;
    GW_OK(test_client_auth(&a, h->port, "early", GW_WAIT_MS), &a);
    GW_OK(test_client_subscribe(&a, "a", NULL, GW_WAIT_MS), &a);
    GW_OK(test_client_subscribe(&a, "b", NULL, GW_WAIT_MS), &a);
    expect_subscribe_refused(&a, "c", HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS);

    reload(h, &r,
           "[auth]\ninsecure = true\n"
           "[limits]\nmax_subscriptions = 4\npublish_rate = 1\npublish_burst = 4\n",
           true);
    expect_log(h, &r, "ev=config_changed key=limits.max_subscriptions old=\"2\" new=\"4\"");
    expect_log(h, &r, "ev=config_changed key=limits.publish_rate old=\"0\" new=\"1\"");
    expect_log(h, &r, "ev=reload_done generation=2 changed=3 restart_needed=0");

    /* The session from before the reload: the new limits, and its subscriptions intact. Its
     * request budget is the new burst of 4: two Subscribes and two Publishes (a Subscribe
     * refused for the subscription limit costs nothing), then RATE_LIMITED. */
    GW_OK(test_client_subscribe(&a, "c", NULL, GW_WAIT_MS), &a);
    GW_OK(test_client_subscribe(&a, "d", NULL, GW_WAIT_MS), &a);
    expect_subscribe_refused(&a, "e", HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS);
    uint64_t off = 0;
    admin_publish(h, "a", &off);
    GW_OK(test_client_expect_push(&a, "a", off, NULL, GW_WAIT_MS), &a);
    GW_OK(test_client_publish(&a, "b", "1", 1, &off, GW_WAIT_MS), &a);
    GW_OK(test_client_expect_push(&a, "b", off, NULL, GW_WAIT_MS), &a);
    GW_OK(test_client_publish(&a, "b", "2", 1, &off, GW_WAIT_MS), &a);
    GW_OK(test_client_expect_push(&a, "b", off, NULL, GW_WAIT_MS), &a);
    int rc = test_client_publish(&a, "b", "3", 1, NULL, GW_WAIT_MS);
    if (rc != -EPROTO || a.last_err_code != HERALD__ERROR__CODE__RATE_LIMITED)
        fail_msg("fifth request at 1/s, burst 4: %d, error %d: %s", rc, a.last_err_code,
                 test_client_what(&a));

    /* A session connected after the reload. */
    test_client_t b;
    GW_OK(test_client_auth(&b, h->port, "late", GW_WAIT_MS), &b);
    for (int i = 0; i < 4; i++) {
        char chan[8];
        snprintf(chan, sizeof(chan), "l%d", i);
        GW_OK(test_client_subscribe(&b, chan, NULL, GW_WAIT_MS), &b);
    }
    expect_subscribe_refused(&b, "l4", HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS);
    /* Nothing was closed by the reload. */
    GW_OK(test_client_ping(&a, GW_WAIT_MS), &a);
    assert_true(gw_metric(h, "herald_closed_total", NULL) == 0.0);
    test_client_close(&a);
    test_client_close(&b);
    gw_stop(state);
    unlink(r.path);
}

/* Connects with token; returns 0 or the Error code that refused it. */
static int connect_with(const test_herald_t *h, const char *token, test_client_t *c)
{
    int rc = test_client_auth(c, h->port, token, GW_WAIT_MS);
    if (rc == 0)
        return 0;
    if (rc != -EPROTO || c->last_err_code <= 0)
        fail_msg("connect: %d: %s", rc, test_client_what(c));
    return c->last_err_code;
}

/* `herald token` with the config file: the token it prints, verified against secret. */
static gw_token_err_t token_cli_verifies_with(const reload_t *r, const char *secret)
{
    static test_herald_run_t run;
    const char *args[] = {"token", "--config", r->path, "--user", "cli", NULL};
    assert_int_equal(test_herald_run(args, GW_WAIT_MS, &run), 0);
    assert_int_equal(run.status, 0);
    size_t len = strcspn(run.out, "\n");
    gw_token_claims_t claims;
    return gw_token_verify(run.out, len, secret, strlen(secret), (int64_t)time(NULL), 0, &claims);
}

static void test_gw_reload_token_rotation(void **state)
{
    reload_t r;
    test_herald_t *h = start_with(state, &r, "[auth]\nsecret = " SECRET_A "\n");
    char ta[GW_TOKEN_CAP];
    char tb[GW_TOKEN_CAP];
    gw_token(ta, "alice", "news", 3600, 0, SECRET_A);
    gw_token(tb, "bob", "news", 3600, 0, SECRET_B);
    test_client_t first;
    assert_int_equal(connect_with(h, ta, &first), 0);
    test_client_t c;
    assert_int_equal(connect_with(h, tb, &c), HERALD__ERROR__CODE__UNAUTHORIZED);
    test_client_close(&c);

    /* Rotation: B signs, A still verifies. */
    reload(h, &r, "[auth]\nsecret = " SECRET_B "\nprevious_secrets = " SECRET_A "\n", true);
    expect_log(h, &r, "ev=config_changed key=auth.secret value=changed");
    expect_log(h, &r, "ev=config_changed key=auth.previous_secrets value=set");
    assert_int_equal(connect_with(h, ta, &c), 0);
    test_client_close(&c);
    assert_int_equal(connect_with(h, tb, &c), 0);
    test_client_close(&c);
    assert_true(gw_metric(h, "herald_auth_ok_previous_secret_total", NULL) == 1.0);
    assert_int_equal(token_cli_verifies_with(&r, SECRET_B), GW_TOKEN_OK);
    assert_int_equal(token_cli_verifies_with(&r, SECRET_A), GW_TOKEN_ERR_SIGNATURE);

    /* A removed: its tokens are refused from now on; B's are not. */
    reload(h, &r, "[auth]\nsecret = " SECRET_B "\n", true);
    expect_log(h, &r, "ev=config_changed key=auth.previous_secrets value=cleared");
    assert_int_equal(connect_with(h, ta, &c), HERALD__ERROR__CODE__UNAUTHORIZED);
    test_client_close(&c);
    assert_int_equal(connect_with(h, tb, &c), 0);
    GW_OK(test_client_subscribe(&c, "news", NULL, GW_WAIT_MS), &c);
    test_client_close(&c);
    /* The session authenticated with A before any of this is still served. */
    GW_OK(test_client_ping(&first, GW_WAIT_MS), &first);
    GW_OK(test_client_subscribe(&first, "news", NULL, GW_WAIT_MS), &first);
    test_client_close(&first);

    /* Secrets never reach the log, not even in part. */
    size_t pos = 0;
    assert_int_equal(test_herald_wait_log(h, "rotation-secret", &pos, 0), -ETIMEDOUT);
    gw_stop(state);
    unlink(r.path);
}

static void test_gw_reload_bad_file_keeps_config(void **state)
{
    reload_t r;
    test_herald_t *h =
        start_with(state, &r, "[auth]\ninsecure = true\n[limits]\nmax_subscriptions = 2\n");
    test_client_t a;
    GW_OK(test_client_auth(&a, h->port, "a", GW_WAIT_MS), &a);
    GW_OK(test_client_subscribe(&a, "x", NULL, GW_WAIT_MS), &a);

    reload(h, &r,
           "[auth]\ninsecure = true\n[limits]\nmax_subscriptions = lots\n[nowhere]\nkey = 1\n",
           false);
    expect_log(h, &r, "ev=reload_error msg=\"");
    expect_log(h, &r, "max_subscriptions: 'lots' is not an integer");
    expect_log(h, &r, "unknown section [nowhere]");
    /* Valid alone, refused beside a ping interval clients were told (25 s by default). */
    reload(h, &r,
           "[auth]\ninsecure = true\n[limits]\nmax_subscriptions = 9\nidle_timeout = 20s\n"
           "ping_interval = 5s\n",
           false);
    expect_log(h, &r, "the longest ping_interval announced to clients since the start");

    /* The old config runs on: the limit is still 2, and new clients are taken. */
    GW_OK(test_client_subscribe(&a, "y", NULL, GW_WAIT_MS), &a);
    expect_subscribe_refused(&a, "z", HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS);
    test_client_t b;
    GW_OK(test_client_auth(&b, h->port, "b", GW_WAIT_MS), &b);
    GW_OK(test_client_ping(&b, GW_WAIT_MS), &b);
    test_client_close(&a);
    test_client_close(&b);
    gw_stop(state);
    unlink(r.path);
}

static void test_gw_reload_restart_needed(void **state)
{
    reload_t r;
    test_herald_t *h = start_with(state, &r, "[server]\nio_threads = 1\n[auth]\ninsecure = true\n");
    test_client_t a;
    GW_OK(test_client_auth(&a, h->port, "a", GW_WAIT_MS), &a);
    reload(h, &r,
           "[server]\nio_threads = 2\n[auth]\ninsecure = true\n[limits]\nmax_subscriptions = 1\n",
           true);
    expect_log(h, &r, "ev=reload_restart_needed key=server.io_threads running=\"1\" wanted=\"2\"");
    expect_log(h, &r, "ev=config_changed key=limits.max_subscriptions");
    expect_log(h, &r, "changed=1 restart_needed=1");
    assert_true(gw_metric(h, "herald_io_loops", NULL) == 1.0);
    GW_OK(test_client_subscribe(&a, "one", NULL, GW_WAIT_MS), &a);
    expect_subscribe_refused(&a, "two", HERALD__ERROR__CODE__TOO_MANY_SUBSCRIPTIONS);
    /* A reload with nothing new changes nothing. */
    reload(h, &r,
           "[server]\nio_threads = 2\n[auth]\ninsecure = true\n[limits]\nmax_subscriptions = 1\n",
           true);
    expect_log(h, &r, "changed=0 restart_needed=1");
    test_client_close(&a);
    gw_stop(state);
    unlink(r.path);
}

static void test_gw_reload_history_rules(void **state)
{
    reload_t r;
    test_herald_t *h = start_with(state, &r,
                                  "[server]\nio_threads = 2\n[auth]\ninsecure = true\n[limits]\n"
                                  "publish_rate = 0\n[history]\nrules = keep:*=100\n");
    test_client_t pub;
    test_client_t c;
    GW_OK(test_client_auth(&pub, h->port, "pub", GW_WAIT_MS), &pub);
    GW_OK(test_client_auth(&c, h->port, "c", GW_WAIT_MS), &c);
    char payload[1024];
    memset(payload, 'h', sizeof(payload));
    uint64_t last = 0;
    char epoch_keep[17];
    char epoch_new[17];
    for (int i = 0; i < 20; i++)
        GW_OK(test_client_publish_ex(&pub, "keep:x", payload, sizeof(payload), &last, epoch_keep,
                                     GW_WAIT_MS),
              &pub);
    /* new:x keeps nothing yet: its publishes leave nothing behind. */
    GW_OK(test_client_publish_ex(&pub, "new:x", "a", 1, &last, epoch_new, GW_WAIT_MS), &pub);
    assert_int_equal(gw_metric(h, "herald_history_messages", NULL), 20);

    reload(h, &r,
           "[server]\nio_threads = 2\n[auth]\ninsecure = true\n[limits]\npublish_rate = 0\n"
           "[history]\nrules = new:*=100\nmax_bytes = 64KiB\n",
           true);
    expect_log(h, &r, "ev=config_changed key=history.rules");
    /* keep:x lost its history, and with nobody subscribed, its state. */
    assert_int_equal(gw_metric(h, "herald_history_messages", NULL), 0);
    test_sub_ok_t ok;
    GW_OK(test_client_subscribe_from(&c, "keep:x", epoch_keep, 10, &ok, GW_WAIT_MS), &c);
    assert_false(ok.is_recovered);
    assert_false(ok.is_recoverable);
    assert_string_not_equal(ok.epoch, epoch_keep);
    /* new:x keeps from now on, within the new cap (64 KiB over 2 loops). */
    uint64_t first = 0;
    for (int i = 0; i < 40; i++)
        GW_OK(test_client_publish_ex(&pub, "new:x", payload, sizeof(payload), &last, epoch_new,
                                     GW_WAIT_MS),
              &pub);
    first = last - 5;
    assert_true(gw_metric(h, "herald_history_bytes", NULL) <= 64 * 1024);
    assert_true(gw_metric(h, "herald_history_evicted_total", "reason=\"memory\"") > 0);
    GW_OK(test_client_subscribe_from(&c, "new:x", epoch_new, first, &ok, GW_WAIT_MS), &c);
    assert_true(ok.is_recovered);
    assert_true(ok.is_recoverable);
    for (uint64_t o = first + 1; o <= last; o++)
        GW_OK(test_client_expect_push(&c, "new:x", o, NULL, GW_WAIT_MS), &c);
    test_client_close(&c);
    test_client_close(&pub);
    gw_stop(state);
    unlink(r.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_reload_limits, gw_teardown),
        cmocka_unit_test_teardown(test_gw_reload_token_rotation, gw_teardown),
        cmocka_unit_test_teardown(test_gw_reload_bad_file_keeps_config, gw_teardown),
        cmocka_unit_test_teardown(test_gw_reload_restart_needed, gw_teardown),
        cmocka_unit_test_teardown(test_gw_reload_history_rules, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
