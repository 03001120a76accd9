/*
 * test_gw_config_reload: what SIGHUP's reload relies on in the config: [auth]
 * previous_secrets, gw_config_reconcile's report of what changed and what cannot change
 * without a restart, and a print/reload round trip proving that the table's printer and
 * parser agree on every setting (and that herald.example.conf loads).
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

/* [auth] previous_secrets from every source, and the checks validation makes on it. */
static void test_gw_config_previous_secrets(void **state)
{
    (void)state;
    char *envp[] = {(char *)"HERALD_TOKEN_PREVIOUS_SECRETS=first-old-secret-123, second-old-secret",
                    NULL};
    gw_config_t c;
    gw_config_init(&c);
    assert_string_equal(c.token_previous_secrets, "");
    assert_int_equal(gw_config_load_env(&c, envp, NULL), 0);
    assert_string_equal(c.token_previous_secrets, "first-old-secret-123, second-old-secret");
    char *argv[] = {(char *)"herald", (char *)"--previous-secrets", (char *)"flag-old-secret-123",
                    NULL};
    assert_int_equal(gw_config_load_args(&c, 3, argv, NULL, NULL), 0);
    assert_string_equal(c.token_previous_secrets, "flag-old-secret-123");

    static const struct {
        const char *list;
        const char *secret;
        int errors;
    } rows[] = {
        {"", SECRET, 0},
        {"0123456789abcdef", SECRET, 0},
        {"0123456789abcdef, fedcba9876543210", SECRET, 0},
        {"0123456789abcde", SECRET, 1},                    /* 15 bytes */
        {"0123456789abcdef,,fedcba9876543210", SECRET, 1}, /* an empty entry */
        {"aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb,cccccccccccccccc,dddddddddddddddd,eeeeeeeeeeeeeeee",
         SECRET, 1},                 /* five */
        {"0123456789abcdef", "", 1}, /* no current secret to go with it */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        gw_config_init(&c);
        strcpy(c.token_secret, rows[i].secret);
        strcpy(c.token_previous_secrets, rows[i].list);
        int n = gw_config_validate(&c, NULL);
        if (n != rows[i].errors)
            fail_msg("'%s': %d errors, want %d", rows[i].list, n, rows[i].errors);
    }
    /* A current secret with a comma could not be listed later: a warning, not an error. */
    gw_config_init(&c);
    strcpy(c.token_secret, "0123456789,abcdef");
    test_capture_t err;
    test_capture_open(&err);
    assert_int_equal(gw_config_validate(&c, err.fp), 0);
    test_capture_close(&err);
    assert_non_null(strstr(err.text, "warning: the token secret holds a ','"));
    free(err.text);
}

/* What the reconcile callback saw. */
typedef struct changes_s {
    int n;
    char keys[16][64];
    gw_config_change_t last[16];
} changes_t;

static void on_change(const gw_config_change_t *ch, void *arg)
{
    changes_t *c = arg;
    assert_true(c->n < 16);
    snprintf(c->keys[c->n], sizeof(c->keys[0]), "%s.%s", ch->section, ch->key);
    c->last[c->n++] = *ch;
}

static const gw_config_change_t *find_change(const changes_t *c, const char *key)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->keys[i], key) == 0)
            return &c->last[i];
    fail_msg("no change reported for %s", key);
    return NULL;
}

/* A reload: reloadable settings take the loaded value, the others keep the running one, and
 * every difference is reported once, secrets without their value. */
