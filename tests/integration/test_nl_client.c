/*
 * test_nl_client: nl_client on loopback: refused connects retried with full-jitter back-off
 * until a listener appears on the port, the connect timeout, max_attempts, close while
 * connecting or waiting (-ECANCELED exactly once), reconnect after the server closes, and a
 * source address bind. Also what a client sees of the server and of its connection on one
 * loop: on_accept refusing, a paused server, the input cap pausing reading without spinning,
 * and input storage held only while bytes wait in it.
 *
 * Loopback-only tricks: a socket bound with SO_REUSEADDR but not listening owns a port that
 * refuses connections, and a listener may later bind the same port (neither listens until then).
 * A listener with backlog 0 whose one queue slot is taken drops further SYNs, so a connect to
 * it stays in progress: that is how the timeout and the cancel are reached without a
 * non-routable address.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"
#include "netlib/nl_timer.h"

#define DEADLINE_MS 30000
#define MAX_RETRIES 64

typedef struct env_s env_t;
typedef bool (*env_pred_t)(env_t *e);

typedef struct retry_s {
    int status;
    bool will_retry;
    uint64_t delay_ms;
} retry_t;

struct env_s {
    nl_loop_t *loop;
    nl_timer_t *deadline;
    bool is_expired;
    nl_client_t *cl;
    nl_server_t *srv;
    int placeholder_fd; /* bound, not listening: refuses */
    uint16_t port;
    retry_t retries[MAX_RETRIES];
    int retry_count;
    int retries_before_listen; /* start the listener after this many refusals (0: never) */
    int connects;
    int closes;
    int last_close_reason;
    int srv_accepts;
    int srv_closes;
    int close_client_at_connect; /* nl_client_close in on_connected number N (0: never) */
    char srv_peer[64];
    bool is_client_closed_in_retry;
    int refuse_accepts;    /* on_accept refuses this many connections first */
    nl_conn_t *srv_conn;   /* the last server-side connection */
    nl_buf_t *srv_in;      /* its input buffer, as on_message saw it */
    size_t srv_bytes;      /* bytes the server consumed */
    size_t srv_consume_at; /* consume only once this many bytes are buffered (0: always) */
    int srv_messages;
    bool is_srv_consuming;
    size_t cli_send_bytes; /* the client sends this many bytes when connected */
};

static void on_deadline(nl_timer_t *t, void *arg)
{
    (void)t;
    env_t *e = arg;
    e->is_expired = true;
}

static int setup(void **state)
{
    env_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    e->placeholder_fd = -1;
    assert_int_equal(nl_loop_new(&e->loop, NULL), 0);
    assert_int_equal(nl_timer_new(&e->deadline, e->loop, on_deadline, e), 0);
    assert_int_equal(nl_timer_start(e->deadline, DEADLINE_MS, 0), 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    if (e->srv)
        nl_server_close(e->srv);
    if (e->placeholder_fd >= 0)
        close(e->placeholder_fd);
    nl_timer_close(e->deadline, NULL);
    assert_int_equal(nl_loop_run_once(e->loop, 0), 0);
    assert_int_equal(nl_loop_free(e->loop), 0);
    free(e);
    return 0;
}

static void env_run_until(env_t *e, env_pred_t done)
{
    while (!done(e) && !e->is_expired)
        assert_int_equal(nl_loop_run_once(e->loop, -1), 0);
    assert_false(e->is_expired);
}

/* Runs iterations for about ms milliseconds of loop time (bounded by the deadline), to show
 * that nothing more happens. The loop waits on its own timer, not on a sleep. */
static void env_run_for(env_t *e, int ms)
{
    uint64_t end = nl_loop_now_ms(e->loop) + (uint64_t)ms;
    while (nl_loop_now_ms(e->loop) < end && !e->is_expired)
        assert_int_equal(nl_loop_run_once(e->loop, ms), 0);
}

/* A port that refuses: bound with SO_REUSEADDR, never listening. */
static void env_refusing_port(env_t *e)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int one = 1;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    socklen_t len = sizeof(sin);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    e->placeholder_fd = fd;
    e->port = ntohs(sin.sin_port);
}

/* A listener whose accept queue is full (backlog 0, one connection queued, never accepted):
 * further SYNs are dropped and connects stay in progress. Returns the two fds to close. */
static void env_full_backlog_port(env_t *e, int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(l >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(l, 0), 0);
    socklen_t len = sizeof(sin);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &len), 0);
    int f = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f >= 0);
    assert_int_equal(connect(f, (struct sockaddr *)&sin, sizeof(sin)), 0);
    fds[0] = l;
    fds[1] = f;
    e->port = ntohs(sin.sin_port);
}

