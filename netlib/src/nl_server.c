/*
 * nl_server: listening sockets, accept, hand-off to IO loops, descriptor exhaustion
 * (see nl_server.h).
 *
 * A server has one listener (the accept loop's socket) or, in SO_REUSEPORT mode, one per IO
 * loop, each touched only on its own loop: start, pause and close reach a foreign loop by a
 * post. Accepted sockets go round-robin to the IO loops by a post carrying the fd and a
 * reference to the server's shared, immutable settings, so a connection in flight never
 * points at a server that closed meanwhile. The connection is created on its IO loop's thread.
 *
 * EMFILE/ENFILE (libuv's uv__emfile_trick, nginx's accept back-off): each listener holds one
 * spare descriptor on /dev/null. When accept fails for lack of descriptors the listener gives
 * the spare up, accepts and closes what is pending (the peers see a close, not a hang), stops
 * watching the socket and arms a 100 ms timer; the timer re-opens the spare and watches again.
 * So exhaustion costs a few syscalls every 100 ms, never a spinning level-triggered loop.
 * Logged once on entering (ev=emfile_enter) and once on the first successful accept after
 * (ev=emfile_leave); every hit is counted in nl_server_stats_t.emfile_events.
 *
 * With max_fd set, an accepted descriptor numbered at or above it is handled the same way:
 * since accept returns the lowest free number, every descriptor below it is in use, and the
 * ones left are kept for the rest of the process (herald's admin HTTP server, whose
 * libmicrohttpd busy-waits when it cannot accept its first connection).
 */
#include "netlib/nl_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netlib/nl_log.h"
#include "netlib/nl_timer.h"
#include "nl_conn_int.h"

#define NL__SERVER_EMFILE_BACKOFF_MS 100u
/* Accepts per readiness, so a connection storm does not starve the loop's other fds. */
#define NL__SERVER_ACCEPT_BATCH 256
/* Pending connections closed per EMFILE hit with the spare descriptor. */
#define NL__SERVER_EMFILE_DRAIN 64

/* What a connection needs from its server. Immutable after nl_server_new apart from the
 * counters; shared across threads by reference count. */
typedef struct server_shared_s {
    /* Callbacks, arg and transport of every connection, which each hold a reference, as do
     * the server and each accepted socket in flight to an IO loop; the last one frees this. */
    nl__conn_desc_t desc;
    nl_server_accept_cb on_accept;
    size_t high_water_bytes;
    size_t max_input_bytes;
    int max_fd;         /* accepted descriptors at or above it count as exhaustion; 0: none */
    size_t refusal_len; /* refusal[0..refusal_len): sent to a connection closed for want of fds */
    uint8_t refusal[NL_SERVER_REFUSAL_MAX];
    uint64_t accepted; /* atomic counters: listeners and IO loops bump them */
    uint64_t refused;
    uint64_t emfile_events;
} server_shared_t;

typedef struct listener_s {
    nl_server_t *srv;
    nl_loop_t *loop;
    struct nl_io_s io;
    nl_timer_t *backoff;
    int fd;
    int spare_fd;
    bool is_registered; /* io set up and counted as a handle on loop */
    bool is_paused;
    bool is_backing_off;
    bool is_emfile;
} listener_t;

struct nl_server_s {
    nl_loop_t *loop; /* the accept loop */
    server_shared_t *shared;
    nl_loop_t **io_loops;
    size_t io_count;
    size_t next_io;
    listener_t *lis;
    size_t lis_count;
    size_t lis_open; /* accept loop only: listeners not yet closed */
    uint16_t port;
    bool is_reuseport;
    bool is_closing;
    nl__deferred_t deferred;
};

typedef struct handoff_s {
    server_shared_t *shared;
    nl_loop_t *loop;
    int fd;
} handoff_t;

static void shared_release(nl__conn_desc_t *d)
{
    free((server_shared_t *)((char *)d - offsetof(server_shared_t, desc)));
}

static void shared_unref(server_shared_t *sh)
{
    nl__conn_desc_unref(&sh->desc);
}

