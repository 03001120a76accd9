/*
 * test_nl_emfile: descriptor exhaustion. A forked child lowers RLIMIT_NOFILE to 64 and runs an
 * nl_server echo server on a loopback port it reports over a pipe. The parent opens
 * connections until the child runs out of descriptors, which the parent sees as connections
 * closed without an echo (the spare-descriptor trick), then checks over several more refused
 * connections that the child stays alive and does not spin (its CPU time, from
 * /proc/<pid>/stat, stays under half the wall time), reads the child's counters, closes its
 * connections, and checks that a new client is served again. With opts.max_fd the child stops
 * taking connections at that descriptor number, as if exhausted, and the descriptors above it
 * stay free (the child can still open them).
 *
 * The parent never sleeps: it waits in poll() on a socket or pipe with a bounded timeout.
 * The child is stopped by its PID (SIGTERM, waitpid).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"

#define CHILD_NOFILE 64
#define MAX_CONNS 200
#define WAIT_MS 5000
#define MEASURE_MS 500
#define MAX_REFUSALS 100
/* The descriptor line of the max_fd test: the child keeps CHILD_NOFILE - CHILD_MAX_FD free. */
#define CHILD_MAX_FD 40
/* What the max_fd test's server sends a connection it refuses (opts.refusal). */
#define REFUSAL "!"

/* The child's answer to a request byte on its request pipe. */
typedef struct child_stats_s {
    uint64_t accepted;
    uint64_t emfile_events;
    uint64_t open;
    uint64_t free_fds; /* descriptors the child could still open */
} child_stats_t;

/* --- the child: an echo server under a low descriptor limit ------------------------------ */

typedef struct child_s {
    nl_loop_t *loop;
    nl_server_t *srv;
    int req_fd;
    int rep_fd;
    bool is_reply_when_idle; /* 'w': answer once no connection is open */
} child_t;

/* How many descriptors the child could still open: /dev/null until it cannot, then closed. */
static uint64_t child_free_fds(void)
{
    int fds[CHILD_NOFILE];
    int n = 0;
    while (n < CHILD_NOFILE) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        fds[n++] = fd;
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return (uint64_t)n;
}

static void child_reply(child_t *ch)
{
    child_stats_t st;
    nl_server_stats_t ss;
    nl_conn_loop_stats_t cs;
    nl_server_get_stats(ch->srv, &ss);
    nl_conn_get_loop_stats(ch->loop, &cs);
    st.accepted = ss.accepted;
    st.emfile_events = ss.emfile_events;
    st.open = cs.open;
    st.free_fds = child_free_fds();
    if (write(ch->rep_fd, &st, sizeof(st)) != (ssize_t)sizeof(st))
        _exit(3);
}

static void child_echo(nl_conn_t *c, nl_buf_t *in)
{
    (void)nl_conn_send(c, nl_buf_peek(in), nl_buf_readable(in));
    nl_buf_retrieve_all(in);
}

/* on_close runs before the connection is counted out, so check on the next iteration. */
static void child_check_idle(void *arg)
{
    child_t *ch = arg;
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(ch->loop, &cs);
    if (ch->is_reply_when_idle && cs.open == 0) {
        ch->is_reply_when_idle = false;
        child_reply(ch);
    }
}

static void child_close(nl_conn_t *c, int reason)
{
    (void)reason;
    child_t *ch = nl_conn_ctx(c);
    if (ch->is_reply_when_idle && nl_loop_post(ch->loop, child_check_idle, ch) != 0)
        _exit(4);
}

static const nl_conn_cbs_t child_cbs = {
    .on_message = child_echo,
    .on_close = child_close,
};

static void child_on_request(nl_io_t *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    child_t *ch = arg;
    char op;
    if (read(ch->req_fd, &op, 1) != 1)
        _exit(0); /* the parent went away */
    if (op == 'w') {
        ch->is_reply_when_idle = true;
        child_check_idle(ch);
    } else {
        child_reply(ch);
    }
}

static _Noreturn void child_main(int req_fd, int rep_fd, int max_fd)
{
    struct rlimit rl = {.rlim_cur = CHILD_NOFILE, .rlim_max = CHILD_NOFILE};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(2);
    child_t ch = {.req_fd = req_fd, .rep_fd = rep_fd};
    if (nl_loop_new(&ch.loop, NULL) != 0)
        _exit(2);
    nl_server_opts_t so = {
        .host = "127.0.0.1",
        .accept_loop = ch.loop,
        .cbs = &child_cbs,
        .arg = &ch,
        .max_fd = max_fd,
        /* With a line, refused peers are told so (the byte REFUSAL) before the close. */
        .refusal = max_fd > 0 ? REFUSAL : NULL,
        .refusal_len = max_fd > 0 ? 1 : 0,
    };
    nl_io_t *io;
    if (nl_server_new(&ch.srv, &so) != 0 || nl_server_start(ch.srv) != 0 ||
        nl_io_new(&io, ch.loop, req_fd, child_on_request, &ch) != 0 || nl_io_set(io, NL_READ))
        _exit(2);
    uint16_t port = nl_server_port(ch.srv);
    if (write(rep_fd, &port, sizeof(port)) != (ssize_t)sizeof(port))
        _exit(2);
    nl_loop_run(ch.loop);
    _exit(0);
}

