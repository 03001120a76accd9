/*
 * gw_config.h: the room's public header.
 *
 * config: herald's settings: the table of every setting with its file key, flag and
 * variable (values, defaults, checks), the immutable snapshots IO loops read, and the first half
 * of a reload (load again, compare, log what changes).
 *
 * Sections, one per module: gw_history_rules (the one setting with a grammar of its own),
 * gw_config (gw_config.c, gw_config_value.c, gw_config_defaults.c), gw_config_snap,
 * gw_config_reload.
 */
#ifndef HERALD_GATEWAY_CONFIG_GW_CONFIG_H
#define HERALD_GATEWAY_CONFIG_GW_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gw_auth.h"
#include "gw_fanout.h"

/* --- gw_history_rules ------------------------------------------------------------------------- */

/*
 * gw_history_rules: which channels keep history, and how much: `[history] rules`.
 *
 * The setting is a comma-separated list of `pattern=count[/age]`:
 *
 *     chat:*=100/5m, news=20/1h, feed:*=1000, chat:tmp*=0
 *
 * pattern is a token pattern (gw_channel.h: "*", "prefix*" or an exact name); count is
 * how many of the channel's latest messages it keeps (1..GW_HISTORY_COUNT_MAX, or 0 for none);
 * age (a duration, "30s", "5m", "1h") drops messages older than that, and without it only the
 * count bounds the history. The first rule whose pattern matches a channel decides, so put
 * exceptions before the general rule ("chat:tmp*=0, chat:*=100"). A channel no rule matches
 * keeps nothing. Blanks around items and around '=' and '/' are ignored.
 *
 * Thread: every function is pure; a parsed gw_history_rules_t is a value (copy it freely) and
 * may be read from any thread that owns its copy.
 * Ownership: nothing is allocated; the rules hold a copy of the text they came from.
 * Usage: gw_history_rules_parse(cfg->history_rules, &rules, err, sizeof(err)) once per config;
 *        r = gw_history_rules_match(&rules, name, len) when a channel's state is made.
 */
/* Rules in one setting, and the longest setting (bytes, NUL included). */
#define GW_HISTORY_RULES_MAX 32
#define GW_HISTORY_RULES_TEXT_MAX 1024
/* Most messages one channel may keep. */
#define GW_HISTORY_COUNT_MAX 65536
/* Longest age a rule may give: 30 days. */
#define GW_HISTORY_AGE_MAX_MS (30ull * 24 * 3600 * 1000)

/* What one channel keeps. count 0: nothing. age_ms 0: no age bound. */
typedef struct gw_history_rule_s {
    uint16_t pattern_off; /* into gw_history_rules_t.text */
    uint16_t pattern_len;
    uint32_t count;
    uint64_t age_ms;
} gw_history_rule_t;

typedef struct gw_history_rules_s {
    uint32_t n;
    gw_history_rule_t rule[GW_HISTORY_RULES_MAX];
    char text[GW_HISTORY_RULES_TEXT_MAX]; /* the patterns, each NUL-terminated */
} gw_history_rules_t;

/* Parses text (NUL-terminated; "" gives no rules) into *out. On failure err (err_cap bytes,
 * may be NULL) says which item and why, and *out is left empty.
 * Returns: 0; -EINVAL (syntax, bad pattern, count or age out of range); -E2BIG (more than
 * GW_HISTORY_RULES_MAX items or text too long). Thread: any. */
int gw_history_rules_parse(const char *text, gw_history_rules_t *out, char *err, size_t err_cap);

/* The first rule matching name[0..len), or NULL when none does. A matching rule with count 0
 * is returned too (it says "keep nothing"); gw_history_rule_keeps tells. Thread: any. */
const gw_history_rule_t *gw_history_rules_match(const gw_history_rules_t *rules, const char *name,
                                                size_t len);

/* Whether r (may be NULL) keeps anything. */
static inline bool gw_history_rule_keeps(const gw_history_rule_t *r)
{
    return r && r->count > 0;
}

/* The pattern of rule r of rules, NUL-terminated. */
static inline const char *gw_history_rule_pattern(const gw_history_rules_t *rules,
                                                  const gw_history_rule_t *r)
{
    return rules->text + r->pattern_off;
}

