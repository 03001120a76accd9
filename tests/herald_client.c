/*
 * herald_client: one blocking test connection to herald (see herald_client.h). The fleet
 * lives in herald_fleet.c.
 *
 * Reads go through an nl_buf_t and proto_frame_decode, exactly as the server reads, so a
 * frame split over several segments or several frames in one segment need no special care.
 * Every wait is a poll() on the socket bounded by the caller's deadline.
 */
#include "herald_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_frame.h"

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

/* --- frame builders and descriptions ------------------------------------------------------ */

void test_frame_connect(Herald__Frame *f, Herald__Connect *body, const char *token)
{
    herald__frame__init(f);
    herald__connect__init(body);
    body->token = (char *)token;
    body->client_name = (char *)"herald-test";
    body->client_version = (char *)"1";
    f->body_case = HERALD__FRAME__BODY_CONNECT;
    f->connect = body;
}

void test_frame_subscribe(Herald__Frame *f, Herald__Subscribe *body, const char *channel)
{
    herald__frame__init(f);
    herald__subscribe__init(body);
    body->channel = (char *)channel;
    f->body_case = HERALD__FRAME__BODY_SUBSCRIBE;
    f->subscribe = body;
}

void test_frame_unsubscribe(Herald__Frame *f, Herald__Unsubscribe *body, const char *channel)
{
    herald__frame__init(f);
    herald__unsubscribe__init(body);
    body->channel = (char *)channel;
    f->body_case = HERALD__FRAME__BODY_UNSUBSCRIBE;
    f->unsubscribe = body;
}

void test_frame_publish(Herald__Frame *f, Herald__Publish *body, const char *channel,
                        const void *payload, size_t len)
{
    herald__frame__init(f);
    herald__publish__init(body);
    body->channel = (char *)channel;
    body->payload.data = (uint8_t *)payload;
    body->payload.len = len;
    f->body_case = HERALD__FRAME__BODY_PUBLISH;
    f->publish = body;
}

void test_frame_ping(Herald__Frame *f, Herald__Ping *body)
{
    herald__frame__init(f);
    herald__ping__init(body);
    f->body_case = HERALD__FRAME__BODY_PING;
    f->ping = body;
}

static const char *enum_name(const ProtobufCEnumDescriptor *d, int v)
{
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);
    return ev ? ev->name : "?";
}

const char *test_frame_str(const Herald__Frame *f, char *buf, size_t cap)
{
    int n =
        snprintf(buf, cap, "%s id=%llu", proto_body_name(f->body_case), (unsigned long long)f->id);
    if (n < 0 || (size_t)n >= cap)
        return buf;
    char *p = buf + n;
    size_t left = cap - (size_t)n;
    switch (f->body_case) {
    case HERALD__FRAME__BODY_ERROR:
        snprintf(p, left, " code=%s text=\"%s\" retry_after_ms=%u",
                 enum_name(&herald__error__code__descriptor, f->error->code), f->error->text,
                 f->error->retry_after_ms);
        break;
    case HERALD__FRAME__BODY_DISCONNECT:
        snprintf(p, left, " code=%s reason=\"%s\" reconnect=%d",
                 enum_name(&herald__disconnect__code__descriptor, f->disconnect->code),
                 f->disconnect->reason, (int)f->disconnect->reconnect);
        break;
    case HERALD__FRAME__BODY_PUSH:
        snprintf(p, left, " channel=%s offset=%llu payload_len=%zu", f->push->channel,
                 (unsigned long long)f->push->offset, f->push->payload.len);
        break;
    case HERALD__FRAME__BODY_PUBLISH_OK:
        snprintf(p, left, " offset=%llu", (unsigned long long)f->publish_ok->offset);
        break;
    case HERALD__FRAME__BODY_SUBSCRIBE_OK:
        snprintf(p, left, " offset=%llu epoch=%s", (unsigned long long)f->subscribe_ok->offset,
                 f->subscribe_ok->epoch);
        break;
    case HERALD__FRAME__BODY_CONNECT_OK:
        snprintf(p, left, " user=%s client=%s ping_ms=%u idle_ms=%u", f->connect_ok->user_id,
                 f->connect_ok->client_id, f->connect_ok->ping_interval_ms,
                 f->connect_ok->idle_timeout_ms);
        break;
    case HERALD__FRAME__BODY_PRESENCE_EVENT: {
        const Herald__PresenceEvent *e = f->presence_event;
        const Herald__ClientInfo *who = e->n_joined ? e->joined[0] : e->n_left ? e->left[0] : NULL;
        snprintf(p, left, " channel=%s joined=%zu left=%zu first: user=%s client=%s", e->channel,
                 e->n_joined, e->n_left, who ? who->user_id : "-", who ? who->client_id : "-");
        break;
    }
    case HERALD__FRAME__BODY_PRESENCE_RESPONSE:
        snprintf(p, left, " channel=%s clients=%zu num_clients=%u num_users=%u truncated=%d",
                 f->presence_response->channel, f->presence_response->n_clients,
                 f->presence_response->num_clients, f->presence_response->num_users,
                 (int)f->presence_response->truncated);
        break;
    default:
        break;
    }
    return buf;
}

