/*
 * nl_poll: the Linux readiness and kernel-timer calls behind netlib's loop (STYLE.md §1): epoll,
 * eventfd, timerfd and signalfd live in nl_poll_epoll.c so the loop itself reads as plain C.
 * Private to netlib. Every function returns 0 (or a count) or a negative errno.
 *
 * Thread: the loop's owner, except nl__poll_wake, which any thread may call.
 */
#ifndef HERALD_NETLIB_NL_POLL_H
#define HERALD_NETLIB_NL_POLL_H

#include <stddef.h>
#include <stdint.h>

/* One poller per loop: the epoll fd and the buffer epoll_wait fills. */
typedef struct nl__poll_s nl__poll_t;

/* Creates the epoll set with room for max_events per wait. Returns: 0; -ENOMEM; -errno. */
int nl__poll_new(nl__poll_t **out, int max_events);
void nl__poll_free(nl__poll_t *p);

/* Changes what the kernel watches for fd. interest is NL_READ | NL_WRITE | NL_EDGE;
 * old_interest is what is registered now (0: not in the set). interest 0 removes the fd.
 * ptr comes back from nl__poll_event. Returns: 0; -errno from epoll_ctl. */
int nl__poll_update(nl__poll_t *p, int fd, unsigned old_interest, unsigned interest, void *ptr);

/* Waits up to timeout_ms (-1: forever). Returns the number of ready events, 0, or -errno
 * (-EINTR is returned as 0). */
int nl__poll_wait(nl__poll_t *p, int timeout_ms);

/* The i-th ready event of the last wait: returns its ptr, and its NL_READ/NL_WRITE/NL_HUP/NL_ERR
 * bits in *events. */
void *nl__poll_event(const nl__poll_t *p, int i, unsigned *events);

/* eventfd: a non-blocking, close-on-exec counter the loop watches to wake from another thread. */
int nl__poll_wakefd_open(void);
/* Adds one to the counter. Thread: any. Returns 0 or -errno. */
int nl__poll_wake(int fd);
/* Resets the counter to zero. */
void nl__poll_wakefd_drain(int fd);

/* timerfd on CLOCK_MONOTONIC, non-blocking. */
int nl__poll_timerfd_open(void);
/* Arms the timerfd to fire once at the absolute monotonic time deadline_ms (the expiry count is
 * reset). Returns 0 or -errno. */
int nl__poll_timerfd_arm(int fd, uint64_t deadline_ms);

/* signalfd for these signals, non-blocking. Returns the fd or -errno. */
int nl__poll_signalfd_open(const int *signums, size_t count);
/* Reads one queued signal: returns its number, 0 when none is queued, or -errno. */
int nl__poll_signalfd_read(int fd);

#endif
