/*
 * nl_loop_int.h: what netlib's modules share about loops and handles. Private to netlib.
 *
 * Handles (io, timer, signal, conn, server, client) are freed only at the end of the loop
 * iteration in which they were closed (STYLE.md §3, rules 3 and 4): closing marks them, stops
 * their events, and queues them with nl__loop_defer; the loop then calls their finish function,
 * which runs the user's close callback and frees the memory. nl_loop_free refuses with -EBUSY
 * while the open-handle count is not zero.
 */
#ifndef HERALD_NETLIB_NL_LOOP_INT_H
#define HERALD_NETLIB_NL_LOOP_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_loop.h"

/* A handle waiting for the end of the iteration. Embed it; finish frees the container. */
typedef struct nl__deferred_s {
    struct nl__deferred_s *next;
    void (*finish)(struct nl__deferred_s *d);
} nl__deferred_t;

/* An fd watcher. Public nl_io_new allocates one (with the deferred slot nl_io_close needs,
 * nl_loop.c); netlib modules embed one (nl__io_init) to save an allocation per connection and
 * finish it with their container, so the embedded io carries no slot of its own. epoll's
 * data.ptr points at it. */
struct nl_io_s {
    nl_loop_t *loop;
    /* The event callback until nl_io_close, the close callback after: a closing io gets no
     * more events (is_closing), and sharing the word keeps an embedding nl_conn_t 8 bytes
     * smaller, one malloc size class (16 bytes) per connection. */
    union {
        nl_io_event_cb cb;
        nl_io_close_cb close_cb;
    } u;
    void *arg;
    int fd;
    uint8_t interest;   /* what epoll has registered now: NL_READ | NL_WRITE | NL_EDGE */
    uint8_t is_added;   /* fd is in the epoll set */
    uint8_t is_closing; /* events already returned by epoll_wait are skipped */
    uint8_t is_embedded;
};

/* Sets up an embedded io (no allocation, not counted as a handle: the container is). */
void nl__io_init(nl_io_t *io, nl_loop_t *loop, int fd, nl_io_event_cb cb, void *arg);
/* Stops an embedded io: removes the fd from epoll and marks it closing, so events this
 * iteration already returned for it are skipped. The container frees it. */
void nl__io_deinit(nl_io_t *io);

/* Counts open handles, for nl_loop_free's -EBUSY. */
void nl__loop_handle_opened(nl_loop_t *loop);
void nl__loop_handle_closed(nl_loop_t *loop);

/* Queues d->finish(d) for the end of this iteration (after before-sleep hooks). */
void nl__loop_defer(nl_loop_t *loop, nl__deferred_t *d);

/* A module's per-loop state, created lazily by the module and freed by nl_loop_free (after the
 * handle check passed). netlib has one such module today: connections (nl_conn.c).
 * before_sleep (optional) runs after every hook added with nl_loop_add_before_sleep, whenever
 * the module's state was created, so the connections' flush sends what those hooks queued
 * in the same iteration. */
typedef struct nl__loop_module_s {
    void *state;
    void (*free_state)(void *state);
    void (*before_sleep)(nl_loop_t *loop, void *state);
} nl__loop_module_t;

enum { NL__MODULE_CONN = 0, NL__MODULE_COUNT };

/* The slot for module m on loop (owner thread). */
nl__loop_module_t *nl__loop_module(nl_loop_t *loop, int m);

/* --- Added by the loop module; everything above is the original contract. ---------------- */

/* epoll_ctl calls nl_io_set/nl__io_deinit made on this loop (tests check that an unchanged
 * interest costs none). Thread: owner. */
uint64_t nl__loop_epoll_ctl_calls(const nl_loop_t *loop);

/* The cached monotonic time in ns, refreshed once per iteration (nl_loop_now_ms is this / 1e6).
 * Thread: owner. */
uint64_t nl__loop_now_ns(const nl_loop_t *loop);

/* Poisons a freed handle's memory in debug builds (NDEBUG unset), so a use after free reads
 * 0xdd bytes and crashes early. Call right before free(). */
void nl__poison(void *p, size_t size);

/* nl_timer.c's per-loop min-heap, embedded in the loop. Ordered by (deadline_ms, seq). */
struct nl_timer_s;
typedef struct nl__timer_heap_s {
    struct nl_timer_s **items;
    size_t count;
    size_t cap;
    size_t reserved;   /* timers alive on the loop: cap >= reserved, so start never allocates */
    uint64_t next_seq; /* start order, the tie-break for equal deadlines */
} nl__timer_heap_t;

/* Re-reads the clock into the loop's cached time. The loop does this once per iteration; call it
 * only outside an iteration (nl_timer_start from a thread not running the loop). */
void nl__loop_update_time(nl_loop_t *loop);

/* The loop's timer heap (owner thread). */
nl__timer_heap_t *nl__loop_timers(nl_loop_t *loop);
/* The earliest deadline in ms, or UINT64_MAX with no active timer. Implemented in nl_timer.c. */
uint64_t nl__timer_next_deadline(nl_loop_t *loop);
/* Fires the timers due at the loop's cached time that were started before this call.
 * Implemented in nl_timer.c. */
void nl__timer_run_due(nl_loop_t *loop);

#endif
