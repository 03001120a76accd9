/*
 * nl_timer: timers on a per-loop binary min-heap ordered by (deadline_ms, seq), where seq is the
 * start order, so equal deadlines fire in the order the timers were started. The loop arms one
 * timerfd for the heap's earliest deadline (nl_loop.c) and calls nl__timer_run_due once per
 * iteration, after dispatching fds.
 *
 * Deadlines are computed from the loop's cached time (refreshed once per iteration), as libuv
 * does: a timer started late in a long iteration fires that much early, never late.
 */
#include "netlib/nl_timer.h"

#include <errno.h>
#include <stdlib.h>

#include "nl_loop_int.h"

#define TIMER_INACTIVE SIZE_MAX

struct nl_timer_s {
    nl_loop_t *loop;
    nl_timer_fire_cb cb;
    void *arg;
    nl_timer_close_cb close_cb;
    nl__deferred_t deferred;
    uint64_t deadline_ms;
    uint64_t repeat_ms;
    uint64_t seq;
    size_t heap_index; /* position in the heap, or TIMER_INACTIVE */
    bool is_closing;
};

static bool timer_less(const nl_timer_t *a, const nl_timer_t *b)
{
    if (a->deadline_ms != b->deadline_ms)
        return a->deadline_ms < b->deadline_ms;
    return a->seq < b->seq;
}

static void heap_place(nl__timer_heap_t *h, size_t i, nl_timer_t *t)
{
    h->items[i] = t;
    t->heap_index = i;
}

static void heap_sift_up(nl__timer_heap_t *h, size_t i)
{
    nl_timer_t *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!timer_less(t, h->items[parent]))
            break;
        heap_place(h, i, h->items[parent]);
        i = parent;
    }
    heap_place(h, i, t);
}

static void heap_sift_down(nl__timer_heap_t *h, size_t i)
{
    nl_timer_t *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->count)
            break;
        if (child + 1 < h->count && timer_less(h->items[child + 1], h->items[child]))
            child++;
        if (!timer_less(h->items[child], t))
            break;
        heap_place(h, i, h->items[child]);
        i = child;
    }
    heap_place(h, i, t);
}

/* Capacity was reserved in nl_timer_new, so inserting never allocates or fails. */
static void heap_insert(nl__timer_heap_t *h, nl_timer_t *t)
{
    NL_ASSERT(h->count < h->cap);
    h->items[h->count] = t;
    t->heap_index = h->count++;
    heap_sift_up(h, t->heap_index);
}

static void heap_remove(nl__timer_heap_t *h, nl_timer_t *t)
{
    size_t i = t->heap_index;
    NL_ASSERT(i < h->count && h->items[i] == t);
    t->heap_index = TIMER_INACTIVE;
    h->count--;
    if (i == h->count)
        return;
    /* Move the last element into the hole and restore order in whichever direction it needs. */
    heap_place(h, i, h->items[h->count]);
    if (i > 0 && timer_less(h->items[i], h->items[(i - 1) / 2]))
        heap_sift_up(h, i);
    else
        heap_sift_down(h, i);
}

static void timer_schedule(nl_timer_t *t, uint64_t now_ms, uint64_t timeout_ms)
{
    nl__timer_heap_t *h = nl__loop_timers(t->loop);
    /* Saturate: UINT64_MAX is nl__timer_next_deadline's "no timer". */
    t->deadline_ms = timeout_ms >= UINT64_MAX - 1 - now_ms ? UINT64_MAX - 1 : now_ms + timeout_ms;
    t->seq = h->next_seq++;
    heap_insert(h, t);
}

int nl_timer_new(nl_timer_t **out, nl_loop_t *loop, nl_timer_fire_cb cb, void *arg)
{
    NL_ASSERT_OWNER(loop);
    nl__timer_heap_t *h = nl__loop_timers(loop);
    if (h->reserved == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        nl_timer_t **items = realloc(h->items, cap * sizeof(*items));
        if (!items)
            return -ENOMEM;
        h->items = items;
        h->cap = cap;
    }
    nl_timer_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->loop = loop;
    t->cb = cb;
    t->arg = arg;
    t->heap_index = TIMER_INACTIVE;
    h->reserved++;
    nl__loop_handle_opened(loop);
    *out = t;
    return 0;
}

int nl_timer_start(nl_timer_t *t, uint64_t timeout_ms, uint64_t repeat_ms)
{
    NL_ASSERT_OWNER(t->loop);
    if (t->is_closing)
        return -EINVAL;
    if (t->heap_index != TIMER_INACTIVE)
        heap_remove(nl__loop_timers(t->loop), t);
    /* Outside an iteration the cached time may be old (a loop not run for a while). */
    if (nl_loop_current() != t->loop)
        nl__loop_update_time(t->loop);
    t->repeat_ms = repeat_ms;
    timer_schedule(t, nl_loop_now_ms(t->loop), timeout_ms);
    return 0;
}

void nl_timer_stop(nl_timer_t *t)
{
    NL_ASSERT_OWNER(t->loop);
    if (t->heap_index != TIMER_INACTIVE)
        heap_remove(nl__loop_timers(t->loop), t);
}

bool nl_timer_is_active(const nl_timer_t *t)
{
    return t->heap_index != TIMER_INACTIVE;
}

static void timer_finish(nl__deferred_t *d)
{
    nl_timer_t *t = (nl_timer_t *)((char *)d - offsetof(nl_timer_t, deferred));
    nl_loop_t *loop = t->loop;
    if (t->close_cb)
        t->close_cb(t, t->arg);
    nl__loop_timers(loop)->reserved--;
    nl__loop_handle_closed(loop);
    nl__poison(t, sizeof(*t));
    free(t);
}

void nl_timer_close(nl_timer_t *t, nl_timer_close_cb close_cb)
{
    NL_ASSERT_OWNER(t->loop);
    if (t->is_closing)
        return;
    nl_timer_stop(t);
    t->is_closing = true;
    t->close_cb = close_cb;
    t->deferred.finish = timer_finish;
    nl__loop_defer(t->loop, &t->deferred);
}

uint64_t nl__timer_next_deadline(nl_loop_t *loop)
{
    const nl__timer_heap_t *h = nl__loop_timers(loop);
    return h->count ? h->items[0]->deadline_ms : UINT64_MAX;
}

void nl__timer_run_due(nl_loop_t *loop)
{
    nl__timer_heap_t *h = nl__loop_timers(loop);
    uint64_t now_ms = nl_loop_now_ms(loop);
    /* Timers (re)started from here on get seq >= boundary and wait for the next iteration, so a
     * zero-timeout timer restarting itself cannot spin this loop. Such a timer has a deadline
     * >= now and a larger seq than every older due timer, so it only reaches the top once all
     * of those have fired: stopping at it loses nothing. */
    uint64_t boundary = h->next_seq;
    while (h->count > 0) {
        nl_timer_t *t = h->items[0];
        if (t->deadline_ms > now_ms || t->seq >= boundary)
            break;
        heap_remove(h, t);
        /* Re-arm before the callback so the callback may stop, restart or close it. */
        if (t->repeat_ms > 0)
            timer_schedule(t, now_ms, t->repeat_ms);
        t->cb(t, t->arg);
    }
}