static void stat_add(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

/* --- connections ------------------------------------------------------------------------- */

/* On the IO loop's thread: the accept callback may refuse, then the connection is made. */
static void server_conn_accepted(nl_loop_t *loop, server_shared_t *sh, int fd)
{
    if (sh->on_accept && !sh->on_accept(loop, fd, sh->desc.arg)) {
        stat_add(&sh->refused);
        close(fd);
        return;
    }
    nl__conn_setup_t setup = {
        .desc = &sh->desc,
        .high_water_bytes = sh->high_water_bytes,
        .max_input_bytes = sh->max_input_bytes,
    };
    nl_conn_t *c;
    int err = nl__conn_new(&c, loop, fd, &setup);
    if (err < 0) {
        NL_LOG(NL_WARN, "accept_failed", "fd=%d err=%s", fd, nl_strerror(err));
        close(fd);
        return;
    }
    nl__conn_start(c);
}

static void server_handoff_run(void *arg)
{
    handoff_t *h = arg;
    server_conn_accepted(h->loop, h->shared, h->fd);
    shared_unref(h->shared);
    free(h);
}

/* Round-robin over the IO loops (a reuseport listener keeps its connections on its own loop).
 * A connection for this very loop is made at once; for another loop the fd travels in a post
 * that holds a reference to the shared settings, never a pointer to the server itself, which
 * may close before the post runs. */
static void server_dispatch(listener_t *lis, int fd)
{
    nl_server_t *s = lis->srv;
    stat_add(&s->shared->accepted);
    nl_loop_t *target = lis->loop;
    if (!s->is_reuseport && s->io_count > 0)
        target = s->io_loops[s->next_io++ % s->io_count];
    if (target == lis->loop) {
        server_conn_accepted(target, s->shared, fd);
        return;
    }
    handoff_t *h = malloc(sizeof(*h));
    if (!h) {
        NL_LOG(NL_WARN, "accept_failed", "fd=%d err=%s", fd, nl_strerror(-ENOMEM));
        close(fd);
        return;
    }
    h->shared = s->shared;
    h->loop = target;
    h->fd = fd;
    nl__conn_desc_ref(&s->shared->desc);
    if (nl_loop_post(target, server_handoff_run, h) < 0) {
        NL_LOG(NL_WARN, "accept_failed", "fd=%d err=%s", fd, nl_strerror(-ENOMEM));
        close(fd);
        shared_unref(h->shared);
        free(h);
    }
}

/* --- listeners (each on its own loop) ---------------------------------------------------- */

static void lis_update(listener_t *lis)
{
    if (!lis->is_registered)
        return;
    unsigned want = (lis->is_paused || lis->is_backing_off) ? 0 : NL_READ;
    int err = nl_io_set(&lis->io, want);
    if (err < 0)
        NL_LOG(NL_ERROR, "listen_watch_failed", "fd=%d err=%s", lis->fd, nl_strerror(err));
}

static void lis_on_backoff(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    listener_t *lis = arg;
    lis->is_backing_off = false;
    /* If no descriptor is free yet this fails; the next EMFILE then backs off again without
     * draining, and the pending peers wait in the backlog. */
    if (lis->spare_fd < 0)
        lis->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    lis_update(lis);
}

/* Closes a connection accepted while descriptors are short, sending the refusal first, then a
 * FIN. Closing a socket with unread input resets the connection instead of closing it, and a
 * reset could beat the refusal to the peer: what the peer already sent (its first request,
 * usually) is discarded, but more may arrive between that and the close (under load the
 * window is wide enough: issue 24 saw a reset 1 time in 20). So the FIN goes out right behind
 * the refusal (shutdown), before the close: a peer that got the FIN reads the refusal and
 * then the end of the stream, whatever reset follows (Linux reports the FIN before a later
 * reset's error). */
static void lis_refuse(listener_t *lis, int fd)
{
    const server_shared_t *sh = lis->srv->shared;
    if (sh->refusal_len > 0) {
        ssize_t n = recv(fd, NULL, 65536, MSG_DONTWAIT | MSG_TRUNC);
        n = send(fd, sh->refusal, sh->refusal_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)n; /* a fresh socket's send buffer takes it; if not, the peer sees a close */
        (void)shutdown(fd, SHUT_WR);
    }
    close(fd);
}

static void lis_on_emfile(listener_t *lis, int err)
{
    stat_add(&lis->srv->shared->emfile_events);
    if (!lis->is_emfile) {
        lis->is_emfile = true;
        NL_LOG(NL_WARN, "emfile_enter", "fd=%d err=%s", lis->fd, nl_strerror(err));
    }
    if (lis->spare_fd >= 0) {
        close(lis->spare_fd);
        lis->spare_fd = -1;
        for (int i = 0; i < NL__SERVER_EMFILE_DRAIN; i++) {
            int fd = accept4(lis->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            lis_refuse(lis, fd);
        }
    }
    lis->is_backing_off = true;
    lis_update(lis);
    nl_timer_start(lis->backoff, NL__SERVER_EMFILE_BACKOFF_MS, 0);
}

/* Errors accept4 reports for one pending connection (Linux passes its network errors on);
 * the next accept may well succeed. */
static bool accept_err_is_transient(int err)
{
    switch (-err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
        return true;
    default:
        return false;
    }
}

static void lis_on_io(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    NL_UNUSED(events);
    listener_t *lis = arg;
    for (int i = 0; i < NL__SERVER_ACCEPT_BATCH; i++) {
        int fd = accept4(lis->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 && lis->srv->shared->max_fd > 0 && fd >= lis->srv->shared->max_fd) {
            /* accept4 returns the lowest free descriptor, so every one below fd is in use:
             * the descriptors kept for the rest of the process are being reached. */
            lis_refuse(lis, fd);
            lis_on_emfile(lis, -EMFILE);
            return;
        }
        if (fd >= 0) {
            if (lis->is_emfile) {
                lis->is_emfile = false;
                NL_LOG(NL_WARN, "emfile_leave", "fd=%d", lis->fd);
            }
            server_dispatch(lis, fd);
            /* A callback (on_accept, on_connected) may have closed or paused the server. */
            if (!lis->is_registered || lis->is_paused)
                return;
            continue;
        }
        int err = -errno;
        if (err == -EAGAIN)
            return;
        if (accept_err_is_transient(err))
            continue;
        if (err == -EMFILE || err == -ENFILE) {
            lis_on_emfile(lis, err);
            return;
        }
        /* ENOBUFS, ENOMEM: the kernel is short of memory; back off like EMFILE, without the
         * spare descriptor dance. */
        NL_LOG(NL_WARN, "accept_failed", "fd=%d err=%s", lis->fd, nl_strerror(err));
        lis->is_backing_off = true;
        lis_update(lis);
        nl_timer_start(lis->backoff, NL__SERVER_EMFILE_BACKOFF_MS, 0);
        return;
    }
}

/* The back-off timer is made here, not on the first EMFILE: when descriptors or memory run out
 * is exactly when creating it could fail, and without it the listener could not back off. */
static int lis_start(listener_t *lis)
{
    if (!lis->is_registered) {
        int err = nl_timer_new(&lis->backoff, lis->loop, lis_on_backoff, lis);
        if (err < 0)
            return err;
        nl__io_init(&lis->io, lis->loop, lis->fd, lis_on_io, lis);
        nl__loop_handle_opened(lis->loop);
        lis->is_registered = true;
    }
    lis->is_paused = false;
    lis_update(lis);
    return 0;
}

static void lis_close(listener_t *lis)
{
    if (lis->is_registered) {
        nl__io_deinit(&lis->io);
        nl_timer_close(lis->backoff, NULL);
        lis->backoff = NULL;
        nl__loop_handle_closed(lis->loop);
        lis->is_registered = false;
    }
    close(lis->fd);
    lis->fd = -1;
    if (lis->spare_fd >= 0)
        close(lis->spare_fd);
    lis->spare_fd = -1;
}

static void lis_start_posted(void *arg)
{
    listener_t *lis = arg;
    int err = lis_start(lis);
    if (err < 0)
        NL_LOG(NL_ERROR, "listen_start_failed", "fd=%d err=%s", lis->fd, nl_strerror(err));
}

static void lis_pause_posted(void *arg)
{
    listener_t *lis = arg;
    lis->is_paused = true;
    lis_update(lis);
}

static void server_finish(nl__deferred_t *d)
{
    nl_server_t *s = (nl_server_t *)((char *)d - offsetof(nl_server_t, deferred));
    nl__loop_handle_closed(s->loop);
    shared_unref(s->shared);
    free(s->lis);
    free(s->io_loops);
    nl__poison(s, sizeof(*s));
    free(s);
}

/* On the accept loop: one more listener is closed; the last one lets the server go. */
static void server_lis_closed(void *arg)
{
    nl_server_t *s = arg;
    NL_ASSERT(s->lis_open > 0);
    if (--s->lis_open == 0)
        nl__conn_defer(s->loop, &s->deferred);
}

static void lis_close_posted(void *arg)
{
    listener_t *lis = arg;
    lis_close(lis);
    /* Without this post the server would never be freed; a failed small allocation here is
     * treated like any other broken invariant. */
    int err = nl_loop_post(lis->srv->loop, server_lis_closed, lis->srv);
    NL_ASSERT(err == 0);
}

/* --- server ------------------------------------------------------------------------------ */

static int server_listen_fd(const struct sockaddr_storage *ss, socklen_t len, int backlog,
                            bool reuseport)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    int err = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        err = -errno;
    else if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
        err = -errno;
    else if (bind(fd, (const struct sockaddr *)ss, len) < 0)
        err = -errno;
    else if (listen(fd, backlog) < 0)
        err = -errno;
    if (err < 0) {
        close(fd);
        return err;
    }
    return fd;
}

/* Reads back the port the kernel picked for port 0 and writes it into ss for the others. */
static int server_bound_port(int fd, struct sockaddr_storage *ss, uint16_t *port)
{
    struct sockaddr_storage got;
    socklen_t len = sizeof(got);
    if (getsockname(fd, (struct sockaddr *)&got, &len) < 0)
        return -errno;
    if (got.ss_family == AF_INET6) {
        *port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(*port);
    } else {
        *port = ntohs(((struct sockaddr_in *)&got)->sin_port);
        ((struct sockaddr_in *)ss)->sin_port = htons(*port);
    }
    return 0;
}

static int server_open_listeners(nl_server_t *s, const nl_server_opts_t *opts)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int err = nl__sockaddr_parse(opts->host, opts->port, &ss, &len);
    if (err < 0)
        return err;
    int backlog = opts->backlog > 0 ? opts->backlog : SOMAXCONN;
    for (size_t i = 0; i < s->lis_count; i++) {
        listener_t *lis = &s->lis[i];
        lis->srv = s;
        lis->loop = s->is_reuseport && s->io_count > 0 ? s->io_loops[i] : s->loop;
        int fd = server_listen_fd(&ss, len, backlog, s->is_reuseport);
        if (fd < 0)
            return fd;
        lis->fd = fd;
        /* With port 0 the first socket's port is the one the reuseport siblings join. */
        if (i == 0 && (err = server_bound_port(fd, &ss, &s->port)) < 0)
            return err;
        lis->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (lis->spare_fd < 0)
            return -errno;
    }
    return 0;
}

