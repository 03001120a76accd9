/*
 * test_gw_redis_failover: a Redis failover through Sentinel under load, with real processes
 * (tests/failover_run.c): a master and a replica, three redis-sentinels, two herald nodes, a
 * steady publisher on a history channel and a subscriber on each node. The master is killed
 * with SIGKILL:
 *   - the nodes follow the new master within the sentinels' failover time (SIGKILL to
 *     +switch-master) plus a second (three under a sanitizer, whose herald is slower), and
 *     publishes are given offsets again;
 *   - every acknowledged publish is, at each subscriber, either received under the offset it
 *     was given or covered by a "cannot recover" the subscriber was told (a refused recovery
 *     or an epoch change); gaps are recovered from history; no payload arrives under two
 *     offsets, no offset carries two payloads, none arrives twice;
 *   - then the old master comes back (empty) and Sentinel makes it a replica: nothing changes
 *     for the clients (no report, no gap, no reconnect, no further failover).
 * And once with the replica behind: the master drops the replica's connection (and refuses
 * its return) 100 ms before the kill, so the new master lacks the last acknowledged messages,
 * which the subscribers had received. The nodes' fences start the channel's epoch over, so
 * those offsets are not given to new messages: every subscriber sees the epoch change (one
 * report), still misses nothing acknowledged, and no offset carries two payloads.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "failover_run.h"
#include "herald_harness.h"
#include "redis_harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FOLLOW_SLACK_MS 3000
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FOLLOW_SLACK_MS 3000
#endif
#endif
#ifndef FOLLOW_SLACK_MS
#define FOLLOW_SLACK_MS 1000
#endif

static void print_result(const fo_result_t *r)
{
    fprintf(stderr,
            "failover: +switch-master %" PRId64 " ms after SIGKILL; nodes ready %" PRId64
            " / %" PRId64 " ms; first publish given an offset %" PRId64
            " ms; old master a replica %" PRId64 " ms after its restart\n",
            r->switch_ms, r->ready_ms[0], r->ready_ms[1], r->first_accepted_ms,
            r->old_master_back_ms);
    fprintf(stderr,
            "publishes: %" PRIu64 " sent, %" PRIu64 " given an offset (%" PRIu64
            " after the kill), %" PRIu64 " local only, %" PRIu64 " BUSY (sent again), %" PRIu64
            " failed in flight; epoch resets %.0f\n",
            r->published, r->acked, r->acked_after_kill, r->local_only, r->refused, r->unknown,
            r->epoch_resets);
    for (int i = 0; i < 2; i++) {
        const fo_sub_t *s = &r->sub[i];
        fprintf(stderr,
                "subscriber %c: %" PRIu64 " received (%" PRIu64 " of the acknowledged), %" PRIu64
                " told it cannot recover them, %" PRIu64 " missing; gaps recovered %" PRIu64
                ", reports %" PRIu64 ", offset 0 %" PRIu64 ", duplicates %" PRIu64 "\n",
                'a' + i, s->received, s->acked_received, s->acked_reported, s->acked_missing,
                s->gaps_recovered, s->reports, s->unsequenced, s->duplicates);
    }
}

static void test_gw_redis_failover_sigkill(void **state)
{
    (void)state;
    fo_opts_t o = {.rate_per_s = 200,
                   .before_ms = 1000,
                   .after_ms = 1000,
                   .is_old_master_back = true,
                   .is_verbose = true};
    fo_result_t r;
    int rc = fo_run(&o, &r);
    print_result(&r);
    if (rc < 0)
        fail_msg("the cluster did not start: %s: %s", strerror(-rc), r.problem);
    if (r.problem[0])
        fail_msg("%s", r.problem);
    assert_true(r.switch_ms >= 1000); /* down-after-milliseconds */
    for (int i = 0; i < 2; i++) {
        if (r.ready_ms[i] > r.switch_ms + FOLLOW_SLACK_MS)
            fail_msg("node %c ready %" PRId64 " ms after SIGKILL, the switch after %" PRId64,
                     'a' + i, r.ready_ms[i], r.switch_ms);
        assert_true(r.failovers[i] == 1.0);
        assert_int_equal(r.sub[i].acked_missing, 0);
        assert_int_equal(r.sub[i].reused, 0);
        assert_int_equal(r.sub[i].twice, 0);
        assert_int_equal(r.sub[i].duplicates, 0);
        assert_true(r.sub[i].acked_received > 0);
    }
    assert_true(r.acked_after_kill > 0);
    assert_int_equal(r.local_only, 0); /* a history channel is never delivered outside it */
    assert_true(r.first_accepted_ms >= 0);
    assert_false(r.changed_at_old_master);
}

static void test_gw_redis_failover_replica_behind(void **state)
{
    (void)state;
    fo_opts_t o = {.rate_per_s = 200,
                   .before_ms = 1000,
                   .after_ms = 1000,
                   .is_replica_behind = true,
                   .is_verbose = true};
    fo_result_t r;
    int rc = fo_run(&o, &r);
    print_result(&r);
    if (rc < 0)
        fail_msg("the cluster did not start: %s: %s", strerror(-rc), r.problem);
    if (r.problem[0])
        fail_msg("%s", r.problem);
    /* 100 ms at 200/s: some twenty acknowledged publishes the new master never had. */
    assert_true(r.epoch_resets >= 1);
    assert_true(r.acked_after_kill > 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r.sub[i].acked_missing, 0);
        assert_int_equal(r.sub[i].reused, 0);
        assert_int_equal(r.sub[i].twice, 0);
        assert_int_equal(r.sub[i].duplicates, 0);
        assert_true(r.sub[i].reports >= 1); /* the epoch changed under it */
        if (r.ready_ms[i] > r.switch_ms + FOLLOW_SLACK_MS)
            fail_msg("node %c ready %" PRId64 " ms after SIGKILL, the switch after %" PRId64,
                     'a' + i, r.ready_ms[i], r.switch_ms);
    }
}

int main(void)
{
    if (!test_redis_available() || !test_sentinel_available()) {
        fprintf(stderr, "redis-server or redis-sentinel is not installed: "
                        "scripts/install-deps.sh installs them\n");
        return 1;
    }
    test_raise_nofile(4096);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_redis_failover_sigkill),
        cmocka_unit_test(test_gw_redis_failover_replica_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
