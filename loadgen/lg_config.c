/*
 * lg_config: defaults, getopt_long parsing and validation of herald-loadgen's settings.
 *
 * Parsing goes on past the first bad flag so that one run shows every problem; validation
 * then checks what involves several settings. Nothing here touches the network.
 */
#include "lg_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Long-only options get values above the char range. */
enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_IDLE,
    OPT_ACTIVE,
    OPT_THREADS,
    OPT_CONNECT_RATE,
    OPT_ID_BASE,
    OPT_SOURCES,
    OPT_RATE,
    OPT_TOTAL_RATE,
    OPT_SIZE,
    OPT_PATTERN,
    OPT_IDLE_SHARED,
    OPT_PREFIX,
    OPT_DURATION,
    OPT_RAMP_TIMEOUT,
    OPT_DRAIN,
    OPT_CONNECT_TIMEOUT,
    OPT_DROP_AT,
    OPT_DROP_FRACTION,
    OPT_INSECURE,
    OPT_SECRET,
    OPT_TOKEN_TTL,
    OPT_JSON,
    OPT_REPORT,
    OPT_MAX_P99,
    OPT_MAX_ARRIVAL_P99,
    OPT_MAX_LOSS,
    OPT_PROGRESS,
    OPT_QUIET,
    OPT_PUBLISH_VIA,
    OPT_ADMIN_PORT,
    OPT_API_KEY,
    OPT_HTTP_CONNS,
    OPT_TRANSPORT,
    OPT_TLS_CA,
    OPT_TLS_SERVER_NAME,
    OPT_TLS_INSECURE,
    OPT_HELP,
};

static const struct option lg_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"idle", required_argument, NULL, OPT_IDLE},
    {"active", required_argument, NULL, OPT_ACTIVE},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"connect-rate", required_argument, NULL, OPT_CONNECT_RATE},
    {"id-base", required_argument, NULL, OPT_ID_BASE},
    {"sources", required_argument, NULL, OPT_SOURCES},
    {"rate", required_argument, NULL, OPT_RATE},
    {"total-rate", required_argument, NULL, OPT_TOTAL_RATE},
    {"size", required_argument, NULL, OPT_SIZE},
    {"pattern", required_argument, NULL, OPT_PATTERN},
    {"idle-shared", no_argument, NULL, OPT_IDLE_SHARED},
    {"channel-prefix", required_argument, NULL, OPT_PREFIX},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"ramp-timeout", required_argument, NULL, OPT_RAMP_TIMEOUT},
    {"drain", required_argument, NULL, OPT_DRAIN},
    {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"drop-at", required_argument, NULL, OPT_DROP_AT},
    {"drop-fraction", required_argument, NULL, OPT_DROP_FRACTION},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"secret", required_argument, NULL, OPT_SECRET},
    {"token-ttl", required_argument, NULL, OPT_TOKEN_TTL},
    {"json", required_argument, NULL, OPT_JSON},
    {"report", required_argument, NULL, OPT_REPORT},
    {"max-p99", required_argument, NULL, OPT_MAX_P99},
    {"max-arrival-p99", required_argument, NULL, OPT_MAX_ARRIVAL_P99},
    {"max-loss", required_argument, NULL, OPT_MAX_LOSS},
    {"progress", required_argument, NULL, OPT_PROGRESS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"publish-via", required_argument, NULL, OPT_PUBLISH_VIA},
    {"admin-port", required_argument, NULL, OPT_ADMIN_PORT},
    {"api-key", required_argument, NULL, OPT_API_KEY},
    {"http-conns", required_argument, NULL, OPT_HTTP_CONNS},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME},
    {"tls-insecure", no_argument, NULL, OPT_TLS_INSECURE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

void lg_config_init(lg_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->host, "127.0.0.1");
    cfg->port = 7400;
    cfg->threads = 1;
    cfg->connect_rate = 0;
    cfg->payload_bytes = 64;
    cfg->pattern = LG_PATTERN_BROADCAST;
    strcpy(cfg->channel_prefix, "lg");
    cfg->duration_ms = 10000;
    cfg->ramp_timeout_ms = 60000;
    cfg->drain_ms = 3000;
    cfg->connect_timeout_ms = 5000;
    cfg->token_ttl_s = 3600;
    cfg->progress = LG_PROGRESS_AUTO;
    cfg->admin_port = 7401;
    cfg->http_conns = 4;
}

