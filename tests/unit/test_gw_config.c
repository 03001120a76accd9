/*
 * test_gw_config: defaults, the value syntax (table-driven), the INI file with every error
 * reported on its line, HERALD_* variables, flags, the load order, validation, --help and
 * list splitting. What reload relies on is in test_gw_config_reload.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_config.h"
#include "netlib/nl_log.h"
#include "test_file.h"

#define SECRET "0123456789abcdef0123456789abcdef"

static int count_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p != '\0'; p++)
        n += *p == '\n';
    return n;
}

static void test_gw_config_defaults(void **state)
{
    (void)state;
    gw_config_t c;
    gw_config_init(&c);
    assert_string_equal(c.listen_host, "0.0.0.0");
    assert_int_equal(c.listen_port, 7400);
    assert_string_equal(c.admin_host, "127.0.0.1");
    assert_int_equal(c.admin_port, 7401);
    assert_true(c.is_admin_enabled);
    assert_string_equal(c.admin_api_key, "");
    assert_string_equal(c.token_secret, "");
    assert_false(c.is_insecure);
    assert_int_equal(c.io_threads, 0);
    assert_int_equal(c.worker_threads, 2);
    assert_int_equal(c.worker_queue_capacity, 4096);
    assert_int_equal(c.ping_interval_ms, 25000);
    assert_int_equal(c.idle_timeout_ms, 60000);
    assert_int_equal(c.max_frame_bytes, 65536);
    assert_int_equal(c.max_subscriptions_per_conn, 128);
    assert_int_equal(c.max_channel_bytes, 128);
    assert_int_equal(c.publish_rate_per_s, 100);
    assert_int_equal(c.publish_burst, 200);
    assert_int_equal(c.output_high_water_bytes, 1024 * 1024);
    assert_int_equal(c.slow_consumer, GW_SLOW_DROP);
    assert_int_equal(c.presence_max_clients, 1000);
    assert_int_equal(c.presence_refresh_ms, 5000);
    assert_int_equal(c.presence_last_seen_ttl_ms, 24 * 3600 * 1000);
    assert_int_equal(c.presence_last_seen_max, 100000);
    assert_int_equal(c.engine, GW_ENGINE_MEMORY);
    assert_string_equal(c.redis, "127.0.0.1:6379");
    assert_int_equal(c.redis_timeout_ms, 2000);
    assert_int_equal(c.log_level, NL_INFO);
    assert_false(c.is_reuseport);
    /* Defaults alone are valid: herald runs with no arguments (refusing every Connect until a
     * secret is set, which is a warning, not an error). */
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_validate(&c, err.fp), 0);
    test_capture_close(&err);
    assert_non_null(strstr(err.text, "no token secret"));
    free(err.text);
}

static void test_gw_config_durations(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
        uint64_t ms;
    } rows[] = {
        {"500ms", 0, 500},
        {"25s", 0, 25000},
        {"1m", 0, 60000},
        {"1h", 0, 3600000},
        {"2d", 0, 172800000},
        {"100", 0, 100},
        {"0", 0, 0},
        {"", -EINVAL, 0},
        {"-1s", -EINVAL, 0},
        {" 1s", -EINVAL, 0},
        {"1 s", -EINVAL, 0},
        {"1x", -EINVAL, 0},
        {"s", -EINVAL, 0},
        {"1.5s", -EINVAL, 0},
        {"1S", -EINVAL, 0},
        {"99999999999999999999", -ERANGE, 0},
        {"18446744073709551615s", -ERANGE, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint64_t v = 12345;
        assert_int_equal(gw_config_parse_duration_ms(rows[i].text, &v), rows[i].rc);
        assert_int_equal(v, rows[i].rc == 0 ? rows[i].ms : 12345);
    }
}