static void test_gw_config_reconcile(void **state)
{
    (void)state;
    gw_config_t running;
    gw_config_init(&running);
    strcpy(running.token_secret, SECRET);
    gw_config_t loaded = running;
    changes_t ch = {0};
    assert_int_equal(gw_config_reconcile(&running, &loaded, on_change, &ch), 0);
    assert_int_equal(ch.n, 0);
    /* A string set twice keeps a longer value's tail behind its NUL: not a change. */
    strcpy(loaded.node_id, "a-longer-name");
    strcpy(loaded.node_id, "");
    assert_int_equal(gw_config_reconcile(&running, &loaded, NULL, NULL), 0);

    loaded.max_subscriptions_per_conn = 5;
    loaded.idle_timeout_ms = 90000;
    loaded.slow_consumer = GW_SLOW_DISCONNECT;
    loaded.log_level = NL_DEBUG;
    strcpy(loaded.token_secret, "another-secret-0123456789");
    strcpy(loaded.token_previous_secrets, SECRET);
    loaded.listen_port = 7500;
    strcpy(loaded.listen_host, "10.1.2.3");
    loaded.io_threads = 3;
    loaded.engine = GW_ENGINE_REDIS;
    strcpy(loaded.admin_api_key, "new-admin-key");
    assert_int_equal(gw_config_reconcile(&running, &loaded, on_change, &ch), 11);
    assert_int_equal(ch.n, 11);

    /* Applied. */
    assert_int_equal(loaded.max_subscriptions_per_conn, 5);
    assert_int_equal(loaded.idle_timeout_ms, 90000);
    assert_int_equal(loaded.slow_consumer, GW_SLOW_DISCONNECT);
    assert_int_equal(loaded.log_level, NL_DEBUG);
    assert_string_equal(loaded.token_secret, "another-secret-0123456789");
    assert_string_equal(loaded.token_previous_secrets, SECRET);
    const gw_config_change_t *c = find_change(&ch, "limits.max_subscriptions");
    assert_true(c->is_reloadable);
    assert_string_equal(c->old_value, "128");
    assert_string_equal(c->new_value, "5");
    c = find_change(&ch, "limits.idle_timeout");
    assert_string_equal(c->old_value, "1m");
    assert_string_equal(c->new_value, "90s");
    assert_string_equal(find_change(&ch, "limits.slow_consumer")->new_value, "disconnect");
    assert_string_equal(find_change(&ch, "log.level")->new_value, "debug");
    c = find_change(&ch, "auth.secret");
    assert_true(c->is_reloadable && c->is_secret);
    assert_string_equal(c->old_value, "set");
    assert_string_equal(c->new_value, "set");
    c = find_change(&ch, "auth.previous_secrets");
    assert_string_equal(c->old_value, "");
    assert_string_equal(c->new_value, "set");

    /* Kept until a restart, reported once each (the host and the port, not "listen"). */
    assert_int_equal(loaded.listen_port, 7400);
    assert_string_equal(loaded.listen_host, "0.0.0.0");
    assert_int_equal(loaded.io_threads, 0);
    assert_int_equal(loaded.engine, GW_ENGINE_MEMORY);
    assert_string_equal(loaded.admin_api_key, "");
    c = find_change(&ch, "server.port");
    assert_false(c->is_reloadable);
    assert_string_equal(c->old_value, "7400");
    assert_string_equal(c->new_value, "7500");
    assert_string_equal(find_change(&ch, "server.host")->new_value, "10.1.2.3");
    assert_false(find_change(&ch, "server.io_threads")->is_reloadable);
    assert_false(find_change(&ch, "engine.type")->is_reloadable);
    c = find_change(&ch, "admin.api_key");
    assert_false(c->is_reloadable);
    assert_string_equal(c->new_value, "set");
    for (int i = 0; i < ch.n; i++) {
        assert_string_not_equal(ch.keys[i], "server.listen");
        assert_null(strstr(ch.last[i].old_value, "secret"));
        assert_null(strstr(ch.last[i].new_value, "secret"));
        assert_null(strstr(ch.last[i].new_value, "admin-key"));
    }
    /* Reconciled, the two agree but for what changes at runtime. */
    ch.n = 0;
    assert_int_equal(gw_config_reconcile(&running, &loaded, on_change, &ch), 6);
    for (int i = 0; i < ch.n; i++)
        assert_true(ch.last[i].is_reloadable);
}

