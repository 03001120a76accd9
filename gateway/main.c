/*
 * herald: the pub/sub push gateway. This file only loads the configuration and wires the
 * rooms together: the node (core/), the admin API beside it (admin/); gw_node does the rest:
 *
 *   herald [OPTION]...                 run a node (see --help for every setting)
 *   herald --help | --version | --print-config
 *   herald --check-config FILE         print every error in FILE with its line; exit 1 if any
 *   herald token --user U [--channels 'news,chat:*'] [--ttl 1h] [OPTION]...
 *                                      print a token signed with the configured secret
 *
 * Signals: SIGTERM/SIGINT drain the node and stop it (a second one stops it at once); SIGHUP
 * reloads the config (gw_config.h).
 *
 * Exit status: 0 after a clean stop (SIGINT/SIGTERM) or a successful subcommand; 1 when the
 * node failed or the config file has errors; 2 for bad flags or settings.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_admin.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_auth.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#ifndef HERALD_VERSION
#define HERALD_VERSION "0.0.0"
#endif

extern char **environ;

/* What `herald token` takes besides the usual settings. */
typedef struct token_args_s {
    const char *user;
    const char *channels; /* comma-separated patterns, or NULL */
    const char *ttl;      /* a duration; default 1h */
} token_args_t;

/* Takes --user/--channels/--ttl (as "--k v" or "--k=v") out of argv[2..argc), leaving the
 * rest (settings such as --secret or --config) in rest[1..*n_rest) for gw_config_load. */
static int token_split_args(int argc, char **argv, token_args_t *ta, char **rest, int *n_rest)
{
    static const char *const keys[] = {"--user", "--channels", "--ttl"};
    const char **slots[] = {&ta->user, &ta->channels, &ta->ttl};
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 2; i < argc; i++) {
        int k = -1;
        const char *value = NULL;
        for (int j = 0; j < 3 && k < 0; j++) {
            size_t len = strlen(keys[j]);
            if (strcmp(argv[i], keys[j]) == 0) {
                k = j;
                if (i + 1 >= argc) {
                    fprintf(stderr, "herald token: %s needs a value\n", keys[j]);
                    return -EINVAL;
                }
                value = argv[++i];
            } else if (strncmp(argv[i], keys[j], len) == 0 && argv[i][len] == '=') {
                k = j;
                value = argv[i] + len + 1;
            }
        }
        if (k >= 0)
            *slots[k] = value;
        else
            rest[n++] = argv[i];
    }
    rest[n] = NULL;
    *n_rest = n;
    return 0;
}

/* Splits "news,chat:*" into at most GW_TOKEN_MAX_CHANNELS patterns, in place. */
static int token_split_channels(char *list, const char **out, size_t *n)
{
    *n = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (*n == GW_TOKEN_MAX_CHANNELS)
            return -E2BIG;
        out[(*n)++] = p;
    }
    return 0;
}

static int cmd_token(int argc, char **argv)
{
    token_args_t ta = {0};
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    gw_config_t *cfg = malloc(sizeof(*cfg));
    char *list = NULL;
    int status = 2;
    int n_rest = 0;
    if (!rest || !cfg || token_split_args(argc, argv, &ta, rest, &n_rest) < 0)
        goto out;
    if (!ta.user) {
        fprintf(stderr, "usage: herald token --user U [--channels 'a,b:*'] [--ttl 1h] "
                        "[--secret S | --config FILE]\n");
        goto out;
    }
    gw_config_action_t action;
    if (gw_config_load(cfg, n_rest, rest, environ, stderr, &action) < 0)
        goto out;
    if (cfg->token_secret[0] == '\0') {
        fprintf(stderr, "herald token: no token secret configured (--secret, HERALD_TOKEN_SECRET "
                        "or [auth] secret)\n");
        goto out;
    }
    uint64_t ttl_ms = 3600 * 1000;
    if (ta.ttl && (gw_config_parse_duration_ms(ta.ttl, &ttl_ms) < 0 || ttl_ms < 1000)) {
        fprintf(stderr, "herald token: bad --ttl '%s' (e.g. 30m, 1h, 7d)\n", ta.ttl);
        goto out;
    }
    const char *patterns[GW_TOKEN_MAX_CHANNELS];
    size_t n_patterns = 0;
    list = strdup(ta.channels ? ta.channels : "");
    if (!list || token_split_channels(list, patterns, &n_patterns) < 0) {
        fprintf(stderr, "herald token: at most %d channel patterns\n", GW_TOKEN_MAX_CHANNELS);
        goto out;
    }
    char token[GW_TOKEN_MAX_BYTES + 1];
    ssize_t len =
        gw_token_sign(ta.user, patterns, n_patterns, (int64_t)time(NULL), (int64_t)(ttl_ms / 1000),
                      cfg->token_secret, strlen(cfg->token_secret), token, sizeof(token));
    if (len < 0) {
        fprintf(stderr, "herald token: cannot sign: %s (check --user and --channels)\n",
                nl_strerror((int)len));
        goto out;
    }
    printf("%s\n", token);
    status = 0;
out:
    free(list);
    free(cfg);
    free(rest);
    return status;
}

