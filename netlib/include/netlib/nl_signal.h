/*
 * nl_signal: receive signals on a loop through signalfd.
 *
 * Signals must be blocked in every thread for signalfd to see them: call nl_signal_block()
 * in the main thread before starting any other thread (threads inherit the mask).
 *
 * Thread: owner of the loop. Ownership: the loop frees the handle after nl_signal_close.
 * Usage: nl_signal_block((int[]){SIGINT, SIGTERM}, 2); nl_signal_new(&s, loop, sigs, 2, cb, arg)
 */
#ifndef HERALD_NETLIB_NL_SIGNAL_H
#define HERALD_NETLIB_NL_SIGNAL_H

#include <stddef.h>

#include "netlib/nl_loop.h"

typedef struct nl_signal_s nl_signal_t;
typedef void (*nl_signal_cb)(nl_signal_t *s, int signum, void *arg);

/* Blocks these signals in the calling thread (and threads it starts later). Returns 0 or -errno. */
int nl_signal_block(const int *signums, size_t count);

/* Watches the signals on loop. Returns: 0; -ENOMEM; -errno from signalfd. Thread: owner. */
int nl_signal_new(nl_signal_t **out, nl_loop_t *loop, const int *signums, size_t count,
                  nl_signal_cb cb, void *arg);

/* Stops watching and frees the handle at the end of the iteration. Idempotent. Thread: owner. */
void nl_signal_close(nl_signal_t *s);

#endif
