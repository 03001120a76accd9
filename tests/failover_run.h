/*
 * failover_run: one Redis failover under load, with real processes, for the failover test
 * (tests/integration/test_gw_redis_failover.c asserts on it) and the failover benchmark
 * (bench/bench_gw_failover.c prints its figures).
 *
 * The cluster: a Redis master and one replica, three redis-sentinels watching them (quorum 2,
 * down-after-milliseconds 1000, failover-timeout 3000), two herald nodes on the Redis engine
 * that find the master through the sentinels. A publisher on node a publishes "p<seq>" on the
 * history channel h:live at a steady rate; one subscriber on each node follows the channel as
 * a careful client does: on a gap in offsets it recovers (Subscribe{recover} from its last
 * offset), and when recovery is refused or the epoch changes it records a report "cannot
 * recover after (epoch, offset)". Then the master is killed with SIGKILL: the run measures
 * when the sentinels announce the new master (+switch-master), when each node is ready again
 * and when a publish is first given an offset again. Optionally the old master then comes
 * back (empty, on its port), the sentinels make it a replica, and the run checks that nothing
 * changed for the clients meanwhile. Finally every acknowledged publish is looked for at each
 * subscriber: received under the offset it was given, or covered by a report, or missing.
 *
 * Thread: one run at a time, from one thread (it starts its own publisher and subscriber
 * threads and joins them). Every process it starts is stopped by PID before it returns. The
 * herald binary is the harness's (TEST_HERALD_BIN overrides it).
 */
#ifndef HERALD_TESTS_FAILOVER_RUN_H
#define HERALD_TESTS_FAILOVER_RUN_H

#include <stdbool.h>
#include <stdint.h>

typedef struct fo_opts_s {
    int rate_per_s;          /* publishes per second (one in flight at a time) */
    int before_ms;           /* publishing before the kill */
    int after_ms;            /* publishing after the nodes are ready again */
    bool is_old_master_back; /* restart the old master and wait until it is a replica */
    bool is_replica_behind;  /* cut the replica off the master 100 ms before the kill, so that
                              * the new master lacks the last acknowledged messages */
    bool is_verbose;         /* progress on stderr */
} fo_opts_t;

/* One subscriber's view. */
typedef struct fo_sub_s {
    uint64_t received;       /* Pushes with an offset, in order */
    uint64_t unsequenced;    /* Pushes with offset 0 (published while its node had no master) */
    uint64_t gaps_recovered; /* gaps filled by Subscribe{recover} */
    uint64_t reports;        /* "cannot recover" (a refused recovery or an epoch change) */
    uint64_t duplicates;     /* an offset at or below the last (must be 0) */
    uint64_t acked_received; /* acknowledged publishes it received */
    uint64_t acked_reported; /* ... it did not receive, covered by a report */
    uint64_t acked_missing;  /* ... neither (must be 0) */
    uint64_t reused;         /* an (epoch, offset) it received with another publish's payload */
    uint64_t twice;          /* a payload it received under two offsets (must be 0) */
} fo_sub_t;

typedef struct fo_result_s {
    int64_t switch_ms;          /* SIGKILL to the first +switch-master of a sentinel */
    int64_t ready_ms[2];        /* SIGKILL to /readyz 200 on node a, b */
    int64_t first_accepted_ms;  /* SIGKILL to the first publish given an offset again (after
                                 * one that was not: the outage as the publisher saw it) */
    int64_t old_master_back_ms; /* its restart to it being a replica that has synced */
    uint64_t published;         /* publishes sent, BUSY ones sent again counted each time */
    uint64_t acked;             /* answered with an offset */
    uint64_t acked_after_kill;  /* ... among those sent after the kill */
    uint64_t local_only;        /* answered with offset 0 (must be 0: a history channel) */
    uint64_t refused;           /* answered BUSY (no master: sent again) */
    uint64_t unknown;           /* answered with another error (in flight at the kill) */
    uint64_t unreplicated;      /* acknowledged between the replica's cut-off and the kill
                                 * (is_replica_behind): the new master lacks them */
    fo_sub_t sub[2];            /* node a's subscriber, node b's */
    double failovers[2];        /* herald_redis_failovers_total of node a, b */
    double epoch_resets;        /* herald_redis_epoch_resets_total, both nodes */
    bool changed_at_old_master; /* a report, gap, failover or reconnect while it came back */
    char problem[512];          /* the first thing that went wrong ("" when none) */
} fo_result_t;

/* Runs it. Returns: 0 (r describes the run; r->problem says what broke, if anything);
 * negative errno when the cluster could not be set up (r->problem says why). */
int fo_run(const fo_opts_t *o, fo_result_t *r);

#endif