/* --- server side ------------------------------------------------------------------------- */

static void srv_connected(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    e->srv_accepts++;
    e->srv_conn = c;
    assert_int_equal(nl_conn_peer(c, e->srv_peer, sizeof(e->srv_peer)), 0);
    /* In the reconnect test the server hangs up on the first two connections. */
    if (e->close_client_at_connect > 0 && e->srv_accepts < e->close_client_at_connect)
        nl_conn_close(c, 0);
}

static void srv_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
    (void)reason;
    e->srv_closes++;
}

static void srv_message(nl_conn_t *c, nl_buf_t *in)
{
    env_t *e = nl_conn_ctx(c);
    e->srv_messages++;
    e->srv_in = in;
    size_t n = nl_buf_readable(in);
    if (e->is_srv_consuming && n >= e->srv_consume_at) {
        e->srv_bytes += n;
        nl_buf_retrieve_all(in);
    }
}

static const nl_conn_cbs_t srv_cbs = {
    .on_connected = srv_connected,
    .on_message = srv_message,
    .on_close = srv_close,
};

static bool srv_accept(nl_loop_t *loop, int fd, void *arg)
{
    env_t *e = arg;
    assert_ptr_equal(loop, e->loop);
    assert_true(fd >= 0);
    if (e->refuse_accepts > 0) {
        e->refuse_accepts--;
        return false;
    }
    return true;
}

static void env_listen_opts(env_t *e, uint16_t port, size_t max_input_bytes)
{
    nl_server_opts_t so = {
        .host = "127.0.0.1",
        .port = port,
        .accept_loop = e->loop,
        .cbs = &srv_cbs,
        .on_accept = srv_accept,
        .arg = e,
        .max_input_bytes = max_input_bytes,
    };
    assert_int_equal(nl_server_new(&e->srv, &so), 0);
    assert_int_equal(nl_server_start(e->srv), 0);
    e->port = nl_server_port(e->srv);
}

static void env_listen(env_t *e, uint16_t port)
{
    env_listen_opts(e, port, 0);
}

/* --- client side ------------------------------------------------------------------------- */

static void cli_connected(nl_conn_t *c)
{
    env_t *e = nl_conn_ctx(c);
    e->connects++;
    if (e->cli_send_bytes > 0) {
        static uint8_t junk[256 * 1024];
        assert_true(e->cli_send_bytes <= sizeof(junk));
        assert_int_equal(nl_conn_send(c, junk, e->cli_send_bytes), 0);
    }
    assert_ptr_equal(nl_client_of(c), e->cl);
    assert_ptr_equal(nl_client_conn(e->cl), c);
    assert_int_equal(nl_conn_state(c), NL_CONN_CONNECTED);
    if (e->close_client_at_connect > 0 && e->connects == e->close_client_at_connect)
        nl_client_close(e->cl);
}

static void cli_close(nl_conn_t *c, int reason)
{
    env_t *e = nl_conn_ctx(c);
    e->closes++;
    e->last_close_reason = reason;
}

static const nl_conn_cbs_t cli_cbs = {
    .on_connected = cli_connected,
    .on_close = cli_close,
};

static void cli_retry(nl_client_t *cl, int status, bool will_retry, uint64_t delay_ms)
{
    env_t *e = nl_client_arg(cl);
    assert_true(e->retry_count < MAX_RETRIES);
    e->retries[e->retry_count++] = (retry_t){status, will_retry, delay_ms};
    if (e->retries_before_listen > 0 && e->retry_count == e->retries_before_listen) {
        /* The port's owner becomes a listener: the next attempt connects. */
        env_listen(e, e->port);
        close(e->placeholder_fd);
        e->placeholder_fd = -1;
    }
    if (e->is_client_closed_in_retry)
        nl_client_close(cl);
}

static nl_client_t *env_client(env_t *e, nl_client_opts_t *o)
{
    o->host = "127.0.0.1";
    o->port = e->port;
    o->cbs = &cli_cbs;
    o->on_retry = cli_retry;
    o->arg = e;
    assert_int_equal(nl_client_new(&e->cl, e->loop, o), 0);
    assert_ptr_equal(nl_client_arg(e->cl), e);
    assert_null(nl_client_conn(e->cl));
    assert_int_equal(nl_client_connect(e->cl), 0);
    assert_int_equal(nl_client_connect(e->cl), -EALREADY);
    return e->cl;
}

static bool connected_once(env_t *e)
{
    return e->connects == 1;
}

static bool closed_once(env_t *e)
{
    return e->closes == 1 && e->srv_closes == 1;
}

