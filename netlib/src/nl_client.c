/*
 * nl_client: outgoing connections with connect timeout, retry and reconnect (see nl_client.h).
 *
 * States: IDLE (nothing pending) -> BACKOFF (timer armed for the next attempt) -> CONNECTING
 * (socket in progress, the same timer armed for the connect timeout) -> CONNECTED (the client
 * holds its nl_conn_t). A failed attempt goes back to BACKOFF, or to IDLE once max_attempts
 * failed. Attempts always start from the timer, never inside an fd callback: the watcher is
 * embedded and re-initialised per attempt, and the loop dispatches fd events before timers,
 * so no event of an earlier attempt can reach the new one.
 *
 * Back-off: "full jitter" (AWS architecture blog, Exponential Backoff And Jitter): after the
 * k-th consecutive failure the delay is uniform in [0, min(retry_max, retry_initial * 2^(k-1))].
 * Synchronised clients (a node restart drops thousands at once) then spread out instead of
 * returning in waves. A reconnect after a close waits uniform in [0, retry_initial].
 *
 * Closing: nl_client_close stops everything at once; a pending attempt (connecting or waiting)
 * completes once via on_retry(-ECANCELED) at the end of the iteration. With a connection the
 * client is freed right after that connection's on_close, so it never outlives its client.
 */
#include "netlib/nl_client.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netlib/nl_timer.h"
#include "nl_conn_int.h"

#define NL__CLIENT_TIMEOUT_MS 5000u
#define NL__CLIENT_RETRY_INITIAL_MS 100u
#define NL__CLIENT_RETRY_MAX_MS 10000u

enum { CL_IDLE, CL_BACKOFF, CL_CONNECTING, CL_CONNECTED };

struct nl_client_s {
    nl_loop_t *loop;
    struct nl_io_s io; /* the socket while CONNECTING */
    nl_timer_t *timer; /* connect timeout or back-off */
    nl_conn_t *conn;
    /* The connection's callbacks, arg and transport. Not freed by its references: the
     * client outlives its connection (freed after the connection's finish). */
    nl__conn_desc_t desc;
    nl_client_retry_cb on_retry;
    struct sockaddr_storage addr;
    struct sockaddr_storage src;
    socklen_t addr_len;
    socklen_t src_len; /* 0: no source bind */
    uint64_t connect_timeout_ms;
    uint64_t retry_initial_ms;
    uint64_t retry_max_ms;
    uint64_t rng;
    int max_attempts;
    int attempts; /* consecutive failures in this round */
    int fd;       /* the connecting socket, or -1 */
    uint8_t state;
    bool is_reconnect;
    bool is_closing;
    bool is_cancel_owed;
    nl__deferred_t deferred;
};

/* xorshift64*: jitter needs spread, not cryptographic quality. */
static uint64_t client_rand(nl_client_t *cl)
{
    uint64_t x = cl->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    cl->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, cap]; cap may be UINT64_MAX (cap + 1 would wrap to 0). */
static uint64_t client_rand_upto(nl_client_t *cl, uint64_t cap)
{
    uint64_t r = client_rand(cl);
    return cap == UINT64_MAX ? r : r % (cap + 1);
}

/* The delay after the attempts-th consecutive failure (see the top of the file). */
static uint64_t client_backoff_ms(nl_client_t *cl)
{
    uint64_t cap = cl->retry_initial_ms;
    for (int i = 1; i < cl->attempts && cap < cl->retry_max_ms; i++)
        cap = cap > cl->retry_max_ms / 2 ? cl->retry_max_ms : cap * 2;
    if (cap > cl->retry_max_ms)
        cap = cl->retry_max_ms;
    return client_rand_upto(cl, cap);
}

static void client_drop_socket(nl_client_t *cl)
{
    if (cl->fd < 0)
        return;
    nl__io_deinit(&cl->io);
    close(cl->fd);
    cl->fd = -1;
}

