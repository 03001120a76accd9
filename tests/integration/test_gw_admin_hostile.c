/*
 * test_gw_admin_hostile: the admin port against hostile clients (issue 24, item 3 and the
 * Content-Length part of item 7), on a real herald with its default admin limits.
 *
 * Idle floods: a holder thread keeps HOLD_N TCP connections to the admin port that never send
 * a byte, and opens a new one for each the server closes (an attacker who wants the port keeps
 * it full), from 127.0.0.1 (the probes' own address), from one other address, or spread over
 * ten; and a flood over ten addresses whose connections each send the start of a request
 * line, which herald's kernel does not hold back (TCP_DEFER_ACCEPT), so that they come back
 * thousands of times a second. Meanwhile PROBES /healthz and PROBES /readyz probes, each a
 * fresh connection, must each be answered 200 within PROBE_BOUND_MS (generous, for a busy
 * machine; the latencies are printed, and the target in the issue is 100 ms). libmicrohttpd
 * takes 64 connections and leaves the rest in the listen backlog, so before herald shed idle
 * connections a probe waited there until one of the 64 hit the request deadline (10 s): every
 * probe timed out.
 *
 * One address's flood does not push out another address's idle connections (the per-address
 * cap keeps it to its share); a connection that sends nothing is cut off with 408 after the
 * default header timeout.
 *
 * Framing: a request with two different Content-Length values is answered 400 and its
 * connection closed, so the bytes after the shorter body are never read as a second request
 * (libmicrohttpd alone took the first value, and the rest of the body was answered as a
 * request of its own); Content-Length beside Transfer-Encoding likewise. The same value given
 * twice is accepted as one, as RFC 9110 section 8.6 allows.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gwtest_util.h"

#define HOLD_N 200
/* Connections the holder opens again after the server closed them, at most, per flood: the
 * load loop's bound (a run takes a few hundred; every one leaves a TIME_WAIT and a conntrack
 * entry behind for a minute or two, on a machine other tests share). */
#define HOLD_REOPENS_MAX 5000
#define HOLD_POLL_MS 20
#define PROBES 10
#define PROBE_BOUND_MS 1000
/* herald's admin connections the flood must reach before the probes: the per-address cap's
 * default (the single-address floods stop there), below the total of 64. */
#define FLOOD_HELD_MIN 32
#define RAW_CAP 8192

static const char *const key_hdrs[] = {"X-Api-Key: " GW_API_KEY, NULL};

/* ---- the holder ---- */

typedef struct hold_s {
    uint16_t port;
    int first_addr; /* source addresses 127.0.0.<first_addr> .. <first_addr + n_addrs - 1> */
    int n_addrs;
    bool is_partial; /* each connection sends the start of a request line, then nothing */
    struct pollfd fds[HOLD_N];
    bool is_up[HOLD_N]; /* the handshake completed */
    pthread_t thread;
    bool is_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_stopping; /* mu */
    int first_ups;    /* mu: connections whose first handshake completed */
    /* Relaxed atomics, written by the holder thread. */
    unsigned reopened;    /* connections opened again after the server closed them */
    unsigned refusals;    /* connect attempts that failed */
    unsigned answered;    /* connections that got bytes (an error answer) before their close */
    unsigned open_errors; /* new connections that could not be made */
    int open_errno;       /* the last one's errno */
} hold_t;