static bool retried_once(env_t *e)
{
    return e->retry_count == 1;
}

/* --- tests ------------------------------------------------------------------------------- */

#define BACKOFF_INITIAL_MS 2
#define BACKOFF_MAX_MS 64
#define REFUSALS 12

static uint64_t backoff_cap(int attempt)
{
    uint64_t cap = BACKOFF_INITIAL_MS;
    for (int i = 1; i < attempt && cap < BACKOFF_MAX_MS; i++)
        cap *= 2;
    return cap > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : cap;
}

static void test_nl_client_refused_backoff_then_connect(void **state)
{
    env_t *e = *state;
    env_refusing_port(e);
    e->retries_before_listen = REFUSALS;
    nl_client_opts_t o = {
        .retry_initial_ms = BACKOFF_INITIAL_MS,
        .retry_max_ms = BACKOFF_MAX_MS,
    };
    env_client(e, &o);
    env_run_until(e, connected_once);
    assert_int_equal(e->retry_count, REFUSALS);
    uint64_t late_max = 0;
    for (int i = 0; i < REFUSALS; i++) {
        assert_int_equal(e->retries[i].status, -ECONNREFUSED);
        assert_true(e->retries[i].will_retry);
        /* Full jitter: uniform in [0, cap], the cap doubling per failure up to the max. */
        assert_true(e->retries[i].delay_ms <= backoff_cap(i + 1));
        if (i >= 5)
            late_max = e->retries[i].delay_ms > late_max ? e->retries[i].delay_ms : late_max;
    }
    /* Seven draws from [0, 64]: all of them within the third cap (8) has odds near 1e-6. */
    assert_true(late_max > backoff_cap(3));
    assert_int_equal(e->srv_accepts, 1);
    nl_client_close(e->cl);
    env_run_until(e, closed_once);
    assert_int_equal(e->last_close_reason, 0);
    assert_int_equal(e->retry_count, REFUSALS); /* no -ECANCELED: nothing was pending */
}

static void test_nl_client_connect_timeout(void **state)
{
    env_t *e = *state;
    int fds[2];
    env_full_backlog_port(e, fds);
    nl_client_opts_t o = {.connect_timeout_ms = 100, .max_attempts = 1};
    env_client(e, &o);
    uint64_t start_ms = nl_loop_now_ms(e->loop);
    env_run_until(e, retried_once);
    assert_int_equal(e->retries[0].status, -ETIMEDOUT);
    assert_false(e->retries[0].will_retry);
    assert_int_equal(e->retries[0].delay_ms, 0);
    assert_true(nl_loop_now_ms(e->loop) - start_ms >= 100);
    assert_int_equal(e->connects, 0);
    /* Out of attempts: idle, nothing more happens, and connect may start a new round. */
    env_run_for(e, 50);
    assert_int_equal(e->retry_count, 1);
    nl_client_close(e->cl);
    env_run_for(e, 20);
    assert_int_equal(e->retry_count, 1); /* idle: nothing to cancel */
    close(fds[0]);
    close(fds[1]);
}

static void test_nl_client_close_while_connecting(void **state)
{
    env_t *e = *state;
    int fds[2];
    env_full_backlog_port(e, fds);
    nl_client_opts_t o = {.connect_timeout_ms = 20000};
    env_client(e, &o);
    /* Let the attempt start (the first timer fires at once) and stay in progress. */
    env_run_for(e, 50);
    assert_int_equal(e->retry_count, 0);
    nl_client_close(e->cl);
    nl_client_close(e->cl); /* idempotent */
    env_run_until(e, retried_once);
    assert_int_equal(e->retries[0].status, -ECANCELED);
    assert_false(e->retries[0].will_retry);
    env_run_for(e, 50);
    assert_int_equal(e->retry_count, 1);
    assert_int_equal(e->connects, 0);
    close(fds[0]);
    close(fds[1]);
}

static void test_nl_client_close_while_waiting_to_retry(void **state)
{
    env_t *e = *state;
    env_refusing_port(e);
    nl_client_opts_t o = {.retry_initial_ms = 10000, .retry_max_ms = 10000};
    env_client(e, &o);
    env_run_until(e, retried_once);
    assert_int_equal(e->retries[0].status, -ECONNREFUSED);
    assert_true(e->retries[0].will_retry);
    nl_client_close(e->cl);
    env_run_for(e, 50);
    assert_int_equal(e->retry_count, 2);
    assert_int_equal(e->retries[1].status, -ECANCELED);
    assert_false(e->retries[1].will_retry);
}

