/*
 * nl_wheel: a hashed timing wheel for per-connection idle timeouts, O(1) per add, refresh and
 * cancel, at any number of entries (1M connections per node).
 *
 * Entries are intrusive (embedded in the caller's struct; no allocation per entry). Refresh
 * only records the new deadline: the entry stays in its slot and is re-filed when that slot
 * comes round, so the per-frame cost of "any frame counts as activity" is one store.
 * The wheel itself has no clock and no fd: the owner calls nl_wheel_advance with the current
 * time (usually from a repeating nl_timer at the wheel's tick), and expired entries are handed
 * to the expire callback. An entry fires no earlier than its deadline and at most one tick late.
 *
 * Thread: a wheel belongs to whoever embeds it (one per loop); nothing locks.
 * Ownership: the caller owns the wheel value and the entries; the wheel owns its slot array.
 * Usage: nl_wheel_init(&w, 1000, 64, on_expire, arg, now); nl_wheel_add(&w, &s->idle, now+t);
 *        on activity: nl_wheel_refresh(&w, &s->idle, now + t); on close: nl_wheel_cancel(...);
 *        every tick: nl_wheel_advance(&w, now).
 */
#ifndef HERALD_NETLIB_NL_WHEEL_H
#define HERALD_NETLIB_NL_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nl_wheel_entry_s {
    struct nl_wheel_entry_s *prev; /* NULL when not in the wheel */
    struct nl_wheel_entry_s *next;
    uint64_t deadline_ms;
} nl_wheel_entry_t;

struct nl_wheel_s;
/* Called for each expired entry, already removed from the wheel; it may re-add it. */
typedef void (*nl_wheel_expire_cb)(struct nl_wheel_s *w, nl_wheel_entry_t *e, void *arg);

typedef struct nl_wheel_s {
    nl_wheel_entry_t *slots; /* slot_count list heads (circular, sentinel) */
    uint32_t slot_count;     /* power of two */
    uint32_t tick_ms;
    uint64_t current_tick;   /* ticks processed up to */
    size_t count;            /* entries in the wheel */
    nl_wheel_expire_cb on_expire;
    void *arg;
} nl_wheel_t;

/* Sets up a wheel of slot_count slots (rounded up to a power of two) of tick_ms each, with
 * now_ms as its start. Returns: 0; -EINVAL; -ENOMEM. */
int nl_wheel_init(nl_wheel_t *w, uint32_t tick_ms, uint32_t slot_count, nl_wheel_expire_cb cb,
                  void *arg, uint64_t now_ms);
/* Frees the slot array. Entries still in the wheel are just forgotten (not called back). */
void nl_wheel_deinit(nl_wheel_t *w);

/* Files e (not in a wheel) to expire at deadline_ms. O(1). */
void nl_wheel_add(nl_wheel_t *w, nl_wheel_entry_t *e, uint64_t deadline_ms);
/* Moves an entry's deadline later (or adds it if not in the wheel). O(1): one store when the
 * entry is in the wheel and the new deadline is not earlier. */
void nl_wheel_refresh(nl_wheel_t *w, nl_wheel_entry_t *e, uint64_t deadline_ms);
/* Removes e if it is in the wheel; idempotent. O(1). */
void nl_wheel_cancel(nl_wheel_t *w, nl_wheel_entry_t *e);
static inline bool nl_wheel_is_pending(const nl_wheel_entry_t *e)
{
    return e->prev != NULL;
}
static inline void nl_wheel_entry_init(nl_wheel_entry_t *e)
{
    e->prev = e->next = NULL;
    e->deadline_ms = 0;
}

/* Processes every tick up to now_ms, calling on_expire for each entry whose deadline has
 * passed. Returns the number expired. */
size_t nl_wheel_advance(nl_wheel_t *w, uint64_t now_ms);

#endif
