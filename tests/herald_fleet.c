/*
 * herald_fleet: many herald test connections on one epoll set (see herald_client.h).
 *
 * Each poll round has two steps. First the epoll events are serviced: a connect completes,
 * queued output is written, or input is read into the connection's buffer (one read per
 * event; the set is level-triggered, so what is left wakes the next round). A connection that
 * read something is put on the dirty list. Then every dirty connection's buffer is decoded and
 * its frames handed to the caller's callback, followed by a NULL frame once its EOF has been
 * seen and no whole frame is left. Reading never calls back directly, so bytes read while
 * connecting (test_fleet_open has no callback) simply wait for the next poll.
 *
 * test_fleet_connect opens one slot while the others run (a reconnect): its connect completes
 * in a poll round, which then sends what was queued on the slot meanwhile; a connect that
 * fails closes the slot and is reported to the callback like any close.
 */
#include "herald_client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_frame.h"

#define FLEET_EVENTS 1024
#define FLEET_SCRATCH (1u << 20) /* raw mode's read buffer */

enum fleet_state { FC_IDLE = 0, FC_CONNECTING, FC_OPEN, FC_CLOSED };

typedef struct fleet_conn_s {
    int fd;
    uint8_t state;
    bool is_dirty;
    bool is_eof;      /* EOF or error read; closes once the buffer holds no whole frame */
    bool is_writing;  /* EPOLLOUT armed */
    int close_reason; /* test_fleet_close_reason */
    nl_buf_t in;
    nl_buf_t out;
    uint64_t next_id;
    uint64_t wait_id; /* request awaited by a *_all helper, 0 when none */
} fleet_conn_t;

struct test_fleet_s {
    int ep;
    size_t n;
    fleet_conn_t *c;
    int rcvbuf;
    struct in_addr source; /* INADDR_ANY: the kernel's choice */
    bool is_rx_stamped;    /* SO_TIMESTAMPNS on new sockets; raw reads take the stamp */
    uint64_t rx_ns;        /* kernel receive time of the last raw read, CLOCK_REALTIME ns */
    size_t n_open;
    size_t *dirty;
    size_t n_dirty;
    struct epoll_event evs[FLEET_EVENTS];
    char *scratch; /* FLEET_SCRATCH bytes, allocated by the first raw poll */
    char what[512];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - now_ms();
    return left > 0 ? (int)left : 0;
}

int test_fleet_new(test_fleet_t **out, size_t n)
{
    test_fleet_t *fl = calloc(1, sizeof(*fl));
    if (!fl)
        return -ENOMEM;
    fl->c = calloc(n ? n : 1, sizeof(*fl->c));
    fl->dirty = calloc(n ? n : 1, sizeof(*fl->dirty));
    fl->ep = epoll_create1(EPOLL_CLOEXEC);
    if (!fl->c || !fl->dirty || fl->ep < 0) {
        int err = fl->ep < 0 ? -errno : -ENOMEM;
        test_fleet_free(fl);
        return err;
    }
    fl->n = n;
    for (size_t i = 0; i < n; i++) {
        fl->c[i].fd = -1;
        fl->c[i].next_id = 1;
        nl_buf_init(&fl->c[i].in, TEST_CLIENT_MAX_FRAME * 2);
        nl_buf_init(&fl->c[i].out, TEST_CLIENT_MAX_FRAME * 2);
    }
    *out = fl;
    return 0;
}

static void conn_close(test_fleet_t *fl, size_t i, int reason)
{
    fleet_conn_t *c = &fl->c[i];
    if (c->state == FC_CLOSED || c->state == FC_IDLE)
        return;
    if (c->state == FC_OPEN)
        fl->n_open--;
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->state = FC_CLOSED;
    c->close_reason = reason;
    nl_buf_deinit(&c->in);
    nl_buf_deinit(&c->out);
}

void test_fleet_free(test_fleet_t *fl)
{
    if (!fl)
        return;
    for (size_t i = 0; fl->c && i < fl->n; i++) {
        conn_close(fl, i, 0);
        nl_buf_deinit(&fl->c[i].in);
        nl_buf_deinit(&fl->c[i].out);
    }
    if (fl->ep >= 0)
        close(fl->ep);
    free(fl->scratch);
    free(fl->c);
    free(fl->dirty);
    free(fl);
}

