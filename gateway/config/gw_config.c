/*
 * gw_config: INI file (inih), HERALD_* variables and getopt_long flags, all driven by the
 * settings[] table below. Adding a setting is one row plus its field and its default (in
 * gw_config_defaults.c, with the checks across settings); the file key, the environment name,
 * the flag, --help and --print-config follow from the row.
 */
#include "gw_config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <ini.h>

#include "gw_channel.h"
#include "gw_fanout.h"
#include "netlib/nl_log.h"

typedef enum setting_type_e {
    T_STR,      /* char array; off2 unused, the capacity comes from FIELD_CAP */
    T_U16,      /* uint16_t */
    T_U32,      /* uint32_t */
    T_BOOL,     /* bool */
    T_DURATION, /* uint64_t milliseconds */
    T_SIZE,     /* uint64_t bytes */
    T_HOSTPORT, /* char host[] at off + uint16_t port at off2 */
    T_SLOW,     /* gw_slow_policy_t */
    T_ENGINE,   /* gw_engine_kind_t */
    T_LOGLEVEL, /* int holding an nl_log_level_t */
} setting_type_t;

typedef struct setting_s {
    const char *section; /* file section, without brackets */
    const char *key;     /* file key within the section */
    const char *name;    /* HERALD_<NAME> and --<name> with '_' turned into '-' */
    const char *alias;   /* an extra long flag, or NULL */
    setting_type_t type;
    size_t off;  /* the field */
    size_t off2; /* T_HOSTPORT: the port field; T_STR: the field's capacity */
    uint64_t min;
    uint64_t max;
    bool is_secret; /* never printed, never echoed in an error */
    const char *help;
    /* SIGHUP applies it to the running node (gw_config_reconcile). A setting is reloadable
     * only once every reader of it takes the value from the node's current config snapshot
     * (gw_config_snap) rather than from something built at startup. */
    bool is_reloadable;
} setting_t;

#define RELOAD true   /* is_reloadable */
#define RESTART false /* a change waits for a restart */
#define OFF(f) offsetof(gw_config_t, f)
#define CAP(f) sizeof(((gw_config_t *)0)->f)
#define MIB (1024ull * 1024ull)
/* A published body becomes a Push's payload, and PROTOCOL.md lets a client refuse frames over
 * 16 MiB: the limit keeps 4 KiB for the rest of the Push (a channel name of at most 1 KiB,
 * offsets, ids and tags), so every message the admin API accepts can be delivered. */
#define ADMIN_MAX_BODY_LIMIT (16 * MIB - 4096)

/* The ordering matters twice: sections print in this order, and a composite HOST:PORT row
 * comes before its host and port rows so that HERALD_LISTEN_PORT overrides HERALD_LISTEN. */