static void client_attempt_failed(nl_client_t *cl, int err)
{
    client_drop_socket(cl);
    nl_timer_stop(cl->timer);
    cl->attempts++;
    bool will_retry = cl->max_attempts == 0 || cl->attempts < cl->max_attempts;
    uint64_t delay_ms = will_retry ? client_backoff_ms(cl) : 0;
    cl->state = will_retry ? CL_BACKOFF : CL_IDLE;
    if (will_retry)
        nl_timer_start(cl->timer, delay_ms, 0);
    /* nl_client_close inside the callback cancels the retry just armed. */
    if (cl->on_retry)
        cl->on_retry(cl, err, will_retry, delay_ms);
}

static void client_connected(nl_client_t *cl, int fd)
{
    nl__conn_setup_t setup = {.desc = &cl->desc};
    nl_conn_t *c;
    int err = nl__conn_new(&c, cl->loop, fd, &setup);
    if (err < 0) {
        close(fd);
        client_attempt_failed(cl, err);
        return;
    }
    cl->conn = c;
    cl->state = CL_CONNECTED;
    if (nl_conn_state(c) == NL_CONN_CONNECTED)
        cl->attempts = 0; /* else once the handshake is done: nl__client_conn_ready */
    nl__conn_start(c);
}

static void client_on_io(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    NL_UNUSED(events);
    nl_client_t *cl = arg;
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    int err = 0;
    if (getsockopt(cl->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        err = -errno;
    else
        err = -soerr;
    if (err < 0) {
        client_attempt_failed(cl, err);
        return;
    }
    /* The socket leaves the client's watcher for the connection's. */
    int fd = cl->fd;
    nl__io_deinit(&cl->io);
    cl->fd = -1;
    nl_timer_stop(cl->timer);
    client_connected(cl, fd);
}

/* Opens the socket, binds the source address if asked, and starts connecting. */
static int client_open(nl_client_t *cl, int *out_fd)
{
    int fd = socket(cl->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (cl->src_len > 0) {
        /* Let connect pick the source port per destination, so one source address serves more
         * than the ~28k ephemeral ports across targets (load generators). */
        int one = 1;
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)&cl->src, cl->src_len) < 0) {
            int err = -errno;
            close(fd);
            return err;
        }
    }
    *out_fd = fd;
    if (connect(fd, (const struct sockaddr *)&cl->addr, cl->addr_len) == 0)
        return 0;
    int err = -errno;
    if (err == -EINPROGRESS)
        return 1;
    close(fd);
    return err;
}

static void client_attempt(nl_client_t *cl)
{
    int fd = -1;
    int rc = client_open(cl, &fd);
    if (rc < 0) {
        client_attempt_failed(cl, rc);
        return;
    }
    if (rc == 0) {
        client_connected(cl, fd);
        return;
    }
    cl->fd = fd;
    cl->state = CL_CONNECTING;
    nl__io_init(&cl->io, cl->loop, fd, client_on_io, cl);
    int err = nl_io_set(&cl->io, NL_WRITE);
    if (err < 0) {
        client_attempt_failed(cl, err);
        return;
    }
    nl_timer_start(cl->timer, cl->connect_timeout_ms, 0);
}

static void client_on_timer(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    nl_client_t *cl = arg;
    if (cl->state == CL_CONNECTING)
        client_attempt_failed(cl, -ETIMEDOUT);
    else if (cl->state == CL_BACKOFF)
        client_attempt(cl);
}

static void client_free(nl_client_t *cl)
{
    nl_timer_close(cl->timer, NULL);
    nl__loop_handle_closed(cl->loop);
    nl__poison(cl, sizeof(*cl));
    free(cl);
}

static void client_finish(nl__deferred_t *d)
{
    nl_client_t *cl = (nl_client_t *)((char *)d - offsetof(nl_client_t, deferred));
    if (cl->is_cancel_owed && cl->on_retry)
        cl->on_retry(cl, -ECANCELED, false, 0);
    nl__conn_loop_t *st = nl__conn_loop_state(cl->loop, false);
    client_free(cl);
    if (st)
        nl__conn_flush_soon(st);
}

void nl__client_conn_ready(nl_client_t *cl)
{
    cl->attempts = 0;
}

