/*
 * herald-loadgen: simulates idle and active herald clients and measures what a deployment
 * needs to know: connects per second, publish-to-deliver latency, deliveries per second, lost
 * and duplicate messages, disconnects, and whether the generator itself kept up.
 *
 * main only checks the environment (descriptor limit, ephemeral ports), runs the fleet and
 * turns the result into output and an exit status: 0 ok, 1 an SLO was broken, 2 bad
 * arguments or setup, 3 the run failed (nothing connected, every client lost during the
 * measured phase, or a thread could not start).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lg_config.h"
#include "lg_fleet.h"
#include "lg_html.h"
#include "lg_report.h"
#include "lg_timeline.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

enum { EXIT_SLO = 1, EXIT_USAGE = 2, EXIT_RUN_FAILED = 3 };

/* Descriptors beyond the clients: each loop's epoll, eventfd and timerfd, stdio, the JSON. */
#define FDS_PER_THREAD 8
#define FDS_SPARE 64

/* Raises the soft descriptor limit to what the fleet needs, or says exactly what to raise. */
static int ensure_fd_limit(const lg_config_t *cfg)
{
    uint64_t http = cfg->is_publish_http ? (uint64_t)cfg->threads * cfg->http_conns : 0;
    uint64_t need = (uint64_t)lg_config_clients(cfg) + http +
                    (uint64_t)cfg->threads * FDS_PER_THREAD + FDS_SPARE;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        uint64_t fit = rl.rlim_max > need - lg_config_clients(cfg)
                           ? rl.rlim_max - (need - lg_config_clients(cfg))
                           : 0;
        fprintf(stderr,
                "herald-loadgen: %u clients need about %llu descriptors, but this process may "
                "hold at most %llu (the hard RLIMIT_NOFILE). Raise the hard limit (ulimit -Hn as "
                "root, LimitNOFILE= in a systemd unit, nofile in /etc/security/limits.conf), or "
                "split the fleet over several herald-loadgen processes of at most %llu clients "
                "each, with disjoint --id-base ranges.\n",
                lg_config_clients(cfg), (unsigned long long)need, (unsigned long long)rl.rlim_max,
                (unsigned long long)fit);
        return -EMFILE;
    }
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        int err = -errno;
        fprintf(stderr, "herald-loadgen: cannot raise the descriptor limit to %llu: %s\n",
                (unsigned long long)need, nl_strerror(err));
        return err;
    }
    return 0;
}

/* Warns when one source address would need more ephemeral ports than the kernel hands out
 * towards a single destination. */
static void check_ports(const lg_config_t *cfg)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    unsigned lo = 0;
    unsigned hi = 0;
    if (!f)
        return;
    int n = fscanf(f, "%u %u", &lo, &hi);
    fclose(f);
    if (n != 2 || hi < lo)
        return;
    unsigned ports = hi - lo + 1;
    unsigned sources = cfg->source_count ? cfg->source_count : 1;
    unsigned per_source = (lg_config_clients(cfg) + sources - 1) / sources;
    if (per_source > ports)
        fprintf(stderr,
                "herald-loadgen: warning: %u connections per source address exceed the %u "
                "ephemeral ports (%u-%u) towards one destination; give --sources, e.g. "
                "--sources 127.0.0.2-127.0.0.%u\n",
                per_source, ports, lo, hi, 1 + (lg_config_clients(cfg) + ports - 1) / ports);
}

/* Warns when each active client is to publish faster than herald lets one connection by
 * default: past the burst most of its publishes would be refused RATE_LIMITED, and the run
 * would measure the limit, not the server. */
static void check_publish_rate(const lg_config_t *cfg)
{
    if (cfg->is_publish_http || cfg->active_count == 0)
        return;
    double fleet = lg_config_fleet_rate(cfg);
    double per_client = fleet / cfg->active_count;
    if (per_client <= LG_HERALD_PUBLISH_RATE)
        return;
    unsigned long long clients = (unsigned long long)(fleet / LG_HERALD_PUBLISH_RATE);
    if ((double)clients * LG_HERALD_PUBLISH_RATE < fleet)
        clients++;
    fprintf(stderr,
            "herald-loadgen: warning: %.0f publishes/s per active client is above herald's "
            "default per-connection limit (%d/s after a burst of %d; PROTOCOL.md section 13): "
            "past the burst most publishes are answered RATE_LIMITED. Start herald with "
            "--publish-rate 0 (or at least %.0f), or spread the rate over more --active clients "
            "(at least %llu).\n",
            per_client, LG_HERALD_PUBLISH_RATE, LG_HERALD_PUBLISH_BURST, per_client, clients);
}

static int run(const lg_config_t *cfg)
{
    lg_result_t *r = calloc(1, sizeof(*r));
    if (!r) {
        fprintf(stderr, "herald-loadgen: out of memory\n");
        return EXIT_RUN_FAILED;
    }
    int rc = lg_fleet_run(cfg, r);
    if (rc < 0) {
        fprintf(stderr, "herald-loadgen: run failed: %s\n", nl_strerror(rc));
        lg_timeline_free(r->timeline);
        free(r);
        return EXIT_RUN_FAILED;
    }
    if (!cfg->is_quiet)
        lg_report_summary(stdout, cfg, r);
    int status = 0;
    if (cfg->json_path[0]) {
        rc = lg_report_json(cfg, r);
        if (rc < 0) {
            fprintf(stderr, "herald-loadgen: cannot write %s: %s\n", cfg->json_path,
                    nl_strerror(rc));
            status = EXIT_RUN_FAILED;
        }
    }
    if (cfg->report_path[0]) {
        rc = lg_html_write(cfg, r);
        if (rc < 0) {
            fprintf(stderr, "herald-loadgen: cannot write %s: %s\n", cfg->report_path,
                    nl_strerror(rc));
            status = EXIT_RUN_FAILED;
        } else {
            fprintf(stderr, "herald-loadgen: report written to %s\n", cfg->report_path);
        }
    }
    if (!lg_report_slo_ok(stderr, cfg, r) && status == 0)
        status = EXIT_SLO;
    if (r->is_failed)
        status = EXIT_RUN_FAILED;
    lg_timeline_free(r->timeline);
    free(r);
    return status;
}

int main(int argc, char **argv)
{
    lg_config_t cfg;
    lg_config_action_t action;
    lg_config_init(&cfg);
    if (lg_config_parse(&cfg, argc, argv, stderr, &action) < 0) {
        fprintf(stderr, "herald-loadgen: see --help\n");
        return EXIT_USAGE;
    }
    if (action == LG_CONFIG_HELP) {
        lg_config_usage(stdout);
        return 0;
    }
    /* netlib's own lines (stalls, EMFILE) stay visible; loadgen has no chatter of its own. */
    nl_log_set_level(NL_WARN);
    if (ensure_fd_limit(&cfg) < 0)
        return EXIT_USAGE;
    check_ports(&cfg);
    check_publish_rate(&cfg);
    return run(&cfg);
}
