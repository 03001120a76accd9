/*
 * nl_timer: one-shot and repeating timers on a loop. Each loop keeps its timers in a min-heap
 * and arms one timerfd for the earliest deadline, so any number of timers costs one fd.
 * Per-connection idle timeouts use nl_wheel instead (O(1) at 1M connections).
 *
 * Thread: owner of the loop, for every function.
 * Ownership: the loop owns timers; nl_timer_close frees one after its close callback.
 * Usage: nl_timer_new(&t, loop, on_fire, arg); nl_timer_start(t, 100, 0); ...
 *        nl_timer_close(t, NULL);
 */
#ifndef HERALD_NETLIB_NL_TIMER_H
#define HERALD_NETLIB_NL_TIMER_H

#include <stdbool.h>
#include <stdint.h>

#include "netlib/nl_loop.h"

typedef struct nl_timer_s nl_timer_t;

/* Runs on the loop's thread. The timer may be stopped, restarted or closed inside. */
typedef void (*nl_timer_fire_cb)(nl_timer_t *t, void *arg);
typedef void (*nl_timer_close_cb)(nl_timer_t *t, void *arg);

/* Creates a stopped timer. Returns: 0; -ENOMEM. Thread: owner. */
int nl_timer_new(nl_timer_t **out, nl_loop_t *loop, nl_timer_fire_cb cb, void *arg);

/* (Re)starts the timer: fires after timeout_ms, then every repeat_ms if repeat_ms > 0.
 * Timers due at the same time fire in the order they were started. Returns: 0; -EINVAL when
 * closing. Thread: owner. Callbacks: never fires before this returns. */
int nl_timer_start(nl_timer_t *t, uint64_t timeout_ms, uint64_t repeat_ms);

/* Stops the timer; idempotent. Thread: owner. */
void nl_timer_stop(nl_timer_t *t);

bool nl_timer_is_active(const nl_timer_t *t);

/* Stops and frees the timer at the end of the iteration, after close_cb (may be NULL).
 * Idempotent; safe inside the timer's own callback. Thread: owner. */
void nl_timer_close(nl_timer_t *t, nl_timer_close_cb close_cb);

#endif
