/*
 * nl_signal: signals as loop events through a signalfd (see nl_signal.h). The signals must be
 * blocked (nl_signal_block) or the kernel delivers them the ordinary way and the fd never sees
 * them.
 */
#include "netlib/nl_signal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "nl_loop_int.h"
#include "nl_poll.h"

struct nl_signal_s {
    nl_io_t io; /* embedded: the signal is the counted handle */
    nl_signal_cb cb;
    void *arg;
    nl__deferred_t deferred;
};

int nl_signal_block(const int *signums, size_t count)
{
    sigset_t mask;
    sigemptyset(&mask);
    for (size_t i = 0; i < count; i++) {
        if (sigaddset(&mask, signums[i]) < 0)
            return -EINVAL;
    }
    int err = pthread_sigmask(SIG_BLOCK, &mask, NULL);
    return -err;
}

static void signal_on_readable(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(events);
    nl_signal_t *s = arg;
    /* Drain every queued signal; the callback may close the handle, which ends the drain (the
     * rest stay queued in the fd, which closes with it). */
    while (!io->is_closing) {
        int signum = nl__poll_signalfd_read(io->fd);
        if (signum <= 0)
            break;
        s->cb(s, signum, s->arg);
    }
}

int nl_signal_new(nl_signal_t **out, nl_loop_t *loop, const int *signums, size_t count,
                  nl_signal_cb cb, void *arg)
{
    NL_ASSERT_OWNER(loop);
    nl_signal_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    int fd = nl__poll_signalfd_open(signums, count);
    if (fd < 0) {
        free(s);
        return fd;
    }
    s->cb = cb;
    s->arg = arg;
    nl__io_init(&s->io, loop, fd, signal_on_readable, s);
    int err = nl_io_set(&s->io, NL_READ);
    if (err < 0) {
        close(fd);
        free(s);
        return err;
    }
    nl__loop_handle_opened(loop);
    *out = s;
    return 0;
}

static void signal_finish(nl__deferred_t *d)
{
    nl_signal_t *s = (nl_signal_t *)((char *)d - offsetof(nl_signal_t, deferred));
    nl_loop_t *loop = s->io.loop;
    close(s->io.fd);
    nl__loop_handle_closed(loop);
    nl__poison(s, sizeof(*s));
    free(s);
}

void nl_signal_close(nl_signal_t *s)
{
    NL_ASSERT_OWNER(s->io.loop);
    if (s->io.is_closing)
        return;
    nl__io_deinit(&s->io);
    s->deferred.finish = signal_finish;
    nl__loop_defer(s->io.loop, &s->deferred);
}
