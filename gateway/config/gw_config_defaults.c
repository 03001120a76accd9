/*
 * gw_config_defaults: the defaults a gw_config_t starts from and the checks across settings
 * that no single row of gw_config.c's settings[] table can make (see gw_config.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gw_channel.h"
#include "gw_config.h"
#include "netlib/nl_log.h"

#define MIB (1024ull * 1024ull)

void gw_config_init(gw_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->listen_host, "0.0.0.0");
    cfg->listen_port = 7400;
    cfg->is_batch_sends = true;
    cfg->worker_threads = 2;
    cfg->worker_queue_capacity = 4096;
    cfg->max_connections = 1000000;
    cfg->drain_ms = 10000;
    cfg->is_admin_enabled = true;
    strcpy(cfg->admin_host, "127.0.0.1");
    cfg->admin_port = 7401;
    cfg->admin_max_body_bytes = MIB;
    cfg->admin_request_timeout_ms = 10000;
    cfg->admin_header_timeout_ms = 2000;
    cfg->admin_max_per_address = 32;
    cfg->ping_interval_ms = 25000;
    cfg->idle_timeout_ms = 60000;
    cfg->connect_timeout_ms = 10000;
    cfg->max_frame_bytes = 65536;
    cfg->max_subscriptions_per_conn = 128;
    cfg->max_channel_bytes = GW_CHANNEL_NAME_MAX_DEFAULT;
    cfg->publish_rate_per_s = 100;
    cfg->publish_burst = 200;
    cfg->idempotency_window_ms = 60000;
    cfg->idempotency_keys = 100000;
    cfg->max_unauthenticated = 10000;
    cfg->max_unauthenticated_per_address = 1000;
    cfg->output_high_water_bytes = MIB;
    cfg->slow_consumer = GW_SLOW_DROP;
    cfg->slow_consumer_linger_ms = 5000;
    cfg->history_max_bytes = 128 * MIB;
    cfg->presence_max_clients = 1000;
    cfg->presence_max_inflight = 2;
    cfg->presence_event_window_ms = 1000;
    cfg->presence_refresh_ms = 5000;
    cfg->presence_last_seen_ttl_ms = 24ull * 3600 * 1000;
    cfg->presence_last_seen_max = 100000;
    cfg->engine = GW_ENGINE_MEMORY;
    strcpy(cfg->redis, "127.0.0.1:6379");
    cfg->redis_timeout_ms = 2000;
    cfg->redis_max_pending = 10000;
    cfg->log_level = NL_INFO;
    cfg->is_tls_ktls = true;
}

__attribute__((format(printf, 3, 4))) static int problem(FILE *err, bool is_error, const char *fmt,
                                                         ...)
{
    if (err != NULL) {
        fputs(is_error ? "config: " : "config: warning: ", err);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(err, fmt, ap);
        va_end(ap);
        fputc('\n', err);
    }
    return is_error ? 1 : 0;
}

/* [auth] previous_secrets: a list of at most GW_CONFIG_PREVIOUS_SECRETS_MAX secrets of 16
 * bytes or more, only beside a current secret. Returns the number of errors. */
static int validate_previous_secrets(const gw_config_t *cfg, FILE *err)
{
    gw_config_item_t items[GW_CONFIG_PREVIOUS_SECRETS_MAX];
    int k =
        gw_config_split_list(cfg->token_previous_secrets, items, GW_CONFIG_PREVIOUS_SECRETS_MAX);
    if (k == -E2BIG)
        return problem(err, true, "previous_secrets holds more than %d secrets",
                       GW_CONFIG_PREVIOUS_SECRETS_MAX);
    if (k < 0)
        return problem(err, true,
                       "previous_secrets has an empty entry (two commas in a row, or "
                       "one at an end)");
    int n = 0;
    for (int i = 0; i < k; i++) {
        if (items[i].len < 16)
            n += problem(err, true, "previous secret %d of %d is shorter than 16 bytes", i + 1, k);
    }
    if (k > 0 && cfg->token_secret[0] == '\0' && !cfg->is_insecure)
        n += problem(err, true, "previous_secrets is set but the token secret is not");
    /* A secret with a comma cannot be listed there when it is rotated out. */
    if (strchr(cfg->token_secret, ',') != NULL)
        problem(err, false,
                "the token secret holds a ',': it cannot be kept in previous_secrets "
                "during a rotation");
    return n;
}

/* [websocket] listen and [tls]: an address that parses, on a port of its own; both TLS files
 * or neither, readable. Returns the number of errors. */