const char *test_client_what(const test_client_t *c)
{
    return c->what;
}

/* Records "expected X, got <frame>" in c->what and returns -EPROTO. */
static int unexpected(test_client_t *c, const char *expected, const Herald__Frame *f)
{
    char fs[384];
    snprintf(c->what, sizeof(c->what), "expected %s, got %s", expected,
             f ? test_frame_str(f, fs, sizeof(fs)) : "nothing");
    if (f && f->body_case == HERALD__FRAME__BODY_ERROR)
        c->last_err_code = (int)f->error->code;
    return -EPROTO;
}

/* --- socket -------------------------------------------------------------------------------- */

int test_client_open(test_client_t *c, uint16_t port, int timeout_ms)
{
    memset(c, 0, sizeof(*c));
    nl_buf_init(&c->in, TEST_CLIENT_MAX_FRAME * 2);
    nl_buf_init(&c->out, TEST_CLIENT_MAX_FRAME * 2);
    c->next_id = 1;
    c->last_err_code = -1;
    c->last_reconnect = -1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -errno;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        int err = -errno;
        snprintf(c->what, sizeof(c->what), "connect: %s", strerror(-err));
        return err;
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
    if (poll(&pfd, 1, timeout_ms) != 1) {
        snprintf(c->what, sizeof(c->what), "connect timed out");
        return -ETIMEDOUT;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
        snprintf(c->what, sizeof(c->what), "connect: %s", strerror(soerr));
        return -soerr;
    }
    return 0;
}

void test_client_close(test_client_t *c)
{
    if (c->fd > 0)
        close(c->fd);
    c->fd = -1;
    for (size_t i = 0; i < c->n_kept; i++)
        proto_frame_free(c->kept[i]);
    free(c->kept);
    c->kept = NULL;
    c->n_kept = c->cap_kept = 0;
    nl_buf_deinit(&c->in);
    nl_buf_deinit(&c->out);
}

int test_client_set_rcvbuf(test_client_t *c, int bytes)
{
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0)
        return -errno;
    return 0;
}

