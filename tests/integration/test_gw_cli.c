/*
 * test_gw_cli: the herald binary's command line, run as an operator runs it. --version and
 * --help exit 0 and say what they should; --check-config prints every error of a bad file with
 * its line and exits non-zero, and says "ok" of a good one; --print-config refuses (exit 2,
 * nothing printed, the same message) a config a start would refuse; a bad flag value is refused
 * before anything starts; `herald token --user U --channels 'news,chat:*' --ttl T` prints a
 * token that a herald with the same secret accepts for exactly those channels, and whose exp
 * it enforces.
 *
 * Each command runs through the harness's test_herald_run (environment without HERALD_*, stdout
 * and stderr collected until it exits, within a deadline).
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
#include <unistd.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"
#include "test_file.h"

#define CLI_WAIT_MS 30000

/* Runs herald with args (see test_herald_run); fails the test if it cannot, or if herald does
 * not finish within CLI_WAIT_MS. */
static void cli_run(test_herald_run_t *r, const char *const *args)
{
    int rc = test_herald_run(args, CLI_WAIT_MS, r);
    if (rc != 0)
        fail_msg("herald %s: %s", args[0] ? args[0] : "", strerror(-rc));
}

/* Fails the test unless the run's stdout (which 0) or stderr (1) holds needle. */
static void expect_out(const test_herald_run_t *r, int which, const char *needle)
{
    const char *text = which ? r->err : r->out;
    if (!strstr(text, needle))
        fail_msg("expected \"%s\" in herald's %s:\n%s\n(the other: %s)", needle,
                 which ? "stderr" : "stdout", text, which ? r->out : r->err);
}

static void test_gw_cli_version_and_help(void **state)
{
    NL_UNUSED(state);
    test_herald_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    cli_run(r, (const char *[]){"--version", NULL});
    assert_int_equal(r->status, 0);
    assert_true(strncmp(r->out, "herald ", 7) == 0);
    assert_true(r->out[7] >= '0' && r->out[7] <= '9');

    cli_run(r, (const char *[]){"--help", NULL});
    assert_int_equal(r->status, 0);
    expect_out(r, 0, "--config");
    expect_out(r, 0, "--check-config");
    expect_out(r, 0, "HERALD_");
    expect_out(r, 0, "herald token --user U");

    /* A bad value is refused before anything listens, with the flag named. */
    cli_run(r, (const char *[]){"--io-threads", "65", "--listen", "127.0.0.1:0", "--admin",
                                "127.0.0.1:0", NULL});
    assert_int_not_equal(r->status, 0);
    expect_out(r, 1, "--io-threads: '65'");
    assert_null(strstr(r->err, "ev=listening"));
    free(r);
}

static void test_gw_cli_check_config(void **state)
{
    NL_UNUSED(state);
    test_herald_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    char bad[64];
    test_write_temp(bad, "[server]\n"                  /* 1 */
                         "port = 70000\n"              /* 2: out of range */
                         "io_threads = 8\n"            /* 3: fine */
                         "[limits]\n"                  /* 4 */
                         "slow_consumer = sometimes\n" /* 5: not a policy */
                         "colour = blue\n");           /* 6: unknown key */
    cli_run(r, (const char *[]){"--check-config", bad, NULL});
    assert_int_not_equal(r->status, 0);
    for (int line = 1; line <= 6; line++) {
        char want[96];
        snprintf(want, sizeof(want), "%s:%d: ", bad, line);
        bool is_bad = line == 2 || line == 5 || line == 6;
        if (is_bad != (strstr(r->err, want) != NULL))
            fail_msg("line %d %s reported:\n%s", line, is_bad ? "not" : "wrongly", r->err);
    }
    unlink(bad);

    char good[64];
    test_write_temp(good, "[server]\nport = 7000\n[auth]\nsecret = " GW_SECRET "\n"
                          "[admin]\napi_key = k\n");
    cli_run(r, (const char *[]){"--check-config", good, NULL});
    assert_int_equal(r->status, 0);
    char ok[96];
    snprintf(ok, sizeof(ok), "%s: ok", good);
    expect_out(r, 0, ok);
    unlink(good);
    free(r);
}

/* --print-config checks what it prints as a start would: a combination herald refuses (here
 * idle_timeout not above ping_interval, from flags and from a file) prints nothing on stdout,
 * the same message as --check-config on stderr, and exits 2 as a start does; a valid one
 * prints. */
