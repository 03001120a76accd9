/*
 * gw_drain: one IO loop's spread-out disconnects. See gw_drain.h for the schedule.
 *
 * Why by connection id and not by walking the wheel at each tick: the wheel is also the
 * loop's deadline list, and telling a session to go moves its entry (the linger deadline),
 * which a walk must not do. A list made once at the start also fixes each session's turn, so
 * sessions that close by themselves meanwhile do not pull the others' turns earlier.
 */
#include "gw_drain.h"

#include <errno.h>
#include <stdlib.h>

#include "gw_node_int.h"
#include "gw_session.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define DRAIN_WAVES 100
#define DRAIN_TICK_MIN_MS 10
#define DRAIN_TICK_MAX_MS 1000

uint64_t gw_drain_tick_ms(uint64_t window_ms)
{
    uint64_t tick = window_ms / DRAIN_WAVES;
    if (tick < DRAIN_TICK_MIN_MS)
        tick = DRAIN_TICK_MIN_MS;
    if (tick > DRAIN_TICK_MAX_MS)
        tick = DRAIN_TICK_MAX_MS;
    return tick;
}

/* Tells every session of the loop not yet closing, now: the sweep after the list, and the
 * fallback when the list could not be made. */
static void drain_sweep(gw_loop_t *lp)
{
    size_t n = gw_heartbeat_count(&lp->hb);
    uint64_t *ids = n ? malloc(n * sizeof(*ids)) : NULL;
    if (n && !ids) {
        /* No memory even for this: close them as a stop would, without the linger. */
        gw_session_close_all(lp);
        return;
    }
    n = gw_session_list(lp, ids, n);
    for (size_t i = 0; i < n; i++)
        (void)gw_session_drain(lp, ids[i]);
    free(ids);
}

static void drain_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_loop_t *lp = arg;
    gw_drain_t *d = &lp->drain;
    uint64_t elapsed_ms = nl_loop_now_ms(lp->fo.loop) - d->start_ms;
    /* Session i goes at (i + 1/2) * window / n: evenly spaced, the first half a spacing in
     * and the last half a spacing before the end. No overflow: at most 10^7 sessions times a
     * window of at most an hour in ms. */
    uint64_t due = (d->n_ids * elapsed_ms + d->window_ms / 2) / d->window_ms;
    if (due > d->n_ids)
        due = d->n_ids;
    while (d->next < due)
        (void)gw_session_drain(lp, d->ids[d->next++]);
    if (d->next < d->n_ids)
        return;
    if (!d->is_swept) {
        d->is_swept = true;
        drain_sweep(lp);
    }
    /* Told sessions leave as their clients hang up, or when their linger ends. */
    if (gw_heartbeat_count(&lp->hb) > 0)
        return;
    gw_drain_done_cb done = d->on_drained;
    gw_drain_stop(lp);
    done(lp);
}

int gw_drain_start(gw_loop_t *lp, uint64_t window_ms, gw_drain_done_cb on_drained)
{
    gw_drain_t *d = &lp->drain;
    if (d->timer)
        return -EALREADY;
    int err = nl_timer_new(&d->timer, lp->fo.loop, drain_on_tick, lp);
    if (err < 0)
        return err;
    d->window_ms = window_ms;
    d->start_ms = nl_loop_now_ms(lp->fo.loop);
    d->on_drained = on_drained;
    d->next = 0;
    d->is_swept = false;
    size_t n = gw_heartbeat_count(&lp->hb);
    d->ids = n ? malloc(n * sizeof(*d->ids)) : NULL;
    if (n && !d->ids) {
        NL_LOG(NL_WARN, "drain_list_failed", "sessions=%zu err=%s", n, nl_strerror(-ENOMEM));
        d->n_ids = 0; /* the first tick sweeps: everyone at once */
    } else {
        d->n_ids = gw_session_list(lp, d->ids, n);
    }
    uint64_t tick_ms = gw_drain_tick_ms(window_ms);
    (void)nl_timer_start(d->timer, tick_ms, tick_ms);
    return 0;
}

void gw_drain_stop(gw_loop_t *lp)
{
    gw_drain_t *d = &lp->drain;
    if (d->timer) {
        nl_timer_close(d->timer, NULL);
        d->timer = NULL;
    }
    free(d->ids);
    d->ids = NULL;
    d->n_ids = 0;
    d->next = 0;
    d->on_drained = NULL;
}