int test_client_send_raw(test_client_t *c, const void *data, size_t len, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    const char *p = data;
    while (len > 0) {
        ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
            if (poll(&pfd, 1, ms_left(deadline)) != 1) {
                snprintf(c->what, sizeof(c->what), "send timed out with %zu bytes left", len);
                return -ETIMEDOUT;
            }
            continue;
        }
        if (w < 0) {
            int err = -errno;
            snprintf(c->what, sizeof(c->what), "send: %s", strerror(-err));
            return err;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int test_client_send(test_client_t *c, const Herald__Frame *f, int timeout_ms)
{
    nl_buf_retrieve_all(&c->out);
    int rc = proto_frame_append(&c->out, f);
    if (rc < 0)
        return rc;
    rc = test_client_send_raw(c, nl_buf_peek(&c->out), nl_buf_readable(&c->out), timeout_ms);
    nl_buf_retrieve_all(&c->out);
    return rc;
}

/* Reads one frame from the socket (not from the kept list). */
static int read_frame(test_client_t *c, Herald__Frame **out, int64_t deadline)
{
    for (;;) {
        int rc = proto_frame_decode(&c->in, TEST_CLIENT_MAX_FRAME, out);
        if (rc == 1)
            return 1;
        if (rc < 0) {
            snprintf(c->what, sizeof(c->what), "server bytes do not decode: %s", proto_err_str(rc));
            return rc;
        }
        if (c->is_eof)
            return 0;
        ssize_t n = nl_buf_read_fd(&c->in, c->fd);
        if (n > 0)
            continue;
        if (n == 0 || (n < 0 && n != -EAGAIN && n != -EINTR)) {
            c->is_eof = true; /* EOF or reset: whatever was read still decodes first */
            continue;
        }
        if (n == -EINTR)
            continue;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, ms_left(deadline));
        if (pr == 0) {
            snprintf(c->what, sizeof(c->what), "timed out waiting for a frame");
            return -ETIMEDOUT;
        }
    }
}

int test_client_recv(test_client_t *c, Herald__Frame **out, int timeout_ms)
{
    if (c->n_kept > 0) {
        *out = c->kept[0];
        memmove(c->kept, c->kept + 1, (c->n_kept - 1) * sizeof(c->kept[0]));
        c->n_kept--;
        return 1;
    }
    return read_frame(c, out, now_ms() + timeout_ms);
}

static int keep(test_client_t *c, Herald__Frame *f)
{
    if (c->n_kept == c->cap_kept) {
        size_t cap = c->cap_kept ? c->cap_kept * 2 : 64;
        Herald__Frame **k = realloc(c->kept, cap * sizeof(*k));
        if (!k)
            return -ENOMEM;
        c->kept = k;
        c->cap_kept = cap;
    }
    c->kept[c->n_kept++] = f;
    return 0;
}

int test_client_request(test_client_t *c, Herald__Frame *f, Herald__Frame **reply, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    uint64_t id = c->next_id++;
    f->id = id;
    int rc = test_client_send(c, f, timeout_ms);
    f->id = 0;
    if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
        return rc;
    /* Even when the send failed because the server closed, its last words may be readable. */
    for (;;) {
        Herald__Frame *r;
        rc = read_frame(c, &r, deadline);
        if (rc <= 0)
            return rc;
        bool is_fatal = r->body_case == HERALD__FRAME__BODY_ERROR ||
                        r->body_case == HERALD__FRAME__BODY_DISCONNECT;
        if (r->id == id || (r->id == 0 && is_fatal)) {
            *reply = r;
            return 1;
        }
        if (keep(c, r) < 0) {
            proto_frame_free(r);
            return -ENOMEM;
        }
    }
}

/* Sends f as a request and checks that the answer has body case want. The answer is returned
 * in *reply_out when wanted (else freed). */
static int request_expect(test_client_t *c, Herald__Frame *f, Herald__Frame__BodyCase want,
                          Herald__Frame **reply_out, int timeout_ms)
{
    Herald__Frame *r = NULL;
    c->last_err_code = -1;
    c->what[0] = '\0';
    int rc = test_client_request(c, f, &r, timeout_ms);
    if (rc == 0) {
        snprintf(c->what, sizeof(c->what), "expected %s, got EOF", proto_body_name(want));
        return -ECONNRESET;
    }
    if (rc < 0)
        return rc;
    if (r->body_case != want) {
        rc = unexpected(c, proto_body_name(want), r);
        proto_frame_free(r);
        return rc;
    }
    if (reply_out)
        *reply_out = r;
    else
        proto_frame_free(r);
    return 0;
}

int test_client_hello(test_client_t *c, const char *token, int timeout_ms)
{
    Herald__Frame f;
    Herald__Connect body;
    test_frame_connect(&f, &body, token);
    Herald__Frame *r;
    int rc = request_expect(c, &f, HERALD__FRAME__BODY_CONNECT_OK, &r, timeout_ms);
    if (rc < 0)
        return rc;
    snprintf(c->user_id, sizeof(c->user_id), "%s", r->connect_ok->user_id);
    snprintf(c->client_id, sizeof(c->client_id), "%s", r->connect_ok->client_id);
    c->ping_interval_ms = r->connect_ok->ping_interval_ms;
    c->idle_timeout_ms = r->connect_ok->idle_timeout_ms;
    c->max_frame_bytes = r->connect_ok->max_frame_bytes;
    proto_frame_free(r);
    return 0;
}

int test_client_auth(test_client_t *c, uint16_t port, const char *token, int timeout_ms)
{
    int rc = test_client_open(c, port, timeout_ms);
    if (rc < 0)
        return rc;
    return test_client_hello(c, token, timeout_ms);
}

int test_client_subscribe(test_client_t *c, const char *channel, uint64_t *offset, int timeout_ms)
{
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, channel);
    Herald__Frame *r;
    int rc = request_expect(c, &f, HERALD__FRAME__BODY_SUBSCRIBE_OK, &r, timeout_ms);
    if (rc < 0)
        return rc;
    if (offset)
        *offset = r->subscribe_ok->offset;
    proto_frame_free(r);
    return 0;
}

