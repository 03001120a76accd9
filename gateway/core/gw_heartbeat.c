/*
 * gw_heartbeat: the per-loop deadline wheel. See gw_heartbeat.h.
 *
 * The timer repeats at the wheel's tick for as long as the loop lives, even with no session:
 * one wake-up per second at most on an idle loop, and in exchange no start/stop bookkeeping
 * on every accept and close.
 *
 * Exact deadlines (gw_heartbeat_at) are the few a promise ties to the clock: the wheel hands
 * them over a tick or two early, and a heap with one one-shot timer takes them the rest of the
 * way. The heap holds only deadlines that close, so it stays small whatever the connections.
 */
#include "gw_heartbeat.h"

#include <errno.h>
#include <stdlib.h>

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

/* --- exact deadlines: a binary min-heap on at_ms -------------------------------------------- */

static void exact_swap(gw_heartbeat_at_t *a, gw_heartbeat_at_t *b)
{
    gw_heartbeat_at_t t = *a;
    *a = *b;
    *b = t;
}

static void exact_pop(gw_heartbeat_t *hb)
{
    gw_heartbeat_at_t *h = hb->exact;
    h[0] = h[--hb->n_exact];
    for (uint32_t i = 0;;) {
        uint32_t l = 2 * i + 1;
        uint32_t m = i;
        if (l < hb->n_exact && h[l].at_ms < h[m].at_ms)
            m = l;
        if (l + 1 < hb->n_exact && h[l + 1].at_ms < h[m].at_ms)
            m = l + 1;
        if (m == i)
            break;
        exact_swap(&h[i], &h[m]);
        i = m;
    }
}

/* Arms the one-shot timer for the heap's top, unless it already is armed for it. */
static void exact_arm(gw_heartbeat_t *hb)
{
    if (hb->n_exact == 0) {
        nl_timer_stop(hb->exact_timer);
        hb->exact_armed_ms = 0;
        return;
    }
    uint64_t at_ms = hb->exact[0].at_ms;
    if (hb->exact_armed_ms == at_ms && nl_timer_is_active(hb->exact_timer))
        return;
    uint64_t now_ms = nl_loop_now_ms(hb->loop);
    (void)nl_timer_start(hb->exact_timer, at_ms > now_ms ? at_ms - now_ms : 0, 0);
    hb->exact_armed_ms = at_ms;
}

static void exact_on_fire(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_heartbeat_t *hb = arg;
    hb->exact_armed_ms = 0;
    uint64_t now_ms = nl_loop_now_ms(hb->loop);
    /* A callback may add deadlines (a fresh one is never due now: it re-enters the heap and
     * waits for its own time), so the top is read again after each. */
    while (hb->n_exact > 0 && hb->exact[0].at_ms <= now_ms) {
        uint64_t id = hb->exact[0].id;
        exact_pop(hb);
        hb->on_exact(id, hb->arg);
    }
    exact_arm(hb);
}

int gw_heartbeat_at(gw_heartbeat_t *hb, uint64_t at_ms, uint64_t id)
{
    if (!hb->on_exact)
        return -EINVAL;
    if (!hb->exact_timer) {
        int err = nl_timer_new(&hb->exact_timer, hb->loop, exact_on_fire, hb);
        if (err < 0) {
            hb->exact_timer = NULL;
            return err;
        }
    }
    if (hb->n_exact == hb->cap_exact) {
        uint32_t cap = hb->cap_exact ? hb->cap_exact * 2 : 16;
        gw_heartbeat_at_t *h = realloc(hb->exact, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        hb->exact = h;
        hb->cap_exact = cap;
    }
    uint32_t i = hb->n_exact++;
    hb->exact[i] = (gw_heartbeat_at_t){.at_ms = at_ms, .id = id};
    while (i > 0 && hb->exact[(i - 1) / 2].at_ms > hb->exact[i].at_ms) {
        exact_swap(&hb->exact[(i - 1) / 2], &hb->exact[i]);
        i = (i - 1) / 2;
    }
    exact_arm(hb);
    return 0;
}

/* --- the wheel ------------------------------------------------------------------------------ */

int gw_heartbeat_init(gw_heartbeat_t *hb, nl_loop_t *loop, uint32_t tick_ms, uint64_t horizon_ms,
                      gw_heartbeat_expire_cb on_expire, gw_heartbeat_exact_cb on_exact, void *arg)
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
    hb->on_exact = on_exact;
    hb->arg = arg;
    hb->timer = NULL;
    hb->exact = NULL;
    hb->n_exact = hb->cap_exact = 0;
    hb->exact_timer = NULL;
    hb->exact_armed_ms = 0;
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
    if (hb->exact_timer) {
        nl_timer_close(hb->exact_timer, NULL);
        hb->exact_timer = NULL;
    }
    free(hb->exact);
    hb->exact = NULL;
    hb->n_exact = hb->cap_exact = 0;
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
