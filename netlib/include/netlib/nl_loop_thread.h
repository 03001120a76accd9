/*
 * nl_loop_thread: a thread running its own loop (one loop per thread), and a group of them
 * (the IO loops a server hands connections to).
 *
 * Thread: start/stop from any thread except the loop's own. Ownership: the caller owns the
 * nl_loop_thread_t; the loop inside is created by start and freed by stop.
 * Usage: nl_loop_thread_start(&t, &opts); nl_loop_post(nl_loop_thread_loop(t), ...);
 *        nl_loop_thread_stop(t);
 */
#ifndef HERALD_NETLIB_NL_LOOP_THREAD_H
#define HERALD_NETLIB_NL_LOOP_THREAD_H

#include <stdbool.h>

#include "netlib/nl_loop.h"

typedef struct nl_loop_thread_s nl_loop_thread_t;

/* Called on the new thread with its loop before the loop runs (set up handles here), and
 * after it stopped, before the loop is freed (close them here). Either may be NULL. */
typedef void (*nl_loop_thread_cb)(nl_loop_t *loop, void *arg);

typedef struct nl_loop_thread_opts_s {
    nl_loop_opts_t loop;
    const char *name;          /* thread name (pthread_setname_np), e.g. "herald-io2" */
    bool is_pinned;            /* pin the thread to `cpu`; false (zeroed options): no pinning */
    int cpu;
    nl_loop_thread_cb on_start;
    nl_loop_thread_cb on_stop;
    void *arg;
} nl_loop_thread_opts_t;

/* Starts the thread and returns once its loop exists and runs. Returns: 0; -ENOMEM; -errno. */
int nl_loop_thread_start(nl_loop_thread_t **out, const nl_loop_thread_opts_t *opts);

nl_loop_t *nl_loop_thread_loop(nl_loop_thread_t *t);

/* Stops the loop, runs on_stop on its thread, joins, frees the loop and t. Returns 0, or the
 * nl_loop_free result (-EBUSY when on_stop left handles open; the loop then leaks, loudly). */
int nl_loop_thread_stop(nl_loop_thread_t *t);

#endif