void test_fleet_set_rcvbuf(test_fleet_t *fl, int bytes)
{
    fl->rcvbuf = bytes;
}

int test_fleet_set_source(test_fleet_t *fl, const char *ip)
{
    struct in_addr a;
    if (ip == NULL) {
        fl->source.s_addr = htonl(INADDR_ANY);
        return 0;
    }
    if (inet_pton(AF_INET, ip, &a) != 1)
        return -EINVAL;
    fl->source = a;
    return 0;
}

void test_fleet_set_rx_timestamps(test_fleet_t *fl, bool on)
{
    fl->is_rx_stamped = on;
}

uint64_t test_fleet_rx_time_ns(const test_fleet_t *fl)
{
    return fl->rx_ns;
}

/* recv that also takes the kernel's receive timestamp (SO_TIMESTAMPNS) into fl->rx_ns: for
 * TCP, the time the last segment read arrived at the socket. Fails like recv (-1, errno). */
static ssize_t recv_stamped(test_fleet_t *fl, int fd, char *buf, size_t len)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    ssize_t n = nl_recv_stamped(fd, &iov, 1, &fl->rx_ns);
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    return n;
}

size_t test_fleet_size(const test_fleet_t *fl)
{
    return fl->n;
}

size_t test_fleet_open_count(const test_fleet_t *fl)
{
    return fl->n_open;
}

bool test_fleet_is_open(const test_fleet_t *fl, size_t i)
{
    return fl->c[i].state == FC_OPEN;
}

int test_fleet_close_reason(const test_fleet_t *fl, size_t i)
{
    return fl->c[i].close_reason;
}

void test_fleet_close(test_fleet_t *fl, size_t i)
{
    conn_close(fl, i, 0);
}

const char *test_fleet_what(const test_fleet_t *fl)
{
    return fl->what;
}

static void mark_dirty(test_fleet_t *fl, size_t i)
{
    if (!fl->c[i].is_dirty) {
        fl->c[i].is_dirty = true;
        fl->dirty[fl->n_dirty++] = i;
    }
}

static int arm(test_fleet_t *fl, size_t i, uint32_t events, int op)
{
    struct epoll_event ev = {.events = events, .data.u64 = i};
    return epoll_ctl(fl->ep, op, fl->c[i].fd, &ev) == 0 ? 0 : -errno;
}

/* Starts a non-blocking connect on slot i. */
static int start_connect(test_fleet_t *fl, size_t i, const struct sockaddr_in *sa)
{
    fleet_conn_t *c = &fl->c[i];
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -errno;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fl->rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &fl->rcvbuf, sizeof(fl->rcvbuf));
    if (fl->source.s_addr != htonl(INADDR_ANY)) {
        struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr = fl->source};
        /* The port is picked at connect, for the destination: bind's own pick would spend a
         * port of the address's range per socket whatever the destination. */
        setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        if (bind(c->fd, (const struct sockaddr *)&src, sizeof(src)) != 0) {
            int err = -errno;
            close(c->fd);
            c->fd = -1;
            return err;
        }
    }
    if (fl->is_rx_stamped) {
        int on = 1;
        setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
    }
    if (connect(c->fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0 && errno != EINPROGRESS) {
        int err = -errno;
        close(c->fd);
        c->fd = -1;
        return err;
    }
    c->state = FC_CONNECTING;
    return arm(fl, i, EPOLLOUT, EPOLL_CTL_ADD);
}

static void flush_out(test_fleet_t *fl, size_t i);

/* Finishes the connect of slot i after EPOLLOUT. */
static int finish_connect(test_fleet_t *fl, size_t i)
{
    fleet_conn_t *c = &fl->c[i];
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr)
        return -soerr;
    c->state = FC_OPEN;
    fl->n_open++;
    int rc = arm(fl, i, EPOLLIN, EPOLL_CTL_MOD);
    if (rc == 0 && nl_buf_readable(&c->out) > 0)
        flush_out(fl, i); /* what test_fleet_connect's caller queued meanwhile */
    return rc;
}