static int run_node(const gw_config_t *cfg, const gw_config_source_t *src)
{
    nl_log_set_level((nl_log_level_t)cfg->log_level);
    NL_LOG(NL_INFO, "starting", "version=%s session_bytes=%zu", HERALD_VERSION,
           gw_node_session_bytes());
    gw_node_t *node = NULL;
    gw_admin_t *admin = NULL;
    int err = gw_node_new(&node, cfg, src);
    /* The admin API before the listener: a failing admin bind then leaves no client session
     * behind. */
    if (err == 0 && cfg->is_admin_enabled)
        err = gw_admin_new(&admin, node, cfg);
    if (err == 0)
        err = gw_node_listen(node);
    if (err < 0) {
        NL_LOG(NL_ERROR, "start_failed", "err=%s", nl_strerror(err));
        gw_admin_free(admin);
        gw_node_free(node);
        return 1;
    }
    err = gw_node_run(node);
    gw_admin_free(admin);
    gw_node_free(node);
    return err < 0 ? 1 : 0;
}

/*
 * A broadcast queues up to a window of blocks on every subscriber and the flush frees all of
 * those queues again, megabytes per iteration. With glibc's default trim threshold (128 KiB)
 * each IO loop's heap handed that memory back at the end of the flush and page-faulted it in
 * again on the next broadcast: perf showed sysmalloc at 5% of the loop and malloc at 8% in
 * all. Keeping up to 32 MiB of free heap per arena stops the cycle (bench_gw_fanout --mode
 * throughput, alternating runs: 1.92-1.97M deliveries/s before, 2.06-2.63M after). Setting it
 * also fixes glibc's mmap threshold at 128 KiB, so the large per-loop tables still get (and
 * return) their own mappings.
 */
static void malloc_tune(void)
{
    (void)mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "token") == 0)
        return cmd_token(argc, argv);
    static gw_config_t cfg;
    gw_config_action_t action = GW_CONFIG_RUN;
    int rc = gw_config_load(&cfg, argc, argv, environ, stderr, &action);
    switch (action) {
    case GW_CONFIG_HELP:
        gw_config_usage(stdout, "herald");
        printf("\nSubcommand:\n  herald token --user U [--channels 'news,chat:*'] [--ttl 1h]\n"
               "                           print a token signed with the configured secret\n");
        return 0;
    case GW_CONFIG_VERSION:
        printf("herald %s\n", HERALD_VERSION);
        return 0;
    case GW_CONFIG_CHECK: {
        int errors = gw_config_check_file(cfg.config_path, stderr);
        if (errors == 0)
            printf("%s: ok\n", cfg.config_path);
        return errors == 0 ? 0 : 1;
    }
    case GW_CONFIG_PRINT:
        /* Nothing on stdout for a config herald would not start with (the problems went to
         * stderr, as --check-config words them): exit 2, as a start would. */
        if (rc < 0)
            return 2;
        gw_config_print(&cfg, stdout, false);
        return 0;
    default:
        break;
    }
    if (rc < 0)
        return 2;
    malloc_tune();
    /* SIGHUP loads the config again from the same file, environment and flags. */
    gw_config_source_t src = {.argc = argc, .argv = argv, .envp = environ};
    return run_node(&cfg, &src);
}
