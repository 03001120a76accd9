/*
 * gw_heartbeat: the per-loop deadline wheel. See gw_heartbeat.h.
 *
 * The timer repeats at the wheel's tick for as long as the loop lives, even with no session:
 * one wake-up per second at most on an idle loop, and in exchange no start/stop bookkeeping
 * on every accept and close.
 */
#include "gw_heartbeat.h"

#include <errno.h>

#include "netlib/nl_common.h"

/* Bounds for the tick: finer costs wake-ups, coarser makes deadlines late. */
#define HB_TICK_MIN_MS 10u
#define HB_TICK_MAX_MS 1000u
/* Never fewer slots than this, so short timeouts do not all share a handful of slots. */
#define HB_SLOTS_MIN 64u
/* Past this many slots, entries wait extra rounds instead (re-filing is cheap). */
#define HB_SLOTS_MAX 4096u

uint32_t gw_heartbeat_tick_ms(uint64_t shortest_timeout_ms)
{
    uint64_t tick = shortest_timeout_ms / 8;
    if (tick < HB_TICK_MIN_MS)
        tick = HB_TICK_MIN_MS;
    if (tick > HB_TICK_MAX_MS)
        tick = HB_TICK_MAX_MS;
    return (uint32_t)tick;
}

static void hb_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_heartbeat_t *hb = arg;
    nl_wheel_advance(&hb->wheel, nl_loop_now_ms(hb->loop));
}

static void hb_on_expire(nl_wheel_t *w, nl_wheel_entry_t *e, void *arg)
{
    NL_UNUSED(w);
    gw_heartbeat_t *hb = arg;
    hb->on_expire(e, hb->arg);
}

int gw_heartbeat_init(gw_heartbeat_t *hb, nl_loop_t *loop, uint32_t tick_ms, uint64_t horizon_ms,
                      gw_heartbeat_expire_cb on_expire, void *arg)
{
    if (tick_ms == 0 || on_expire == NULL)
        return -EINVAL;
    uint64_t slots = horizon_ms / tick_ms + 1;
    if (slots < HB_SLOTS_MIN)
        slots = HB_SLOTS_MIN;
    if (slots > HB_SLOTS_MAX)
        slots = HB_SLOTS_MAX;
    hb->loop = loop;
    hb->on_expire = on_expire;
    hb->arg = arg;
    hb->timer = NULL;
    int err =
        nl_wheel_init(&hb->wheel, tick_ms, (uint32_t)slots, hb_on_expire, hb, nl_loop_now_ms(loop));
    if (err < 0)
        return err;
    err = nl_timer_new(&hb->timer, loop, hb_on_tick, hb);
    if (err < 0)
        goto fail_wheel;
    err = nl_timer_start(hb->timer, tick_ms, tick_ms);
    if (err < 0)
        goto fail_timer;
    return 0;
fail_timer:
    nl_timer_close(hb->timer, NULL);
    hb->timer = NULL;
fail_wheel:
    nl_wheel_deinit(&hb->wheel);
    return err;
}

void gw_heartbeat_deinit(gw_heartbeat_t *hb)
{
    if (hb->timer) {
        nl_timer_close(hb->timer, NULL);
        hb->timer = NULL;
    }
    nl_wheel_deinit(&hb->wheel);
}

void gw_heartbeat_set(gw_heartbeat_t *hb, nl_wheel_entry_t *e, uint64_t deadline_ms)
{
    /* nl_wheel_refresh files an earlier deadline again and a later one with a store. */
    nl_wheel_refresh(&hb->wheel, e, deadline_ms);
}

/* The wheel's slots are circular lists with a sentinel head (nl_wheel.h documents the layout
 * of nl_wheel_t); walking them reads the links and changes nothing. */
void gw_heartbeat_foreach(gw_heartbeat_t *hb, void (*fn)(nl_wheel_entry_t *e, void *arg), void *arg)
{
    nl_wheel_t *w = &hb->wheel;
    for (uint32_t i = 0; i < w->slot_count; i++) {
        nl_wheel_entry_t *head = &w->slots[i];
        for (nl_wheel_entry_t *e = head->next; e != head;) {
            nl_wheel_entry_t *next = e->next;
            fn(e, arg);
            e = next;
        }
    }
}