/* Writes what slot i has queued; arms or disarms EPOLLOUT accordingly. */
static void flush_out(test_fleet_t *fl, size_t i)
{
    fleet_conn_t *c = &fl->c[i];
    while (nl_buf_readable(&c->out) > 0) {
        ssize_t w = send(c->fd, nl_buf_peek(&c->out), nl_buf_readable(&c->out), MSG_NOSIGNAL);
        if (w > 0) {
            nl_buf_retrieve(&c->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        /* The peer is gone: the read side will see EOF or the error. */
        nl_buf_retrieve_all(&c->out);
        break;
    }
    bool want = nl_buf_readable(&c->out) > 0;
    if (want != c->is_writing) {
        c->is_writing = want;
        arm(fl, i, want ? EPOLLIN | EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
    }
    if (!want)
        nl_buf_release(&c->out);
}

int test_fleet_send(test_fleet_t *fl, size_t i, const Herald__Frame *f)
{
    fleet_conn_t *c = &fl->c[i];
    if ((c->state != FC_OPEN && c->state != FC_CONNECTING) || c->is_eof)
        return -ENOTCONN;
    int rc = proto_frame_append(&c->out, f);
    if (rc < 0)
        return rc;
    if (c->state == FC_OPEN)
        flush_out(fl, i);
    return 0;
}

/* Services one epoll event on slot i. In raw mode reading is left to dispatch_raw. */
static int service(test_fleet_t *fl, size_t i, uint32_t events, bool is_raw)
{
    fleet_conn_t *c = &fl->c[i];
    if (c->state == FC_CONNECTING) {
        int rc = finish_connect(fl, i);
        if (rc < 0)
            snprintf(fl->what, sizeof(fl->what), "connect %zu: %s", i, strerror(-rc));
        return rc;
    }
    if (c->state != FC_OPEN || c->is_eof)
        return 0;
    if (events & EPOLLOUT)
        flush_out(fl, i);
    if (is_raw && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        mark_dirty(fl, i);
    } else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        ssize_t n = nl_buf_read_fd(&c->in, c->fd);
        if (n == 0 || (n < 0 && n != -EAGAIN && n != -EINTR)) {
            c->is_eof = true;
            c->close_reason = n == 0 ? 1 : (int)n;
            arm(fl, i, 0, EPOLL_CTL_DEL);
        }
        mark_dirty(fl, i);
    }
    return 0;
}

/* Decodes slot i's buffer and hands every frame to cb, then the close if EOF was seen. */
static void dispatch(test_fleet_t *fl, size_t i, test_fleet_frame_cb cb, void *arg)
{
    fleet_conn_t *c = &fl->c[i];
    c->is_dirty = false;
    while (c->state == FC_OPEN) {
        Herald__Frame *f;
        int rc = proto_frame_decode(&c->in, TEST_CLIENT_MAX_FRAME, &f);
        if (rc == 1) {
            if (cb)
                cb(fl, i, f, arg);
            proto_frame_free(f);
            continue;
        }
        if (rc < 0 || c->is_eof) {
            int reason = rc < 0 ? rc : c->close_reason;
            conn_close(fl, i, reason);
            if (cb)
                cb(fl, i, NULL, arg);
        } else if (nl_buf_readable(&c->in) == 0) {
            nl_buf_release(&c->in);
        }
        break;
    }
}

/* Raw mode: reads slot i straight into the fleet's scratch buffer, behind what was left over
 * last time, and hands it all to cb; what cb leaves is kept in the slot's buffer (usually a
 * partial frame). No allocation per read. */
static void dispatch_raw(test_fleet_t *fl, size_t i, test_fleet_raw_cb cb, void *arg)
{
    fleet_conn_t *c = &fl->c[i];
    c->is_dirty = false;
    if (c->state != FC_OPEN)
        return;
    size_t have = nl_buf_readable(&c->in);
    if (have > FLEET_SCRATCH / 2) {
        /* A frame larger than half the scratch: let the buffer gather it. */
        ssize_t n = nl_buf_read_fd(&c->in, c->fd);
        if (n == 0 || (n < 0 && n != -EAGAIN && n != -EINTR)) {
            c->is_eof = true;
            c->close_reason = n == 0 ? 1 : (int)n;
        }
        have = 0;
    } else {
        memcpy(fl->scratch, nl_buf_peek(&c->in), have);
        nl_buf_retrieve_all(&c->in);
        ssize_t n = fl->is_rx_stamped
                        ? recv_stamped(fl, c->fd, fl->scratch + have, FLEET_SCRATCH - have)
                        : recv(c->fd, fl->scratch + have, FLEET_SCRATCH - have, 0);
        if (n > 0) {
            have += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            c->is_eof = true;
            c->close_reason = n == 0 ? 1 : -errno;
        }
    }
    if (have > 0) {
        size_t used = cb(fl, i, fl->scratch, have, arg);
        if (used < have && nl_buf_append(&c->in, fl->scratch + used, have - used) < 0) {
            c->is_eof = true;
            c->close_reason = -ENOBUFS;
        }
    } else if (nl_buf_readable(&c->in) > 0) {
        size_t len = nl_buf_readable(&c->in);
        nl_buf_retrieve(&c->in, cb(fl, i, nl_buf_peek(&c->in), len, arg));
    }
    if (c->is_eof) {
        conn_close(fl, i, c->close_reason);
        cb(fl, i, NULL, 0, arg);
    } else if (nl_buf_readable(&c->in) == 0) {
        nl_buf_release(&c->in);
    }
}

/* One round: wait, service the events, then dispatch every dirty connection. */
static int poll_round(test_fleet_t *fl, int timeout_ms, test_fleet_frame_cb cb,
                      test_fleet_raw_cb raw, void *arg)
{
    int n = epoll_wait(fl->ep, fl->evs, FLEET_EVENTS, fl->n_dirty ? 0 : timeout_ms);
    if (n < 0 && errno != EINTR)
        return -errno;
    for (int k = 0; k < n; k++) {
        size_t i = (size_t)fl->evs[k].data.u64;
        int rc = service(fl, i, fl->evs[k].events, raw != NULL);
        if (rc < 0) {
            /* Only a connect fails here (test_fleet_connect): the slot closes, and the
             * callback hears of it as of any close. */
            conn_close(fl, i, rc);
            if (raw)
                raw(fl, i, NULL, 0, arg);
            else if (cb)
                cb(fl, i, NULL, arg);
        }
    }
    int serviced = (int)fl->n_dirty;
    /* A callback may send, which never marks dirty, so the list is stable while it runs. */
    for (size_t k = 0; k < fl->n_dirty; k++) {
        if (raw)
            dispatch_raw(fl, fl->dirty[k], raw, arg);
        else
            dispatch(fl, fl->dirty[k], cb, arg);
    }
    fl->n_dirty = 0;
    return n > serviced ? n : serviced;
}

int test_fleet_poll(test_fleet_t *fl, int timeout_ms, test_fleet_frame_cb cb, void *arg)
{
    return poll_round(fl, timeout_ms, cb, NULL, arg);
}

int test_fleet_poll_raw(test_fleet_t *fl, int timeout_ms, test_fleet_raw_cb cb, void *arg)
{
    if (!fl->scratch && !(fl->scratch = malloc(FLEET_SCRATCH)))
        return -ENOMEM;
    return poll_round(fl, timeout_ms, NULL, cb, arg);
}

int test_fleet_send_raw(test_fleet_t *fl, size_t i, const void *data, size_t len)
{
    fleet_conn_t *c = &fl->c[i];
    if ((c->state != FC_OPEN && c->state != FC_CONNECTING) || c->is_eof)
        return -ENOTCONN;
    int rc = nl_buf_append(&c->out, data, len);
    if (rc < 0)
        return rc;
    if (c->state == FC_OPEN)
        flush_out(fl, i);
    return 0;
}

int test_fleet_connect(test_fleet_t *fl, size_t i, uint16_t port)
{
    fleet_conn_t *c = &fl->c[i];
    if (c->state == FC_CONNECTING || c->state == FC_OPEN)
        return -EISCONN;
    /* A closed slot starts over; its buffers were freed by the close. */
    nl_buf_deinit(&c->in);
    nl_buf_deinit(&c->out);
    nl_buf_init(&c->in, TEST_CLIENT_MAX_FRAME * 2);
    nl_buf_init(&c->out, TEST_CLIENT_MAX_FRAME * 2);
    c->is_eof = false;
    c->is_writing = false;
    c->close_reason = 0;
    c->wait_id = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = start_connect(fl, i, &sa);
    if (rc < 0) {
        c->state = FC_CLOSED;
        c->close_reason = rc;
    }
    return rc;
}

int test_fleet_open(test_fleet_t *fl, uint16_t port, size_t in_flight, int timeout_ms)
{
    return test_fleet_open_ports(fl, &port, 1, in_flight, timeout_ms);
}

int test_fleet_open_ports(test_fleet_t *fl, const uint16_t *ports, size_t n_ports, size_t in_flight,
                          int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!in_flight)
        in_flight = 256;
    size_t started = 0;
    size_t done = 0;
    while (done < fl->n) {
        while (started < fl->n && started - done < in_flight) {
            sa.sin_port = htons(ports[started % n_ports]);
            int rc = start_connect(fl, started++, &sa);
            if (rc < 0) {
                snprintf(fl->what, sizeof(fl->what), "connect %zu: %s", started - 1, strerror(-rc));
                return rc;
            }
        }
        if (ms_left(deadline) == 0) {
            snprintf(fl->what, sizeof(fl->what), "%zu of %zu connects done in time", done, fl->n);
            return -ETIMEDOUT;
        }
        int n = epoll_wait(fl->ep, fl->evs, FLEET_EVENTS, ms_left(deadline));
        for (int k = 0; k < n; k++) {
            size_t i = (size_t)fl->evs[k].data.u64;
            bool was_connecting = fl->c[i].state == FC_CONNECTING;
            int rc = service(fl, i, fl->evs[k].events, false);
            if (rc < 0)
                return rc;
            done += was_connecting;
        }
    }
    return 0;
}

/* State of a request sent to every connection and awaited by the *_all helpers. */
typedef struct req_all_s {
    Herald__Frame__BodyCase want;
    uint64_t *offsets;
    test_fleet_frame_cb cb;
    void *arg;
    size_t pending;
    bool has_failed;
} req_all_t;

static void req_all_cb(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg)
{
    req_all_t *r = arg;
    fleet_conn_t *c = &fl->c[i];
    bool is_fatal = f && (f->body_case == HERALD__FRAME__BODY_ERROR ||
                          f->body_case == HERALD__FRAME__BODY_DISCONNECT);
    bool is_answer = c->wait_id && (!f || f->id == c->wait_id || (f->id == 0 && is_fatal));
    if (!is_answer) {
        if (r->cb)
            r->cb(fl, i, f, r->arg);
        return;
    }
    c->wait_id = 0;
    r->pending--;
    if (f && f->body_case == r->want) {
        if (r->offsets && f->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK)
            r->offsets[i] = f->subscribe_ok->offset;
        return;
    }
    if (!r->has_failed) {
        char fs[384];
        snprintf(fl->what, sizeof(fl->what), "connection %zu: expected %s, got %s", i,
                 proto_body_name(r->want), f ? test_frame_str(f, fs, sizeof(fs)) : "close");
    }
    r->has_failed = true;
    /* A Disconnect is the server's last frame: the connection is over (counted as its EOF)
     * even if the close itself has not been read yet, so open counts leave it out. */
    if (f && f->body_case == HERALD__FRAME__BODY_DISCONNECT) {
        conn_close(fl, i, 1);
        f = NULL;
    }
    if (!f && r->cb)
        r->cb(fl, i, f, r->arg);
}

/* Sends f (adjusted per connection by fill, when given) to every open connection and waits
 * for every answer. */
static int request_all(test_fleet_t *fl, Herald__Frame *f, req_all_t *r,
                       void (*fill)(Herald__Frame *f, size_t i, void *arg), void *fill_arg,
                       int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    size_t sent = 0;
    for (size_t i = 0; i < fl->n; i++) {
        fleet_conn_t *c = &fl->c[i];
        if (c->state != FC_OPEN || c->is_eof)
            continue;
        if (fill)
            fill(f, i, fill_arg);
        f->id = c->next_id++;
        c->wait_id = f->id;
        if (test_fleet_send(fl, i, f) == 0) {
            r->pending++;
            sent++;
        } else {
            c->wait_id = 0;
        }
    }
    f->id = 0;
    while (r->pending > 0 && ms_left(deadline) > 0) {
        int rc = test_fleet_poll(fl, ms_left(deadline), req_all_cb, r);
        if (rc < 0)
            return rc;
    }
    if (r->pending > 0) {
        if (!r->has_failed)
            snprintf(fl->what, sizeof(fl->what), "%zu of %zu %s answers missing", r->pending, sent,
                     proto_body_name(r->want));
        for (size_t i = 0; i < fl->n; i++)
            fl->c[i].wait_id = 0;
        return -ETIMEDOUT;
    }
    return r->has_failed ? -EPROTO : 0;
}

/* Per-connection strings for the Connect token or the Subscribe channel. */
typedef struct fill_s {
    const char *(*string_of)(size_t i, void *arg);
    void *arg;
} fill_t;

static void fill_token(Herald__Frame *f, size_t i, void *arg)
{
    fill_t *fi = arg;
    f->connect->token = (char *)fi->string_of(i, fi->arg);
}

static void fill_channel(Herald__Frame *f, size_t i, void *arg)
{
    fill_t *fi = arg;
    f->subscribe->channel = (char *)fi->string_of(i, fi->arg);
}

int test_fleet_hello_all(test_fleet_t *fl, const char *token,
                         const char *(*token_of)(size_t i, void *arg), void *arg, int timeout_ms)
{
    Herald__Frame f;
    Herald__Connect body;
    test_frame_connect(&f, &body, token);
    req_all_t r = {.want = HERALD__FRAME__BODY_CONNECT_OK};
    fill_t fi = {.string_of = token_of, .arg = arg};
    return request_all(fl, &f, &r, token_of ? fill_token : NULL, &fi, timeout_ms);
}

int test_fleet_open_hello(test_fleet_t *fl, const uint16_t *ports, size_t n_ports, size_t in_flight,
                          const char *token, const char *(*token_of)(size_t i, void *arg),
                          void *arg, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!in_flight)
        in_flight = 256;
    req_all_t r = {.want = HERALD__FRAME__BODY_CONNECT_OK};
    size_t started = 0;
    while (started < fl->n || r.pending > 0) {
        /* A window of in_flight connections between connect() and ConnectOk, each sending
         * its Connect as soon as it is connected (queued now, written by the connect). */
        while (started < fl->n && r.pending < in_flight) {
            size_t i = started++;
            fleet_conn_t *c = &fl->c[i];
            sa.sin_port = htons(ports[i % n_ports]);
            int rc = start_connect(fl, i, &sa);
            if (rc < 0) {
                snprintf(fl->what, sizeof(fl->what), "connect %zu: %s", i, strerror(-rc));
                return rc;
            }
            Herald__Frame f;
            Herald__Connect body;
            test_frame_connect(&f, &body, token_of ? token_of(i, arg) : token);
            f.id = c->next_id++;
            c->wait_id = f.id;
            if ((rc = test_fleet_send(fl, i, &f)) < 0)
                return rc;
            r.pending++;
        }
        if (ms_left(deadline) == 0) {
            snprintf(fl->what, sizeof(fl->what), "%zu of %zu connections answered in time",
                     started - r.pending, fl->n);
            for (size_t i = 0; i < fl->n; i++)
                fl->c[i].wait_id = 0;
            return -ETIMEDOUT;
        }
        int rc = test_fleet_poll(fl, ms_left(deadline), req_all_cb, &r);
        if (rc < 0)
            return rc;
    }
    return r.has_failed ? -EPROTO : 0;
}

