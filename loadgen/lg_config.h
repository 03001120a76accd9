/*
 * lg_config: herald-loadgen's settings and their command-line parser.
 *
 * Every setting has a default that makes `herald-loadgen` alone a small, short run against a
 * herald on 127.0.0.1:7400. Everything is bounded: client counts by the descriptor limit, run
 * time by --ramp-timeout + --duration + --drain, targets and source addresses by 127.0.0.0/8
 * (or ::1): herald-loadgen refuses to send traffic anywhere but the local host.
 *
 * Values: durations take a unit ("500ms", "10s", "2m"; a bare number is seconds), latencies
 * take fractional values ("0.5ms", "250us", "5ms"), sizes take "k" (1024) and "m".
 *
 * Thread: lg_config_parse uses getopt_long's globals: call it once, on the main thread, before
 * any thread starts. Afterwards the struct is read-only and shared by every thread.
 * Ownership: lg_config_t holds fixed-size arrays, no pointers; nothing to free.
 * Usage: lg_config_t cfg; rc = lg_config_parse(&cfg, argc, argv, stderr);
 *        if (rc == LG_CONFIG_HELP) { lg_config_usage(stdout); exit(0); }
 */
#ifndef HERALD_LOADGEN_LG_CONFIG_H
#define HERALD_LOADGEN_LG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_transport.h"

#define LG_HOST_MAX 64             /* a numeric address, NUL included */
#define LG_SOURCES_MAX 256         /* --sources addresses */
#define LG_SECRET_MAX 512          /* --secret bytes, NUL included */
#define LG_PREFIX_MAX 32           /* --channel-prefix bytes, NUL included */
#define LG_PATH_MAX 4096           /* --json and --report paths */
#define LG_THREADS_MAX 64          /* --threads */
#define LG_GROUPS_MAX 100000       /* groups:K */
#define LG_PAYLOAD_MIN 8           /* the send timestamp */
#define LG_PAYLOAD_MAX (60 * 1024) /* under herald's default 64 KiB frame limit */
/* herald's default per-connection publish limit (PROTOCOL.md section 13): a bucket of this
 * many publishes, refilled at this many a second; past it, Error{RATE_LIMITED}. */
#define LG_HERALD_PUBLISH_BURST 200
#define LG_HERALD_PUBLISH_RATE 100

/* Which channel an active client publishes to, and what the fleet subscribes to. */
typedef enum lg_pattern_e {
    LG_PATTERN_BROADCAST = 0, /* everyone publishes to <prefix>:all; active clients subscribe */
    LG_PATTERN_GROUPS = 1,    /* client i is in group i % K: <prefix>:g:<k> */
    LG_PATTERN_PER_USER = 2,  /* publish to a random client's own channel <prefix>:u:<id> */
} lg_pattern_t;

/* What lg_config_parse found besides settings. */
typedef enum lg_config_action_e {
    LG_CONFIG_RUN = 0,
    LG_CONFIG_HELP = 1,
} lg_config_action_t;

