/*
 * nl_wheel: a hashed timing wheel (Varghese & Lauck's scheme 6; the Linux kernel's timer wheel
 * and netty's HashedWheelTimer are the same shape).
 *
 * Time is counted in absolute ticks, tick = ms / tick_ms. An entry due at deadline D is filed
 * in the slot of tick k = ceil(D / tick_ms), the first tick boundary at or after D, so when
 * tick k is processed (now >= k * tick_ms >= D) it is due, and since k * tick_ms < D + tick_ms
 * it fires at most one tick late. current_tick is the last tick processed; an entry whose k is
 * not in the future is filed for current_tick + 1.
 *
 * A slot holds entries of different rounds (k, k + slot_count, ...) and entries whose deadline
 * was pushed back by nl_wheel_refresh. Processing a slot checks each entry against now_ms:
 * due entries expire, the others are re-filed by their current deadline. Re-filing costs one
 * list move per round, which is what makes refresh a single store.
 */
#include "netlib/nl_wheel.h"

#include <errno.h>
#include <stdlib.h>

#include "netlib/nl_common.h"

/* Slot arrays beyond this are a configuration mistake (16M slots is 384 MiB). */
#define WHEEL_MAX_SLOTS (1u << 24)

static void list_init(nl_wheel_entry_t *head)
{
    head->prev = head;
    head->next = head;
}

static bool list_is_empty(const nl_wheel_entry_t *head)
{
    return head->next == head;
}

static void list_push_back(nl_wheel_entry_t *head, nl_wheel_entry_t *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}

static void list_unlink(nl_wheel_entry_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = NULL;
    e->next = NULL;
}

/* Moves every entry of from onto the empty list to, leaving from empty. */
static void list_move_all(nl_wheel_entry_t *from, nl_wheel_entry_t *to)
{
    list_init(to);
    if (list_is_empty(from))
        return;
    to->next = from->next;
    to->prev = from->prev;
    to->next->prev = to;
    to->prev->next = to;
    list_init(from);
}

static uint32_t round_up_pow2(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

int nl_wheel_init(nl_wheel_t *w, uint32_t tick_ms, uint32_t slot_count, nl_wheel_expire_cb cb,
                  void *arg, uint64_t now_ms)
{
    if (tick_ms == 0 || slot_count == 0 || slot_count > WHEEL_MAX_SLOTS || cb == NULL)
        return -EINVAL;
    uint32_t n = round_up_pow2(slot_count);
    nl_wheel_entry_t *slots = malloc((size_t)n * sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        list_init(&slots[i]);
    w->slots = slots;
    w->slot_count = n;
    w->tick_ms = tick_ms;
    w->current_tick = now_ms / tick_ms;
    w->count = 0;
    w->on_expire = cb;
    w->arg = arg;
    return 0;
}

void nl_wheel_deinit(nl_wheel_t *w)
{
    free(w->slots);
    w->slots = NULL;
    w->slot_count = 0;
    w->count = 0;
}

/* Links e into the slot its deadline maps to; the count is the caller's business. */
static void wheel_file(nl_wheel_t *w, nl_wheel_entry_t *e)
{
    uint64_t k = e->deadline_ms / w->tick_ms;
    if (k * w->tick_ms < e->deadline_ms)
        k++;
    if (k <= w->current_tick)
        k = w->current_tick + 1;
    list_push_back(&w->slots[k & (w->slot_count - 1)], e);
}

void nl_wheel_add(nl_wheel_t *w, nl_wheel_entry_t *e, uint64_t deadline_ms)
{
    NL_ASSERT(e->prev == NULL);
    e->deadline_ms = deadline_ms;
    wheel_file(w, e);
    w->count++;
}

void nl_wheel_refresh(nl_wheel_t *w, nl_wheel_entry_t *e, uint64_t deadline_ms)
{
    if (e->prev == NULL) {
        nl_wheel_add(w, e, deadline_ms);
        return;
    }
    if (deadline_ms >= e->deadline_ms) {
        /* The common case, "any frame counts as activity": the entry stays where it is and
         * is re-filed when its slot comes round (see wheel_process_slot). */
        e->deadline_ms = deadline_ms;
        return;
    }
    /* Earlier: the current slot may come round too late, so file it again now. */
    list_unlink(e);
    e->deadline_ms = deadline_ms;
    wheel_file(w, e);
}

void nl_wheel_cancel(nl_wheel_t *w, nl_wheel_entry_t *e)
{
    if (e->prev == NULL)
        return;
    list_unlink(e);
    NL_ASSERT(w->count > 0);
    w->count--;
}

/*
 * Runs the slot of tick t (current_tick is already t). The slot is first moved to a local
 * list so that entries re-filed into the same slot (a deadline a whole round or more away)
 * wait for the next round instead of being seen again now. The callback may add, refresh or
 * cancel any entry, including ones still on the local list: they are linked normally, so an
 * unlink from there is safe.
 */
static size_t wheel_process_slot(nl_wheel_t *w, uint64_t t, uint64_t now_ms)
{
    nl_wheel_entry_t *slot = &w->slots[t & (w->slot_count - 1)];
    if (list_is_empty(slot))
        return 0;
    nl_wheel_entry_t pending;
    list_move_all(slot, &pending);
    size_t expired = 0;
    while (!list_is_empty(&pending)) {
        nl_wheel_entry_t *e = pending.next;
        list_unlink(e);
        if (e->deadline_ms > now_ms) {
            wheel_file(w, e);
            continue;
        }
        w->count--;
        expired++;
        w->on_expire(w, e, w->arg);
    }
    return expired;
}

size_t nl_wheel_advance(nl_wheel_t *w, uint64_t now_ms)
{
    uint64_t target = now_ms / w->tick_ms;
    if (target <= w->current_tick)
        return 0;
    /* After a long stall, one pass over every slot sees every entry: skip the ticks before
     * that pass rather than visit empty slots millions of times. Entries filed for a skipped
     * tick are due (their deadline is at most that tick) and expire in the pass. */
    if (target - w->current_tick > w->slot_count)
        w->current_tick = target - w->slot_count;
    size_t expired = 0;
    while (w->current_tick < target) {
        w->current_tick++;
        expired += wheel_process_slot(w, w->current_tick, now_ms);
    }
    return expired;
}