static void hold_count(unsigned *counter)
{
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static unsigned hold_read(const unsigned *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

static hold_t g_hold; /* the running flood, for the teardown */

/* Binds fd to 127.0.0.<addr>, leaving the port to connect(2) (IP_BIND_ADDRESS_NO_PORT): a
 * port picked at bind time must be free for every destination, and a flood that turns over
 * thousands of connections ran out of those. Returns 0 or -errno. */
static int bind_source(int fd, int addr)
{
    int one = 1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl((127u << 24) | (unsigned)addr);
    if (setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0)
        return -errno;
    return 0;
}

/* Opens connection i (non-blocking, bound to its source address). Returns 0 or -errno. */
static int hold_open(hold_t *h, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(h->port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind_source(fd, h->first_addr + i % h->n_addrs) != 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 && errno != EINPROGRESS)) {
        int err = -errno;
        close(fd);
        return err;
    }
    h->fds[i] = (struct pollfd){.fd = fd, .events = POLLOUT};
    h->is_up[i] = false;
    return 0;
}

/* One event on connection i: a completed handshake, or bytes, or the server's close. */
static void hold_event(hold_t *h, int i, bool *is_first_up)
{
    struct pollfd *p = &h->fds[i];
    if (!h->is_up[i] && (p->revents & POLLOUT)) {
        int err = 0;
        socklen_t len = sizeof(err);
        (void)getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
            static const char part[] = "GET /heal";
            h->is_up[i] = true;
            p->events = POLLIN;
            *is_first_up = true;
            if (h->is_partial)
                (void)send(p->fd, part, sizeof(part) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            return;
        }
    }
    char buf[512];
    ssize_t n = h->is_up[i] ? recv(p->fd, buf, sizeof(buf), MSG_DONTWAIT) : -1;
    if (n > 0) {
        hold_count(&h->answered);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    /* Closed (or refused): the attacker comes straight back, within its budget. */
    if (!h->is_up[i])
        hold_count(&h->refusals);
    close(p->fd);
    p->fd = -1;
    if (hold_read(&h->reopened) >= HOLD_REOPENS_MAX)
        return;
    int err = hold_open(h, i);
    if (err == 0) {
        hold_count(&h->reopened);
    } else {
        __atomic_store_n(&h->open_errno, -err, __ATOMIC_RELAXED);
        hold_count(&h->open_errors);
    }
}

static void *hold_main(void *arg)
{
    hold_t *h = arg;
    bool ups[HOLD_N] = {false};
    for (;;) {
        pthread_mutex_lock(&h->mu);
        bool is_stopping = h->is_stopping;
        pthread_mutex_unlock(&h->mu);
        if (is_stopping)
            break;
        if (poll(h->fds, HOLD_N, HOLD_POLL_MS) <= 0)
            continue;
        int new_ups = 0;
        for (int i = 0; i < HOLD_N; i++) {
            if (h->fds[i].fd < 0 || h->fds[i].revents == 0)
                continue;
            bool is_first_up = false;
            hold_event(h, i, &is_first_up);
            if (is_first_up && !ups[i]) {
                ups[i] = true;
                new_ups++;
            }
        }
        if (new_ups > 0) {
            pthread_mutex_lock(&h->mu);
            h->first_ups += new_ups;
            pthread_cond_broadcast(&h->cv);
            pthread_mutex_unlock(&h->mu);
        }
    }
    return NULL;
}

/* Starts a flood of HOLD_N idle connections from n_addrs source addresses and waits until
 * every one has completed its handshake once. */
static hold_t *hold_start(uint16_t port, int first_addr, int n_addrs, bool is_partial)
{
    hold_t *h = &g_hold;
    memset(h, 0, sizeof(*h));
    h->port = port;
    h->first_addr = first_addr;
    h->n_addrs = n_addrs;
    h->is_partial = is_partial;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    for (int i = 0; i < HOLD_N; i++) {
        int err = hold_open(h, i);
        if (err < 0)
            fail_msg("flood connection %d from 127.0.0.%d: %s", i, first_addr + i % n_addrs,
                     strerror(-err));
    }
    assert_int_equal(pthread_create(&h->thread, NULL, hold_main, h), 0);
    h->is_running = true;
    pthread_mutex_lock(&h->mu);
    for (int64_t until = test_now_ms() + GW_WAIT_MS;
         h->first_ups < HOLD_N && test_now_ms() < until;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    int ups = h->first_ups;
    pthread_mutex_unlock(&h->mu);
    if (ups < HOLD_N)
        fail_msg("only %d of %d flood connections came up", ups, HOLD_N);
    return h;
}

/* Stops the flood and closes its connections. Safe on a flood never started. */
static void hold_stop(hold_t *h)
{
    if (!h->is_running)
        return;
    pthread_mutex_lock(&h->mu);
    h->is_stopping = true;
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    h->is_running = false;
    for (int i = 0; i < HOLD_N; i++) {
        if (h->fds[i].fd >= 0)
            close(h->fds[i].fd);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

static int hostile_teardown(void **state)
{
    hold_stop(&g_hold);
    return gw_teardown(state);
}

/* Descriptors herald holds (its /proc/<pid>/fd entries), or -1. */
static int herald_fds(const test_herald_t *h)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)h->pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Waits until herald holds at least want descriptors: the flood has reached the admin
 * server, not only the listen backlog. There is no event to await from outside; the count is
 * read every 5 ms, for at most GW_WAIT_MS. */
static void await_fds(const test_herald_t *h, int want)
{
    int n = herald_fds(h);
    for (int64_t until = test_now_ms() + GW_WAIT_MS; n < want && test_now_ms() < until;
         poll(NULL, 0, 5))
        n = herald_fds(h);
    if (n < want)
        fail_msg("herald holds %d descriptors, want %d: the flood did not reach it", n, want);
}

/* PROBES requests of path, each on a fresh connection; each must answer 200 within
 * PROBE_BOUND_MS. Their latencies go into ms[] and the slowest is returned. */
static int64_t probe(const test_herald_t *h, const char *path, const char *what, int64_t *ms)
{
    int64_t worst = 0;
    for (int i = 0; i < PROBES; i++) {
        test_http_resp_t r;
        int64_t t0 = test_now_ms();
        int rc = test_http_request(h->admin_port, "GET", path, NULL, NULL, 0, PROBE_BOUND_MS, &r);
        ms[i] = test_now_ms() - t0;
        if (rc != 0)
            fail_msg("%s: probe %d of %s: %s after %lld ms", what, i, path, strerror(-rc),
                     (long long)ms[i]);
        int status = r.status;
        test_http_resp_free(&r);
        if (status != 200)
            fail_msg("%s: probe %d of %s answered %d", what, i, path, status);
        if (ms[i] > PROBE_BOUND_MS)
            fail_msg("%s: probe %d of %s took %lld ms", what, i, path, (long long)ms[i]);
        worst = ms[i] > worst ? ms[i] : worst;
    }
    return worst;
}

static void print_probes(const char *what, const char *path, const int64_t *ms, int64_t worst)
{
    char line[256];
    size_t n = 0;
    for (int i = 0; i < PROBES && n < sizeof(line); i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %lld", (long long)ms[i]);
    print_message("%s: %s ms:%s (max %lld)\n", what, path, line, (long long)worst);
}

/* The flood from n_addrs addresses starting at 127.0.0.<first_addr>, then the probes. */
static void idle_flood(void **state, const char *what, int first_addr, int n_addrs, bool is_partial)
{
    test_herald_t *h = gw_start(state, "--insecure", "--api-key", GW_API_KEY, NULL);
    int base = herald_fds(h);
    hold_t *hold = hold_start(h->admin_port, first_addr, n_addrs, is_partial);
    await_fds(h, base + FLOOD_HELD_MIN);
    int64_t t0 = test_now_ms();
    int64_t healthz[PROBES];
    int64_t readyz[PROBES];
    int64_t worst_h = probe(h, "/healthz", what, healthz);
    int64_t worst_r = probe(h, "/readyz", what, readyz);
    int64_t took = test_now_ms() - t0;
    print_probes(what, "/healthz", healthz, worst_h);
    print_probes(what, "/readyz", readyz, worst_r);
    print_message("%s: %d idle connections held, %u opened again after herald closed them "
                  "(%u got an answer first, %u connects failed, %u not made: %s), probes took "
                  "%lld ms, herald holds %d more fds\n",
                  what, HOLD_N, hold_read(&hold->reopened), hold_read(&hold->answered),
                  hold_read(&hold->refusals), hold_read(&hold->open_errors),
                  hold_read(&hold->open_errors) > 0
                      ? strerror(__atomic_load_n(&hold->open_errno, __ATOMIC_RELAXED))
                      : "-",
                  (long long)took, herald_fds(h) - base);
    hold_stop(hold);
    gw_stop(state);
}

/* 200 idle connections from the probes' own address. */
static void test_gw_admin_hostile_idle_flood_same_address(void **state)
{
    idle_flood(state, "flood from 127.0.0.1", 1, 1, false);
}

/* 200 idle connections from one other address. */
static void test_gw_admin_hostile_idle_flood_one_address(void **state)
{
    idle_flood(state, "flood from 127.0.0.2", 2, 1, false);
}

/* 200 idle connections spread over 127.0.0.2 .. 127.0.0.11. */
static void test_gw_admin_hostile_idle_flood_many_addresses(void **state)
{
    idle_flood(state, "flood from 127.0.0.2-11", 2, 10, false);
}

/* As above, each connection sending "GET /heal" and then nothing: these reach herald at once
 * (the kernel holds back only connections that sent nothing), and are shed as fast as they
 * come back, thousands a second; the probes' address holds the fewest connections, so never
 * theirs. */
static void test_gw_admin_hostile_partial_flood_many_addresses(void **state)
{
    idle_flood(state, "partial requests from 127.0.0.2-11", 2, 10, true);
}

/* ---- the per-address cap ---- */

#define BYSTANDERS 8

/* A blocking connection to the admin port from 127.0.0.<addr> that sends nothing. */
static int open_idle(uint16_t port, int addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind_source(fd, addr), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof(dst)), 0);
    return fd;
}

/* Idle connections from 127.0.0.3 (a Prometheus between scrapes, say) survive a flood from
 * 127.0.0.2: that address sheds its own oldest connections at its cap (32 by default), and
 * 32 + 8 stay under the total of 64, so nobody else's connection has to give way. The header
 * timeout is raised so that only shedding could close them. */
static void test_gw_admin_hostile_address_cap(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--api-key", GW_API_KEY,
                                "--admin-header-timeout", "1m", NULL);
    int base = herald_fds(h);
    int fds[BYSTANDERS];
    for (int i = 0; i < BYSTANDERS; i++)
        fds[i] = open_idle(h->admin_port, 3);
    await_fds(h, base + BYSTANDERS);
    hold_t *hold = hold_start(h->admin_port, 2, 1, true);
    await_fds(h, base + BYSTANDERS + FLOOD_HELD_MIN);
    int64_t ms[PROBES];
    print_probes("address cap", "/healthz", ms, probe(h, "/healthz", "address cap", ms));
    unsigned reopened = hold_read(&hold->reopened);
    /* The flood did churn (its own connections were shed), and the bystanders saw nothing. */
    if (reopened == 0)
        fail_msg("the flood from 127.0.0.2 was never shed: no cap on one address");
    for (int i = 0; i < BYSTANDERS; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        if (poll(&p, 1, 0) != 0)
            fail_msg("bystander %d from 127.0.0.3 was closed by a flood from 127.0.0.2", i);
        close(fds[i]);
    }
    print_message("address cap: %u flood connections shed, %d bystanders kept\n", reopened,
                  BYSTANDERS);
    hold_stop(hold);
    gw_stop(state);
}

/* ---- raw requests ---- */

/* Sends req on a fresh connection and reads until EOF into out (NUL-terminated). Returns the
 * bytes read, or -1 when the server did not close within timeout_ms. */
static ssize_t raw_exchange(uint16_t port, const char *req, size_t len, char *out, size_t cap,
                            int timeout_ms)
{
    int fd = open_idle(port, 1);
    assert_int_equal(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
    size_t n = 0;
    ssize_t rc = -1;
    for (int64_t until = test_now_ms() + timeout_ms; test_now_ms() < until;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, test_ms_left(until)) <= 0)
            continue;
        ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
        if (r <= 0) {
            rc = (ssize_t)n;
            break;
        }
        n += (size_t)r;
    }
    out[n] = '\0';
    close(fd);
    return rc;
}

/* Occurrences of "HTTP/1.1 " at the start of a line in text: the responses. */
static int responses(const char *text)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        n += p == text || p[-1] == '\n' || p[-1] == '}';
    return n;
}