int test_client_subscribe_from(test_client_t *c, const char *channel, const char *epoch,
                               uint64_t offset, test_sub_ok_t *ok, int timeout_ms)
{
    Herald__Frame f;
    Herald__Subscribe body;
    test_frame_subscribe(&f, &body, channel);
    if (epoch) {
        body.recover = true;
        body.epoch = (char *)(uintptr_t)epoch;
        body.offset = offset;
    }
    Herald__Frame *r;
    int rc = request_expect(c, &f, HERALD__FRAME__BODY_SUBSCRIBE_OK, &r, timeout_ms);
    if (rc < 0)
        return rc;
    if (ok) {
        const Herald__SubscribeOk *so = r->subscribe_ok;
        ok->offset = so->offset;
        snprintf(ok->epoch, sizeof(ok->epoch), "%s", so->epoch ? so->epoch : "");
        ok->is_recovered = so->recovered;
        ok->is_recoverable = so->recoverable;
    }
    proto_frame_free(r);
    return 0;
}

int test_client_unsubscribe(test_client_t *c, const char *channel, int timeout_ms)
{
    Herald__Frame f;
    Herald__Unsubscribe body;
    test_frame_unsubscribe(&f, &body, channel);
    return request_expect(c, &f, HERALD__FRAME__BODY_UNSUBSCRIBE_OK, NULL, timeout_ms);
}

int test_client_publish(test_client_t *c, const char *channel, const void *payload, size_t len,
                        uint64_t *offset, int timeout_ms)
{
    return test_client_publish_ex(c, channel, payload, len, offset, NULL, timeout_ms);
}

int test_client_publish_ex(test_client_t *c, const char *channel, const void *payload, size_t len,
                           uint64_t *offset, char epoch[17], int timeout_ms)
{
    Herald__Frame f;
    Herald__Publish body;
    test_frame_publish(&f, &body, channel, payload, len);
    Herald__Frame *r;
    int rc = request_expect(c, &f, HERALD__FRAME__BODY_PUBLISH_OK, &r, timeout_ms);
    if (rc < 0)
        return rc;
    if (offset)
        *offset = r->publish_ok->offset;
    if (epoch)
        snprintf(epoch, 17, "%s", r->publish_ok->epoch ? r->publish_ok->epoch : "");
    proto_frame_free(r);
    return 0;
}