static const setting_t settings[] = {
    {"server", "listen", "listen", NULL, T_HOSTPORT, OFF(listen_host), OFF(listen_port), 0, 0,
     false, "address clients connect to", RESTART},
    {"server", "host", "listen_host", NULL, T_STR, OFF(listen_host), CAP(listen_host), 0, 0, false,
     "client listener host only", RESTART},
    {"server", "port", "listen_port", NULL, T_U16, OFF(listen_port), 0, 0, 65535, false,
     "client listener port only (0: any free port)", RESTART},
    /* At most GW_NODE_MAX_LOOPS (64): the memory engine keeps a channel's loops in 64 bits. */
    {"server", "io_threads", "io_threads", NULL, T_U32, OFF(io_threads), 0, 0, 64, false,
     "IO loop threads (0: one per CPU herald may run on, at most 64)", RESTART},
    {"server", "pin_io_threads", "pin_io_threads", NULL, T_BOOL, OFF(is_pin_io_threads), 0, 0, 0,
     false, "pin IO loop i to the i-th CPU herald may run on", RESTART},
    {"server", "batch_sends", "batch_sends", NULL, T_BOOL, OFF(is_batch_sends), 0, 0, 0, false,
     "send a flush's writes through io_uring, many per system call", RESTART},
    {"server", "worker_threads", "worker_threads", NULL, T_U32, OFF(worker_threads), 0, 1, 256,
     false, "worker pool threads (token checks, slow work)", RESTART},
    {"server", "worker_queue", "worker_queue", NULL, T_U32, OFF(worker_queue_capacity), 0, 1,
     1u << 20, false, "worker pool queue capacity, tasks", RESTART},
    {"server", "max_connections", "max_connections", NULL, T_U32, OFF(max_connections), 0, 1,
     10000000, false, "client connections accepted at once", RELOAD},
    {"server", "reuseport", "reuseport", NULL, T_BOOL, OFF(is_reuseport), 0, 0, 0, false,
     "one SO_REUSEPORT listener per IO loop", RESTART},
    {"server", "node_id", "node_id", NULL, T_STR, OFF(node_id), CAP(node_id), 0, 0, false,
     "this node's name in presence and logs (empty: host name)", RESTART},
    {"server", "drain", "drain", NULL, T_DURATION, OFF(drain_ms), 0, 0, 3600000, false,
     "on SIGTERM, spread client disconnects over this window (0: all at once)", RELOAD},
    {"websocket", "listen", "ws_listen", NULL, T_STR, OFF(ws_listen), CAP(ws_listen), 0, 0, false,
     "WebSocket listener HOST:PORT, path /connection (empty: none)", RESTART},
    {"websocket", "allowed_origins", "ws_allowed_origins", NULL, T_STR, OFF(ws_allowed_origins),
     CAP(ws_allowed_origins), 0, 0, false,
     "origins browsers may connect from: * or a comma-separated list (empty: none)", RESTART},
    {"tls", "cert_file", "tls_cert", NULL, T_STR, OFF(tls_cert_file), CAP(tls_cert_file), 0, 0,
     false, "PEM certificate chain: with key_file, both listeners speak TLS (read again on SIGHUP)",
     RELOAD},
    {"tls", "key_file", "tls_key", NULL, T_STR, OFF(tls_key_file), CAP(tls_key_file), 0, 0, false,
     "PEM private key of cert_file", RELOAD},
    {"tls", "ktls", "tls_ktls", NULL, T_BOOL, OFF(is_tls_ktls), 0, 0, 0, false,
     "kernel TLS where the kernel offers it", RESTART},
    {"admin", "enabled", "admin_enabled", NULL, T_BOOL, OFF(is_admin_enabled), 0, 0, 0, false,
     "serve the admin HTTP API", RESTART},
    {"admin", "listen", "admin", NULL, T_HOSTPORT, OFF(admin_host), OFF(admin_port), 0, 0, false,
     "admin HTTP address (keep it on loopback)", RESTART},
    {"admin", "host", "admin_host", NULL, T_STR, OFF(admin_host), CAP(admin_host), 0, 0, false,
     "admin HTTP host only", RESTART},
    {"admin", "port", "admin_port", NULL, T_U16, OFF(admin_port), 0, 0, 65535, false,
     "admin HTTP port only (0: any free port)", RESTART},
    {"admin", "api_key", "admin_api_key", "api-key", T_STR, OFF(admin_api_key), CAP(admin_api_key),
     0, 0, true, "admin key (X-Api-Key or Authorization: Bearer) for all but /healthz", RESTART},
    {"admin", "max_body", "admin_max_body", NULL, T_SIZE, OFF(admin_max_body_bytes), 0, 1024,
     ADMIN_MAX_BODY_LIMIT, false, "largest admin request body", RELOAD},
    {"admin", "request_timeout", "admin_request_timeout", NULL, T_DURATION,
     OFF(admin_request_timeout_ms), 0, 100, 3600000, false,
     "an admin request must arrive whole within this, or the connection is cut off", RELOAD},
    {"admin", "header_timeout", "admin_header_timeout", NULL, T_DURATION,
     OFF(admin_header_timeout_ms), 0, 100, 3600000, false,
     "an admin request's header must arrive within this (a new connection's: 408)", RELOAD},
    /* At most the admin server's 64 connections (gw_http_guard.h). */
    {"admin", "max_per_address", "admin_max_per_address", NULL, T_U32, OFF(admin_max_per_address),
     0, 1, 64, false,
     "admin connections from one source address; past it its oldest idle one gives way", RESTART},
    {"auth", "secret", "token_secret", "secret", T_STR, OFF(token_secret), CAP(token_secret), 0, 0,
     true, "HS256 key that signs client tokens", RELOAD},
    {"auth", "previous_secrets", "token_previous_secrets", "previous-secrets", T_STR,
     OFF(token_previous_secrets), CAP(token_previous_secrets), 0, 0, true,
     "earlier HS256 keys still accepted during a rotation, comma-separated", RELOAD},
    {"auth", "insecure", "insecure", NULL, T_BOOL, OFF(is_insecure), 0, 0, 0, false,
     "accept clients without checking tokens (demos only)", RESTART},
    {"limits", "ping_interval", "ping_interval", NULL, T_DURATION, OFF(ping_interval_ms), 0, 1000,
     3600000, false, "client ping interval announced in ConnectOk", RELOAD},
    {"limits", "idle_timeout", "idle_timeout", NULL, T_DURATION, OFF(idle_timeout_ms), 0, 1000,
     86400000, false, "close connections silent this long (> ping_interval)", RELOAD},
    {"limits", "connect_timeout", "connect_timeout", NULL, T_DURATION, OFF(connect_timeout_ms), 0,
     100, 600000, false, "close connections that send no Connect this long", RELOAD},
    {"limits", "max_frame", "max_frame", NULL, T_SIZE, OFF(max_frame_bytes), 0, 64, 16 * MIB, false,
     "largest frame a client may send", RELOAD},
    {"limits", "max_subscriptions", "max_subscriptions", NULL, T_U32,
     OFF(max_subscriptions_per_conn), 0, 1, GW_SUB_SET_MAX, false, "channels per connection",
     RELOAD},
    {"limits", "max_channel_bytes", "max_channel_bytes", NULL, T_U32, OFF(max_channel_bytes), 0, 1,
     GW_CHANNEL_NAME_MAX_LIMIT, false, "longest channel name", RELOAD},
    {"limits", "publish_rate", "publish_rate", NULL, T_U32, OFF(publish_rate_per_s), 0, 0, 1000000,
     false,
     "requests per second per connection: Publish, Subscribe, PresenceRequest (0: unlimited)",
     RELOAD},
    {"limits", "publish_burst", "publish_burst", NULL, T_U32, OFF(publish_burst), 0, 1, 1000000,
     false, "such requests a connection may send at once above the rate", RELOAD},
    {"limits", "idempotency_window", "idempotency_window", NULL, T_DURATION,
     OFF(idempotency_window_ms), 0, 1000, 86400000, false,
     "a Publish repeating an applied one's idempotency key within this is not published again",
     RELOAD},
    {"limits", "idempotency_keys", "idempotency_keys", NULL, T_U32, OFF(idempotency_keys), 0, 0,
     100000000, false,
     "memory engine: idempotency keys remembered at most; past it the oldest go early "
     "(0: keys ignored)",
     RELOAD},
    {"limits", "max_unauthenticated", "max_unauthenticated", NULL, T_U32, OFF(max_unauthenticated),
     0, 1, 10000000, false,
     "connections without a verified Connect (at most a quarter of the client descriptors); past "
     "it the oldest gives way",
     RELOAD},
    {"limits", "max_unauthenticated_per_address", "max_unauthenticated_per_address", NULL, T_U32,
     OFF(max_unauthenticated_per_address), 0, 1, 10000000, false,
     "connections without a verified Connect from one source address; past it that address's "
     "oldest gives way",
     RELOAD},
    {"limits", "output_high_water", "output_high_water", NULL, T_SIZE, OFF(output_high_water_bytes),
     0, 4096, 1024 * MIB, false, "queued output that makes a subscriber slow", RELOAD},
    {"limits", "slow_consumer", "slow_consumer", NULL, T_SLOW, OFF(slow_consumer), 0, 0, 0, false,
     "slow subscriber policy: drop | disconnect", RELOAD},
    {"limits", "slow_consumer_linger", "slow_consumer_linger", NULL, T_DURATION,
     OFF(slow_consumer_linger_ms), 0, 100, 3600000, false,
     "disconnect policy: how long a slow subscriber may read its backlog before the close", RELOAD},
    {"history", "rules", "history_rules", NULL, T_STR, OFF(history_rules), CAP(history_rules), 0, 0,
     false, "channels that keep history: pattern=count[/age], ... (e.g. chat:*=100/5m)", RELOAD},
    {"history", "max_bytes", "history_max_bytes", NULL, T_SIZE, OFF(history_max_bytes), 0,
     64 * 1024, 1024 * 1024 * MIB, false,
     "memory all channel histories of the node may hold together", RELOAD},
    {"presence", "max_clients", "presence_max_clients", NULL, T_U32, OFF(presence_max_clients), 0,
     0, 100000, false, "clients listed in a presence answer (the counts stay exact)", RELOAD},
    {"presence", "max_inflight", "presence_max_inflight", NULL, T_U32, OFF(presence_max_inflight),
     0, 1, 64, false, "PresenceRequests of one connection in progress at once; later ones wait",
     RELOAD},
    {"presence", "event_window", "presence_event_window", NULL, T_DURATION,
     OFF(presence_event_window_ms), 0, 10, 60000, false,
     "a client's joins and leaves of a channel within this are sent as their net change", RELOAD},
    /* At least 1 s: a session's last-seen stamp counts 2 s units (gw_online). */
    {"presence", "refresh_interval", "presence_refresh_interval", NULL, T_DURATION,
     OFF(presence_refresh_ms), 0, 1000, 3600000, false,
     "each IO loop hands the engine one online-status batch this often (last seen's step)",
     RESTART},
    {"presence", "last_seen_ttl", "presence_last_seen_ttl", NULL, T_DURATION,
     OFF(presence_last_seen_ttl_ms), 0, 1000, 30ull * 86400000, false,
     "how long an offline user's last-seen time is kept", RESTART},
    {"presence", "last_seen_max", "presence_last_seen_max", NULL, T_U32,
     OFF(presence_last_seen_max), 0, 0, 100000000, false,
     "offline users whose last-seen time is kept (0: none; oldest dropped first)", RESTART},
    {"engine", "type", "engine", NULL, T_ENGINE, OFF(engine), 0, 0, 0, false,
     "engine: memory | redis", RESTART},
    {"engine", "redis", "redis", NULL, T_STR, OFF(redis), CAP(redis), 0, 0, false,
     "Redis servers (engine redis), host:port, ...; channels spread over them", RESTART},
    {"engine", "redis_timeout", "redis_timeout", NULL, T_DURATION, OFF(redis_timeout_ms), 0, 50,
     600000, false,
     "a Redis connect slower than this fails; a Redis silent this long while a command waits is "
     "down",
     RESTART},
    {"engine", "redis_max_pending", "redis_max_pending", NULL, T_U32, OFF(redis_max_pending), 0, 16,
     10000000, false, "commands in flight per Redis server; past it publishes get BUSY", RESTART},
    {"engine", "sentinels", "sentinels", NULL, T_STR, OFF(sentinels), CAP(sentinels), 0, 0, false,
     "Redis Sentinel addresses, host:port, ...: masters found through them, replacing redis",
     RESTART},
    {"engine", "sentinel_master", "sentinel_master", NULL, T_STR, OFF(sentinel_master),
     CAP(sentinel_master), 0, 0, false,
     "the Sentinel master name, or one per shard (a, b, ...): channels spread over them", RESTART},
    {"engine", "sentinel_password", "sentinel_password", NULL, T_STR, OFF(sentinel_password),
     CAP(sentinel_password), 0, 0, true, "password the sentinels ask for (AUTH); empty: none",
     RESTART},
    {"log", "level", "log_level", NULL, T_LOGLEVEL, OFF(log_level), 0, 0, 0, false,
     "error | warn | info | debug | trace", RELOAD},
};