/* Parses a double followed by an optional unit from units[] (scale per unit); a bare number
 * takes bare_scale. Returns 0 and *out = value * scale, or -EINVAL. */
typedef struct unit_s {
    const char *name;
    double scale;
} unit_t;

static int parse_scaled(const char *text, const unit_t *units, double bare_scale, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || !isfinite(v) || v < 0)
        return -EINVAL;
    if (*end == '\0') {
        *out = v * bare_scale;
        return 0;
    }
    for (const unit_t *u = units; u->name; u++) {
        if (strcasecmp(end, u->name) == 0) {
            *out = v * u->scale;
            return 0;
        }
    }
    return -EINVAL;
}

static const unit_t duration_units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {NULL, 0},
};
static const unit_t latency_units[] = {
    {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {NULL, 0},
};
static const unit_t size_units[] = {
    {"b", 1}, {"k", 1024}, {"kib", 1024}, {"m", 1048576}, {"mib", 1048576}, {NULL, 0},
};
static const unit_t count_units[] = {
    {"k", 1000},
    {"m", 1000000},
    {NULL, 0},
};
static const unit_t percent_units[] = {
    {"%", 1},
    {NULL, 0},
};

/* A whole number in [min, max] with optional k/m (thousands) suffix. */
static int parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out)
{
    double v;
    if (parse_scaled(text, count_units, 1, &v) < 0 || v != floor(v) || v < min || v > max)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int parse_u64_scaled(const char *text, const unit_t *units, double bare, double max,
                            uint64_t *out)
{
    double v;
    if (parse_scaled(text, units, bare, &v) < 0 || v > max)
        return -EINVAL;
    *out = (uint64_t)llround(v);
    return 0;
}

bool lg_config_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

static int add_source(lg_config_t *cfg, uint32_t host_order)
{
    if (cfg->source_count >= LG_SOURCES_MAX)
        return -E2BIG;
    struct in_addr a = {.s_addr = htonl(host_order)};
    inet_ntop(AF_INET, &a, cfg->sources[cfg->source_count++], LG_HOST_MAX);
    return 0;
}

/* One element of --sources: an IPv4 address, or A-B over the last octets (both full
 * addresses, B >= A). Every address must be loopback. */
static int parse_source_item(lg_config_t *cfg, char *item)
{
    char *dash = strchr(item, '-');
    if (dash)
        *dash = '\0';
    struct in_addr lo, hi;
    if (inet_pton(AF_INET, item, &lo) != 1)
        return -EINVAL;
    hi = lo;
    if (dash && inet_pton(AF_INET, dash + 1, &hi) != 1)
        return -EINVAL;
    uint32_t a = ntohl(lo.s_addr);
    uint32_t b = ntohl(hi.s_addr);
    if (b < a || (a >> 24) != 127 || (b >> 24) != 127 || b - a >= LG_SOURCES_MAX)
        return -EINVAL;
    for (uint32_t x = a; x <= b; x++) {
        int rc = add_source(cfg, x);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int parse_sources(lg_config_t *cfg, const char *text)
{
    char copy[4096];
    if (strlen(text) >= sizeof(copy))
        return -EINVAL;
    strcpy(copy, text);
    cfg->source_count = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int rc = parse_source_item(cfg, item);
        if (rc < 0)
            return rc;
    }
    return cfg->source_count > 0 ? 0 : -EINVAL;
}

static int parse_pattern(lg_config_t *cfg, const char *text)
{
    if (strcmp(text, "broadcast") == 0) {
        cfg->pattern = LG_PATTERN_BROADCAST;
        return 0;
    }
    if (strcmp(text, "per-user") == 0) {
        cfg->pattern = LG_PATTERN_PER_USER;
        return 0;
    }
    if (strncmp(text, "groups:", 7) == 0 &&
        parse_u32(text + 7, 1, LG_GROUPS_MAX, &cfg->group_count) == 0) {
        cfg->pattern = LG_PATTERN_GROUPS;
        return 0;
    }
    return -EINVAL;
}

/* herald's channel name characters (gateway/gw_channel_name.h), without ':' at the end. */
static bool prefix_is_valid(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n >= LG_PREFIX_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  strchr("_-:.@/=", c) != NULL;
        if (!ok)
            return false;
    }
    return true;
}

static int copy_str(char *dst, size_t cap, const char *src)
{
    if (strlen(src) >= cap)
        return -EINVAL;
    strcpy(dst, src);
    return 0;
}

static int parse_progress(lg_config_t *cfg, const char *text)
{
    static const char *const names[] = {"auto", "tty", "plain", "none"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(text, names[i]) == 0) {
            cfg->progress = i;
            return 0;
        }
    }
    return -EINVAL;
}