static void server_free_unstarted(nl_server_t *s)
{
    for (size_t i = 0; s->lis && i < s->lis_count; i++) {
        if (s->lis[i].fd >= 0)
            close(s->lis[i].fd);
        if (s->lis[i].spare_fd >= 0)
            close(s->lis[i].spare_fd);
    }
    free(s->lis);
    free(s->io_loops);
    free(s->shared);
    free(s);
}

static int server_alloc(nl_server_t **out, const nl_server_opts_t *opts)
{
    nl_server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->loop = opts->accept_loop;
    s->is_reuseport = opts->reuseport;
    s->io_count = opts->io_loops ? opts->io_loop_count : 0;
    s->lis_count = s->is_reuseport && s->io_count > 0 ? s->io_count : 1;
    s->shared = calloc(1, sizeof(*s->shared));
    s->lis = calloc(s->lis_count, sizeof(*s->lis));
    if (s->io_count > 0)
        s->io_loops = malloc(s->io_count * sizeof(*s->io_loops));
    if (!s->shared || !s->lis || (s->io_count > 0 && !s->io_loops)) {
        server_free_unstarted(s);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->lis_count; i++) {
        s->lis[i].fd = -1;
        s->lis[i].spare_fd = -1;
    }
    if (s->io_count > 0)
        memcpy(s->io_loops, opts->io_loops, s->io_count * sizeof(*s->io_loops));
    *out = s;
    return 0;
}