#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

/* Error text buffer for one refused value; long enough for the longest message below. */
#define MSG_MAX 160

/* ---- applying and formatting one setting ---- */

/* Parses an unsigned number (with units for durations and sizes), checks s's range and stores
 * it in the field's width. */
static int apply_ranged(const setting_t *s, char *field, const char *value, char *msg)
{
    uint64_t n = 0;
    int rc = s->type == T_DURATION ? gw_config_parse_duration_ms(value, &n)
             : s->type == T_SIZE   ? gw_config_parse_size(value, &n)
                                   : gw_config_parse_uint(value, &n);
    if (rc != 0 || n < s->min || n > s->max) {
        const char *what = s->type == T_DURATION ? "a duration (500ms, 25s, 1m, 1h) in ms"
                           : s->type == T_SIZE   ? "a size (512, 64k, 1MiB) in bytes"
                                                 : "an integer";
        snprintf(msg, MSG_MAX, "'%s' is not %s in %" PRIu64 "..%" PRIu64, value, what, s->min,
                 s->max);
        return -EINVAL;
    }
    if (s->type == T_U16)
        *(uint16_t *)field = (uint16_t)n;
    else if (s->type == T_U32)
        *(uint32_t *)field = (uint32_t)n;
    else
        *(uint64_t *)field = n;
    return 0;
}