static void test_nl_client_close_inside_on_retry(void **state)
{
    env_t *e = *state;
    env_refusing_port(e);
    e->is_client_closed_in_retry = true;
    nl_client_opts_t o = {.retry_initial_ms = 1};
    env_client(e, &o);
    env_run_for(e, 100);
    /* The refusal, then the retry it had armed completes as cancelled, and nothing else. */
    assert_int_equal(e->retry_count, 2);
    assert_int_equal(e->retries[0].status, -ECONNREFUSED);
    assert_int_equal(e->retries[1].status, -ECANCELED);
}

static bool refused_three(env_t *e)
{
    return e->retry_count == 3;
}

static bool refused_six(env_t *e)
{
    return e->retry_count == 6;
}

static void test_nl_client_max_attempts(void **state)
{
    env_t *e = *state;
    env_refusing_port(e);
    nl_client_opts_t o = {.retry_initial_ms = 1, .max_attempts = 3};
    env_client(e, &o);
    env_run_until(e, refused_three);
    assert_true(e->retries[0].will_retry);
    assert_true(e->retries[1].will_retry);
    assert_false(e->retries[2].will_retry);
    env_run_for(e, 30);
    assert_int_equal(e->retry_count, 3);
    /* A new round. */
    assert_int_equal(nl_client_connect(e->cl), 0);
    env_run_until(e, refused_six);
    assert_false(e->retries[5].will_retry);
    nl_client_close(e->cl);
    env_run_for(e, 10);
    assert_int_equal(e->retry_count, 6);
}

static bool connected_thrice(env_t *e)
{
    return e->connects == 3 && e->closes == 3 && e->srv_closes == 3;
}

/* A back-off bound of UINT64_MAX ("no cap") must not crash: the delay draw is
 * rand % (cap + 1), and cap + 1 wrapped to 0 (division by zero, SIGFPE). */
static void test_nl_client_backoff_uint64_max(void **state)
{
    env_t *e = *state;
    env_refusing_port(e);
    nl_client_opts_t o = {.retry_initial_ms = UINT64_MAX, .max_attempts = 2};
    env_client(e, &o);
    env_run_until(e, retried_once);
    assert_int_equal(e->retries[0].status, -ECONNREFUSED);
    nl_client_close(e->cl);
    env_run_for(e, 10);
}

static void test_nl_client_reconnect_after_server_close(void **state)
{
    env_t *e = *state;
    e->close_client_at_connect = 3; /* the server hangs up twice; the third time we close */
    env_listen(e, 0);
    nl_client_opts_t o = {.retry_initial_ms = 5, .reconnect = true};
    env_client(e, &o);
    env_run_until(e, connected_thrice);
    assert_int_equal(e->srv_accepts, 3);
    assert_int_equal(e->retry_count, 0);
    assert_int_equal(e->last_close_reason, 0);
    env_run_for(e, 30);
    assert_int_equal(e->connects, 3); /* closed by us: no reconnect */
}

static void test_nl_client_source_address(void **state)
{
    env_t *e = *state;
    env_listen(e, 0);
    nl_client_opts_t o = {.source_host = "127.0.0.2"};
    env_client(e, &o);
    env_run_until(e, connected_once);
    assert_int_equal(strncmp(e->srv_peer, "127.0.0.2:", 10), 0);
    char peer[64];
    assert_int_equal(nl_conn_peer(nl_client_conn(e->cl), peer, sizeof(peer)), 0);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)e->port);
    assert_string_equal(peer, want);
    assert_int_equal(nl_conn_peer(nl_client_conn(e->cl), peer, 4), -ENOSPC);
    nl_client_close(e->cl);
    env_run_until(e, closed_once);
}

static void test_nl_client_bad_address(void **state)
{
    env_t *e = *state;
    nl_client_t *cl;
    nl_client_opts_t o = {.host = "not-an-ip", .port = 1};
    assert_int_equal(nl_client_new(&cl, e->loop, &o), -EINVAL);
    nl_client_opts_t o6 = {.host = "::1", .port = 1, .source_host = "127.0.0.2"};
    assert_int_equal(nl_client_new(&cl, e->loop, &o6), -EINVAL);
}

static bool srv_accepted_once(env_t *e)
{
    return e->srv_accepts == 1;
}

static void test_nl_client_server_refuses_in_on_accept(void **state)
{
    env_t *e = *state;
    e->refuse_accepts = 1;
    env_listen(e, 0);
    nl_client_opts_t o = {.retry_initial_ms = 5, .reconnect = true};
    env_client(e, &o);
    /* The refused connection is closed without server callbacks: the client sees an orderly
     * close and reconnects; the second one is accepted. */
    env_run_until(e, srv_accepted_once);
    assert_int_equal(e->connects, 2);
    assert_int_equal(e->closes, 1);
    assert_int_equal(e->srv_closes, 0);
    nl_server_stats_t ss;
    nl_server_get_stats(e->srv, &ss);
    assert_int_equal(ss.accepted, 2);
    assert_int_equal(ss.refused, 1);
    assert_int_equal(ss.emfile_events, 0);
    nl_client_close(e->cl);
    env_run_for(e, 20);
    assert_int_equal(e->srv_closes, 1);
}