int nl_server_new(nl_server_t **out, const nl_server_opts_t *opts)
{
    if (!opts || !opts->accept_loop || opts->refusal_len > NL_SERVER_REFUSAL_MAX ||
        (opts->refusal_len > 0 && !opts->refusal))
        return -EINVAL;
    NL_ASSERT_OWNER(opts->accept_loop);
    nl_server_t *s;
    int err = server_alloc(&s, opts);
    if (err < 0)
        return err;
    server_shared_t *sh = s->shared;
    nl__conn_desc_init(&sh->desc, opts->cbs, opts->arg, opts->transport, opts->transport_arg);
    sh->desc.release = shared_release;
    sh->on_accept = opts->on_accept;
    sh->high_water_bytes = opts->high_water_bytes;
    sh->max_input_bytes = opts->max_input_bytes;
    sh->max_fd = opts->max_fd;
    sh->refusal_len = opts->refusal_len;
    if (opts->refusal_len > 0)
        memcpy(sh->refusal, opts->refusal, opts->refusal_len);
    err = server_open_listeners(s, opts);
    if (err < 0) {
        server_free_unstarted(s);
        return err;
    }
    s->lis_open = s->lis_count;
    s->deferred.finish = server_finish;
    nl__loop_handle_opened(s->loop);
    *out = s;
    return 0;
}