/* Stores one of two words (slow_consumer, engine type) as 0 or 1. */
static int apply_choice(const setting_t *s, char *field, const char *value, char *msg)
{
    const char *a = s->type == T_SLOW ? "drop" : "memory";
    const char *b = s->type == T_SLOW ? "disconnect" : "redis";
    if (strcmp(value, a) != 0 && strcmp(value, b) != 0) {
        snprintf(msg, MSG_MAX, "'%s' is neither %s nor %s", value, a, b);
        return -EINVAL;
    }
    /* Both enums number their first choice 0 and the second 1. */
    *(int *)field = strcmp(value, b) == 0;
    return 0;
}

/*
 * Whether text can be written as a value in the config file and read back the same, which
 * gw_config_print promises. inih drops blanks around a value, takes ';' after a blank (or
 * first, since "key = ;x" has a blank before it) for a comment, and a newline ends the line.
 * A file cannot set such a value, so the environment and the flags may not either: a
 * node_id of "x\n[auth]\ninsecure = true" would otherwise print as two settings. Control
 * bytes are refused whole, which keeps them out of log lines as well.
 */
static bool value_fits_file(const char *text)
{
    size_t len = strlen(text);
    if (len > 0 && (text[0] == ' ' || text[len - 1] == ' ' || text[0] == ';'))
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f || (c == ';' && i > 0 && text[i - 1] == ' '))
            return false;
    }
    return true;
}

/* Stores value into the field of s in cfg. On error writes a message to msg (never echoing a
 * secret) and leaves cfg unchanged. */
static int setting_apply(const setting_t *s, gw_config_t *cfg, const char *value, char *msg)
{
    char *field = (char *)cfg + s->off;
    switch (s->type) {
    case T_STR:
        if (strlen(value) >= s->off2) {
            snprintf(msg, MSG_MAX, "value longer than %zu bytes", s->off2 - 1);
            return -EINVAL;
        }
        if (!value_fits_file(value)) {
            snprintf(msg, MSG_MAX, "value has a control byte, an outer blank or a ' ;'");
            return -EINVAL;
        }
        strcpy(field, value);
        return 0;
    case T_HOSTPORT: {
        char host[GW_CONFIG_HOST_MAX];
        uint16_t port;
        if (gw_config_parse_hostport(value, host, sizeof(host), &port) != 0) {
            snprintf(msg, MSG_MAX, "'%s' is not HOST:PORT (host up to %zu bytes, port 0..65535)",
                     value, sizeof(host) - 1);
            return -EINVAL;
        }
        if (!value_fits_file(host)) {
            snprintf(msg, MSG_MAX, "host has a control byte, an outer blank or a ' ;'");
            return -EINVAL;
        }
        strcpy(field, host);
        *(uint16_t *)((char *)cfg + s->off2) = port;
        return 0;
    }
    case T_BOOL:
        if (gw_config_parse_bool(value, (bool *)field) == 0)
            return 0;
        snprintf(msg, MSG_MAX, "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)", value);
        return -EINVAL;
    case T_SLOW:
    case T_ENGINE:
        return apply_choice(s, field, value, msg);
    case T_LOGLEVEL: {
        nl_log_level_t level;
        if (nl_log_parse_level(value, &level) != 0) {
            snprintf(msg, MSG_MAX, "'%s' is not error, warn, info, debug or trace", value);
            return -EINVAL;
        }
        *(int *)field = (int)level;
        return 0;
    }
    case T_U16:
    case T_U32:
    case T_DURATION:
    case T_SIZE:
        return apply_ranged(s, field, value, msg);
    }
    snprintf(msg, MSG_MAX, "internal: unknown setting type");
    return -EINVAL;
}