void nl__client_conn_finished(nl_client_t *cl, nl_conn_t *c, bool is_failed, int reason)
{
    NL_ASSERT(cl->conn == c);
    cl->conn = NULL;
    if (cl->is_closing) {
        /* A handshake cut short by nl_client_close is a pending attempt: it completes once. */
        if (is_failed && cl->on_retry)
            cl->on_retry(cl, -ECANCELED, false, 0);
        client_free(cl);
        return;
    }
    if (is_failed) {
        /* The handshake failed: an attempt like a refused connect (reason 0 would read as
         * success to on_retry). */
        client_attempt_failed(cl, reason < 0 ? reason : -ECONNABORTED);
        return;
    }
    cl->state = CL_IDLE;
    if (cl->is_reconnect) {
        cl->attempts = 0;
        cl->state = CL_BACKOFF;
        nl_timer_start(cl->timer, client_rand_upto(cl, cl->retry_initial_ms), 0);
    }
}

static void client_apply_opts(nl_client_t *cl, const nl_client_opts_t *opts)
{
    nl__conn_desc_init(&cl->desc, opts->cbs, opts->arg, opts->transport, opts->transport_arg);
    cl->desc.client = cl;
    cl->on_retry = opts->on_retry;
    cl->connect_timeout_ms =
        opts->connect_timeout_ms ? opts->connect_timeout_ms : NL__CLIENT_TIMEOUT_MS;
    cl->retry_initial_ms =
        opts->retry_initial_ms ? opts->retry_initial_ms : NL__CLIENT_RETRY_INITIAL_MS;
    cl->retry_max_ms = opts->retry_max_ms ? opts->retry_max_ms : NL__CLIENT_RETRY_MAX_MS;
    if (cl->retry_max_ms < cl->retry_initial_ms)
        cl->retry_max_ms = cl->retry_initial_ms;
    cl->max_attempts = opts->max_attempts > 0 ? opts->max_attempts : 0;
    cl->is_reconnect = opts->reconnect;
    cl->rng = (nl_now_ns() ^ (uint64_t)(uintptr_t)cl) | 1;
}

int nl_client_new(nl_client_t **out, nl_loop_t *loop, const nl_client_opts_t *opts)
{
    NL_ASSERT_OWNER(loop);
    if (!opts || !opts->host)
        return -EINVAL;
    nl_client_t *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return -ENOMEM;
    cl->loop = loop;
    cl->fd = -1;
    int err = nl__sockaddr_parse(opts->host, opts->port, &cl->addr, &cl->addr_len);
    if (err == 0 && opts->source_host)
        err = nl__sockaddr_parse(opts->source_host, 0, &cl->src, &cl->src_len);
    if (err == 0 && cl->src_len > 0 && cl->src.ss_family != cl->addr.ss_family)
        err = -EINVAL;
    if (err == 0)
        err = nl_timer_new(&cl->timer, loop, client_on_timer, cl);
    if (err < 0) {
        free(cl);
        return err;
    }
    client_apply_opts(cl, opts);
    nl__loop_handle_opened(loop);
    *out = cl;
    return 0;
}

int nl_client_connect(nl_client_t *cl)
{
    NL_ASSERT_OWNER(cl->loop);
    if (cl->is_closing)
        return -EINVAL;
    if (cl->state != CL_IDLE)
        return -EALREADY;
    cl->attempts = 0;
    cl->state = CL_BACKOFF;
    return nl_timer_start(cl->timer, 0, 0);
}

nl_conn_t *nl_client_conn(const nl_client_t *cl)
{
    return cl->conn;
}

void *nl_client_arg(const nl_client_t *cl)
{
    return cl->desc.arg;
}

void nl_client_close(nl_client_t *cl)
{
    NL_ASSERT_OWNER(cl->loop);
    if (cl->is_closing)
        return;
    cl->is_closing = true;
    nl_timer_stop(cl->timer);
    if (cl->state == CL_CONNECTING || cl->state == CL_BACKOFF) {
        cl->is_cancel_owed = true;
        client_drop_socket(cl);
    }
    cl->state = CL_IDLE;
    if (cl->conn) {
        /* The connection's finish frees the client after on_close. */
        nl_conn_close(cl->conn, 0);
        return;
    }
    cl->deferred.finish = client_finish;
    nl__conn_defer(cl->loop, &cl->deferred);
}