static int validate_listeners(const gw_config_t *cfg, FILE *err)
{
    int n = 0;
    if (cfg->ws_listen[0]) {
        char host[GW_CONFIG_HOST_MAX];
        uint16_t port;
        if (gw_config_parse_hostport(cfg->ws_listen, host, sizeof(host), &port) != 0)
            n += problem(err, true, "[websocket] listen '%s' is not HOST:PORT", cfg->ws_listen);
        else if (port != 0 &&
                 (port == cfg->listen_port || (cfg->is_admin_enabled && port == cfg->admin_port)))
            n += problem(err, true, "[websocket] listen's port %u is another listener's", port);
    }
    bool has_cert = cfg->tls_cert_file[0] != '\0';
    bool has_key = cfg->tls_key_file[0] != '\0';
    if (has_cert != has_key)
        n += problem(err, true, "[tls] needs both cert_file and key_file (or neither)");
    if (has_cert && access(cfg->tls_cert_file, R_OK) != 0)
        n += problem(err, true, "[tls] cert_file %s: %s", cfg->tls_cert_file, strerror(errno));
    if (has_key && access(cfg->tls_key_file, R_OK) != 0)
        n += problem(err, true, "[tls] key_file %s: %s", cfg->tls_key_file, strerror(errno));
    return n;
}

/* [engine] sentinels and sentinel_master go together: the addresses, and a name per shard. */
static int validate_sentinels(const gw_config_t *cfg, FILE *err)
{
    int n = 0;
    gw_config_server_t sentinels[GW_CONFIG_REDIS_SERVERS_MAX];
    char names[GW_CONFIG_REDIS_SERVERS_MAX][GW_CONFIG_NAME_MAX];
    int n_sentinels =
        gw_config_parse_servers(cfg->sentinels, sentinels, GW_CONFIG_REDIS_SERVERS_MAX);
    int n_names = gw_config_parse_names(cfg->sentinel_master, names, GW_CONFIG_REDIS_SERVERS_MAX);
    if (n_sentinels < 0)
        n += problem(err, true,
                     "[engine] sentinels: a list of 1..%d host:port items, each listed once (%s)",
                     GW_CONFIG_REDIS_SERVERS_MAX, n_sentinels == -E2BIG ? "too many" : "bad item");
    if (n_names < 0)
        n += problem(err, true,
                     "[engine] sentinel_master: 1..%d names (no blanks), each listed once (%s)",
                     GW_CONFIG_REDIS_SERVERS_MAX, n_names == -E2BIG ? "too many" : "bad name");
    if (n_sentinels > 0 && n_names == 0)
        n += problem(err, true, "[engine] sentinels need [engine] sentinel_master (a name)");
    if (n_sentinels == 0 && n_names > 0)
        n += problem(err, true, "[engine] sentinel_master needs [engine] sentinels");
    return n;
}

int gw_config_validate(const gw_config_t *cfg, FILE *err)
{
    int n = 0;
    if (cfg->idle_timeout_ms <= cfg->ping_interval_ms)
        n += problem(err, true,
                     "idle_timeout (%" PRIu64 " ms) must exceed ping_interval (%" PRIu64 " ms)",
                     cfg->idle_timeout_ms, cfg->ping_interval_ms);
    /* herald with no arguments must run (an operator's first try), yet must never accept a
     * token it cannot verify: without a secret every Connect is refused (gw_session_auth). */
    if (!cfg->is_insecure && cfg->token_secret[0] == '\0')
        problem(err, false,
                "no token secret: every Connect is refused until [auth] secret, "
                "HERALD_TOKEN_SECRET or --secret is set (or --insecure for a demo)");
    if (cfg->token_secret[0] != '\0' && strlen(cfg->token_secret) < 16)
        n += problem(err, true, "the token secret must be at least 16 bytes");
    n += validate_previous_secrets(cfg, err);
    if (cfg->output_high_water_bytes < cfg->max_frame_bytes)
        n += problem(err, true, "output_high_water must be at least max_frame");
    if (cfg->listen_host[0] == '\0')
        n += problem(err, true, "the listen host is empty");
    if (cfg->is_admin_enabled && cfg->admin_host[0] == '\0')
        n += problem(err, true, "the admin host is empty");
    if (cfg->is_admin_enabled && cfg->admin_port != 0 && cfg->admin_port == cfg->listen_port)
        n += problem(err, true, "the admin port and the listen port are both %u", cfg->listen_port);
    gw_history_rules_t rules;
    char why[160];
    if (gw_history_rules_parse(cfg->history_rules, &rules, why, sizeof(why)) < 0)
        n += problem(err, true, "[history] rules: %s", why);
    gw_config_server_t servers[GW_CONFIG_REDIS_SERVERS_MAX];
    int n_servers = gw_config_parse_servers(cfg->redis, servers, GW_CONFIG_REDIS_SERVERS_MAX);
    if (n_servers < 0)
        n += problem(err, true,
                     "[engine] redis: a list of 1..%d host:port items, each listed once (%s)",
                     GW_CONFIG_REDIS_SERVERS_MAX, n_servers == -E2BIG ? "too many" : "bad item");
    else if (n_servers == 0 && cfg->engine == GW_ENGINE_REDIS && cfg->sentinels[0] == '\0')
        n += problem(err, true, "engine redis needs [engine] redis servers");
    n += validate_listeners(cfg, err);
    n += validate_sentinels(cfg, err);
    if (cfg->is_admin_enabled && cfg->admin_api_key[0] == '\0')
        problem(err, false, "no admin api_key: the admin port answers /healthz only");
    if (cfg->is_insecure)
        problem(err, false, "insecure mode: client tokens are not verified");
    return n;
}
