/* nl_poll_epoll: epoll, eventfd, timerfd and signalfd for the loop (see nl_poll.h). */
#include "nl_poll.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "netlib/nl_loop.h"

struct nl__poll_s {
    int epfd;
    int max_events;
    struct epoll_event events[]; /* filled by epoll_wait, read back by nl__poll_event */
};

int nl__poll_new(nl__poll_t **out, int max_events)
{
    if (max_events <= 0)
        max_events = 1024;
    nl__poll_t *p = malloc(sizeof(*p) + (size_t)max_events * sizeof(struct epoll_event));
    if (!p)
        return -ENOMEM;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (p->epfd < 0) {
        int err = -errno;
        free(p);
        return err;
    }
    p->max_events = max_events;
    *out = p;
    return 0;
}

void nl__poll_free(nl__poll_t *p)
{
    if (!p)
        return;
    close(p->epfd);
    free(p);
}

int nl__poll_update(nl__poll_t *p, int fd, unsigned old_interest, unsigned interest, void *ptr)
{
    struct epoll_event ev = {0};
    int op;
    if (!(interest & (NL_READ | NL_WRITE))) {
        if (!(old_interest & (NL_READ | NL_WRITE)))
            return 0;
        op = EPOLL_CTL_DEL;
    } else {
        op = (old_interest & (NL_READ | NL_WRITE)) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        ev.events = ((interest & NL_READ) ? EPOLLIN : 0u) |
                    ((interest & NL_WRITE) ? EPOLLOUT : 0u) | ((interest & NL_EDGE) ? EPOLLET : 0u);
        if ((interest & (NL_READ | NL_EDGE)) == (NL_READ | NL_EDGE))
            ev.events |= EPOLLRDHUP | EPOLLPRI;
        ev.data.ptr = ptr;
    }
    if (epoll_ctl(p->epfd, op, fd, &ev) < 0)
        return -errno;
    return 0;
}

int nl__poll_wait(nl__poll_t *p, int timeout_ms)
{
    int n = epoll_wait(p->epfd, p->events, p->max_events, timeout_ms);
    if (n < 0) {
        int err = -errno;
        /* A signal (a debugger, SIGPROF) interrupted the wait: an empty iteration, not a fault. */
        return err == -EINTR ? 0 : err;
    }
    return n;
}

void *nl__poll_event(const nl__poll_t *p, int i, unsigned *events)
{
    uint32_t e = p->events[i].events;
    *events = ((e & EPOLLIN) ? NL_READ : 0u) | ((e & EPOLLOUT) ? NL_WRITE : 0u) |
              ((e & EPOLLHUP) ? NL_HUP : 0u) | ((e & EPOLLERR) ? NL_ERR : 0u) |
              ((e & EPOLLRDHUP) ? NL_RDHUP : 0u) | ((e & EPOLLPRI) ? NL_PRI : 0u);
    return p->events[i].data.ptr;
}

int nl__poll_wakefd_open(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int nl__poll_wake(int fd)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is at its maximum: the loop is awake already. */
    if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        return -errno;
    return 0;
}

void nl__poll_wakefd_drain(int fd)
{
    uint64_t count;
    /* A non-blocking read returns the whole count at once, or EAGAIN when it is zero. */
    ssize_t n = read(fd, &count, sizeof(count));
    NL_UNUSED(n);
}

int nl__poll_timerfd_open(void)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int nl__poll_timerfd_arm(int fd, uint64_t deadline_ms)
{
    /* An all-zero it_value would disarm the timer; a deadline of 0 ms means "already due". */
    if (deadline_ms == 0)
        deadline_ms = 1;
    struct itimerspec its = {0};
    its.it_value.tv_sec = (time_t)(deadline_ms / 1000u);
    its.it_value.tv_nsec = (long)(deadline_ms % 1000u) * 1000000L;
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return -errno;
    return 0;
}

int nl__poll_signalfd_open(const int *signums, size_t count)
{
    sigset_t mask;
    sigemptyset(&mask);
    for (size_t i = 0; i < count; i++) {
        if (sigaddset(&mask, signums[i]) < 0)
            return -EINVAL;
    }
    int fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int nl__poll_signalfd_read(int fd)
{
    struct signalfd_siginfo si;
    ssize_t n = read(fd, &si, sizeof(si));
    if (n < 0) {
        int err = -errno;
        return err == -EAGAIN ? 0 : err;
    }
    if ((size_t)n != sizeof(si))
        return -EIO;
    return (int)si.ssi_signo;
}