/* Formats the current value of s in cfg the way a config file would spell it. */
static void setting_format(const setting_t *s, const gw_config_t *cfg, char *out, size_t cap)
{
    const char *field = (const char *)cfg + s->off;
    switch (s->type) {
    case T_STR:
        snprintf(out, cap, "%s", field);
        return;
    case T_HOSTPORT: {
        uint16_t port = *(const uint16_t *)((const char *)cfg + s->off2);
        bool is_v6 = strchr(field, ':') != NULL;
        snprintf(out, cap, "%s%s%s:%u", is_v6 ? "[" : "", field, is_v6 ? "]" : "", port);
        return;
    }
    case T_BOOL:
        snprintf(out, cap, "%s", *(const bool *)field ? "true" : "false");
        return;
    case T_SLOW:
        snprintf(out, cap, "%s", gw_slow_policy_str(*(const gw_slow_policy_t *)field));
        return;
    case T_ENGINE:
        snprintf(out, cap, "%s", gw_engine_kind_str(*(const gw_engine_kind_t *)field));
        return;
    case T_LOGLEVEL: {
        static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
        int level = *(const int *)field;
        snprintf(out, cap, "%s", level >= 0 && level <= NL_TRACE ? names[level] : "info");
        return;
    }
    case T_U16:
        snprintf(out, cap, "%u", *(const uint16_t *)field);
        return;
    case T_U32:
        snprintf(out, cap, "%" PRIu32, *(const uint32_t *)field);
        return;
    case T_DURATION:
        gw_config_format_duration(*(const uint64_t *)field, out, cap);
        return;
    case T_SIZE:
        gw_config_format_size(*(const uint64_t *)field, out, cap);
        return;
    }
    snprintf(out, cap, "?");
}

/* HERALD_<NAME>: the name upper-cased. */
static void env_name(const setting_t *s, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "HERALD_%s", s->name);
    for (size_t i = 7; i < n && i < cap; i++)
        out[i] = (char)(out[i] >= 'a' && out[i] <= 'z' ? out[i] - 'a' + 'A' : out[i]);
}

/* <name> with dashes, the long flag without its "--". */
static void flag_name(const setting_t *s, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s", s->name);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = out[i] == '_' ? '-' : out[i];
}

/* What --help shows after each flag, indexed by setting_type_t. */
static const char *const metavars[] = {"TEXT", "N",         "N",      "[=BOOL]", "DURATION",
                                       "SIZE", "HOST:PORT", "POLICY", "ENGINE",  "LEVEL"};
_Static_assert(sizeof(metavars) / sizeof(metavars[0]) == T_LOGLEVEL + 1, "one per type");

/* ---- the INI file ---- */

typedef struct file_ctx_s {
    FILE *fp;
    FILE *err;
    const char *path;
    gw_config_t *cfg;
    int line;             /* the line inih is working on: one reader call per line */
    int errors;           /* problems printed so far */
    int settings;         /* settings read */
    bool is_unterminated; /* the last line read had no newline */
    int first_line[N_SETTINGS];
} file_ctx_t;

__attribute__((format(printf, 2, 3))) static void file_error(file_ctx_t *ctx, const char *fmt, ...)
{
    ctx->errors++;
    if (ctx->err == NULL)
        return;
    fprintf(ctx->err, "%s:%d: ", ctx->path, ctx->line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(ctx->err, fmt, ap);
    va_end(ap);
    fputc('\n', ctx->err);
}

/*
 * inih's reader hook, called once per line, which is how we know line numbers (Debian's inih is
 * built without INI_HANDLER_LINENO). It also makes every error reportable: inih only returns the
 * first syntax error's line, so lines inih would refuse (an unclosed section, a line without
 * '=' or ':') are reported here and handed on as blank lines, and over-long lines, which inih
 * would split in two, are reported and skipped. Leading blanks are dropped so that an indented
 * line is never taken as a continuation of the previous value.
 */
static bool section_known(const char *section)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (strcmp(settings[i].section, section) == 0)
            return true;
    }
    return false;
}

static char *file_reader(char *str, int num, void *stream)
{
    file_ctx_t *ctx = stream;
    if (fgets(str, num, ctx->fp) == NULL)
        return NULL;
    ctx->line++;
    size_t len = strlen(str);
    ctx->is_unterminated = len > 0 && str[len - 1] != '\n';
    if (len == (size_t)num - 1 && str[len - 1] != '\n') {
        /* The buffer filled up: the line is too long unless it ends right here. */
        int c = fgetc(ctx->fp);
        if (c != EOF && c != '\n') {
            while ((c = fgetc(ctx->fp)) != EOF && c != '\n')
                ;
            file_error(ctx, "line longer than %d bytes", num - 3);
            strcpy(str, "\n");
            return str;
        }
    }
    size_t lead = strspn(str, " \t");
    memmove(str, str + lead, len - lead + 1);
    if (str[0] == '\0' || strchr(";#\r\n", str[0]) != NULL)
        return str;
    const char *close = strchr(str, ']');
    if (str[0] == '[' && close != NULL) {
        /* inih takes the section name verbatim between the brackets; so do we. */
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(close - str - 1), str + 1);
        if (!section_known(name))
            file_error(ctx, "unknown section [%s]", name);
    } else if (str[0] == '[' || strpbrk(str, "=:") == NULL) {
        file_error(ctx, "%s",
                   str[0] == '[' ? "expected ']' to close the section" : "expected key = value");
        strcpy(str, "\n");
    }
    return str;
}

static int file_handler(void *user, const char *section, const char *name, const char *value)
{
    file_ctx_t *ctx = user;
    if (section[0] == '\0') {
        file_error(ctx, "key '%s' outside any [section]", name);
        return 1;
    }
    if (!section_known(section))
        return 1; /* file_reader reported the section line; its keys are not errors too */
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_t *s = &settings[i];
        if (strcmp(s->section, section) != 0 || strcmp(s->key, name) != 0)
            continue;
        if (ctx->first_line[i] != 0) {
            file_error(ctx, "'%s' set twice (first on line %d)", name, ctx->first_line[i]);
            return 1;
        }
        ctx->first_line[i] = ctx->line;
        ctx->settings++;
        char msg[MSG_MAX];
        if (setting_apply(s, ctx->cfg, value, msg) != 0)
            file_error(ctx, "%s: %s", name, msg);
        return 1;
    }
    file_error(ctx, "unknown key '%s' in [%s]", name, section);
    /* Returning 1 keeps inih's own error report for syntax it alone could find. */
    return 1;
}

