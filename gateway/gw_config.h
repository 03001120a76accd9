/*
 * gw_config: every herald setting, its default, and where it can come from.
 *
 * Load order (later wins): built-in defaults (gw_config_init), then the INI file named by
 * --config/-c or HERALD_CONFIG, then HERALD_* environment variables, then command-line flags.
 * gw_config_load() runs the whole sequence and validates the result.
 *
 * One table in gw_config.c drives all four sources and the --help text, so names cannot drift.
 * Each setting has a section and key in the file ("[limits] ping_interval = 25s"), a name that
 * gives the environment variable (HERALD_PING_INTERVAL) and the long flag (--ping-interval),
 * and sometimes a short alias flag (--secret for --token-secret, --api-key for
 * --admin-api-key). Run `herald --help` for the list; gateway/herald.example.conf shows every
 * key with its default.
 *
 * Values: durations take a unit, "500ms", "25s", "1m", "1h" (a bare number is milliseconds);
 * sizes take "64k"/"64KiB"/"64KB", "1m"/"1MiB", "1g" (binary multiples; a bare number is
 * bytes); booleans are true/false, yes/no, on/off, 1/0; HOST:PORT values take "[v6]:port".
 * Text values (hosts, node id, secrets) may hold no control byte, no blank at either end and
 * no ';' first or after a blank, from any source: the config file could not hold them, and
 * gw_config_print must write a file that reloads to the same config.
 *
 * Decisions worth knowing:
 *   - admin api_key empty (the default): the admin port still answers /healthz, and refuses
 *     every other request with 401. Set it (or --api-key) to use the admin API.
 *   - token secret empty and insecure off: herald starts (an operator's first try with no
 *     arguments must run), warns, and refuses every Connect until a secret is set. Insecure
 *     mode (--insecure) accepts connections without verifying tokens; for demos and benchmarks.
 *   - idle_timeout must exceed ping_interval, or clients that ping on time would be closed.
 *
 * Reload (SIGHUP): gw_config_load runs again over the same sources, and gw_config_reconcile
 * compares the result with the running config setting by setting. Each row of the table says
 * whether its setting may change at runtime; `herald --help` marks those "reloads on SIGHUP".
 *
 * Thread: not thread-safe. Load the config on the main thread only (getopt_long uses
 * globals): at startup, and on SIGHUP from the main loop. A loaded struct is never written
 * again; a running node shares it through gw_config_snap (immutable, reference-counted).
 * Ownership: gw_config_t holds fixed-size strings, no pointers; copy it freely, nothing to free.
 */
#ifndef HERALD_GATEWAY_GW_CONFIG_H
#define HERALD_GATEWAY_GW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gw_fanout.h"
#include "gw_history_rules.h"

#define GW_CONFIG_HOST_MAX 256           /* host names and addresses, bytes including the NUL */
#define GW_CONFIG_SECRET_MAX 512         /* token secret and API key, bytes including the NUL */
#define GW_CONFIG_NAME_MAX 64            /* node id, bytes including the NUL */
#define GW_CONFIG_PATH_MAX 4096          /* the config file path */
#define GW_CONFIG_SECRET_LIST_MAX 1024   /* previous token secrets, comma-separated, with the NUL */
#define GW_CONFIG_PREVIOUS_SECRETS_MAX 4 /* secrets in that list */
#define GW_CONFIG_REDIS_LIST_MAX 1024    /* [engine] redis, with the NUL */
#define GW_CONFIG_REDIS_SERVERS_MAX 16   /* servers in that list */


typedef enum gw_engine_kind_e {
    GW_ENGINE_MEMORY = 0, /* one node, embedded */
    GW_ENGINE_REDIS = 1,  /* several nodes through Redis */
} gw_engine_kind_t;

/* What the command line asked for besides settings. */
typedef enum gw_config_action_e {
    GW_CONFIG_RUN = 0,     /* start the server */
    GW_CONFIG_HELP = 1,    /* --help: print gw_config_usage() and exit 0 */
    GW_CONFIG_CHECK = 2,   /* --check-config FILE: run gw_config_check_file(config_path) */
    GW_CONFIG_PRINT = 3,   /* --print-config: gw_config_print() the effective config */
    GW_CONFIG_VERSION = 4, /* --version */
} gw_config_action_t;

