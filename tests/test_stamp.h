/*
 * test_stamp: what the receive-timestamp tests share (test_nl_buf, test_nl_conn_stamp): the
 * wall clock the kernel stamps with, a connected loopback TCP pair, and the warm-up that waits
 * until the kernel really stamps.
 *
 * Thread: the test's. Include after <cmocka.h>'s prerequisites; failures are cmocka asserts.
 */
#ifndef HERALD_TESTS_TEST_STAMP_H
#define HERALD_TESTS_TEST_STAMP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_buf.h"

/* CLOCK_REALTIME in ns, the clock of SO_TIMESTAMPNS. */
static inline uint64_t test_realtime_ns(void)
{
    struct timespec ts;
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &ts), 0);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A connected loopback TCP pair: fds[0] receives (non-blocking, with SO_TIMESTAMPNS when
 * is_stamped), fds[1] sends (blocking, so writes go out whole). */
static inline void test_tcp_pair(int fds[2], bool is_stamped)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 1), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fds[1] >= 0);
    assert_int_equal(connect(fds[1], (struct sockaddr *)&sa, sizeof(sa)), 0);
    fds[0] = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    assert_true(fds[0] >= 0);
    close(lfd);
    int on = 1;
    if (is_stamped)
        assert_int_equal(setsockopt(fds[0], SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)), 0);
}

/* The kernel turns receive stamping on lazily: the first SO_TIMESTAMPNS in the system
 * schedules a work item that flips a static key, and segments that arrive before it ran carry
 * no stamp. This bounces bytes over a stamped pair (test_tcp_pair(fds, true)) until a read
 * comes back stamped (at most 10 s); while the pair stays open the key stays on, so every
 * read after this is stamped from the first. */
static inline void test_stamps_warm_up(int fds[2])
{
    nl_buf_t w;
    nl_buf_init(&w, 0);
    uint64_t stamp = 0;
    uint64_t end_ns = test_realtime_ns() + 10000000000ull;
    while (stamp == 0 && test_realtime_ns() < end_ns) {
        assert_int_equal(write(fds[1], "w", 1), 1);
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1);
        assert_int_equal(nl_buf_read_fd_stamped(&w, fds[0], &stamp), 1);
        nl_buf_retrieve_all(&w);
    }
    nl_buf_deinit(&w);
    assert_true(stamp != 0);
}

#endif