/* Parses the file over cfg and returns the number of problems printed, or -errno. */
static int file_load_counted(gw_config_t *cfg, const char *path, FILE *err)
{
    file_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return -ENOMEM;
    ctx->fp = fopen(path, "r");
    if (ctx->fp == NULL) {
        int rc = -errno;
        if (err != NULL)
            fprintf(err, "%s: cannot open: %s\n", path, strerror(-rc));
        free(ctx);
        return rc;
    }
    ctx->err = err;
    ctx->path = path;
    ctx->cfg = cfg;
    /* A directory opens, and reads as an empty file: say what it is. */
    struct stat st;
    if (fstat(fileno(ctx->fp), &st) == 0 && !S_ISREG(st.st_mode)) {
        file_error(ctx, "not a regular file");
        fclose(ctx->fp);
        free(ctx);
        return 1;
    }
    int rc = ini_parse_stream(file_reader, ctx, file_handler, ctx);
    if (rc > 0) {
        /* inih found syntax file_reader did not anticipate; it only tells the first line. */
        ctx->line = rc;
        file_error(ctx, "syntax error");
    } else if (rc < 0) {
        file_error(ctx, "cannot parse (out of memory)");
    }
    if (ferror(ctx->fp))
        file_error(ctx, "read error: %s", strerror(errno));
    /* A file cut short (a copy interrupted, a full disk) ends inside a line; an empty one is a
     * mistake rather than a wish for every default. Either would be taken as a config. */
    if (ctx->is_unterminated)
        file_error(ctx, "the last line has no newline: is the file cut short?");
    if (ctx->errors == 0 && ctx->settings == 0)
        file_error(ctx, "no setting in the file (an empty file is refused: every default would "
                        "replace the running config)");
    fclose(ctx->fp);
    int errors = ctx->errors;
    free(ctx);
    if (errors == 0)
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", path);
    return errors;
}

int gw_config_load_file(gw_config_t *cfg, const char *path, FILE *err)
{
    int n = file_load_counted(cfg, path, err);
    if (n < 0)
        return n;
    return n == 0 ? 0 : -EINVAL;
}

int gw_config_check_file(const char *path, FILE *err)
{
    gw_config_t *cfg = malloc(sizeof(*cfg));
    if (cfg == NULL)
        return 1;
    gw_config_init(cfg);
    int n = file_load_counted(cfg, path, err);
    if (n < 0)
        n = 1;
    else
        n += gw_config_validate(cfg, err);
    free(cfg);
    return n;
}

/* ---- environment ---- */

int gw_config_load_env(gw_config_t *cfg, char *const *envp, FILE *err)
{
    int errors = 0;
    /* Table order, not environment order, so that composite rows apply before their parts. */
    for (size_t i = 0; i < N_SETTINGS; i++) {
        char name[64];
        env_name(&settings[i], name, sizeof(name));
        size_t n = strlen(name);
        for (char *const *e = envp; e != NULL && *e != NULL; e++) {
            if (strncmp(*e, name, n) != 0 || (*e)[n] != '=')
                continue;
            char msg[MSG_MAX];
            if (setting_apply(&settings[i], cfg, *e + n + 1, msg) != 0) {
                errors++;
                if (err != NULL)
                    fprintf(err, "%s: %s\n", name, msg);
            }
        }
    }
    /* Unknown HERALD_* names are reported but tolerated: test harnesses and scripts export
     * their own (HERALD_BUILD_DIR), and a warning is enough to catch a typo. */
    for (char *const *e = envp; err != NULL && e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "HERALD_", 7) != 0 || strncmp(*e, "HERALD_CONFIG=", 14) == 0)
            continue;
        bool is_known = false;
        for (size_t i = 0; i < N_SETTINGS && !is_known; i++) {
            char name[64];
            env_name(&settings[i], name, sizeof(name));
            size_t n = strlen(name);
            is_known = strncmp(*e, name, n) == 0 && (*e)[n] == '=';
        }
        if (!is_known) {
            int n = (int)strcspn(*e, "=");
            fprintf(err, "warning: %.*s is not a herald setting; ignored\n", n, *e);
        }
    }
    return errors == 0 ? 0 : -EINVAL;
}

/* ---- command line ---- */

/* getopt_long codes for the flags that are not settings; setting i uses OPT_SETTING + i. */
enum {
    OPT_CONFIG = 'c',
    OPT_HELP = 'h',
    OPT_CHECK = 1000,
    OPT_PRINT,
    OPT_VERSION,
    OPT_SETTING = 2000,
};

typedef struct opt_table_s {
    struct option opts[2 * N_SETTINGS + 6];
    char names[2 * N_SETTINGS][48];
} opt_table_t;

