/*
 * gw_heartbeat: one IO loop's timing wheel for connection deadlines: the handshake timeout of
 * a connection that has not authenticated yet, the idle timeout of one that has, and the short
 * linger of one that is closing. A repeating nl_timer at the wheel's tick drives nl_wheel, so
 * 100k connections cost one timer, and "any frame counts as activity" is one store
 * (nl_wheel_refresh moving a deadline later).
 *
 * A token's expiry needs better than a tick (PROTOCOL.md promises the Disconnect within a
 * second of exp, and a 1 s tick plus its phase missed it): gw_heartbeat_at times a deadline
 * to the millisecond, for a wheel deadline that came a little early.
 *
 * Every session of the loop is in the wheel from its accept to its close, which makes the
 * wheel the loop's list of sessions as well: gw_heartbeat_foreach walks it (shutdown, drain)
 * without a per-session list link.
 *
 * Thread: the loop's owner only. Ownership: the caller owns the gw_heartbeat_t and the
 * entries (embedded in sessions); the wheel owns its slot array and the timer.
 * Usage: gw_heartbeat_init(&hb, loop, tick, horizon, on_expire, on_exact, arg); on accept
 *        gw_heartbeat_set(&hb, &s->idle, now + handshake); per frame gw_heartbeat_touch(...);
 *        on close gw_heartbeat_cancel; at loop stop gw_heartbeat_deinit.
 */
#ifndef HERALD_GATEWAY_GW_HEARTBEAT_H
#define HERALD_GATEWAY_GW_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_loop.h"
#include "netlib/nl_timer.h"
#include "netlib/nl_wheel.h"

/* An entry's deadline passed; it is already out of the wheel (re-add it to keep it). */
typedef void (*gw_heartbeat_expire_cb)(nl_wheel_entry_t *e, void *arg);

/* An exact deadline (gw_heartbeat_at) passed; id is what it was given. */
typedef void (*gw_heartbeat_exact_cb)(uint64_t id, void *arg);

/* An exact deadline: when, and for whom. */
typedef struct gw_heartbeat_at_s {
    uint64_t at_ms;
    uint64_t id;
} gw_heartbeat_at_t;

typedef struct gw_heartbeat_s {
    nl_wheel_t wheel;
    nl_timer_t *timer;
    nl_loop_t *loop;
    gw_heartbeat_expire_cb on_expire;
    gw_heartbeat_exact_cb on_exact;
    void *arg;
    /* Exact deadlines: a min-heap on at_ms, one one-shot timer armed at its top. */
    gw_heartbeat_at_t *exact;
    uint32_t n_exact;
    uint32_t cap_exact;
    nl_timer_t *exact_timer;
    uint64_t exact_armed_ms; /* what exact_timer is armed for; 0: not armed */
} gw_heartbeat_t;

/* Picks the wheel tick for a set of timeouts: an eighth of the shortest, between 10 ms and
 * 1 s, so a deadline fires at most 1/8 late for short timeouts and at most 1 s late otherwise.
 * Thread: any. */
uint32_t gw_heartbeat_tick_ms(uint64_t shortest_timeout_ms);

/* Sets up the wheel (enough slots for horizon_ms, the longest timeout) and starts its timer.
 * on_expire gets wheel entries, on_exact (may be NULL if gw_heartbeat_at is never used) exact
 * deadlines, both with arg. Returns: 0; -EINVAL; -ENOMEM. Thread: the loop's owner. */
int gw_heartbeat_init(gw_heartbeat_t *hb, nl_loop_t *loop, uint32_t tick_ms, uint64_t horizon_ms,
                      gw_heartbeat_expire_cb on_expire, gw_heartbeat_exact_cb on_exact, void *arg);

/* The wheel's tick: how late a wheel deadline may fire. */
static inline uint32_t gw_heartbeat_tick(const gw_heartbeat_t *hb)
{
    return hb->wheel.tick_ms;
}

/* Calls on_exact(id) when the loop clock reaches at_ms, within a millisecond or two rather
 * than the wheel's tick: for the few deadlines a promise ties to the clock (a token's expiry,
 * PROTOCOL.md section 8), handed over by a wheel deadline set a little before. Each call is
 * one callback; ids are names (a connection id), so one whose owner went meanwhile is simply
 * not found by the callback. Keep these to deadlines within a few ticks: each costs 16 bytes
 * until it fires. Returns: 0; -ENOMEM (the caller falls back on the wheel). Thread: owner. */
int gw_heartbeat_at(gw_heartbeat_t *hb, uint64_t at_ms, uint64_t id);

/* Closes the timer and frees the wheel; entries still in it are forgotten. Thread: owner. */
void gw_heartbeat_deinit(gw_heartbeat_t *hb);

/* Sets e's deadline to deadline_ms, earlier or later, adding e if it is not in the wheel. */
void gw_heartbeat_set(gw_heartbeat_t *hb, nl_wheel_entry_t *e, uint64_t deadline_ms);

/* Activity: moves e's deadline later (one store). e must be in the wheel or not, either way. */
static inline void gw_heartbeat_touch(gw_heartbeat_t *hb, nl_wheel_entry_t *e, uint64_t deadline_ms)
{
    nl_wheel_refresh(&hb->wheel, e, deadline_ms);
}

static inline void gw_heartbeat_cancel(gw_heartbeat_t *hb, nl_wheel_entry_t *e)
{
    nl_wheel_cancel(&hb->wheel, e);
}

/* Entries in the wheel (the loop's sessions). */
static inline size_t gw_heartbeat_count(const gw_heartbeat_t *hb)
{
    return hb->wheel.count;
}

/* Calls fn for every entry in the wheel. fn must not add, cancel or move entries (closing a
 * connection is fine: its entry leaves in on_close, after the walk). Thread: owner. */
void gw_heartbeat_foreach(gw_heartbeat_t *hb, void (*fn)(nl_wheel_entry_t *e, void *arg),
                          void *arg);

#endif