/* The fleet and publishing options. Returns 0, -EINVAL, or -ENOENT when opt is not one. */
static int apply_fleet_option(lg_config_t *cfg, int opt, const char *arg)
{
    uint32_t v32;
    double v;
    switch (opt) {
    case OPT_HOST:
        return copy_str(cfg->host, sizeof(cfg->host), arg);
    case OPT_PORT:
        if (parse_u32(arg, 1, 65535, &v32) < 0)
            return -EINVAL;
        cfg->port = (uint16_t)v32;
        return 0;
    case OPT_IDLE:
        return parse_u32(arg, 0, 1000000, &cfg->idle_count);
    case OPT_ACTIVE:
        return parse_u32(arg, 0, 1000000, &cfg->active_count);
    case OPT_THREADS:
        return parse_u32(arg, 1, LG_THREADS_MAX, &cfg->threads);
    case OPT_CONNECT_RATE:
        return parse_u32(arg, 0, 10000000, &cfg->connect_rate);
    case OPT_ID_BASE:
        return parse_u32(arg, 0, 1000000000, &cfg->id_base);
    case OPT_SOURCES:
        return parse_sources(cfg, arg);
    case OPT_RATE:
    case OPT_TOTAL_RATE:
        if (parse_scaled(arg, count_units, 1, &v) < 0 || v > 1e7)
            return -EINVAL;
        cfg->rate_per_client = opt == OPT_RATE ? v : 0;
        cfg->total_rate = opt == OPT_RATE ? 0 : v;
        return 0;
    case OPT_SIZE:
        if (parse_scaled(arg, size_units, 1, &v) < 0 || v < LG_PAYLOAD_MIN || v > LG_PAYLOAD_MAX)
            return -EINVAL;
        cfg->payload_bytes = (uint32_t)v;
        return 0;
    case OPT_PATTERN:
        return parse_pattern(cfg, arg);
    case OPT_IDLE_SHARED:
        cfg->is_idle_shared = true;
        return 0;
    case OPT_PUBLISH_VIA:
        if (strcmp(arg, "client") != 0 && strcmp(arg, "http") != 0)
            return -EINVAL;
        cfg->is_publish_http = strcmp(arg, "http") == 0;
        return 0;
    case OPT_ADMIN_PORT:
        if (parse_u32(arg, 1, 65535, &v32) < 0)
            return -EINVAL;
        cfg->admin_port = (uint16_t)v32;
        return 0;
    case OPT_API_KEY:
        return copy_str(cfg->api_key, sizeof(cfg->api_key), arg);
    case OPT_HTTP_CONNS:
        return parse_u32(arg, 1, 256, &cfg->http_conns);
    case OPT_PREFIX:
        return prefix_is_valid(arg) ? copy_str(cfg->channel_prefix, LG_PREFIX_MAX, arg) : -EINVAL;
    case OPT_TRANSPORT:
        return lg_transport_parse(arg, &cfg->transport);
    case OPT_TLS_CA:
        return arg[0] ? copy_str(cfg->tls_ca, sizeof(cfg->tls_ca), arg) : -EINVAL;
    case OPT_TLS_SERVER_NAME:
        return arg[0] ? copy_str(cfg->tls_server_name, sizeof(cfg->tls_server_name), arg) : -EINVAL;
    case OPT_TLS_INSECURE:
        cfg->is_tls_insecure = true;
        return 0;
    default:
        return -ENOENT;
    }
}