/* Every setting changed from its default, printed, reloaded: the same config comes back. */
static void test_gw_config_print_round_trip(void **state)
{
    (void)state;
    gw_config_t a;
    gw_config_init(&a);
    strcpy(a.listen_host, "::1");
    a.listen_port = 1;
    a.io_threads = 7;
    a.worker_threads = 9;
    a.worker_queue_capacity = 11;
    a.max_connections = 13;
    a.is_reuseport = true;
    strcpy(a.node_id, "n1");
    a.drain_ms = 1500;
    a.is_admin_enabled = false;
    strcpy(a.admin_host, "localhost");
    a.admin_port = 2;
    strcpy(a.admin_api_key, "key with spaces");
    a.admin_max_body_bytes = 3000;
    strcpy(a.token_secret, SECRET);
    strcpy(a.token_previous_secrets, "old secret 0123456789, older-secret-0123456789");
    a.is_insecure = true;
    a.ping_interval_ms = 1001;
    a.idle_timeout_ms = 7200000;
    a.connect_timeout_ms = 100;
    a.max_frame_bytes = 2048;
    a.max_subscriptions_per_conn = 3;
    a.max_channel_bytes = 1024;
    a.publish_rate_per_s = 0;
    a.publish_burst = 1;
    a.output_high_water_bytes = 1u << 30;
    a.slow_consumer = GW_SLOW_DISCONNECT;
    a.presence_max_clients = 0;
    a.presence_refresh_ms = 1500;
    a.presence_last_seen_ttl_ms = 7 * 86400000ull;
    a.presence_last_seen_max = 17;
    a.engine = GW_ENGINE_REDIS;
    strcpy(a.redis, "redis.local:1234,10.0.0.2:6379");
    a.redis_timeout_ms = 750;
    a.redis_max_pending = 77;
    a.log_level = NL_ERROR;

    char path[64];
    test_write_temp(path, "");
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    gw_config_print(&a, fp, true);
    fclose(fp);
    gw_config_t b;
    gw_config_init(&b);
    assert_int_equal(gw_config_load_file(&b, path, stderr), 0);
    memset(b.config_path, 0, sizeof(b.config_path));
    assert_memory_equal(&a, &b, sizeof(a));

    /* Without show_secrets the secrets are masked. */
    test_capture_t out;
    test_capture_open(&out);
    gw_config_print(&a, out.fp, false);
    test_capture_close(&out);
    assert_null(strstr(out.text, SECRET));
    assert_null(strstr(out.text, "key with spaces"));
    assert_null(strstr(out.text, "old secret"));
    assert_non_null(strstr(out.text, "previous_secrets = <set>\n"));
    assert_non_null(strstr(out.text, "secret = <set>\n"));
    free(out.text);
    unlink(path);
}

/* Prints c with its secrets to a file and loads that over the defaults into *out. */
static void print_and_reload(const gw_config_t *c, gw_config_t *out)
{
    char path[64];
    test_write_temp(path, "");
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    gw_config_print(c, fp, true);
    fclose(fp);
    gw_config_init(out);
    assert_int_equal(gw_config_load_file(out, path, stderr), 0);
    unlink(path);
}

/* A string the config file cannot hold (fuzz_gw_config found HERALD_NODE_ID="\n"): a newline,
 * other control bytes, outer blanks, ';' after a blank. The environment and the flags refuse
 * it as the file would, or gw_config_print writes a file that reloads differently; with a
 * newline, one that even sets other keys. */
static void test_gw_config_refuses_values_a_file_cannot_hold(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "HERALD_NODE_ID=x\n[auth]\ninsecure = true",
        "HERALD_NODE_ID=\n",
        "HERALD_ADMIN_API_KEY=key\r",
        "HERALD_TOKEN_SECRET=0123456789abcdef\t",
        "HERALD_TOKEN_SECRET= 0123456789abcdef",
        "HERALD_TOKEN_SECRET=0123456789abcdef ",
        "HERALD_TOKEN_SECRET=0123456789abcdef ;x",
        "HERALD_REDIS=;redis",
        "HERALD_REDIS=red\x7fis:1",
        "HERALD_LISTEN= 10.0.0.1:1",
        "HERALD_ADMIN=[x\ny]:1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *envp[] = {(char *)bad[i], NULL};
        gw_config_t c;
        gw_config_t def;
        gw_config_init(&c);
        gw_config_init(&def);
        if (gw_config_load_env(&c, envp, NULL) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
        assert_memory_equal(&c, &def, sizeof(c));
    }
    /* Blanks and ';' inside a value are fine, and survive the file. */
    char *good[] = {(char *)"HERALD_NODE_ID=a b;c",
                    (char *)"HERALD_TOKEN_SECRET=01234567 89;abcdef", NULL};
    gw_config_t c;
    gw_config_init(&c);
    assert_int_equal(gw_config_load_env(&c, good, NULL), 0);
    assert_string_equal(c.node_id, "a b;c");
    gw_config_t again;
    print_and_reload(&c, &again);
    assert_string_equal(again.node_id, "a b;c");
    assert_string_equal(again.token_secret, "01234567 89;abcdef");
    assert_false(again.is_insecure);

    /* The flags go through the same check. */
    char *argv[] = {(char *)"herald", (char *)"--node-id", (char *)"n\n1", NULL};
    gw_config_init(&c);
    assert_int_equal(gw_config_load_args(&c, 3, argv, NULL, NULL), -EINVAL);
    assert_string_equal(c.node_id, "");
}