/* --- gw_config -------------------------------------------------------------------------------- */

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
#define GW_CONFIG_HOST_MAX 256           /* host names and addresses, bytes including the NUL */
#define GW_CONFIG_SECRET_MAX 512         /* token secret and API key, bytes including the NUL */
#define GW_CONFIG_NAME_MAX 64            /* node id, bytes including the NUL */
#define GW_CONFIG_PATH_MAX 4096          /* the config file path, TLS file paths */
#define GW_CONFIG_ORIGINS_MAX 2048       /* [websocket] allowed_origins, bytes with the NUL */
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

    /* [websocket] */
    char ws_listen[GW_CONFIG_HOST_MAX + 8]; /* default "": no WebSocket listener; HOST:PORT */
    /* Origins browsers may connect from: "*", or exact origins, comma-separated; default "":
     * none (requests without Origin only). */
    char ws_allowed_origins[GW_CONFIG_ORIGINS_MAX];

    /* [tls] Both files set: the client and WebSocket listeners speak TLS. */
    char tls_cert_file[GW_CONFIG_PATH_MAX]; /* default "" */
    char tls_key_file[GW_CONFIG_PATH_MAX];  /* default "" */
    bool is_tls_ktls;                       /* default true: kernel TLS where offered */

    /* [admin] */
    bool is_admin_enabled;                    /* default true */
    char admin_host[GW_CONFIG_HOST_MAX];      /* default "127.0.0.1" */
    uint16_t admin_port;                      /* default 7401; 0 binds a free port */
    char admin_api_key[GW_CONFIG_SECRET_MAX]; /* default "": only /healthz answers */
    uint64_t admin_max_body_bytes;            /* default 1 MiB */
    uint64_t admin_request_timeout_ms;        /* default 10 s */
    uint64_t admin_header_timeout_ms;         /* default 2 s */
    uint32_t admin_max_per_address;           /* default 32 (of the admin port's 64) */

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
    /* The request budget of a connection: Publish, Subscribe and PresenceRequest each take a
     * token (the names predate Subscribe and PresenceRequest counting). */
    uint32_t publish_rate_per_s; /* default 100 requests/s per connection; 0 = off */
    uint32_t publish_burst;      /* default 200 */
    uint64_t idempotency_window_ms; /* default 60 s: a Publish key's lifetime */
    uint32_t idempotency_keys;      /* default 100,000: the memory engine's cap; 0: keys ignored */
    /* Connections that have not authenticated yet (no verified Connect): node-wide and per
     * source address; past either, the oldest such connection (of that address) is closed to
     * make room. The node-wide one is also held to a quarter of the client descriptors. */
    uint32_t max_unauthenticated;             /* default 10000 */
    uint32_t max_unauthenticated_per_address; /* default 1000 */
    uint64_t output_high_water_bytes;         /* default 1 MiB */
    gw_slow_policy_t slow_consumer;           /* default GW_SLOW_DROP */
    uint64_t slow_consumer_linger_ms;         /* disconnect policy: time to read the backlog; 5 s */

    /* [history] */
    char history_rules[GW_HISTORY_RULES_TEXT_MAX]; /* default "": none (gw_config.h) */
    uint64_t history_max_bytes; /* default 128 MiB: all histories of the node together */
    /* [presence] */
    uint32_t presence_max_clients;      /* default 1000: clients listed per presence answer */
    uint32_t presence_max_inflight;     /* default 2: PresenceRequests per connection at once */
    uint64_t presence_event_window_ms;  /* default 1 s: join/leave events coalesce within it */
    uint64_t presence_refresh_ms;       /* default 5 s: one online-status batch per loop */
    uint64_t presence_last_seen_ttl_ms; /* default 24 h: an offline user's last seen, kept */
    uint32_t presence_last_seen_max;    /* default 100000 users gone offline remembered */

    /* [engine] */
    gw_engine_kind_t engine;              /* default GW_ENGINE_MEMORY */
    char redis[GW_CONFIG_REDIS_LIST_MAX]; /* default "127.0.0.1:6379"; host:port, ... */
    uint64_t redis_timeout_ms;            /* default 2 s: connect timeout; no reply this long
                                           * with a command waiting: Redis is down */
    uint32_t redis_max_pending;           /* default 10000 commands in flight per server */
    /* Redis through Sentinel (replaces redis when set): the sentinels, host:port, ... */
    char sentinels[GW_CONFIG_REDIS_LIST_MAX];       /* default "": no Sentinel */
    char sentinel_master[GW_CONFIG_REDIS_LIST_MAX]; /* default "": master names, one per shard */
    char sentinel_password[GW_CONFIG_SECRET_MAX];   /* default "": the sentinels' AUTH */

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
 * variables from envp, flags from argv, then gw_config_validate() when *action is RUN or
 * PRINT (--print-config refuses what a start would refuse, with the same messages).
 * Returns: 0, or -EINVAL / -errno after printing every problem to err. For HELP, CHECK and
 *          VERSION it returns 0 without loading the file.
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