static void opt_table_build(opt_table_t *t)
{
    size_t k = 0;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_t *s = &settings[i];
        int has_arg = s->type == T_BOOL ? optional_argument : required_argument;
        flag_name(s, t->names[k], sizeof(t->names[k]));
        t->opts[k] = (struct option){t->names[k], has_arg, NULL, OPT_SETTING + (int)i};
        k++;
        if (s->alias != NULL) {
            snprintf(t->names[k], sizeof(t->names[k]), "%s", s->alias);
            t->opts[k] = (struct option){t->names[k], has_arg, NULL, OPT_SETTING + (int)i};
            k++;
        }
    }
    t->opts[k++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
    t->opts[k++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    t->opts[k++] = (struct option){"check-config", required_argument, NULL, OPT_CHECK};
    t->opts[k++] = (struct option){"print-config", no_argument, NULL, OPT_PRINT};
    t->opts[k++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    t->opts[k] = (struct option){NULL, 0, NULL, 0};
}

/* Handles one getopt_long result; returns 1 when it was an error. */
static int args_apply_one(gw_config_t *cfg, int c, const char *flag, char *const *argv, FILE *err,
                          gw_config_action_t *action)
{
    if (c >= OPT_SETTING && c < OPT_SETTING + (int)N_SETTINGS) {
        const setting_t *s = &settings[c - OPT_SETTING];
        char msg[MSG_MAX];
        /* A bare boolean flag (--insecure) means true. */
        const char *value = optarg != NULL ? optarg : "true";
        if (setting_apply(s, cfg, value, msg) == 0)
            return 0;
        if (err != NULL)
            fprintf(err, "--%s: %s\n", flag, msg);
        return 1;
    }
    switch (c) {
    case OPT_CONFIG:
    case OPT_CHECK:
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", optarg);
        if (c == OPT_CHECK)
            *action = GW_CONFIG_CHECK;
        return 0;
    case OPT_HELP:
        *action = GW_CONFIG_HELP;
        return 0;
    case OPT_PRINT:
        *action = GW_CONFIG_PRINT;
        return 0;
    case OPT_VERSION:
        *action = GW_CONFIG_VERSION;
        return 0;
    case ':':
        if (err != NULL)
            fprintf(err, "%s: needs a value\n", argv[optind - 1]);
        return 1;
    default:
        if (err != NULL)
            fprintf(err, "%s: unknown option (see --help)\n", argv[optind - 1]);
        return 1;
    }
}

int gw_config_load_args(gw_config_t *cfg, int argc, char *const *argv, FILE *err,
                        gw_config_action_t *action)
{
    gw_config_action_t scratch = GW_CONFIG_RUN;
    if (action == NULL)
        action = &scratch;
    *action = GW_CONFIG_RUN;
    opt_table_t *t = malloc(sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    opt_table_build(t);
    /* optind = 0 makes glibc reinitialise, so the function can run more than once; opterr = 0
     * keeps getopt quiet, errors are printed here to err. The leading '+' stops at the first
     * non-option instead of permuting argv, and ':' reports a missing value as ':'. */
    optind = 0;
    opterr = 0;
    int errors = 0;
    int c;
    int index = -1;
    while ((c = getopt_long(argc, argv, "+:c:h", t->opts, &index)) != -1) {
        /* index names the long option matched; the value may be in the next argv slot. */
        const char *flag = index >= 0 ? t->opts[index].name : "?";
        errors += args_apply_one(cfg, c, flag, argv, err, action);
        index = -1;
    }
    for (int i = optind; i < argc; i++) {
        errors++;
        if (err != NULL)
            fprintf(err, "%s: unexpected argument (see --help)\n", argv[i]);
    }
    free(t);
    return errors == 0 ? 0 : -EINVAL;
}

/* ---- validation and the whole sequence ---- */

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

int gw_config_load(gw_config_t *cfg, int argc, char *const *argv, char *const *envp, FILE *err,
                   gw_config_action_t *action)
{
    gw_config_action_t scratch;
    if (action == NULL)
        action = &scratch;
    /* First pass, silent, on a copy: only to learn --config and the action. The second pass
     * applies the flags for real after the file and the environment, and reports errors. */
    gw_config_t *first = malloc(sizeof(*first));
    if (first == NULL)
        return -ENOMEM;
    gw_config_init(first);
    gw_config_load_args(first, argc, argv, NULL, action);
    char path[GW_CONFIG_PATH_MAX];
    snprintf(path, sizeof(path), "%s", first->config_path);
    free(first);

    gw_config_init(cfg);
    if (*action == GW_CONFIG_HELP || *action == GW_CONFIG_VERSION || *action == GW_CONFIG_CHECK) {
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", path);
        return 0;
    }
    const char *env_path = env_lookup(envp, "HERALD_CONFIG");
    if (path[0] == '\0' && env_path != NULL)
        snprintf(path, sizeof(path), "%s", env_path);
    int rc = 0;
    if (path[0] != '\0') {
        rc = gw_config_load_file(cfg, path, err);
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", path);
        if (rc != 0 && rc != -EINVAL)
            return rc;
    }
    int rc_env = gw_config_load_env(cfg, envp, err);
    int rc_args = gw_config_load_args(cfg, argc, argv, err, action);
    if (rc == 0)
        rc = rc_env != 0 ? rc_env : rc_args;
    /* --print-config shows the config herald would run with, so it checks it as a start
     * would: an operator who pipes it somewhere must not get a config no node accepts. */
    if (rc == 0 && (*action == GW_CONFIG_RUN || *action == GW_CONFIG_PRINT) &&
        gw_config_validate(cfg, err) != 0)
        rc = -EINVAL;
    return rc;
}

/* ---- help and printing ---- */

void gw_config_usage(FILE *out, const char *prog)
{
    gw_config_t def;
    gw_config_init(&def);
    fprintf(out,
            "Usage: %s [OPTION]...\n"
            "herald, the pub/sub push gateway. Settings come from defaults, then the config\n"
            "file, then HERALD_* variables, then these flags (later wins).\n\n"
            "  -c, --config FILE        INI config file (also HERALD_CONFIG)\n"
            "      --check-config FILE  report every error in FILE and exit\n"
            "      --print-config       print the effective config and exit (2, printing\n"
            "                           nothing, if herald would refuse it)\n"
            "  -h, --help               this text\n"
            "      --version            print the version and exit\n\n"
            "Durations take ms/s/m/h/d (bare: ms), sizes k/m/g or KiB/MiB/GiB (bare: bytes).\n"
            "SIGHUP reads the same sources again and applies the settings marked \"reloads on\n"
            "SIGHUP\"; the others keep their running value until a restart.\n",
            prog);
    const char *section = "";
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_t *s = &settings[i];
        if (strcmp(section, s->section) != 0) {
            section = s->section;
            fprintf(out, "\n[%s]\n", section);
        }
        char flag[48];
        char env[64];
        char value[GW_CONFIG_HOST_MAX + 16];
        flag_name(s, flag, sizeof(flag));
        env_name(s, env, sizeof(env));
        setting_format(s, &def, value, sizeof(value));
        char lhs[96];
        snprintf(lhs, sizeof(lhs), "--%s%s%s", flag, s->type == T_BOOL ? "" : " ",
                 metavars[s->type]);
        fprintf(out, "  %-34s %s\n", lhs, s->help);
        fprintf(out, "  %-34s key %s, %s, default %s%s%s%s\n", "", s->key, env,
                value[0] != '\0' ? value : "(none)", s->alias != NULL ? ", alias --" : "",
                s->alias != NULL ? s->alias : "", s->is_reloadable ? ", reloads on SIGHUP" : "");
    }
}

void gw_config_print(const gw_config_t *cfg, FILE *out, bool show_secrets)
{
    const char *section = "";
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_t *s = &settings[i];
        /* The host and port rows say the same as the composite row. */
        if (s->type == T_HOSTPORT)
            continue;
        if (strcmp(section, s->section) != 0) {
            fprintf(out, "%s[%s]\n", section[0] != '\0' ? "\n" : "", s->section);
            section = s->section;
        }
        char value[GW_CONFIG_SECRET_MAX + 16];
        setting_format(s, cfg, value, sizeof(value));
        if (s->is_secret && !show_secrets && value[0] != '\0')
            snprintf(value, sizeof(value), "<set>");
        fprintf(out, "%s = %s\n", s->key, value);
    }
}

/* ---- reload ---- */

/* Whether s holds the same value in a and b. Strings compare up to their NUL: a field set
 * twice keeps the tail of a longer earlier value behind it, which is no difference. */
static bool setting_equal(const setting_t *s, const gw_config_t *a, const gw_config_t *b)
{
    const char *fa = (const char *)a + s->off;
    const char *fb = (const char *)b + s->off;
    switch (s->type) {
    case T_STR:
        return strcmp(fa, fb) == 0;
    case T_U16:
        return *(const uint16_t *)fa == *(const uint16_t *)fb;
    case T_U32:
        return *(const uint32_t *)fa == *(const uint32_t *)fb;
    case T_BOOL:
        return *(const bool *)fa == *(const bool *)fb;
    case T_DURATION:
    case T_SIZE:
        return *(const uint64_t *)fa == *(const uint64_t *)fb;
    case T_SLOW:
    case T_ENGINE:
    case T_LOGLEVEL:
        return *(const int *)fa == *(const int *)fb;
    case T_HOSTPORT:
        break; /* compared through its host and port rows */
    }
    return true;
}

/* The bytes of s's field, for copying a running value back. */
static size_t setting_size(const setting_t *s)
{
    switch (s->type) {
    case T_STR:
        return s->off2;
    case T_U16:
        return sizeof(uint16_t);
    case T_U32:
        return sizeof(uint32_t);
    case T_BOOL:
        return sizeof(bool);
    case T_DURATION:
    case T_SIZE:
        return sizeof(uint64_t);
    case T_SLOW:
    case T_ENGINE:
    case T_LOGLEVEL:
        return sizeof(int);
    case T_HOSTPORT:
        break;
    }
    return 0;
}

int gw_config_reconcile(const gw_config_t *running, gw_config_t *loaded, gw_config_change_cb cb,
                        void *arg)
{
    int n = 0;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_t *s = &settings[i];
        if (s->type == T_HOSTPORT || setting_equal(s, running, loaded))
            continue;
        n++;
        if (cb != NULL) {
            gw_config_change_t ch = {
                .section = s->section,
                .key = s->key,
                .is_reloadable = s->is_reloadable,
                .is_secret = s->is_secret,
            };
            if (s->is_secret) {
                /* Never the secret itself, not even in part: only whether one is set. */
                const char *old_field = (const char *)running + s->off;
                const char *new_field = (const char *)loaded + s->off;
                snprintf(ch.old_value, sizeof(ch.old_value), "%s", old_field[0] ? "set" : "");
                snprintf(ch.new_value, sizeof(ch.new_value), "%s", new_field[0] ? "set" : "");
            } else {
                setting_format(s, running, ch.old_value, sizeof(ch.old_value));
                setting_format(s, loaded, ch.new_value, sizeof(ch.new_value));
            }
            cb(&ch, arg);
        }
        if (!s->is_reloadable)
            memcpy((char *)loaded + s->off, (const char *)running + s->off, setting_size(s));
    }
    return n;
}