/* Time, token and output options. Returns 0 or -EINVAL. */
static int apply_run_option(lg_config_t *cfg, int opt, const char *arg, lg_config_action_t *action)
{
    double v;
    switch (opt) {
    case OPT_DURATION:
        return parse_u64_scaled(arg, duration_units, 1000, 86400e3, &cfg->duration_ms);
    case OPT_RAMP_TIMEOUT:
        return parse_u64_scaled(arg, duration_units, 1000, 86400e3, &cfg->ramp_timeout_ms);
    case OPT_DRAIN:
        return parse_u64_scaled(arg, duration_units, 1000, 600e3, &cfg->drain_ms);
    case OPT_CONNECT_TIMEOUT:
        return parse_u64_scaled(arg, duration_units, 1000, 600e3, &cfg->connect_timeout_ms);
    case OPT_DROP_AT:
        return parse_u64_scaled(arg, duration_units, 1000, 86400e3, &cfg->drop_at_ms);
    case OPT_DROP_FRACTION:
        if (parse_scaled(arg, percent_units, 1, &v) < 0)
            return -EINVAL;
        /* "50%" and "0.5" both mean half. */
        cfg->drop_fraction = strchr(arg, '%') ? v / 100 : v;
        return cfg->drop_fraction > 0 && cfg->drop_fraction <= 1 ? 0 : -EINVAL;
    case OPT_INSECURE:
        cfg->is_insecure = true;
        return 0;
    case OPT_SECRET:
        return copy_str(cfg->secret, sizeof(cfg->secret), arg);
    case OPT_TOKEN_TTL:
        if (parse_u64_scaled(arg, duration_units, 1000, 365 * 86400e3, &cfg->token_ttl_s) < 0)
            return -EINVAL;
        cfg->token_ttl_s = (cfg->token_ttl_s + 999) / 1000;
        return cfg->token_ttl_s > 0 ? 0 : -EINVAL;
    case OPT_JSON:
        return copy_str(cfg->json_path, sizeof(cfg->json_path), arg);
    case OPT_REPORT:
        return arg[0] ? copy_str(cfg->report_path, sizeof(cfg->report_path), arg) : -EINVAL;
    case OPT_MAX_P99:
        cfg->has_max_p99 = true;
        return parse_u64_scaled(arg, latency_units, 1e6, 3600e9, &cfg->max_p99_ns);
    case OPT_MAX_ARRIVAL_P99:
        cfg->has_max_arrival_p99 = true;
        return parse_u64_scaled(arg, latency_units, 1e6, 3600e9, &cfg->max_arrival_p99_ns);
    case OPT_MAX_LOSS:
        cfg->has_max_loss = true;
        if (parse_scaled(arg, percent_units, 1, &cfg->max_loss_pct) < 0)
            return -EINVAL;
        return cfg->max_loss_pct <= 100 ? 0 : -EINVAL;
    case OPT_PROGRESS:
        return parse_progress(cfg, arg);
    case OPT_QUIET:
        cfg->is_quiet = true;
        return 0;
    case OPT_HELP:
        *action = LG_CONFIG_HELP;
        return 0;
    default:
        return -EINVAL;
    }
}

/* Applies one option; returns 0 or -EINVAL (the caller prints the flag and value). */
static int apply_option(lg_config_t *cfg, int opt, const char *arg, lg_config_action_t *action)
{
    /* Flags without a value get NULL from getopt; they never read it, but keep it a string. */
    if (!arg)
        arg = "";
    int rc = apply_fleet_option(cfg, opt, arg);
    return rc == -ENOENT ? apply_run_option(cfg, opt, arg, action) : rc;
}