typedef struct gw_config_s {
    /* [server] */
    char listen_host[GW_CONFIG_HOST_MAX]; /* default "0.0.0.0" */
    uint16_t listen_port;                 /* default 7400 */
    uint32_t io_threads;                  /* default 0: one per CPU herald may run on; <= 64 */
    uint32_t worker_threads;              /* default 2 */
    uint32_t worker_queue_capacity;       /* default 4096 tasks */
    uint32_t max_connections;             /* default 1000000 */
    bool is_reuseport;                    /* default false: SO_REUSEPORT listeners */
    bool is_pin_io_threads;               /* default false: IO loop i pinned to a CPU */
    bool is_batch_sends;                  /* default true: io_uring batches a flush's sends */
    char node_id[GW_CONFIG_NAME_MAX];     /* default "": main.c uses the host name */
    uint64_t drain_ms;                    /* default 10 s: SIGTERM disconnect window */

    /* [admin] */
    bool is_admin_enabled;                    /* default true */
    char admin_host[GW_CONFIG_HOST_MAX];      /* default "127.0.0.1" */
    uint16_t admin_port;                      /* default 7401; 0 binds a free port */
    char admin_api_key[GW_CONFIG_SECRET_MAX]; /* default "": only /healthz answers */
    uint64_t admin_max_body_bytes;            /* default 1 MiB */
    uint64_t admin_request_timeout_ms;        /* default 10 s */

    /* [auth] */
    char token_secret[GW_CONFIG_SECRET_MAX]; /* HS256 key; default "" */
    /* Secrets still accepted for verification during a rotation, comma-separated; default "".
     * herald signs (herald token) with token_secret only. */
    char token_previous_secrets[GW_CONFIG_SECRET_LIST_MAX];
    bool is_insecure; /* default false */

    /* [limits] */
    uint64_t ping_interval_ms;           /* default 25 s, announced in ConnectOk */
    uint64_t idle_timeout_ms;            /* default 60 s, > ping_interval_ms */
    uint64_t connect_timeout_ms;         /* default 10 s: first frame (Connect) deadline */
    uint64_t max_frame_bytes;            /* default 64 KiB */
    uint32_t max_subscriptions_per_conn; /* default 128 */
    uint32_t max_channel_bytes;          /* default 128 */
    uint32_t publish_rate_per_s;         /* default 100 publishes/s per connection; 0 = off */
    uint32_t publish_burst;              /* default 200 */
    uint64_t output_high_water_bytes;    /* default 1 MiB */
    gw_slow_policy_t slow_consumer;      /* default GW_SLOW_DROP */
    uint64_t slow_consumer_linger_ms;    /* disconnect policy: time to read the backlog; 5 s */

    /* [history] */
    char history_rules[GW_HISTORY_RULES_TEXT_MAX]; /* default "": none (gw_history_rules.h) */
    uint64_t history_max_bytes; /* default 128 MiB: all histories of the node together */
    /* [presence] */
    uint32_t presence_max_clients;      /* default 1000: clients listed per presence answer */
    uint64_t presence_refresh_ms;       /* default 5 s: one online-status batch per loop */
    uint64_t presence_last_seen_ttl_ms; /* default 24 h: an offline user's last seen, kept */
    uint32_t presence_last_seen_max;    /* default 100000 users gone offline remembered */

    /* [engine] */
    gw_engine_kind_t engine;              /* default GW_ENGINE_MEMORY */
    char redis[GW_CONFIG_REDIS_LIST_MAX]; /* default "127.0.0.1:6379"; host:port, ... */
    uint64_t redis_timeout_ms;            /* default 2 s: connect and command timeout */
    uint32_t redis_max_pending;           /* default 10000 commands in flight per server */

    /* [log] */
    int log_level; /* an nl_log_level_t; default NL_INFO */

    /* Not a setting: the file that was loaded ("" when none). */
    char config_path[GW_CONFIG_PATH_MAX];
} gw_config_t;