static void test_gw_cli_print_config_validates(void **state)
{
    NL_UNUSED(state);
    test_herald_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    static const char want[] = "config: idle_timeout (20000 ms) must exceed ping_interval "
                               "(30000 ms)";
    cli_run(r, (const char *[]){"--print-config", "--ping-interval", "30s", "--idle-timeout", "20s",
                                NULL});
    assert_int_equal(r->status, 2);
    assert_string_equal(r->out, "");
    expect_out(r, 1, want);

    char bad[64];
    test_write_temp(bad, "[limits]\nping_interval = 30s\nidle_timeout = 20s\n");
    cli_run(r, (const char *[]){"--config", bad, "--print-config", NULL});
    assert_int_equal(r->status, 2);
    assert_string_equal(r->out, "");
    expect_out(r, 1, want);
    cli_run(r, (const char *[]){"--check-config", bad, NULL});
    assert_int_not_equal(r->status, 0);
    expect_out(r, 1, want);
    unlink(bad);

    cli_run(r, (const char *[]){"--print-config", "--ping-interval", "30s", "--idle-timeout", "40s",
                                NULL});
    assert_int_equal(r->status, 0);
    expect_out(r, 0, "ping_interval = 30s");
    expect_out(r, 0, "idle_timeout = 40s");
    free(r);
}

/* The token the command printed (its first line), copied into tok. */
static void token_of(const test_herald_run_t *r, char tok[GW_TOKEN_CAP])
{
    size_t len = strcspn(r->out, "\n");
    assert_true(len > 0 && len < GW_TOKEN_CAP);
    memcpy(tok, r->out, len);
    tok[len] = '\0';
    /* A JWT: three base64url parts. */
    assert_int_equal(
        strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."), len);
    assert_non_null(strchr(tok, '.'));
    assert_non_null(strchr(strchr(tok, '.') + 1, '.'));
}

static void test_gw_cli_token(void **state)
{
    test_herald_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    cli_run(r, (const char *[]){"token", "--user", "alice", "--channels", "news,chat:*", "--ttl",
                                "1h", "--secret", GW_SECRET, NULL});
    assert_int_equal(r->status, 0);
    char tok[GW_TOKEN_CAP];
    token_of(r, tok);

    /* Without a secret it refuses, naming where a secret comes from. */
    cli_run(r, (const char *[]){"token", "--user", "alice", NULL});
    assert_int_not_equal(r->status, 0);
    expect_out(r, 1, "[auth] secret");

    test_herald_t *h = gw_start(state, "--secret", GW_SECRET, NULL);
    test_client_t c;
    GW_OK(test_client_auth(&c, h->port, tok, GW_WAIT_MS), &c);
    assert_string_equal(c.user_id, "alice");
    uint64_t off = 0;
    GW_OK(test_client_subscribe(&c, "chat:lobby", &off, GW_WAIT_MS), &c);
    GW_OK(test_client_subscribe(&c, "news", NULL, GW_WAIT_MS), &c);
    assert_int_not_equal(test_client_subscribe(&c, "sport", NULL, GW_WAIT_MS), 0);
    test_client_close(&c);

    /* A token for another secret is refused. */
    cli_run(r, (const char *[]){"token", "--user", "mallory", "--secret",
                                "another-secret-0123456789", NULL});
    assert_int_equal(r->status, 0);
    token_of(r, tok);
    test_client_t m;
    GW_OK(test_client_open(&m, h->port, GW_WAIT_MS), &m);
    assert_int_not_equal(test_client_hello(&m, tok, GW_WAIT_MS), 0);
    test_client_close(&m);

    /* --ttl sets exp: a 2 s token is accepted, then the session ends TOKEN_EXPIRED. */
    cli_run(r, (const char *[]){"token", "--user", "brief", "--ttl", "2s", "--secret", GW_SECRET,
                                NULL});
    assert_int_equal(r->status, 0);
    token_of(r, tok);
    test_client_t b;
    GW_OK(test_client_auth(&b, h->port, tok, GW_WAIT_MS), &b);
    Herald__Frame *f = NULL;
    int rc = test_client_recv(&b, &f, GW_WAIT_MS);
    if (rc <= 0)
        fail_msg("expected Disconnect{TOKEN_EXPIRED}, got %d: %s", rc, test_client_what(&b));
    assert_int_equal(f->body_case, HERALD__FRAME__BODY_DISCONNECT);
    assert_int_equal(f->disconnect->code, HERALD__DISCONNECT__CODE__TOKEN_EXPIRED);
    proto_frame_free(f);
    test_client_close(&b);
    free(r);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_cli_version_and_help),
        cmocka_unit_test(test_gw_cli_check_config),
        cmocka_unit_test(test_gw_cli_print_config_validates),
        cmocka_unit_test_teardown(test_gw_cli_token, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