/* --- the parent -------------------------------------------------------------------------- */

typedef struct parent_s {
    pid_t pid;
    int req_fd;
    int rep_fd;
    uint16_t port;
    int max_fd;    /* the child server's opts.max_fd */
    bool was_told; /* the last connection refused got REFUSAL first */
    int conns[MAX_CONNS];
    int conn_count;
} parent_t;

static int wait_readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n;
    do {
        n = poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    return n;
}

static void read_exact(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        assert_int_equal(wait_readable(fd, WAIT_MS), 1);
        ssize_t n = read(fd, p, len);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

static child_stats_t ask_child(parent_t *pa, char op)
{
    child_stats_t st;
    assert_int_equal(write(pa->req_fd, &op, 1), 1);
    read_exact(pa->rep_fd, &st, sizeof(st));
    return st;
}

static int tcp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Completes from the kernel's backlog whether or not the server accepts. */
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

/* Sends one byte and waits for it to come back. Returns 1 when echoed, 0 when the server
 * closed the connection without answering, 2 when it answered REFUSAL (and closed). */
static int probe(int fd)
{
    ssize_t sent = send(fd, "x", 1, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EPIPE || errno == ECONNRESET))
        return 0; /* closed and reset before we spoke */
    assert_int_equal(sent, 1);
    assert_int_equal(wait_readable(fd, WAIT_MS), 1);
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    if (n == 1 && c == REFUSAL[0]) {
        assert_int_equal(wait_readable(fd, WAIT_MS), 1);
        assert_int_equal(recv(fd, &c, 1, 0), 0); /* then a clean close, not a reset */
        return 2;
    }
    if (n == 1) {
        assert_int_equal(c, 'x');
        return 1;
    }
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
    return 0;
}