typedef struct lg_config_s {
    char host[LG_HOST_MAX];        /* default "127.0.0.1" */
    uint16_t port;                 /* default 7400 */
    lg_transport_kind_t transport; /* --transport tcp|ws|tls|wss; default tcp */
    char tls_ca[LG_PATH_MAX];      /* --tls-ca FILE: CA certificates to trust; "": the system's */
    char tls_server_name[LG_TRANSPORT_NAME_MAX]; /* --tls-server-name; "": --host */
    bool is_tls_insecure;                        /* --tls-insecure: no certificate checks */
    uint32_t idle_count;                         /* --idle; default 0 */
    uint32_t active_count;                       /* --active; default 0 */
    uint32_t threads;                            /* --threads; default 1 */
    uint32_t connect_rate; /* --connect-rate, new connections per second in total; 0: no ramp */
    uint32_t id_base;      /* --id-base: first client id, so several processes do not collide */
    char sources[LG_SOURCES_MAX][LG_HOST_MAX]; /* --sources; none: the kernel picks */
    uint32_t source_count;

    /* Publishing. Exactly one of rate_per_client and total_rate is used (the other is 0). */
    double rate_per_client; /* --rate, publishes per second per active client */
    double total_rate;      /* --total-rate, publishes per second over all active clients */
    uint32_t payload_bytes; /* --size; default 64, at least LG_PAYLOAD_MIN */
    lg_pattern_t pattern;   /* --pattern; default broadcast */
    uint32_t group_count;   /* K of groups:K */
    bool is_idle_shared;    /* --idle-shared: idle clients also join the pattern's channel */
    char channel_prefix[LG_PREFIX_MAX]; /* --channel-prefix; default "lg" */

    /* --publish-via http: publish through herald's admin API instead of client frames. */
    bool is_publish_http;
    uint16_t admin_port;         /* --admin-port; default 7401 (same host as --host) */
    char api_key[LG_SECRET_MAX]; /* --api-key: herald's admin API key */
    uint32_t http_conns;         /* --http-conns: keep-alive connections per thread; 4 */

    /* Time, in milliseconds. */
    uint64_t duration_ms;        /* --duration: the measured phase; default 10 s */
    uint64_t ramp_timeout_ms;    /* --ramp-timeout: longest wait for every client; default 60 s */
    uint64_t drain_ms;           /* --drain: longest wait for in-flight deliveries; default 3 s */
    uint64_t connect_timeout_ms; /* --connect-timeout; default 5 s */

    /* Reconnect storm: at drop_at_ms into the measured phase, drop_fraction of the clients
     * close their connection and reconnect at once. 0: no storm. */
    uint64_t drop_at_ms;  /* --drop-at */
    double drop_fraction; /* --drop-fraction; default 0.5 when --drop-at is given */

    /* Tokens. */
    bool is_insecure;           /* --insecure: the server does not check signatures */
    char secret[LG_SECRET_MAX]; /* --secret; required unless --insecure */
    uint64_t token_ttl_s;       /* --token-ttl; default 1 h */

    /* Output and thresholds. */
    char json_path[LG_PATH_MAX];   /* --json FILE; "" for none, "-" for stdout */
    char report_path[LG_PATH_MAX]; /* --report FILE.html; "" for none */
    bool has_max_p99;
    uint64_t max_p99_ns; /* --max-p99: publish to processed */
    bool has_max_arrival_p99;
    uint64_t max_arrival_p99_ns; /* --max-arrival-p99: publish to arrival in the socket */
    bool has_max_loss;
    double max_loss_pct; /* --max-loss, percent of expected deliveries */
    int progress;        /* --progress auto|tty|plain|none: LG_PROGRESS_* */
    bool is_quiet;       /* --quiet: no summary table (the JSON still goes out) */
} lg_config_t;

enum { LG_PROGRESS_AUTO = 0, LG_PROGRESS_TTY, LG_PROGRESS_PLAIN, LG_PROGRESS_NONE };

/* Fills cfg with the defaults listed above. Thread: any. */
void lg_config_init(lg_config_t *cfg);

/* Parses argv[1..argc) over the defaults and validates the result (loopback targets only,
 * counts within bounds, a secret unless --insecure). Every problem is printed to err.
 * Returns: 0 with *action set; -EINVAL after printing what was wrong.
 * Thread: main thread, before any other starts (getopt's globals). */
int lg_config_parse(lg_config_t *cfg, int argc, char *const *argv, FILE *err,
                    lg_config_action_t *action);

/* Prints the --help text. Thread: any. */
void lg_config_usage(FILE *out);

/* Total clients (idle + active). Thread: any. */
static inline uint32_t lg_config_clients(const lg_config_t *cfg)
{
    return cfg->idle_count + cfg->active_count;
}

/* Publishes per second over the whole fleet (from --rate or --total-rate). Thread: any. */
double lg_config_fleet_rate(const lg_config_t *cfg);

/* Returns the pattern as text ("broadcast", "groups:8", "per-user") in buf. Thread: any. */
const char *lg_config_pattern_str(const lg_config_t *cfg, char *buf, size_t len);

/* Tells whether a numeric address is a loopback address (127.0.0.0/8 or ::1). Thread: any. */
bool lg_config_is_loopback(const char *host);

#endif