/* Parses a list of Sentinel master names ("a, b"), at most cap of them, into out: each up to
 * GW_CONFIG_NAME_MAX - 1 bytes of printable ASCII without blanks or commas, listed once.
 * Returns: the number parsed (0 for an empty list); -EINVAL (a bad or repeated name); -E2BIG. */
int gw_config_parse_names(const char *text, char (*out)[GW_CONFIG_NAME_MAX], size_t cap);

/* Formats milliseconds with the largest unit that divides them exactly ("25s", "1500ms",
 * "0ms") and bytes likewise ("64KiB", "1MiB", "1000"), so the text parses back to the value.
 * Output is truncated to cap bytes, NUL included. */
void gw_config_format_duration(uint64_t ms, char *out, size_t cap);
void gw_config_format_size(uint64_t bytes, char *out, size_t cap);

/* Returns "drop"/"disconnect" and "memory"/"redis". Thread: any. Ownership: static strings. */
const char *gw_slow_policy_str(gw_slow_policy_t policy);
const char *gw_engine_kind_str(gw_engine_kind_t kind);

/* --- gw_config_snap --------------------------------------------------------------------------- */

/*
 * gw_config_snap: the running node's configuration as an immutable, reference-counted
 * snapshot, so that a reload (SIGHUP) can put a new one in place while IO loops, workers and
 * the admin thread go on reading the one they hold, without a lock on any of their paths.
 *
 * A snapshot is filled once, by gw_config_snap_new on the main thread, and never written
 * again. Each holder owns one reference: the node (its current config, gw_node_t.snap), each
 * IO loop (gw_loop_t.snap, swapped on the loop's own thread by a posted closure), each token
 * verification on its way through the worker pool, each admin request that reads it. The
 * last gw_config_snap_unref frees it, on whichever thread that is; the acquire-release
 * decrement orders every holder's reads before the free.
 *
 * Besides the settings it carries what is worked out once per config rather than per use: the
 * token keys (the current secret, then the previous ones) and two limits that must also cover
 * every client connected since the node started. A client is told max_frame_bytes and
 * ping_interval_ms in its ConnectOk and keeps them for the whole session, and a session keeps
 * no copy of them (every byte of a session counts at a million connections), so:
 *   - frame_limit_bytes, the largest max_frame_bytes announced so far, is what the decoder
 *     accepts: a client told 64 KiB before a reload to 16 KiB may still send 64 KiB frames;
 *   - ping_interval_max_ms, the longest ping_interval_ms announced so far, is what a reload's
 *     idle_timeout must exceed, or clients pinging on time by what they were told would be
 *     closed as idle.
 * Both only grow while the node runs; a restart starts them afresh.
 *
 * Thread: gw_config_snap_new on the main thread; ref and unref from any thread.
 * Ownership: gw_config_snap_new returns one reference, the caller's. Pointers into a snapshot
 * (cfg strings, keys) live as long as a reference does.
 */
typedef struct gw_config_snap_s {
    gw_config_t cfg;
    uint64_t generation;           /* 1 at start, one more per reload applied */
    uint64_t frame_limit_bytes;    /* see above: >= cfg.max_frame_bytes */
    uint64_t ping_interval_max_ms; /* see above: >= cfg.ping_interval_ms */
    size_t n_keys;                 /* 0 without a token secret: every token is refused */
    gw_token_key_t keys[1 + GW_CONFIG_PREVIOUS_SECRETS_MAX]; /* keys[0]: token_secret */
    _Atomic uint32_t refs;
} gw_config_snap_t;

/* Makes a snapshot of cfg (copied). prev is the snapshot it replaces (NULL at startup): the
 * generation and the two "announced so far" limits carry on from it. cfg must have passed
 * gw_config_validate (the previous secrets are split as it checked them).
 * Returns: 0 with *out holding one reference; -ENOMEM; -EINVAL (previous_secrets does not
 * split). Thread: main. Ownership: the caller's reference; drop it with gw_config_snap_unref. */