int test_client_ping(test_client_t *c, int timeout_ms)
{
    Herald__Frame f;
    Herald__Ping body;
    test_frame_ping(&f, &body);
    return request_expect(c, &f, HERALD__FRAME__BODY_PONG, NULL, timeout_ms);
}

/* Takes the next frame (kept first) into *out; returns 0, or a negative error described. */
static int next_frame(test_client_t *c, const char *expected, Herald__Frame **out, int timeout_ms)
{
    int rc = test_client_recv(c, out, timeout_ms);
    if (rc == 1)
        return 0;
    if (rc == 0) {
        snprintf(c->what, sizeof(c->what), "expected %s, got EOF", expected);
        return -ECONNRESET;
    }
    if (rc == -ETIMEDOUT)
        snprintf(c->what, sizeof(c->what), "expected %s, timed out", expected);
    return rc;
}

int test_client_expect_push(test_client_t *c, const char *channel, uint64_t offset,
                            Herald__Frame **frame_out, int timeout_ms)
{
    char expected[256];
    snprintf(expected, sizeof(expected), "push channel=%s offset=%llu", channel,
             (unsigned long long)offset);
    Herald__Frame *f;
    int rc = next_frame(c, expected, &f, timeout_ms);
    if (rc < 0)
        return rc;
    if (f->body_case != HERALD__FRAME__BODY_PUSH || strcmp(f->push->channel, channel) != 0 ||
        f->push->offset != offset) {
        rc = unexpected(c, expected, f);
        proto_frame_free(f);
        return rc;
    }
    if (frame_out)
        *frame_out = f;
    else
        proto_frame_free(f);
    return 0;
}

int test_client_expect_error(test_client_t *c, Herald__Error__Code code, int timeout_ms)
{
    char expected[96];
    snprintf(expected, sizeof(expected), "error code=%s",
             enum_name(&herald__error__code__descriptor, (int)code));
    Herald__Frame *f;
    int rc = next_frame(c, expected, &f, timeout_ms);
    if (rc < 0)
        return rc;
    if (f->body_case != HERALD__FRAME__BODY_ERROR || f->error->code != code)
        rc = unexpected(c, expected, f);
    proto_frame_free(f);
    return rc;
}

int test_client_expect_close(test_client_t *c, bool skip_pushes, int *disconnect_code,
                             int *error_code, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    if (disconnect_code)
        *disconnect_code = -1;
    if (error_code)
        *error_code = -1;
    c->last_reconnect = -1;
    for (;;) {
        Herald__Frame *f;
        int rc = test_client_recv(c, &f, ms_left(deadline));
        if (rc == 0)
            return 0;
        if (rc < 0) {
            if (rc == -ETIMEDOUT)
                snprintf(c->what, sizeof(c->what), "the server did not close in time");
            return rc;
        }
        if (f->body_case == HERALD__FRAME__BODY_DISCONNECT)
            c->last_reconnect = f->disconnect->reconnect ? 1 : 0;
        if (f->body_case == HERALD__FRAME__BODY_DISCONNECT && disconnect_code)
            *disconnect_code = (int)f->disconnect->code;
        else if (f->body_case == HERALD__FRAME__BODY_ERROR && error_code)
            *error_code = (int)f->error->code;
        else if (f->body_case != HERALD__FRAME__BODY_DISCONNECT &&
                 f->body_case != HERALD__FRAME__BODY_ERROR &&
                 !(skip_pushes && f->body_case == HERALD__FRAME__BODY_PUSH)) {
            rc = unexpected(c, "error, disconnect or close", f);
            proto_frame_free(f);
            return rc;
        }
        proto_frame_free(f);
    }
}

bool test_client_is_closed(test_client_t *c, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        Herald__Frame *f;
        int rc = read_frame(c, &f, deadline);
        if (rc == 0)
            return true;
        if (rc < 0)
            return rc != -ETIMEDOUT;
        if (keep(c, f) < 0) {
            proto_frame_free(f);
            return false;
        }
    }
}
