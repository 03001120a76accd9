/*
 * bench_gw_failover: what a Redis failover through Sentinel costs herald's clients, in
 * figures (issue 27). Each run builds a fresh cluster (tests/failover_run.c: a master and a
 * replica, three redis-sentinels with down-after-milliseconds 1000, two herald nodes), publishes
 * --rate messages/s on a history channel from a client of node a, with a subscriber on each
 * node, kills the master with SIGKILL and measures:
 *   - SIGKILL to +switch-master (the sentinels' own failover time);
 *   - SIGKILL to each node's /readyz answering 200 again;
 *   - SIGKILL to the first publish given an offset again (the publisher sends a publish
 *     answered BUSY again at its next tick, so this is herald's delay, not a client's backoff);
 *   - publishes lost: acknowledged with an offset but not received by a subscriber, whether
 *     it was told it cannot recover them (an epoch change) or not (which must not happen);
 *     and publishes whose fate is unknown (answered with an error while in flight at the kill).
 * A benchmark, never a test: it prints figures (a run that breaks a promise says so).
 *
 * With --replica-behind the master drops its replica's connection 100 ms before the kill, so
 * the new master lacks what was acknowledged meanwhile: the channel starts a new epoch and
 * those messages are lost, with every subscriber told.
 *
 * Usage: bench_gw_failover [--runs N] [--rate R] [--before-ms MS] [--after-ms MS]
 *                          [--old-master-back] [--replica-behind] [--verbose] [--herald PATH]
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failover_run.h"
#include "herald_harness.h"

static int64_t lost(const fo_result_t *r, int i)
{
    return (int64_t)(r->sub[i].acked_reported + r->sub[i].acked_missing);
}

int main(int argc, char **argv)
{
    int runs = 3;
    fo_opts_t o = {.rate_per_s = 1000, .before_ms = 3000, .after_ms = 3000};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            o.rate_per_s = atoi(argv[++i]);
        else if (strcmp(argv[i], "--before-ms") == 0 && i + 1 < argc)
            o.before_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--after-ms") == 0 && i + 1 < argc)
            o.after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--old-master-back") == 0)
            o.is_old_master_back = true;
        else if (strcmp(argv[i], "--replica-behind") == 0)
            o.is_replica_behind = true;
        else if (strcmp(argv[i], "--verbose") == 0)
            o.is_verbose = true;
        else if (strcmp(argv[i], "--herald") == 0 && i + 1 < argc)
            setenv("TEST_HERALD_BIN", argv[++i], 1);
        else {
            fprintf(stderr,
                    "usage: %s [--runs N] [--rate R] [--before-ms MS] [--after-ms MS] "
                    "[--old-master-back] [--replica-behind] [--verbose] [--herald PATH]\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 100 || o.rate_per_s < 1 || o.rate_per_s > 20000)
        return 2;
    test_raise_nofile(4096);
    printf("bench_gw_failover: %d runs, %d publishes/s on a history channel, SIGKILL to the "
           "master\n",
           runs, o.rate_per_s);
    printf("%4s %9s %10s %10s %10s %9s %8s %7s %9s %9s %6s %s\n", "run", "switch_ms", "ready_a_ms",
           "ready_b_ms", "accept_ms", "acked", "busy", "unknown", "lost_a", "lost_b", "resets",
           "reports");
    int status = 0;
    for (int k = 1; k <= runs; k++) {
        fo_result_t r;
        int rc = fo_run(&o, &r);
        if (rc < 0) {
            fprintf(stderr, "run %d: setup failed: %s\n", k, r.problem);
            return 3;
        }
        printf("%4d %9" PRId64 " %10" PRId64 " %10" PRId64 " %10" PRId64 " %9" PRIu64 " %8" PRIu64
               " %7" PRIu64 " %4" PRId64 "/%-4" PRIu64 " %4" PRId64 "/%-4" PRIu64 " %6.0f %" PRIu64
               "/%" PRIu64 "\n",
               k, r.switch_ms, r.ready_ms[0], r.ready_ms[1], r.first_accepted_ms, r.acked,
               r.refused, r.unknown, lost(&r, 0), r.sub[0].acked_missing, lost(&r, 1),
               r.sub[1].acked_missing, r.epoch_resets, r.sub[0].reports, r.sub[1].reports);
        if (o.is_replica_behind)
            printf("     %" PRIu64 " acknowledged after the replica was cut off: received, not in "
                   "the new master's history\n",
                   r.unreplicated);
        if (o.is_old_master_back)
            printf("     old master a replica %" PRId64 " ms after its restart; %s\n",
                   r.old_master_back_ms,
                   r.changed_at_old_master ? "clients SAW it" : "clients saw nothing");
        if (r.problem[0]) {
            printf("     PROBLEM: %s\n", r.problem);
            status = 1;
        }
        fflush(stdout);
    }
    printf("lost_x = acknowledged publishes subscriber x did not receive / of which it was not "
           "told (must be 0); resets = channel epochs the nodes started over (the new master "
           "lacked what they had delivered); reports = epoch changes or refused recoveries each "
           "subscriber was told of\n");
    return status;
}