int gw_config_snap_new(gw_config_snap_t **out, const gw_config_t *cfg,
                       const gw_config_snap_t *prev);

/* Takes one more reference and returns snap. Thread: any, by a holder of a reference. */
gw_config_snap_t *gw_config_snap_ref(gw_config_snap_t *snap);

/* Drops one reference; the last frees the snapshot. NULL is fine. Thread: any. */
void gw_config_snap_unref(gw_config_snap_t *snap);

/* --- gw_config_reload ------------------------------------------------------------------------- */

/*
 * gw_config_reload: SIGHUP's first half. The node's config is loaded again from the sources
 * it started with (the file named by --config or HERALD_CONFIG, read anew; the HERALD_*
 * environment and the command-line flags, which a running process cannot change, so they still
 * win over the file), compared with the running one setting by setting, and what may change at
 * runtime is put in place without touching a connection.
 *
 * Log lines, in order:
 *   ev=reload_begin config=PATH
 *   ev=reload_warning msg=...          each warning the load printed
 *   ev=reload_error msg=...            each error: the reload is refused, nothing changes,
 *   ev=reload_failed errors=N          and the node runs on with its config
 *   ev=config_changed key=SECTION.KEY old=... new=...   each setting applied (a secret says
 *                                      only value=changed, set or cleared)
 *   ev=reload_restart_needed key=SECTION.KEY running=... wanted=...   each setting that
 *                                      cannot change at runtime: the running value stays
 *   ev=reload_done generation=N changed=K restart_needed=M   once the new config is in force
 *                                      on every IO loop (logged by the last one to apply it)
 *
 * What applies when (settings marked "reloads on SIGHUP" in --help):
 *   - at once, for every session: max_subscriptions, max_channel_bytes, publish_rate and
 *     publish_burst (at the next request), idempotency_window and idempotency_keys (the
 *     records made from now on), presence max_inflight (at the next
 *     PresenceRequest), max_unauthenticated and max_unauthenticated_per_address (at the next
 *     accepted connection), presence event_window (from the loop's next window),
 *     output_high_water as the slow-consumer threshold,
 *     slow_consumer and slow_consumer_linger, idle_timeout (from each session's next frame),
 *     max_connections (new connections; none is closed for being over it), the token secret
 *     and previous_secrets (Connects verified from now on; sessions already authenticated
 *     stay), drain (the next SIGTERM), log level, admin max_body and request_timeout;
 *   - for connections accepted from now on: connect_timeout, ping_interval and max_frame
 *     (both announced in ConnectOk), output_high_water as the cap on a connection's queued
 *     answers (twice the mark);
 *   - with a floor: the decoder keeps accepting frames up to the largest max_frame announced
 *     since the start, and a new idle_timeout must exceed the longest ping_interval announced
 *     since the start (else the reload is refused), since connected clients keep what their
 *     ConnectOk said (gw_config.h).
 * Everything else (addresses, ports, threads, io_uring batching, the engine, the node id, the
 * admin key and switch, insecure mode) needs a restart.
 *
 * The second half is the node's (gw_node_reload): it puts the new snapshot in place on the
 * main thread and on every IO loop, and logs reload_done once the last loop has it.
 *
 * Thread: main (the accept loop): gw_config_load uses getopt's globals.
 */
/* What a reload found: the config to put in place and the counts ev=reload_done reports. */
typedef struct gw_config_reload_s {
    gw_config_snap_t *snap; /* a new reference, or NULL: nothing to change */
    uint64_t generation;    /* the snapshot's (the running one's when nothing changed) */
    int changed;
    int restart_needed;
} gw_config_reload_t;

/* Loads the config again from src and compares it with running (logging reload_begin, each
 * warning and error, each change), then builds the snapshot to apply. With nothing to change
 * it logs reload_done itself and out->snap is NULL.
 * Returns: 0; -ENOTSUP (no sources: logged as reload_unavailable); -EINVAL (refused, logged as
 * reload_failed: nothing changes); -ENOMEM. Thread: main. Ownership: out->snap is the caller's
 * reference. */
int gw_config_reload(const gw_config_snap_t *running, const gw_config_source_t *src,
                     gw_config_reload_t *out);

/* Logs ev=reload_done for r: once the new config is in force everywhere. Thread: any. */
void gw_config_reload_log_done(const gw_config_reload_t *r);

#endif