/* Fills cfg with the built-in defaults listed above.
 * Thread: any (touches only cfg). */
void gw_config_init(gw_config_t *cfg);

/* Applies the INI file at path over cfg. Every problem is printed to err (when not NULL) as
 * "path:LINE: message", and parsing goes on to find them all.
 * Returns: 0; -EINVAL when any line was refused (cfg then holds the lines that were good);
 *          -errno when the file cannot be opened.
 * Thread: main thread at startup (see the header comment). */
int gw_config_load_file(gw_config_t *cfg, const char *path, FILE *err);

/* For `herald --check-config FILE`: parses the file over defaults, prints every error with its
 * line number to err, then runs gw_config_validate() on the result (so cross-setting problems
 * count too, though HERALD_* variables and flags are not applied).
 * Returns: the number of errors printed (0 = valid); 1 when the file cannot be opened.
 * Thread: main thread at startup. */
int gw_config_check_file(const char *path, FILE *err);

/* Applies HERALD_* variables found in envp (a NULL-terminated "NAME=value" array such as
 * environ). An unknown HERALD_* name is an error (it is usually a typo); HERALD_CONFIG is
 * accepted and ignored here (gw_config_load reads it).
 * Returns: 0, or -EINVAL after printing each bad variable to err.
 * Thread: main thread at startup. */
int gw_config_load_env(gw_config_t *cfg, char *const *envp, FILE *err);

/* Applies the command-line flags in argv[1..argc) with getopt_long. --config is recorded in
 * cfg->config_path but not loaded here. Positional arguments are refused.
 * Returns: 0, or -EINVAL after printing each bad flag to err. *action (may be NULL) tells
 *          whether --help, --check-config, --print-config or --version was seen.
 * Thread: main thread at startup (resets and uses getopt's globals). */
int gw_config_load_args(gw_config_t *cfg, int argc, char *const *argv, FILE *err,
                        gw_config_action_t *action);

/* Checks the rules that involve several settings or the whole config (idle timeout above the
 * ping interval, a secret unless insecure, ...). Prints each problem to err.
 * Returns: the number of problems (0 = valid).
 * Thread: any (reads cfg only). */
int gw_config_validate(const gw_config_t *cfg, FILE *err);

/* Runs the whole load order: defaults, the file (--config F, else HERALD_CONFIG), HERALD_*
 * variables from envp, flags from argv, then gw_config_validate() when *action is RUN.
 * Returns: 0, or -EINVAL / -errno after printing every problem to err. For HELP, CHECK,
 *          PRINT and VERSION it returns 0 without loading the file, except that PRINT loads
 *          everything (it prints the effective values).
 * Thread: main thread at startup. */
int gw_config_load(gw_config_t *cfg, int argc, char *const *argv, char *const *envp, FILE *err,
                   gw_config_action_t *action);

/* Where a running config came from, read again on SIGHUP (gw_config_load's arguments). The
 * arrays must outlive whoever keeps this: main's argv and environ. */
typedef struct gw_config_source_s {
    int argc;
    char *const *argv;
    char *const *envp;
} gw_config_source_t;

/* One setting that differs between two configs (gw_config_reconcile). */
typedef struct gw_config_change_s {
    const char *section;                     /* "limits" */
    const char *key;                         /* "max_subscriptions" */
    bool is_reloadable;                      /* false: the running value stays until a restart */
    bool is_secret;                          /* old_value and new_value then say only "set" or "" */
    char old_value[GW_CONFIG_HOST_MAX + 16]; /* as a config file spells it */
    char new_value[GW_CONFIG_HOST_MAX + 16];
} gw_config_change_t;

typedef void (*gw_config_change_cb)(const gw_config_change_t *change, void *arg);