/* Cross-setting rules. Returns the number of problems printed. */
static int validate(const lg_config_t *cfg, FILE *err)
{
    int bad = 0;
    if (!lg_config_is_loopback(cfg->host)) {
        fprintf(err,
                "herald-loadgen: --host %s is not a loopback address: only 127.0.0.0/8 "
                "and ::1 are allowed\n",
                cfg->host);
        bad++;
    }
    uint32_t clients = lg_config_clients(cfg);
    if (clients == 0) {
        fprintf(err, "herald-loadgen: nothing to do: give --idle N and/or --active M\n");
        bad++;
    }
    if (clients > 0 && cfg->threads > clients) {
        fprintf(err, "herald-loadgen: --threads %u exceeds the %u clients\n", cfg->threads,
                clients);
        bad++;
    }
    if (!cfg->is_insecure && cfg->secret[0] == '\0') {
        fprintf(err, "herald-loadgen: give --secret S (the server's token secret) or --insecure "
                     "(for a herald started with --insecure)\n");
        bad++;
    }
    if (cfg->source_count > 0 && strchr(cfg->host, ':')) {
        fprintf(err, "herald-loadgen: --sources are IPv4; --host must be IPv4 too\n");
        bad++;
    }
    if (cfg->is_publish_http && cfg->api_key[0] == '\0') {
        fprintf(err, "herald-loadgen: --publish-via http needs --api-key K (herald's "
                     "--api-key)\n");
        bad++;
    }
    bool has_tls_flags = cfg->tls_ca[0] || cfg->tls_server_name[0] || cfg->is_tls_insecure;
    if (has_tls_flags && !lg_transport_is_tls(cfg->transport)) {
        fprintf(err, "herald-loadgen: --tls-ca, --tls-server-name and --tls-insecure go with "
                     "--transport tls or wss\n");
        bad++;
    }
    if (cfg->is_tls_insecure && (cfg->tls_ca[0] || cfg->tls_server_name[0])) {
        fprintf(err, "herald-loadgen: --tls-insecure checks nothing: give it without --tls-ca "
                     "and --tls-server-name\n");
        bad++;
    }
    if (cfg->tls_ca[0] && access(cfg->tls_ca, R_OK) != 0) {
        fprintf(err, "herald-loadgen: --tls-ca %s: %s\n", cfg->tls_ca, strerror(errno));
        bad++;
    }
    if (cfg->drop_at_ms > 0 && cfg->drop_at_ms >= cfg->duration_ms) {
        fprintf(err, "herald-loadgen: --drop-at must fall inside --duration\n");
        bad++;
    }
    return bad;
}

int lg_config_parse(lg_config_t *cfg, int argc, char *const *argv, FILE *err,
                    lg_config_action_t *action)
{
    *action = LG_CONFIG_RUN;
    int bad = 0;
    int opt;
    int index = -1;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", lg_options, &index)) != -1) {
        if (opt == 'h')
            opt = OPT_HELP;
        if (opt == '?') {
            fprintf(err, "herald-loadgen: unknown or incomplete option %s\n", argv[optind - 1]);
            bad++;
            continue;
        }
        if (apply_option(cfg, opt, optarg, action) < 0) {
            const char *name = index >= 0 ? lg_options[index].name : "help";
            fprintf(err, "herald-loadgen: bad value for --%s: '%s'\n", name, optarg ? optarg : "");
            bad++;
        }
        index = -1;
    }
    if (optind < argc) {
        fprintf(err, "herald-loadgen: unexpected argument '%s'\n", argv[optind]);
        bad++;
    }
    if (cfg->drop_at_ms > 0 && cfg->drop_fraction == 0)
        cfg->drop_fraction = 0.5;
    if (cfg->rate_per_client == 0 && cfg->total_rate == 0 && cfg->active_count > 0)
        cfg->rate_per_client = 1;
    if (*action == LG_CONFIG_HELP)
        return 0;
    bad += validate(cfg, err);
    return bad ? -EINVAL : 0;
}

double lg_config_fleet_rate(const lg_config_t *cfg)
{
    if (cfg->active_count == 0)
        return 0;
    return cfg->total_rate > 0 ? cfg->total_rate : cfg->rate_per_client * cfg->active_count;
}

const char *lg_config_pattern_str(const lg_config_t *cfg, char *buf, size_t len)
{
    switch (cfg->pattern) {
    case LG_PATTERN_GROUPS:
        snprintf(buf, len, "groups:%u", cfg->group_count);
        break;
    case LG_PATTERN_PER_USER:
        snprintf(buf, len, "per-user");
        break;
    default:
        snprintf(buf, len, "broadcast");
        break;
    }
    return buf;
}