/* A request whose framing is ambiguous gets one 400 and a close: whatever follows the shorter
 * reading of its body is never answered as a request. */
static void expect_refused(uint16_t port, const char *what, const char *req)
{
    char out[RAW_CAP];
    ssize_t n = raw_exchange(port, req, strlen(req), out, sizeof(out), GW_WAIT_MS);
    if (n < 0)
        fail_msg("%s: the connection was kept open after:\n%s", what, out);
    if (strncmp(out, "HTTP/1.1 400", 12) != 0 || responses(out) != 1)
        fail_msg("%s: expected one 400 and a close, got:\n%s", what, out);
    print_message("%s: %.*s\n", what, (int)strcspn(out, "\r"), out);
}

#define SMUGGLED "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n"

static void test_gw_admin_hostile_content_length(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--api-key", GW_API_KEY, NULL);
    /* Either order of the two values: libmicrohttpd read the first. */
    expect_refused(h->admin_port, "Content-Length 5 then 10",
                   "POST /api/publish?channel=news HTTP/1.1\r\nHost: h\r\n"
                   "X-Api-Key: " GW_API_KEY "\r\nContent-Length: 5\r\nContent-Length: 10\r\n\r\n"
                   "hello" SMUGGLED);
    expect_refused(h->admin_port, "Content-Length 10 then 5",
                   "POST /api/publish?channel=news HTTP/1.1\r\nHost: h\r\n"
                   "X-Api-Key: " GW_API_KEY "\r\nContent-Length: 10\r\nContent-Length: 5\r\n\r\n"
                   "hello" SMUGGLED);
    /* Before the key is looked at, and on a public path too. */
    expect_refused(h->admin_port, "no key, Content-Length 0 then 3",
                   "GET /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n"
                   "Content-Length: 3\r\n\r\nabc" SMUGGLED);
    /* RFC 9112 section 6.1: a server that reads such a request must close the connection. */
    expect_refused(h->admin_port, "Content-Length and Transfer-Encoding",
                   "POST /api/publish?channel=news HTTP/1.1\r\nHost: h\r\n"
                   "X-Api-Key: " GW_API_KEY "\r\nContent-Length: 5\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" SMUGGLED);
    /* The same value twice is one value (RFC 9110 section 8.6): published and answered. */
    static const char twice[] = "POST /api/publish?channel=news HTTP/1.1\r\nHost: h\r\n"
                                "X-Api-Key: " GW_API_KEY "\r\nContent-Length: 5\r\n"
                                "Content-Length: 5\r\nConnection: close\r\n\r\nhello";
    char out[RAW_CAP];
    ssize_t n = raw_exchange(h->admin_port, twice, sizeof(twice) - 1, out, sizeof(out), GW_WAIT_MS);
    if (n < 0 || strncmp(out, "HTTP/1.1 200", 12) != 0 || !strstr(out, "\"offset\""))
        fail_msg("Content-Length 5 twice: expected 200 with an offset, got:\n%s", out);
    /* And the API still works for a well-formed request. */
    test_http_resp_t r;
    int rc = test_http_request(h->admin_port, "POST", "/api/publish?channel=news", key_hdrs,
                               "hello", 5, GW_WAIT_MS, &r);
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, 200);
    test_http_resp_free(&r);
    gw_stop(state);
}