static void test_gw_config_example_file_is_valid(void **state)
{
    (void)state;
    const char *src = getenv("HERALD_SOURCE_DIR");
    assert_non_null(src);
    char path[1024];
    snprintf(path, sizeof(path), "%s/gateway/herald.example.conf", src);
    assert_int_equal(gw_config_check_file(path, stderr), 0);
    /* It spells out the defaults: loading it over defaults changes only the two secrets. */
    gw_config_t a;
    gw_config_t b;
    gw_config_init(&a);
    gw_config_init(&b);
    assert_int_equal(gw_config_load_file(&b, path, stderr), 0);
    assert_string_not_equal(b.token_secret, "");
    assert_string_not_equal(b.admin_api_key, "");
    memcpy(a.token_secret, b.token_secret, sizeof(a.token_secret));
    memcpy(a.admin_api_key, b.admin_api_key, sizeof(a.admin_api_key));
    memcpy(a.config_path, b.config_path, sizeof(a.config_path));
    assert_memory_equal(&a, &b, sizeof(a));
}

/* Issue 24 (hostile pass): SIGHUP took an empty file, or one without the token secret, and
 * cleared the secret: every Connect refused while the node looked healthy. Both reloads are
 * refused now and the running config stays; a real change still applies. */
static void test_gw_config_reload_refuses_what_would_lock_everyone_out(void **state)
{
    (void)state;
    char path[64];
    test_write_temp(path, "[auth]\nsecret = " SECRET "\n[limits]\nmax_subscriptions = 64\n");
    char arg0[] = "herald";
    char arg1[] = "--config";
    char *argv[] = {arg0, arg1, path, NULL};
    char *envp[] = {NULL};
    gw_config_source_t src = {.argc = 3, .argv = argv, .envp = envp};
    gw_config_t cfg;
    gw_config_action_t action = GW_CONFIG_RUN;
    assert_int_equal(gw_config_load(&cfg, 3, argv, envp, NULL, &action), 0);
    gw_config_snap_t *running = NULL;
    assert_int_equal(gw_config_snap_new(&running, &cfg, NULL), 0);
    static const char *const refused[] = {
        "",                                               /* empty */
        "[limits]\nmax_subscriptions = 32\n",             /* the secret gone */
        "[auth]\nsecret = " SECRET "\n[limits]\nmax_sub", /* cut short */
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(refused[i], f);
        fclose(f);
        gw_config_reload_t r;
        if (gw_config_reload(running, &src, &r) != -EINVAL || r.snap != NULL)
            fail_msg("reload %zu was not refused", i);
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("[auth]\nsecret = " SECRET "\n[limits]\nmax_subscriptions = 32\n", f);
    fclose(f);
    gw_config_reload_t r;
    assert_int_equal(gw_config_reload(running, &src, &r), 0);
    assert_non_null(r.snap);
    assert_int_equal(r.snap->cfg.max_subscriptions_per_conn, 32);
    assert_int_equal(r.snap->n_keys, 1);
    gw_config_snap_unref(r.snap);
    gw_config_snap_unref(running);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_config_previous_secrets),
        cmocka_unit_test(test_gw_config_reconcile),
        cmocka_unit_test(test_gw_config_print_round_trip),
        cmocka_unit_test(test_gw_config_refuses_values_a_file_cannot_hold),
        cmocka_unit_test(test_gw_config_example_file_is_valid),
        cmocka_unit_test(test_gw_config_reload_refuses_what_would_lock_everyone_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