/* For a reload: compares running with loaded, setting by setting (a HOST:PORT setting through
 * its host and port), and calls cb (may be NULL) for each that differs, in table order. A
 * setting that cannot change at runtime gets its running value copied back into loaded, so
 * that loaded is the config to run with afterwards. config_path is taken from loaded.
 * Returns: the number of settings that differ, reloadable or not. Thread: any (reads running,
 * writes loaded). */
int gw_config_reconcile(const gw_config_t *running, gw_config_t *loaded, gw_config_change_cb cb,
                        void *arg);

/* Prints the --help text: every flag with its file key, environment variable and default.
 * Thread: any. */
void gw_config_usage(FILE *out, const char *prog);

/* Prints cfg as an INI file (every key, in table order). Secrets print as "<set>" unless
 * show_secrets; with show_secrets the output is a config file that reloads to the same cfg.
 * Thread: any. */
void gw_config_print(const gw_config_t *cfg, FILE *out, bool show_secrets);

/* Value syntax, shared by the file, the environment, the flags and `herald token --ttl`.
 * Implemented in gw_config_value.c. Every parser takes the whole string: no leading sign or
 * blank, no trailing garbage.
 * Thread: any. */

/* Parses a decimal integer. Returns: 0, or -EINVAL (syntax), -ERANGE (over UINT64_MAX). */
int gw_config_parse_uint(const char *text, uint64_t *out);

/* Parses a duration ("500ms", "25s", "1m", "1h", "2d"; a bare number is ms) into *out_ms.
 * Returns: 0, or -EINVAL (syntax, unknown unit), -ERANGE (overflow). */
int gw_config_parse_duration_ms(const char *text, uint64_t *out_ms);

/* Parses a size ("512", "64k", "64KiB", "64KB", "1m", "1MiB", "1g"; binary multiples, case
 * ignored, a bare number is bytes) into *out_bytes.
 * Returns: 0, or -EINVAL, -ERANGE. */
int gw_config_parse_size(const char *text, uint64_t *out_bytes);

/* Parses true/false, yes/no, on/off, 1/0 (case ignored). Returns: 0, or -EINVAL. */
int gw_config_parse_bool(const char *text, bool *out);

/* Splits "host:port" or "[v6addr]:port" into host (NUL-terminated, at most host_cap - 1
 * bytes) and a port 0..65535.
 * Returns: 0, or -EINVAL (no colon, empty host, bad port), -ENAMETOOLONG (host too long). */
int gw_config_parse_hostport(const char *text, char *host, size_t host_cap, uint16_t *port);

/* One item of a comma-separated list: text[0..len), not NUL-terminated. */
typedef struct gw_config_item_s {
    const char *text;
    size_t len;
} gw_config_item_t;

/* Splits a comma-separated list ("a, b,c") into at most cap items, each with the blanks
 * around it dropped; "" (or only blanks) is an empty list. The items point into text.
 * Returns: the number of items; -EINVAL (an empty item: "a,,b", "a,"); -E2BIG (over cap). */
int gw_config_split_list(const char *text, gw_config_item_t *out, size_t cap);

/* A host and port out of a list. */
typedef struct gw_config_server_s {
    char host[GW_CONFIG_HOST_MAX];
    uint16_t port;
} gw_config_server_t;

/* Parses a list of "host:port" ("[v6]:port") items, at most cap of them, into out.
 * Returns: the number parsed (0 for an empty list); -EINVAL (a bad item, or a server listed
 * twice); -E2BIG (over cap). */
int gw_config_parse_servers(const char *text, gw_config_server_t *out, size_t cap);

/* Formats milliseconds with the largest unit that divides them exactly ("25s", "1500ms",
 * "0ms") and bytes likewise ("64KiB", "1MiB", "1000"), so the text parses back to the value.
 * Output is truncated to cap bytes, NUL included. */
void gw_config_format_duration(uint64_t ms, char *out, size_t cap);
void gw_config_format_size(uint64_t bytes, char *out, size_t cap);

/* Returns "drop"/"disconnect" and "memory"/"redis". Thread: any. Ownership: static strings. */
const char *gw_slow_policy_str(gw_slow_policy_t policy);
const char *gw_engine_kind_str(gw_engine_kind_t kind);

#endif