/* ---- the header timeout ---- */

/* A connection that sends nothing is cut off with 408 once the header timeout (2 s by
 * default) has passed since herald accepted it, and not before; the kernel holds it back
 * about a second first (TCP_DEFER_ACCEPT). */
static void test_gw_admin_hostile_header_timeout(void **state)
{
    test_herald_t *h = gw_start(state, "--insecure", "--api-key", GW_API_KEY, NULL);
    int fd = open_idle(h->admin_port, 1);
    int64_t t0 = test_now_ms();
    char out[RAW_CAP];
    size_t n = 0;
    for (int64_t until = t0 + GW_WAIT_MS; test_now_ms() < until;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, test_ms_left(until)) <= 0)
            continue;
        ssize_t r = recv(fd, out + n, sizeof(out) - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    out[n] = '\0';
    int64_t took = test_now_ms() - t0;
    close(fd);
    print_message("an idle connection was cut off after %lld ms: %.*s\n", (long long)took,
                  (int)strcspn(out, "\r"), out);
    if (strncmp(out, "HTTP/1.1 408", 12) != 0)
        fail_msg("an idle connection got, after %lld ms:\n%s", (long long)took, out);
    /* Never early; late by at most the checking tick plus a busy machine's slack. */
    if (took < 1900 || took > 6000)
        fail_msg("an idle connection was cut off after %lld ms, want 2000 to 3000 and some",
                 (long long)took);
    gw_stop(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_gw_admin_hostile_idle_flood_same_address, hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_idle_flood_one_address, hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_idle_flood_many_addresses,
                                  hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_partial_flood_many_addresses,
                                  hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_address_cap, hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_content_length, hostile_teardown),
        cmocka_unit_test_teardown(test_gw_admin_hostile_header_timeout, hostile_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