static void test_nl_client_server_pause(void **state)
{
    env_t *e = *state;
    env_listen(e, 0);
    nl_server_pause(e->srv);
    nl_client_opts_t o = {0};
    env_client(e, &o);
    env_run_until(e, connected_once); /* the kernel completes the handshake from the backlog */
    env_run_for(e, 50);
    assert_int_equal(e->srv_accepts, 0);
    assert_int_equal(nl_server_start(e->srv), 0);
    env_run_until(e, srv_accepted_once);
    nl_client_close(e->cl);
    env_run_until(e, closed_once);
}

#define CAP_BYTES 4096
#define CAP_SEND (128u * 1024)

static bool srv_buffer_full(env_t *e)
{
    return e->srv_in && nl_buf_readable(e->srv_in) == CAP_BYTES - NL_BUF_PREPEND;
}

static bool srv_got_all(env_t *e)
{
    return e->srv_bytes == CAP_SEND;
}

static void test_nl_client_input_cap_pauses_reading(void **state)
{
    env_t *e = *state;
    env_listen_opts(e, 0, CAP_BYTES);
    e->cli_send_bytes = CAP_SEND;
    nl_client_opts_t o = {0};
    env_client(e, &o);
    env_run_until(e, srv_buffer_full);
    /* Full and not consumed: reading stops; a level-triggered loop would spin here. */
    int messages = e->srv_messages;
    nl_loop_stats_t before;
    nl_loop_get_stats(e->loop, &before);
    env_run_for(e, 100);
    nl_loop_stats_t after;
    nl_loop_get_stats(e->loop, &after);
    assert_int_equal(e->srv_messages, messages);
    assert_true(after.iterations - before.iterations < 20);
    /* Consume and resume: the rest arrives. */
    e->is_srv_consuming = true;
    e->srv_bytes = nl_buf_readable(e->srv_in);
    nl_buf_retrieve_all(e->srv_in);
    nl_conn_resume_read(e->srv_conn);
    env_run_until(e, srv_got_all);
    nl_client_close(e->cl);
    env_run_until(e, closed_once);
}

static bool srv_consumed(env_t *e)
{
    return e->srv_bytes == e->srv_consume_at;
}

/* An input buffer holds storage only while a partial frame waits in it; once consumed whole
 * its storage goes to the loop's pool, so an idle connection holds none. */
static void test_nl_client_input_storage_only_while_pending(void **state)
{
    env_t *e = *state;
    env_listen(e, 0);
    e->is_srv_consuming = true;
    e->srv_consume_at = 150; /* the "frame" is 150 bytes: 100 arrive first */
    e->cli_send_bytes = 100;
    nl_client_opts_t o = {0};
    env_client(e, &o);
    env_run_until(e, srv_accepted_once);
    while (e->srv_messages == 0 && !e->is_expired)
        assert_int_equal(nl_loop_run_once(e->loop, -1), 0);
    assert_int_equal(nl_buf_readable(e->srv_in), 100);
    assert_true(nl_buf_capacity(e->srv_in) > 0);
    static const char rest[50];
    assert_int_equal(nl_conn_send(nl_client_conn(e->cl), rest, sizeof(rest)), 0);
    env_run_until(e, srv_consumed);
    assert_int_equal(nl_buf_capacity(e->srv_in), 0);
    /* A burst the server consumes only whole grows its buffer past what a pool keeps. */
    e->srv_bytes = 0;
    e->srv_consume_at = 200 * 1024;
    static const char burst[200 * 1024];
    assert_int_equal(nl_conn_send(nl_client_conn(e->cl), burst, sizeof(burst)), 0);
    env_run_until(e, srv_consumed);
    assert_int_equal(nl_buf_capacity(e->srv_in), 0);
    nl_client_close(e->cl);
    env_run_until(e, closed_once);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_client_refused_backoff_then_connect, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_connect_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_close_while_connecting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_close_while_waiting_to_retry, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_close_inside_on_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_max_attempts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_backoff_uint64_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_reconnect_after_server_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_source_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_bad_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_server_refuses_in_on_accept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_server_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_input_cap_pauses_reading, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nl_client_input_storage_only_while_pending, setup,
                                        teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
