/*
 * test_gw_cli: the herald binary's command line, run as an operator runs it. --version and
 * --help exit 0 and say what they should; --check-config prints every error of a bad file with
 * its line and exits non-zero, and says "ok" of a good one; a bad flag value is refused before
 * anything starts; `herald token --user U --channels 'news,chat:*' --ttl T` prints a token that
 * a herald with the same secret accepts for exactly those channels, and whose exp it enforces.
 *
 * Each command runs as a child (fork + execve) with every HERALD_* variable removed from its
 * environment, as the harness does, its stdout and stderr captured through two pipes until
 * EOF (a poll deadline), then reaped.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gwtest_util.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

#define CLI_OUT_CAP 16384
#define CLI_WAIT_MS 30000

extern char **environ;

typedef struct cli_run_s {
    int status;               /* exit code, or 128 + signal */
    char out[2][CLI_OUT_CAP]; /* stdout, stderr */
} cli_run_t;

/* The child's environment: ours without any HERALD_* variable (herald refuses unknown ones,
 * and ctest sets some), built before fork so the child only calls async-signal-safe functions. */
static char **cli_env(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof(*env));
    assert_non_null(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "HERALD_", 7) != 0)
            env[k++] = environ[i];
    }
    env[k] = NULL;
    return env;
}

/* Kills and reaps pid, closes the fds still open, and fails the test with what. */
static void cli_abort(pid_t pid, struct pollfd p[2], char **env, const char *what, const char *arg)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < 2; i++) {
        if (p[i].fd >= 0)
            close(p[i].fd);
    }
    free(env);
    fail_msg("herald %s: %s within %d ms", arg, what, CLI_WAIT_MS);
}

/* Runs herald with args (NULL-terminated, without argv[0]) and collects its stdout and stderr
 * (the first CLI_OUT_CAP - 1 bytes of each; the rest is read and dropped) until both close and
 * it exits; fails the test if it cannot start it, or if that takes over CLI_WAIT_MS. */
static void cli_run(cli_run_t *r, const char *const *args)
{
    const char *bin = test_herald_bin();
    if (!bin)
        fail_msg("no herald binary known (HERALD_BIN / TEST_HERALD_BIN)");
    const char *argv[32] = {bin};
    size_t n = 1;
    for (; args[n - 1] && n + 1 < 32; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char **env = cli_env();
    int fds[2][2];
    if (pipe2(fds[0], O_CLOEXEC) < 0 || pipe2(fds[1], O_CLOEXEC) < 0)
        fail_msg("pipe2: %s", strerror(errno)); /* a test process: fds go with it */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        /* Dies with the test, as the harness's children do. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(126);
        dup2(fds[0][1], STDOUT_FILENO);
        dup2(fds[1][1], STDERR_FILENO);
        execve(bin, (char *const *)argv, env);
        _exit(127);
    }
    size_t len[2] = {0, 0};
    struct pollfd p[2];
    for (int i = 0; i < 2; i++) {
        close(fds[i][1]);
        p[i] = (struct pollfd){.fd = fds[i][0], .events = POLLIN};
    }
    int64_t until = test_now_ms() + CLI_WAIT_MS;
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        int64_t left = until - test_now_ms();
        if (left <= 0 || poll(p, 2, (int)left) <= 0)
            cli_abort(pid, p, env, "output did not end", args[0] ? args[0] : "");
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            char drop[4096];
            bool is_full = len[i] == CLI_OUT_CAP - 1;
            ssize_t k = is_full ? read(p[i].fd, drop, sizeof(drop))
                                : read(p[i].fd, r->out[i] + len[i], CLI_OUT_CAP - 1 - len[i]);
            if (k < 0 && errno == EINTR)
                continue;
            if (k > 0 && !is_full)
                len[i] += (size_t)k;
            if (k <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
            }
        }
    }
    r->out[0][len[0]] = '\0';
    r->out[1][len[1]] = '\0';
    /* The output closed; wait for the exit itself on a pidfd, with what is left of the deadline. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0)
        cli_abort(pid, p, env, "no pidfd to wait on", args[0] ? args[0] : "");
    struct pollfd w = {.fd = pidfd, .events = POLLIN};
    int64_t left = until - test_now_ms();
    int ready = left > 0 ? poll(&w, 1, (int)left) : 0;
    close(pidfd);
    if (ready <= 0)
        cli_abort(pid, p, env, "did not exit after closing its output", args[0] ? args[0] : "");
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        fail_msg("waitpid: %s", strerror(errno));
    free(env);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Fails the test unless the run's stdout (which 0) or stderr (1) holds needle. */
static void expect_out(const cli_run_t *r, int which, const char *needle)
{
    if (!strstr(r->out[which], needle))
        fail_msg("expected \"%s\" in herald's %s:\n%s\n(the other: %s)", needle,
                 which ? "stderr" : "stdout", r->out[which], r->out[!which]);
}

/* Writes text to a fresh temporary file; path gets its name. */
static void write_temp(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/test_gw_cli.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

static void test_gw_cli_version_and_help(void **state)
{
    NL_UNUSED(state);
    cli_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    cli_run(r, (const char *[]){"--version", NULL});
    assert_int_equal(r->status, 0);
    assert_true(strncmp(r->out[0], "herald ", 7) == 0);
    assert_true(r->out[0][7] >= '0' && r->out[0][7] <= '9');

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
    assert_null(strstr(r->out[1], "ev=listening"));
    free(r);
}

static void test_gw_cli_check_config(void **state)
{
    NL_UNUSED(state);
    cli_run_t *r = malloc(sizeof(*r));
    assert_non_null(r);
    char bad[64];
    write_temp(bad, "[server]\n"                  /* 1 */
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
        if (is_bad != (strstr(r->out[1], want) != NULL))
            fail_msg("line %d %s reported:\n%s", line, is_bad ? "not" : "wrongly", r->out[1]);
    }
    unlink(bad);

    char good[64];
    write_temp(good, "[server]\nport = 7000\n[auth]\nsecret = " GW_SECRET "\n"
                     "[admin]\napi_key = k\n");
    cli_run(r, (const char *[]){"--check-config", good, NULL});
    assert_int_equal(r->status, 0);
    char ok[96];
    snprintf(ok, sizeof(ok), "%s: ok", good);
    expect_out(r, 0, ok);
    unlink(good);
    free(r);
}

/* The token the command printed (its first line), copied into tok. */
static void token_of(const cli_run_t *r, char tok[GW_TOKEN_CAP])
{
    size_t len = strcspn(r->out[0], "\n");
    assert_true(len > 0 && len < GW_TOKEN_CAP);
    memcpy(tok, r->out[0], len);
    tok[len] = '\0';
    /* A JWT: three base64url parts. */
    assert_int_equal(
        strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."), len);
    assert_non_null(strchr(tok, '.'));
    assert_non_null(strchr(strchr(tok, '.') + 1, '.'));
}

static void test_gw_cli_token(void **state)
{
    cli_run_t *r = malloc(sizeof(*r));
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
        cmocka_unit_test_teardown(test_gw_cli_token, gw_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