void lg_config_usage(FILE *out)
{
    fputs("usage: herald-loadgen [options]\n"
          "Simulates idle and active herald clients and measures connects, publish-to-deliver\n"
          "latency, loss and throughput. Loopback targets only. Exit status: 0 ok, 1 an SLO\n"
          "(--max-p99, --max-arrival-p99, --max-loss) was broken, 2 bad arguments or setup,\n"
          "3 the run failed.\n"
          "\n"
          "Target and fleet:\n"
          "  --host ADDR            herald's client address (default 127.0.0.1)\n"
          "  --port N               herald's client port (default 7400)\n"
          "  --idle N               clients that connect, subscribe and only heartbeat\n"
          "  --active M             clients that also publish and receive\n"
          "  --threads T            loops (one per thread) sharing the clients (default 1)\n"
          "  --connect-rate R       new connections per second in total (default 0: no ramp)\n"
          "  --sources A-B[,C]      bind source addresses round robin, e.g.\n"
          "                         127.0.0.2-127.0.0.17 (each has its own ephemeral ports)\n"
          "  --id-base N            first client id; separate processes use disjoint ranges\n"
          "  --connect-timeout D    per attempt (default 5s); the TLS and WebSocket\n"
          "                         handshakes that follow the TCP connect get as long again\n"
          "\n"
          "Transport (the same for every client):\n"
          "  --transport T          tcp (default) | ws | tls | wss: --port is then herald's\n"
          "                         [websocket] listen port for ws and wss, and herald runs\n"
          "                         with [tls] cert_file and key_file for tls and wss\n"
          "  --tls-ca FILE          PEM CA certificates the server's certificate must chain to\n"
          "                         (default: the system's trust store)\n"
          "  --tls-server-name N    the name the certificate must carry, sent as SNI unless it\n"
          "                         is an address (default: --host)\n"
          "  --tls-insecure         no certificate verification (never with real servers)\n"
          "\n"
          "Publishing (active clients):\n"
          "  --rate R               publishes/s per active client (default 1)\n"
          "  --total-rate R         publishes/s over all active clients (instead of --rate)\n"
          "  --size B               payload bytes, >= 8: a send timestamp + padding (default 64)\n"
          "  --pattern P            broadcast | groups:K | per-user (default broadcast)\n"
          "  --idle-shared          idle clients also subscribe to the broadcast/group channel\n"
          "  --channel-prefix S     channel names start with S: (default lg)\n"
          "  --publish-via MODE     client (Publish frames, default) | http (POST\n"
          "                         /api/publish on the admin port; active clients only\n"
          "                         choose the channel and receive)\n"
          "  --admin-port N         herald's admin port for http (default 7401)\n"
          "  --api-key K            herald's admin API key for http\n"
          "  --http-conns N         keep-alive admin connections per thread (default 4)\n"
          "\n"
          "Time (a bare number is seconds; ms, s, m, h):\n"
          "  --ramp-timeout D       longest wait for every client to be ready (default 60s)\n"
          "  --duration D           measured phase, starts once every client is ready (10s)\n"
          "  --drain D              longest wait for in-flight deliveries afterwards (3s)\n"
          "  --drop-at D            reconnect storm: at D into the measured phase, a fraction\n"
          "  --drop-fraction F      (default 0.5) of the clients drop and reconnect at once\n"
          "\n"
          "Tokens:\n"
          "  --secret S             sign HS256 tokens with the server's secret\n"
          "  --insecure             the server runs --insecure (tokens are not verified)\n"
          "  --token-ttl D          token lifetime (default 1h)\n"
          "\n"
          "Output and thresholds:\n"
          "  --json FILE            write the results as JSON (- for stdout)\n"
          "  --report FILE          write a self-contained HTML report: settings, results,\n"
          "                         latency over time, latency histogram, throughput,\n"
          "                         connections and errors (SVG charts, opens offline)\n"
          "  --max-p99 L            exit 1 when p99 latency exceeds L (e.g. 5ms, 250us):\n"
          "                         publish to the Push processed by loadgen\n"
          "  --max-arrival-p99 L    the same for p99 latency to the Push's arrival in\n"
          "                         loadgen's socket (kernel receive timestamp)\n"
          "  --max-loss P           exit 1 when lost deliveries exceed P percent (e.g. 0)\n"
          "  --progress MODE        auto | tty | plain | none (default auto: a live line on a\n"
          "                         terminal, redrawn 4 times a second with the time left;\n"
          "                         one plain line per second otherwise)\n"
          "  --quiet                no summary table\n"
          "  -h, --help             this text\n",
          out);
}
