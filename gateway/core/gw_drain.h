/*
 * gw_drain: one IO loop's share of a graceful drain (SIGTERM with [server] drain > 0): its
 * sessions are told Disconnect{SHUTDOWN, reconnect} a few at a time, spread evenly over the
 * drain window, so that they reconnect elsewhere through the load balancer without arriving
 * all at once.
 *
 * At gw_drain_start the loop lists its sessions by connection id (those not already closing)
 * and starts a repeating timer, a hundredth of the window (10 ms to 1 s). Each tick tells the
 * sessions whose turn has come by elapsed time: session i of n at (i + 1/2) * window / n, so
 * the first goes half a spacing into the window and the last half a spacing before its end
 * (a tick late at most). A late tick catches up rather than shifting the schedule.
 * Each session closes gracefully (gw_session_drain): the Disconnect queued behind whatever
 * output it still has, then a half-close and a short linger for the client to hang up. An id
 * that closed meanwhile is skipped. Sessions not on the list (none are expected: the listener
 * closed before the list was made, and a loop refuses connections while draining) are told in
 * one sweep when the list is done. Once the list is done and the loop has no session left,
 * on_drained runs once, on the loop, and the timer stops.
 *
 * Until its turn, a session carries on as before: it receives what is published, answers
 * requests, may subscribe.
 *
 * Thread: the loop's own, for every function. Ownership: gw_drain_t is embedded in the
 * gw_loop_t; gw_drain_stop frees what it holds.
 */
#ifndef HERALD_GATEWAY_GW_DRAIN_H
#define HERALD_GATEWAY_GW_DRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_timer.h"

typedef struct gw_loop_s gw_loop_t;

/* The loop has told every session and none is left. Runs on the loop's thread. */
typedef void (*gw_drain_done_cb)(gw_loop_t *lp);

typedef struct gw_drain_s {
    nl_timer_t *timer; /* the waves; NULL when not draining */
    uint64_t *ids;     /* connection ids listed at the start */
    size_t n_ids;
    size_t next;       /* ids[0 .. next) have been told */
    uint64_t start_ms; /* the loop's clock at the start */
    uint64_t window_ms;
    bool is_swept; /* the sweep after the list ran */
    gw_drain_done_cb on_drained;
} gw_drain_t;

/* Lists lp's sessions and starts telling them over window_ms (> 0); on_drained runs once the
 * loop is empty (possibly from a tick long after). Without memory for the list, the sessions
 * are told at once (logged).
 * Returns: 0; -EALREADY (draining); -ENOMEM (no timer: nothing started). Thread: lp's. */
int gw_drain_start(gw_loop_t *lp, uint64_t window_ms, gw_drain_done_cb on_drained);

/* Stops the waves and frees the list (the node is stopping at once). Idempotent; on_drained
 * will not run. Thread: lp's. */
void gw_drain_stop(gw_loop_t *lp);

/* The tick for a window: a hundredth of it, within 10 ms .. 1 s. Thread: any. */
uint64_t gw_drain_tick_ms(uint64_t window_ms);

#endif