static void test_gw_config_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
        uint64_t bytes;
    } rows[] = {
        {"512", 0, 512},      {"64k", 0, 65536},
        {"64K", 0, 65536},    {"64KiB", 0, 65536},
        {"64kb", 0, 65536},   {"1m", 0, 1048576},
        {"1MiB", 0, 1048576}, {"2g", 0, 2147483648u},
        {"7b", 0, 7},         {"1t", -EINVAL, 0},
        {"k", -EINVAL, 0},    {"1kk", -EINVAL, 0},
        {"-1k", -EINVAL, 0},  {"17179869184g", -ERANGE, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint64_t v = 12345;
        assert_int_equal(gw_config_parse_size(rows[i].text, &v), rows[i].rc);
        assert_int_equal(v, rows[i].rc == 0 ? rows[i].bytes : 12345);
    }
}

static void test_gw_config_hostport_and_bool(void **state)
{
    (void)state;
    char host[16];
    uint16_t port = 0;
    assert_int_equal(gw_config_parse_hostport("0.0.0.0:7400", host, sizeof(host), &port), 0);
    assert_string_equal(host, "0.0.0.0");
    assert_int_equal(port, 7400);
    assert_int_equal(gw_config_parse_hostport("[::1]:0", host, sizeof(host), &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(gw_config_parse_hostport("::1:80", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(gw_config_parse_hostport(":80", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(gw_config_parse_hostport("h:", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(gw_config_parse_hostport("h:65536", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(gw_config_parse_hostport("h", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(gw_config_parse_hostport("0123456789abcdef:1", host, sizeof(host), &port),
                     -ENAMETOOLONG);
    bool b = false;
    assert_int_equal(gw_config_parse_bool("Yes", &b), 0);
    assert_true(b);
    assert_int_equal(gw_config_parse_bool("off", &b), 0);
    assert_false(b);
    assert_int_equal(gw_config_parse_bool("2", &b), -EINVAL);

    char out[32];
    gw_config_format_duration(25000, out, sizeof(out));
    assert_string_equal(out, "25s");
    gw_config_format_duration(1500, out, sizeof(out));
    assert_string_equal(out, "1500ms");
    gw_config_format_duration(0, out, sizeof(out));
    assert_string_equal(out, "0ms");
    gw_config_format_size(1048576, out, sizeof(out));
    assert_string_equal(out, "1MiB");
    gw_config_format_size(1000, out, sizeof(out));
    assert_string_equal(out, "1000");
}

static void test_gw_config_file_values(void **state)
{
    (void)state;
    char path[64];
    test_write_temp(path, "; comment\n"
                          "[server]\n"
                          "listen = 127.0.0.2:9100\n"
                          "  io_threads = 3   ; indented keys are keys, not continuations\n"
                          "reuseport = yes\n"
                          "node_id = node-a\n"
                          "[admin]\n"
                          "port = 0\n"
                          "api_key = k3y\n"
                          "[auth]\n"
                          "secret = " SECRET "\n"
                          "[limits]\n"
                          "ping_interval = 10s\n"
                          "idle_timeout = 1m\n"
                          "max_frame = 128KiB\n"
                          "output_high_water = 4m\n"
                          "slow_consumer = disconnect\n"
                          "# hash comments too\n"
                          "[engine]\n"
                          "type = redis\n"
                          "redis = 10.0.0.1:6380, [::1]:6381\n"
                          "[log]\n"
                          "level = debug\n");
    gw_config_t c;
    gw_config_init(&c);
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_load_file(&c, path, err.fp), 0);
    test_capture_close(&err);
    assert_string_equal(err.text, "");
    free(err.text);
    assert_string_equal(c.listen_host, "127.0.0.2");
    assert_int_equal(c.listen_port, 9100);
    assert_int_equal(c.io_threads, 3);
    assert_true(c.is_reuseport);
    assert_string_equal(c.node_id, "node-a");
    assert_int_equal(c.admin_port, 0);
    assert_string_equal(c.admin_api_key, "k3y");
    assert_string_equal(c.token_secret, SECRET);
    assert_int_equal(c.ping_interval_ms, 10000);
    assert_int_equal(c.idle_timeout_ms, 60000);
    assert_int_equal(c.max_frame_bytes, 131072);
    assert_int_equal(c.output_high_water_bytes, 4194304);
    assert_int_equal(c.slow_consumer, GW_SLOW_DISCONNECT);
    assert_int_equal(c.engine, GW_ENGINE_REDIS);
    assert_string_equal(c.redis, "10.0.0.1:6380, [::1]:6381");
    gw_config_server_t servers[4];
    assert_int_equal(gw_config_parse_servers(c.redis, servers, 4), 2);
    assert_string_equal(servers[0].host, "10.0.0.1");
    assert_int_equal(servers[0].port, 6380);
    assert_string_equal(servers[1].host, "::1");
    assert_int_equal(servers[1].port, 6381);
    assert_int_equal(gw_config_parse_servers("a:1,a:1", servers, 4), -EINVAL);
    assert_int_equal(gw_config_parse_servers("a:1,", servers, 4), -EINVAL);
    assert_int_equal(gw_config_parse_servers("a", servers, 4), -EINVAL);
    assert_int_equal(gw_config_parse_servers("a:0", servers, 4), -EINVAL);
    assert_int_equal(gw_config_parse_servers("a:1,b:1,c:1", servers, 2), -E2BIG);
    assert_int_equal(gw_config_parse_servers("", servers, 4), 0);
    assert_int_equal(c.log_level, NL_DEBUG);
    assert_string_equal(c.config_path, path);
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    /* The Redis engine needs its servers. */
    c.redis[0] = '\0';
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    c.engine = GW_ENGINE_MEMORY;
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    unlink(path);
}

/* Every kind of error, each on a known line, all reported in one pass. */
static void test_gw_config_check_reports_every_line(void **state)
{
    (void)state;
    char long_line[300];
    memset(long_line, 'x', sizeof(long_line));
    memcpy(long_line, "node_id = ", 10);
    long_line[sizeof(long_line) - 2] = '\n';
    long_line[sizeof(long_line) - 1] = '\0';
    char text[1024];
    snprintf(text, sizeof(text),
             "orphan = 1\n"                /* 1: outside a section */
             "[server]\n"                  /* 2 */
             "port = 70000\n"              /* 3: out of range */
             "io_threads = many\n"         /* 4: not a number */
             "colour = blue\n"             /* 5: unknown key */
             "port = 1\n"                  /* 6: set twice */
             "just words\n"                /* 7: no '=' */
             "[limits\n"                   /* 8: unclosed section */
             "%s"                          /* 9: too long */
             "[limits]\n"                  /* 10 */
             "ping_interval = 30s\n"       /* 11: fine alone; but idle_timeout 20s is lower */
             "idle_timeout = 20s\n"        /* 12 */
             "slow_consumer = sometimes\n" /* 13: bad enum */
             "max_subscriptions = 40000\n" /* 14: over what a connection's set holds */
             "[nosuch]\n"                  /* 15 */
             "a = 1\n"                     /* 16: unknown section, reported once */
             "b = 2\n"                     /* 17 */
             "[auth]\n"                    /* 18 */
             "secret = " SECRET "\n"       /* 19 */
             "[admin]\n"                   /* 20 */
             "api_key = k\n",              /* 21: so validate has no warning to print */
             long_line);
    char path[64];
    test_write_temp(path, text);
    test_capture_t err;
    test_capture_open(&err);
    int n = gw_config_check_file(path, err.fp);
    test_capture_close(&err);
    static const int lines[] = {1, 3, 4, 5, 6, 7, 8, 9, 13, 14, 15};
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char want[96];
        snprintf(want, sizeof(want), "%s:%d: ", path, lines[i]);
        if (strstr(err.text, want) == NULL)
            fail_msg("no error for line %d in:\n%s", lines[i], err.text);
    }
    assert_non_null(strstr(err.text, ":6: 'port' set twice (first on line 3)"));
    assert_non_null(strstr(err.text, ":5: unknown key 'colour' in [server]"));
    assert_non_null(strstr(err.text, "idle_timeout (20000 ms) must exceed ping_interval"));
    assert_null(strstr(err.text, ":16:"));
    assert_null(strstr(err.text, ":17:"));
    /* Eleven line errors and one cross-setting error, one line each, nothing else. */
    assert_int_equal(n, 12);
    assert_int_equal(count_lines(err.text), 12);
    free(err.text);
    unlink(path);

    test_capture_open(&err);
    assert_int_equal(gw_config_check_file("/nonexistent/herald.conf", err.fp), 1);
    test_capture_close(&err);
    assert_non_null(strstr(err.text, "cannot open"));
    free(err.text);
}

/* Issue 24 (hostile pass): an empty file, one cut short in the middle of a line, one with only
 * comments, and a directory were all taken as a config (every default: no token secret). Each
 * is refused now, with its own reason. */
static void test_gw_config_refuses_empty_cut_or_not_a_file(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"", "no setting in the file"},
        {"; only a comment\n\n# and another\n", "no setting in the file"},
        {"[auth]\nsecret = " SECRET "\n[limits]\nidle_tim", "the last line has no newline"},
        {"[auth]\nsecret = " SECRET, "the last line has no newline"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[64];
        test_write_temp(path, cases[i].text);
        test_capture_t err;
        test_capture_open(&err);
        int n = gw_config_check_file(path, err.fp);
        test_capture_close(&err);
        if (n == 0 || strstr(err.text, cases[i].reason) == NULL)
            fail_msg("case %zu: %d problems, wanted '%s' in:\n%s", i, n, cases[i].reason, err.text);
        free(err.text);
        unlink(path);
    }
    test_capture_t err;
    test_capture_open(&err);
    assert_true(gw_config_check_file("/tmp", err.fp) > 0);
    test_capture_close(&err);
    assert_non_null(strstr(err.text, "not a regular file"));
    free(err.text);
}

static void test_gw_config_env(void **state)
{
    (void)state;
    char *envp[] = {
        (char *)"PATH=/bin",
        (char *)"HERALD_LISTEN=10.0.0.1:1",
        (char *)"HERALD_LISTEN_PORT=9000", /* applies after HERALD_LISTEN, whatever the order */
        (char *)"HERALD_TOKEN_SECRET=" SECRET,
        (char *)"HERALD_ADMIN_API_KEY=adminkey",
        (char *)"HERALD_INSECURE=yes",
        (char *)"HERALD_PING_INTERVAL=5s",
        (char *)"HERALD_BUILD_DIR=/tmp", /* not ours: a warning only */
        NULL,
    };
    gw_config_t c;
    gw_config_init(&c);
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_load_env(&c, envp, err.fp), 0);
    test_capture_close(&err);
    assert_string_equal(c.listen_host, "10.0.0.1");
    assert_int_equal(c.listen_port, 9000);
    assert_string_equal(c.token_secret, SECRET);
    assert_string_equal(c.admin_api_key, "adminkey");
    assert_true(c.is_insecure);
    assert_int_equal(c.ping_interval_ms, 5000);
    assert_string_equal(err.text, "warning: HERALD_BUILD_DIR is not a herald setting; ignored\n");
    free(err.text);

    char *bad[] = {(char *)"HERALD_IO_THREADS=-2", (char *)"HERALD_TOKEN_SECRET=", NULL};
    test_capture_open(&err);
    assert_int_equal(gw_config_load_env(&c, bad, err.fp), -EINVAL);
    test_capture_close(&err);
    assert_string_equal(err.text, "HERALD_IO_THREADS: '-2' is not an integer in 0..64\n");
    assert_string_equal(c.token_secret, ""); /* the empty value was applied */
    free(err.text);
}

/* [admin] max_body stops where a Push would pass the 16 MiB clients accept (PROTOCOL.md). */
static void test_gw_config_admin_body_fits_a_push(void **state)
{
    (void)state;
    gw_config_t c;
    gw_config_init(&c);
    char *fits[] = {(char *)"HERALD_ADMIN_MAX_BODY=16380k", NULL};
    assert_int_equal(gw_config_load_env(&c, fits, NULL), 0);
    assert_int_equal(c.admin_max_body_bytes, 16380 * 1024);
    char *over[] = {(char *)"HERALD_ADMIN_MAX_BODY=16m", NULL};
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_load_env(&c, over, err.fp), -EINVAL);
    test_capture_close(&err);
    assert_non_null(strstr(err.text, "HERALD_ADMIN_MAX_BODY: '16m'"));
    free(err.text);
}

static void test_gw_config_args(void **state)
{
    (void)state;
    char *argv[] = {(char *)"herald",
                    (char *)"--listen",
                    (char *)"1.2.3.4:99",
                    (char *)"--insecure",
                    (char *)"--secret",
                    (char *)"s3cr3t-s3cr3t-16",
                    (char *)"--api-key=K",
                    (char *)"--io-threads",
                    (char *)"4",
                    (char *)"--log-level",
                    (char *)"trace",
                    (char *)"--max-frame=1m",
                    (char *)"--reuseport=no",
                    (char *)"-c",
                    (char *)"/etc/herald.conf",
                    NULL};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;
    gw_config_t c;
    gw_config_init(&c);
    c.is_reuseport = true;
    gw_config_action_t action = GW_CONFIG_HELP;
    assert_int_equal(gw_config_load_args(&c, argc, argv, stderr, &action), 0);
    assert_int_equal(action, GW_CONFIG_RUN);
    assert_string_equal(c.listen_host, "1.2.3.4");
    assert_int_equal(c.listen_port, 99);
    assert_true(c.is_insecure);
    assert_string_equal(c.token_secret, "s3cr3t-s3cr3t-16");
    assert_string_equal(c.admin_api_key, "K");
    assert_int_equal(c.io_threads, 4);
    assert_int_equal(c.log_level, NL_TRACE);
    assert_int_equal(c.max_frame_bytes, 1048576);
    assert_false(c.is_reuseport);
    assert_string_equal(c.config_path, "/etc/herald.conf");

    char *bad[] = {(char *)"herald",
                   (char *)"--io-threads",
                   (char *)"lots",
                   (char *)"--no-such",
                   (char *)"--token-secret=" SECRET,
                   (char *)"--secret",
                   NULL};
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_load_args(&c, 6, bad, err.fp, &action), -EINVAL);
    test_capture_close(&err);
    assert_string_equal(err.text, "--io-threads: 'lots' is not an integer in 0..64\n"
                                  "--no-such: unknown option (see --help)\n"
                                  "--secret: needs a value\n");
    assert_string_equal(c.token_secret, SECRET);
    free(err.text);

    char *extra[] = {(char *)"herald", (char *)"--insecure", (char *)"stray", NULL};
    test_capture_open(&err);
    assert_int_equal(gw_config_load_args(&c, 3, extra, err.fp, NULL), -EINVAL);
    test_capture_close(&err);
    assert_string_equal(err.text, "stray: unexpected argument (see --help)\n");
    free(err.text);

    char *help[] = {(char *)"herald", (char *)"--check-config", (char *)"x.conf", NULL};
    assert_int_equal(gw_config_load_args(&c, 3, help, stderr, &action), 0);
    assert_int_equal(action, GW_CONFIG_CHECK);
    assert_string_equal(c.config_path, "x.conf");
}

/* Defaults < file < environment < flags, through gw_config_load. */
static void test_gw_config_load_order(void **state)
{
    (void)state;
    char path[64];
    test_write_temp(path, "[server]\nport = 1000\nio_threads = 1\nworker_threads = 5\n"
                          "[auth]\nsecret = " SECRET "\n");
    char config_flag[80];
    snprintf(config_flag, sizeof(config_flag), "--config=%s", path);
    char *argv[] = {(char *)"herald", config_flag, (char *)"--io-threads", (char *)"3", NULL};
    char *envp[] = {(char *)"HERALD_LISTEN_PORT=2000", (char *)"HERALD_IO_THREADS=2", NULL};
    gw_config_t c;
    gw_config_action_t action;
    assert_int_equal(gw_config_load(&c, 4, argv, envp, stderr, &action), 0);
    assert_int_equal(action, GW_CONFIG_RUN);
    assert_int_equal(c.worker_threads, 5); /* file only */
    assert_int_equal(c.listen_port, 2000); /* file, then environment */
    assert_int_equal(c.io_threads, 3);     /* file, environment, then flag */
    assert_string_equal(c.config_path, path);

    /* HERALD_CONFIG names the file when no flag does. */
    char env_config[80];
    snprintf(env_config, sizeof(env_config), "HERALD_CONFIG=%s", path);
    char *envp2[] = {env_config, NULL};
    char *argv2[] = {(char *)"herald", NULL};
    assert_int_equal(gw_config_load(&c, 1, argv2, envp2, stderr, &action), 0);
    assert_int_equal(c.listen_port, 1000);

    /* A file error fails the load but every source is still reported. */
    char *argv3[] = {(char *)"herald", config_flag, (char *)"--bogus", NULL};
    unlink(path);
    test_write_temp(path, "[server]\nport = x\n");
    snprintf(config_flag, sizeof(config_flag), "--config=%s", path);
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_load(&c, 3, argv3, envp, err.fp, &action), -EINVAL);
    test_capture_close(&err);
    assert_int_equal(count_lines(err.text), 2);
    assert_non_null(strstr(err.text, ":2: port: 'x' is not an integer"));
    assert_non_null(strstr(err.text, "--bogus: unknown option"));
    free(err.text);

    /* --help stops before anything is loaded. */
    char *argv4[] = {(char *)"herald", (char *)"--help", (char *)"--bogus", NULL};
    assert_int_equal(gw_config_load(&c, 3, argv4, envp, NULL, &action), 0);
    assert_int_equal(action, GW_CONFIG_HELP);
    unlink(path);
}

static void test_gw_config_validate(void **state)
{
    (void)state;
    gw_config_t c;
    gw_config_init(&c);
    strcpy(c.token_secret, SECRET);
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    c.idle_timeout_ms = c.ping_interval_ms;
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    c.idle_timeout_ms = c.ping_interval_ms + 1;
    strcpy(c.token_secret, "short");
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    c.token_secret[0] = '\0';
    c.is_insecure = true;
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    c.output_high_water_bytes = c.max_frame_bytes - 1;
    c.admin_port = c.listen_port;
    assert_int_equal(gw_config_validate(&c, NULL), 2);
}

static void test_gw_config_usage_names_every_source(void **state)
{
    (void)state;
    test_capture_t out;
    test_capture_open(&out);
    gw_config_usage(out.fp, "herald");
    test_capture_close(&out);
    static const char *const want[] = {
        "Usage: herald",
        "--listen HOST:PORT",
        "HERALD_LISTEN_PORT",
        "default 7400",
        "--api-key",
        "HERALD_ADMIN_API_KEY",
        "--secret",
        "HERALD_TOKEN_SECRET",
        "--insecure[=BOOL]",
        "HERALD_INSECURE",
        "--ping-interval DURATION",
        "default 25s",
        "default 1MiB",
        "--log-level LEVEL",
        "[limits]",
        "[presence]",
        "--presence-refresh-interval DURATION",
        "HERALD_PRESENCE_MAX_CLIENTS",
        "default 1d",
        "--check-config FILE",
        "default (none)",
        "--token-previous-secrets TEXT",
        "HERALD_TOKEN_PREVIOUS_SECRETS",
        "alias --previous-secrets",
        "default 10s, reloads on SIGHUP", /* drain */
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (strstr(out.text, want[i]) == NULL)
            fail_msg("--help lacks '%s'", want[i]);
    }
    free(out.text);
}

static void test_gw_config_split_list(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int want; /* items, or a negative errno */
        const char *first;
        const char *last;
    } rows[] = {
        {"", 0, NULL, NULL},
        {"   ", 0, NULL, NULL},
        {"a", 1, "a", "a"},
        {"a,b", 2, "a", "b"},
        {"  a b , c\t", 2, "a b", "c"},
        {"a,b,c,d", 4, "a", "d"},
        {"a,b,c,d,e", -E2BIG, NULL, NULL},
        {"a,,b", -EINVAL, NULL, NULL},
        {"a,", -EINVAL, NULL, NULL},
        {",a", -EINVAL, NULL, NULL},
        {"a, ,b", -EINVAL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        gw_config_item_t items[4];
        int n = gw_config_split_list(rows[i].text, items, 4);
        if (n != rows[i].want)
            fail_msg("'%s': %d items, want %d", rows[i].text, n, rows[i].want);
        if (n > 0) {
            assert_int_equal(items[0].len, strlen(rows[i].first));
            assert_memory_equal(items[0].text, rows[i].first, items[0].len);
            assert_int_equal(items[n - 1].len, strlen(rows[i].last));
            assert_memory_equal(items[n - 1].text, rows[i].last, items[n - 1].len);
        }
    }
}
/* Sentinel: the addresses and a master name per shard go together; names have no blanks. */
static void test_gw_config_sentinels(void **state)
{
    (void)state;
    char names[4][GW_CONFIG_NAME_MAX];
    assert_int_equal(gw_config_parse_names("herald", names, 4), 1);
    assert_string_equal(names[0], "herald");
    assert_int_equal(gw_config_parse_names(" a, b-2 ,c.3", names, 4), 3);
    assert_string_equal(names[1], "b-2");
    assert_int_equal(gw_config_parse_names("a,a", names, 4), -EINVAL);
    assert_int_equal(gw_config_parse_names("a b", names, 4), -EINVAL);
    assert_int_equal(gw_config_parse_names("a,,b", names, 4), -EINVAL);
    assert_int_equal(gw_config_parse_names("a,b,c", names, 2), -E2BIG);
    assert_int_equal(gw_config_parse_names("", names, 4), 0);
    char longname[GW_CONFIG_NAME_MAX + 1];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(gw_config_parse_names(longname, names, 4), -EINVAL);

    gw_config_t c;
    gw_config_init(&c);
    c.is_insecure = true;
    strcpy(c.admin_api_key, "k");
    c.engine = GW_ENGINE_REDIS;
    c.redis[0] = '\0'; /* Sentinel replaces the server list */
    strcpy(c.sentinels, "127.0.0.1:26379,127.0.0.1:26380");
    strcpy(c.sentinel_master, "herald");
    assert_int_equal(gw_config_validate(&c, NULL), 0);
    c.sentinel_master[0] = '\0'; /* no name: an error, and no servers either */
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    strcpy(c.sentinel_master, "a b");
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    strcpy(c.sentinel_master, "herald");
    strcpy(c.sentinels, "127.0.0.1");
    assert_int_equal(gw_config_validate(&c, NULL), 1);
    c.sentinels[0] = '\0'; /* a name without sentinels; and no servers */
    assert_int_equal(gw_config_validate(&c, NULL), 2);
    /* From the file, the environment and the flags, like every setting. */
    char *envp[] = {(char *)"HERALD_SENTINELS=10.0.0.1:26379",
                    (char *)"HERALD_SENTINEL_PASSWORD=pw", NULL};
    gw_config_init(&c);
    assert_int_equal(gw_config_load_env(&c, envp, NULL), 0);
    assert_string_equal(c.sentinels, "10.0.0.1:26379");
    assert_string_equal(c.sentinel_password, "pw");
    char *argv[] = {(char *)"herald", (char *)"--sentinel-master", (char *)"m1,m2", NULL};
    assert_int_equal(gw_config_load_args(&c, 3, argv, NULL, NULL), 0);
    assert_string_equal(c.sentinel_master, "m1,m2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_config_defaults),
        cmocka_unit_test(test_gw_config_durations),
        cmocka_unit_test(test_gw_config_sizes),
        cmocka_unit_test(test_gw_config_hostport_and_bool),
        cmocka_unit_test(test_gw_config_file_values),
        cmocka_unit_test(test_gw_config_check_reports_every_line),
        cmocka_unit_test(test_gw_config_refuses_empty_cut_or_not_a_file),
        cmocka_unit_test(test_gw_config_env),
        cmocka_unit_test(test_gw_config_admin_body_fits_a_push),
        cmocka_unit_test(test_gw_config_args),
        cmocka_unit_test(test_gw_config_load_order),
        cmocka_unit_test(test_gw_config_validate),
        cmocka_unit_test(test_gw_config_usage_names_every_source),
        cmocka_unit_test(test_gw_config_split_list),
        cmocka_unit_test(test_gw_config_sentinels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