/* Runs fn on the listener's loop: directly when that is the accept loop, else by a post. */
static int server_on_lis(nl_server_t *s, listener_t *lis, nl_loop_post_cb fn)
{
    if (lis->loop == s->loop) {
        fn(lis);
        return 0;
    }
    return nl_loop_post(lis->loop, fn, lis);
}

int nl_server_start(nl_server_t *s)
{
    NL_ASSERT_OWNER(s->loop);
    if (s->is_closing)
        return -EINVAL;
    for (size_t i = 0; i < s->lis_count; i++) {
        listener_t *lis = &s->lis[i];
        int err =
            lis->loop == s->loop ? lis_start(lis) : nl_loop_post(lis->loop, lis_start_posted, lis);
        if (err < 0)
            return err;
    }
    return 0;
}

void nl_server_pause(nl_server_t *s)
{
    NL_ASSERT_OWNER(s->loop);
    if (s->is_closing)
        return;
    for (size_t i = 0; i < s->lis_count; i++) {
        if (server_on_lis(s, &s->lis[i], lis_pause_posted) < 0)
            NL_LOG(NL_WARN, "listen_pause_failed", "err=%s", nl_strerror(-ENOMEM));
    }
}

uint16_t nl_server_port(const nl_server_t *s)
{
    return s->port;
}

void nl_server_get_stats(const nl_server_t *s, nl_server_stats_t *out)
{
    out->accepted = __atomic_load_n(&s->shared->accepted, __ATOMIC_RELAXED);
    out->refused = __atomic_load_n(&s->shared->refused, __ATOMIC_RELAXED);
    out->emfile_events = __atomic_load_n(&s->shared->emfile_events, __ATOMIC_RELAXED);
}

/* Each listener closes on its own loop; the last one to report back (server_lis_closed) lets
 * the server be freed, so no loop can still be dispatching a listener's io when it goes. */
void nl_server_close(nl_server_t *s)
{
    NL_ASSERT_OWNER(s->loop);
    if (s->is_closing)
        return;
    s->is_closing = true;
    for (size_t i = 0; i < s->lis_count; i++) {
        listener_t *lis = &s->lis[i];
        if (lis->loop == s->loop) {
            lis_close(lis);
            server_lis_closed(s);
        } else {
            int err = nl_loop_post(lis->loop, lis_close_posted, lis);
            NL_ASSERT(err == 0);
        }
    }
}