int test_fleet_subscribe_all(test_fleet_t *fl, const char *channel, uint64_t *offsets,
                             test_fleet_frame_cb cb, void *arg, int timeout_ms)
{
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, channel);
    req_all_t r = {
        .want = HERALD__FRAME__BODY_SUBSCRIBE_OK, .offsets = offsets, .cb = cb, .arg = arg};
    return request_all(fl, &f, &r, NULL, NULL, timeout_ms);
}

int test_fleet_subscribe_each(test_fleet_t *fl, const char *(*channel_of)(size_t i, void *arg),
                              void *arg, int timeout_ms)
{
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, "");
    req_all_t r = {.want = HERALD__FRAME__BODY_SUBSCRIBE_OK};
    fill_t fi = {.string_of = channel_of, .arg = arg};
    return request_all(fl, &f, &r, fill_channel, &fi, timeout_ms);
}

int test_fleet_ping_all(test_fleet_t *fl, test_fleet_frame_cb cb, void *arg, int timeout_ms)
{
    Herald__Frame f;
    Herald__Ping body;
    test_frame_ping(&f, &body);
    req_all_t r = {.want = HERALD__FRAME__BODY_PONG, .cb = cb, .arg = arg};
    return request_all(fl, &f, &r, NULL, NULL, timeout_ms);
}