/* utime + stime of pid, in clock ticks. */
static uint64_t child_cpu_ticks(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command name (which may hold spaces) start at field 3 (state). */
    const char *p = strrchr(buf, ')');
    assert_non_null(p);
    unsigned long utime = 0;
    unsigned long stime = 0;
    int got = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
    assert_int_equal(got, 2);
    return (uint64_t)utime + stime;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The parent of the running test, for the teardown: a failed assertion skips the test's own
 * cleanup, and the next test's child, a fork (which keeps even close-on-exec descriptors),
 * would inherit the leftover connections and start over its descriptor limit. Tests keep
 * their parent_t in static storage so that it outlives the failed test's frame. */
static parent_t *running;

static int parent_teardown(void **state)
{
    (void)state;
    parent_t *pa = running;
    running = NULL;
    if (pa == NULL)
        return 0;
    for (int i = 0; i < pa->conn_count; i++)
        close(pa->conns[i]);
    pa->conn_count = 0;
    (void)kill(pa->pid, SIGKILL);
    (void)waitpid(pa->pid, NULL, 0);
    close(pa->req_fd);
    close(pa->rep_fd);
    return 0;
}

static void parent_start(parent_t *pa)
{
    int req[2];
    int rep[2];
    assert_int_equal(pipe2(req, O_CLOEXEC), 0);
    assert_int_equal(pipe2(rep, O_CLOEXEC), 0);
    pa->pid = fork();
    assert_true(pa->pid >= 0);
    if (pa->pid == 0) {
        close(req[1]);
        close(rep[0]);
        child_main(req[0], rep[1], pa->max_fd);
    }
    close(req[0]);
    close(rep[1]);
    pa->req_fd = req[1];
    pa->rep_fd = rep[0];
    running = pa;
    read_exact(pa->rep_fd, &pa->port, sizeof(pa->port));
}

static void parent_stop(parent_t *pa)
{
    for (int i = 0; i < pa->conn_count; i++)
        close(pa->conns[i]);
    pa->conn_count = 0;
    assert_int_equal(kill(pa->pid, SIGTERM), 0);
    int status;
    assert_int_equal(waitpid(pa->pid, &status, 0), pa->pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);
    close(pa->req_fd);
    close(pa->rep_fd);
    running = NULL;
}

/* Opens echoed connections (kept in pa->conns) until the child refuses one; returns how many
 * it served. pa->was_told says whether the refused one got REFUSAL. */
static int fill_until_refused(parent_t *pa)
{
    int served = 0;
    int refused_fd = -1;
    while (pa->conn_count < MAX_CONNS) {
        int fd = tcp_connect(pa->port);
        int answer = probe(fd);
        if (answer != 1) {
            refused_fd = fd;
            pa->was_told = answer == 2;
            break;
        }
        pa->conns[pa->conn_count++] = fd;
        served++;
    }
    assert_true(refused_fd >= 0);
    close(refused_fd);
    return served;
}

/* Closes every connection, waits until the child has seen them all closed, and connects anew;
 * the new connection is served (probe it). */
static int release_all_then_connect(parent_t *pa)
{
    for (int i = 0; i < pa->conn_count; i++)
        close(pa->conns[i]);
    pa->conn_count = 0;
    child_stats_t st = ask_child(pa, 'w');
    assert_int_equal(st.open, 0);
    int fd = tcp_connect(pa->port);
    assert_int_equal(probe(fd), 1);
    return fd;
}

static void test_nl_emfile_survives_and_recovers(void **state)
{
    (void)state;
    static parent_t pa;
    memset(&pa, 0, sizeof(pa));
    parent_start(&pa);
    /* Until the child runs out of descriptors. */
    int served = fill_until_refused(&pa);
    assert_true(served > 10 && served < CHILD_NOFILE);

    /* Exhausted: further connections are closed unanswered, paced by the ~100 ms back-off
     * (one that arrives while the child drains its backlog goes at once). Over at least
     * MEASURE_MS the child must mostly wait. Unpaced, MAX_REFUSALS would pass in a few ms. */
    uint64_t cpu0 = child_cpu_ticks(pa.pid);
    uint64_t wall0 = mono_ms();
    int refusals = 0;
    while (mono_ms() - wall0 < MEASURE_MS && refusals < MAX_REFUSALS) {
        int fd = tcp_connect(pa.port);
        assert_int_equal(probe(fd), 0);
        close(fd);
        refusals++;
    }
    uint64_t wall_ms = mono_ms() - wall0;
    uint64_t cpu_ms = (child_cpu_ticks(pa.pid) - cpu0) * 1000u / (uint64_t)sysconf(_SC_CLK_TCK);
    print_message("served=%d refusals=%d wall_ms=%llu child_cpu_ms=%llu\n", served, refusals,
                  (unsigned long long)wall_ms, (unsigned long long)cpu_ms);
    assert_int_equal(waitpid(pa.pid, NULL, WNOHANG), 0); /* alive */
    assert_true(refusals < MAX_REFUSALS);                /* the back-off paced the refusals */
    assert_true(cpu_ms * 2 < wall_ms);                   /* waiting, not spinning */

    child_stats_t st = ask_child(&pa, 's');
    assert_true(st.emfile_events >= 2);
    assert_int_equal(st.open, (uint64_t)served);
    assert_true(st.accepted >= (uint64_t)served);

    /* Free the child's descriptors; once it has closed them all, a new client is served. */
    int fd = release_all_then_connect(&pa);
    assert_int_equal(probe(fd), 1);
    close(fd);
    parent_stop(&pa);
}

/* max_fd: the child refuses connections at descriptor CHILD_MAX_FD as if exhausted, so the
 * descriptors above stay free for the rest of the process (herald keeps them for its admin
 * API); once clients leave it serves again. */
static void test_nl_emfile_max_fd_keeps_reserve(void **state)
{
    (void)state;
    static parent_t pa;
    memset(&pa, 0, sizeof(pa));
    pa.max_fd = CHILD_MAX_FD;
    parent_start(&pa);
    int served = fill_until_refused(&pa);
    child_stats_t st = ask_child(&pa, 's');
    print_message("served=%d emfile_events=%llu free_fds=%llu\n", served,
                  (unsigned long long)st.emfile_events, (unsigned long long)st.free_fds);
    assert_true(served > 10 && served < CHILD_MAX_FD);
    assert_true(pa.was_told); /* the refused one read REFUSAL, then a clean close */
    /* The next one arrives during the back-off, so its byte waits in the socket when the child
     * accepts it: still REFUSAL and a clean close, not a reset for unread input. */
    int late = tcp_connect(pa.port);
    assert_int_equal(probe(late), 2);
    close(late);
    assert_true(st.emfile_events >= 1);
    /* Everything from the line up is free, but for the spare descriptor, which may be open. */
    assert_true(st.free_fds >= CHILD_NOFILE - CHILD_MAX_FD - 1);
    int fd = release_all_then_connect(&pa);
    close(fd);
    parent_stop(&pa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_nl_emfile_survives_and_recovers, parent_teardown),
        cmocka_unit_test_teardown(test_nl_emfile_max_fd_keeps_reserve, parent_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
