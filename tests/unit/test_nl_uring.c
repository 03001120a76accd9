/*
 * test_nl_uring: the io_uring ring behind batched sends (netlib/src/nl_uring.c, on liburing)
 * and the flush path that uses it (nl_conn_out.c's flush_batched), against real sockets.
 *
 * The ring alone: sends on several sockets in one submit land in slot order; a send bigger
 * than the socket takes is short and the next one gets -EAGAIN; a broken peer or a descriptor
 * that is no socket fails its own slot only; a ring takes no more than its entries.
 *
 * The flush: server connections on the test loop, peers that are plain sockets the test reads
 * itself, so nothing else writes or reads behind the test's back.
 * - short sends: blocks larger than the sockets hold, queued on every connection and flushed
 *   through the ring; the rest stays queued and is written when the peers read, every byte in
 *   order;
 * - -EAGAIN: sockets filled to the brim behind netlib's back, then one block each: the ring's
 *   sends get -EAGAIN, nothing is lost or counted as sent, and the block follows the fill;
 * - closed in flight: a callback run while the batch settles closes a connection whose send
 *   is in the same batch (it is never settled, never gets on_write_complete); a peer that
 *   reset its connection before the flush fails only its own send;
 * - seccomp: a forked child makes io_uring_setup fail with ENOSYS (a kernel built without it),
 *   fans out, and must report batch_unavailable with every byte delivered one send at a time;
 *   the parent runs the same fan-out and must see it batched.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../netlib/src/nl_uring.h"
#include "netlib/nl_block.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"

/* --- the ring alone ----------------------------------------------------------------------- */

static void fill_pattern(char *p, size_t n, unsigned seed)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (char)(seed * 31 + k * 7 + 1);
}

/* Reads exactly n bytes from a blocking socket. */
static void read_exact(int fd, char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, p + got, n - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

static void test_nl_uring_sends_in_slot_order(void **state)
{
    (void)state;
    nl__uring_t *r;
    assert_int_equal(nl__uring_open(&r, 8), 0);
    int sv[3][2];
    static char out[3][3000];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
        fill_pattern(out[i], sizeof(out[i]), (unsigned)i);
    }
    /* Two sends on the first socket: the kernel must take them in slot order. */
    assert_int_equal(nl__uring_prep_send(r, sv[0][0], out[0], 1000, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, sv[1][0], out[1], 3000, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, sv[2][0], out[2], 2000, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, sv[0][0], out[0] + 1000, 2000, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_pending(r), 4);
    int32_t res[8];
    assert_int_equal(nl__uring_submit(r, res), 0);
    assert_int_equal(nl__uring_pending(r), 0);
    assert_int_equal(res[0], 1000);
    assert_int_equal(res[1], 3000);
    assert_int_equal(res[2], 2000);
    assert_int_equal(res[3], 2000);
    static char in[3000];
    size_t lens[3] = {3000, 3000, 2000};
    for (int i = 0; i < 3; i++) {
        read_exact(sv[i][1], in, lens[i]);
        assert_memory_equal(in, out[i], lens[i]);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    nl__uring_close(r);
}

static void test_nl_uring_short_send_then_eagain(void **state)
{
    (void)state;
    nl__uring_t *r;
    assert_int_equal(nl__uring_open(&r, 4), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int sndbuf = 16384;
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
    size_t big = 4u << 20;
    char *out = malloc(big);
    assert_non_null(out);
    fill_pattern(out, big, 5);
    int32_t res[4];
    assert_int_equal(nl__uring_prep_send(r, sv[0], out, (uint32_t)big, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_submit(r, res), 0);
    /* Short: the socket took what it had room for and the send did not wait for more. */
    assert_true(res[0] > 0);
    assert_true((size_t)res[0] < big);
    size_t sent = (size_t)res[0];
    assert_int_equal(nl__uring_prep_send(r, sv[0], out + sent, 100, MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_submit(r, res), 0);
    assert_int_equal(res[0], -EAGAIN);
    char *in = malloc(sent);
    assert_non_null(in);
    read_exact(sv[1], in, sent);
    assert_memory_equal(in, out, sent);
    free(in);
    free(out);
    close(sv[0]);
    close(sv[1]);
    nl__uring_close(r);
}

static void test_nl_uring_errors_stay_in_their_slot(void **state)
{
    (void)state;
    nl__uring_t *r;
    assert_int_equal(nl__uring_open(&r, 4), 0);
    int gone[2];
    int good[2];
    int pipefd[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, gone), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, good), 0);
    assert_int_equal(pipe(pipefd), 0);
    close(gone[1]);
    static const char msg[] = "still delivered";
    assert_int_equal(nl__uring_prep_send(r, gone[0], msg, sizeof(msg), MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, pipefd[1], msg, sizeof(msg), MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, good[0], msg, sizeof(msg), MSG_NOSIGNAL), 0);
    assert_int_equal(nl__uring_prep_send(r, good[0], msg, sizeof(msg), MSG_NOSIGNAL), 0);
    /* The ring holds 4: a fifth waits for the next submit. */
    assert_int_equal(nl__uring_prep_send(r, good[0], msg, sizeof(msg), MSG_NOSIGNAL), -ENOSPC);
    int32_t res[4];
    assert_int_equal(nl__uring_submit(r, res), 0);
    assert_int_equal(res[0], -EPIPE); /* MSG_NOSIGNAL: an error, no SIGPIPE */
    assert_int_equal(res[1], -ENOTSOCK);
    assert_int_equal(res[2], (int32_t)sizeof(msg));
    assert_int_equal(res[3], (int32_t)sizeof(msg));
    char in[2 * sizeof(msg)];
    read_exact(good[1], in, sizeof(in));
    assert_memory_equal(in, msg, sizeof(msg));
    assert_memory_equal(in + sizeof(msg), msg, sizeof(msg));
    close(gone[0]);
    close(good[0]);
    close(good[1]);
    close(pipefd[0]);
    close(pipefd[1]);
    nl__uring_close(r);
}

/* --- the flush, with peers the test reads itself ------------------------------------------ */

#define MAX_PEERS 300

/* CHECK: like assert_true, but usable in a forked child (no cmocka jump): a failure names the
 * line and ends the process, whose exit status the parent asserts. */
static bool is_child;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            if (is_child)                                                                          \
                _exit(1);                                                                          \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

typedef struct fix_s {
    nl_loop_t *loop;
    nl_server_t *srv;
    size_t n;
    int peer[MAX_PEERS];        /* the test's end, nonblocking */
    nl_conn_t *conn[MAX_PEERS]; /* the server connection of peer i */
    size_t recvd[MAX_PEERS];    /* bytes the peer read */
    uint8_t *expect[MAX_PEERS]; /* what it must read, in order */
    size_t expect_len[MAX_PEERS];
    bool is_mismatch;
    size_t n_accepted;
    size_t wc_calls;
    size_t wc_of_victim;
    int victim;        /* index whose connection a callback closes, or -1 */
    int victim_reason; /* the reason its on_close got */
    size_t closes;
} fix_t;

static fix_t *cur; /* the running test's fixture: callbacks find it here */

static int conn_index(nl_conn_t *c)
{
    for (size_t i = 0; i < cur->n; i++) {
        if (cur->conn[i] == c)
            return (int)i;
    }
    return -1;
}

/* Pairs the accepted connection with its peer by the peer's port. */
static void fix_connected(nl_conn_t *c)
{
    char name[64];
    CHECK(nl_conn_peer(c, name, sizeof(name)) == 0);
    unsigned port = (unsigned)atoi(strrchr(name, ':') + 1);
    for (size_t i = 0; i < cur->n; i++) {
        struct sockaddr_in sin;
        socklen_t len = sizeof(sin);
        CHECK(getsockname(cur->peer[i], (struct sockaddr *)&sin, &len) == 0);
        if (ntohs(sin.sin_port) == port) {
            cur->conn[i] = c;
            cur->n_accepted++;
            /* A small, fixed send buffer so a few blocks fill it. */
            int sndbuf = 32768;
            CHECK(setsockopt(nl_conn_fd(c), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == 0);
            return;
        }
    }
    CHECK(false);
}

static void fix_write_complete(nl_conn_t *c)
{
    cur->wc_calls++;
    int i = conn_index(c);
    if (i == cur->victim)
        cur->wc_of_victim++;
    if (cur->victim >= 0 && cur->conn[cur->victim] && i != cur->victim)
        nl_conn_close(cur->conn[cur->victim], -ECANCELED);
}

static void fix_close(nl_conn_t *c, int reason)
{
    int i = conn_index(c);
    cur->closes++;
    if (i >= 0) {
        if (i == cur->victim)
            cur->victim_reason = reason;
        cur->conn[i] = NULL;
    }
}

static const nl_conn_cbs_t fix_cbs = {
    .on_connected = fix_connected, .on_write_complete = fix_write_complete, .on_close = fix_close};

static void fix_run_once(fix_t *f)
{
    CHECK(nl_loop_run_once(f->loop, 100) == 0);
}

/* A loop, a server and n connected peers whose receive buffers are small (so sockets fill). */
static void fix_open(fix_t *f, size_t n)
{
    memset(f, 0, sizeof(*f));
    cur = f;
    f->n = n;
    f->victim = -1;
    CHECK(nl_loop_new(&f->loop, NULL) == 0);
    nl_server_opts_t so = {.host = "127.0.0.1", .accept_loop = f->loop, .cbs = &fix_cbs};
    CHECK(nl_server_new(&f->srv, &so) == 0);
    CHECK(nl_server_start(f->srv) == 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(nl_server_port(f->srv))};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (size_t i = 0; i < n; i++) {
        f->peer[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(f->peer[i] >= 0);
        int rcvbuf = 16384;
        CHECK(setsockopt(f->peer[i], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0);
        /* Blocking connect: the kernel completes it from the backlog, before any accept. */
        CHECK(connect(f->peer[i], (struct sockaddr *)&sin, sizeof(sin)) == 0);
        CHECK(fcntl(f->peer[i], F_SETFL, O_NONBLOCK) == 0);
    }
    for (int k = 0; k < 1000 && f->n_accepted < n; k++)
        fix_run_once(f);
    CHECK(f->n_accepted == n);
}

static void fix_expect(fix_t *f, size_t i, const void *p, size_t len)
{
    uint8_t *e = realloc(f->expect[i], f->expect_len[i] + len);
    CHECK(e != NULL);
    memcpy(e + f->expect_len[i], p, len);
    f->expect[i] = e;
    f->expect_len[i] += len;
}

/* Reads what the peers have; true once every peer read all it expects. */
static bool fix_drain(fix_t *f)
{
    static uint8_t buf[65536];
    bool is_all = true;
    for (size_t i = 0; i < f->n; i++) {
        for (;;) {
            ssize_t r = recv(f->peer[i], buf, sizeof(buf), 0);
            if (r <= 0)
                break;
            size_t k = 0;
            for (; k < (size_t)r && f->recvd[i] + k < f->expect_len[i]; k++)
                f->is_mismatch |= buf[k] != f->expect[i][f->recvd[i] + k];
            f->is_mismatch |= k < (size_t)r; /* more than expected */
            f->recvd[i] += (size_t)r;
        }
        is_all &= f->recvd[i] >= f->expect_len[i];
    }
    return is_all;
}

/* Runs the loop while the peers read, until all is delivered (bounded: 10 s of loop waits). */
static void fix_deliver_all(fix_t *f)
{
    for (int k = 0; k < 100000 && !fix_drain(f); k++)
        CHECK(nl_loop_run_once(f->loop, 0) == 0);
    CHECK(fix_drain(f));
    CHECK(!f->is_mismatch);
}

static void fix_close_all(fix_t *f)
{
    for (size_t i = 0; i < f->n; i++) {
        if (f->conn[i])
            nl_conn_close(f->conn[i], 0);
        close(f->peer[i]);
        free(f->expect[i]);
    }
    nl_server_close(f->srv);
    CHECK(nl_loop_run_once(f->loop, 0) == 0);
    CHECK(nl_loop_free(f->loop) == 0);
    cur = NULL;
}

/* One shared block of len bytes, pattern seed, queued on every open connection. */
static void fix_queue_block(fix_t *f, size_t len, unsigned seed)
{
    nl_block_t *b = nl_block_new(len);
    CHECK(b != NULL);
    fill_pattern((char *)nl_block_data(b), len, seed);
    for (size_t i = 0; i < f->n; i++) {
        if (!f->conn[i])
            continue;
        CHECK(nl_conn_send_block(f->conn[i], b) == 0);
        fix_expect(f, i, nl_block_data(b), len);
    }
    nl_block_unref(b);
}

static nl_conn_loop_stats_t fix_stats(const fix_t *f)
{
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(f->loop, &cs);
    return cs;
}

static void test_nl_uring_flush_short_sends(void **state)
{
    (void)state;
    static fix_t f;
    fix_open(&f, 8);
    nl_conn_set_batch_sends(f.loop, true);
    /* One 200,000-byte block each: a one-piece write, so one ring send per connection. */
    fix_queue_block(&f, 200000, 1);
    nl_conn_flush_loop(f.loop);
    nl_conn_loop_stats_t cs = fix_stats(&f);
    size_t queued = 0;
    for (size_t i = 0; i < f.n; i++)
        queued += nl_conn_output_bytes(f.conn[i]);
    /* The sockets hold far less than 200,000 bytes: the rest is still queued. */
    CHECK(queued > 0);
    CHECK(cs.batch_submits == 1);
    CHECK(cs.batch_sends == f.n);
    CHECK(cs.short_writes == f.n);
    CHECK(cs.bytes_out + queued == f.n * 200000);
    fix_deliver_all(&f);
    for (size_t i = 0; i < f.n; i++)
        CHECK(nl_conn_output_bytes(f.conn[i]) == 0);
    fix_close_all(&f);
}

static void test_nl_uring_flush_eagain(void **state)
{
    (void)state;
    static fix_t f;
    fix_open(&f, 4);
    nl_conn_set_batch_sends(f.loop, true);
    /* Behind netlib's back, each socket is filled until the kernel refuses a byte. */
    static char fill[4096];
    for (size_t i = 0; i < f.n; i++) {
        fill_pattern(fill, sizeof(fill), 100 + (unsigned)i);
        for (;;) {
            ssize_t r = send(nl_conn_fd(f.conn[i]), fill, sizeof(fill), MSG_DONTWAIT);
            if (r < 0) {
                CHECK(errno == EAGAIN);
                break;
            }
            fix_expect(&f, i, fill, (size_t)r);
        }
    }
    nl_conn_loop_stats_t before = fix_stats(&f);
    fix_queue_block(&f, 100, 7);
    nl_conn_flush_loop(f.loop);
    nl_conn_loop_stats_t after = fix_stats(&f);
    /* One submit whose four sends all got -EAGAIN: nothing sent, nothing short, nothing lost. */
    CHECK(after.batch_submits == before.batch_submits + 1);
    CHECK(after.batch_sends == before.batch_sends);
    CHECK(after.short_writes == before.short_writes);
    CHECK(after.bytes_out == before.bytes_out);
    for (size_t i = 0; i < f.n; i++) {
        CHECK(nl_conn_output_bytes(f.conn[i]) == 100);
        CHECK(nl_conn_state(f.conn[i]) == NL_CONN_CONNECTED);
    }
    CHECK(f.wc_calls == 0);
    fix_deliver_all(&f);
    CHECK(f.wc_calls == f.n);
    fix_close_all(&f);
}

static void test_nl_uring_flush_close_in_batch(void **state)
{
    (void)state;
    static fix_t f;
    fix_open(&f, 4);
    nl_conn_set_batch_sends(f.loop, true);
    /* The dirty list, so the batch, follows the queueing order 0..3: connection 0's settle
     * closes connection 3, whose send already went out in the same submit. */
    f.victim = 3;
    nl_block_t *b = nl_block_new(100);
    CHECK(b != NULL);
    fill_pattern((char *)nl_block_data(b), 100, 9);
    for (size_t i = 0; i < f.n; i++) {
        CHECK(nl_conn_send_block(f.conn[i], b) == 0);
        fix_expect(&f, i, nl_block_data(b), 100);
    }
    nl_block_unref(b);
    nl_conn_flush_loop(f.loop);
    nl_conn_loop_stats_t cs = fix_stats(&f);
    CHECK(cs.batch_submits == 1);
    CHECK(cs.batch_sends == 3); /* the closed one was never settled */
    CHECK(f.wc_calls == 3);
    CHECK(f.wc_of_victim == 0);
    CHECK(nl_conn_state(f.conn[3]) == NL_CONN_DISCONNECTED);
    CHECK(nl_loop_run_once(f.loop, 0) == 0); /* its on_close runs at the iteration's end */
    CHECK(f.closes == 1);
    CHECK(f.victim_reason == -ECANCELED);
    CHECK(f.conn[3] == NULL);
    /* Its block had reached the kernel: the peer still gets it, then the close. */
    fix_deliver_all(&f);
    fix_close_all(&f);
}

static void test_nl_uring_flush_peer_reset(void **state)
{
    (void)state;
    static fix_t f;
    fix_open(&f, 4);
    nl_conn_set_batch_sends(f.loop, true);
    /* Peer 1 resets its connection; the loop does not run before the flush, so the server
     * connection learns it from its send in the batch. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    CHECK(setsockopt(f.peer[1], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
    close(f.peer[1]);
    f.peer[1] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0); /* unconnected: reads nothing */
    CHECK(f.peer[1] >= 0);
    nl_conn_t *reset = f.conn[1];
    nl_block_t *b = nl_block_new(100);
    CHECK(b != NULL);
    fill_pattern((char *)nl_block_data(b), 100, 11);
    for (size_t i = 0; i < f.n; i++) {
        CHECK(nl_conn_send_block(f.conn[i], b) == 0);
        if (i != 1)
            fix_expect(&f, i, nl_block_data(b), 100);
    }
    nl_block_unref(b);
    nl_conn_flush_loop(f.loop);
    nl_conn_loop_stats_t cs = fix_stats(&f);
    CHECK(cs.batch_submits == 1);
    CHECK(cs.batch_sends == 3);
    CHECK(nl_conn_state(reset) == NL_CONN_DISCONNECTED);
    CHECK(f.wc_calls == 3);
    f.victim = 1; /* every other queue drained: only records the reason now */
    CHECK(nl_loop_run_once(f.loop, 0) == 0);
    CHECK(f.closes == 1);
    CHECK(f.conn[1] == NULL);
    CHECK(f.victim_reason == -ECONNRESET || f.victim_reason == -EPIPE);
    fix_deliver_all(&f);
    fix_close_all(&f);
}

/* --- io_uring refused: a child under seccomp --------------------------------------------- */

/* Makes system call nr fail with err in this process from now on. */
static void forbid_syscall(int nr, int err)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
}

/* 300 connections (more than one ring of 256) x 5 rounds of one 100-byte block. */
static nl_conn_loop_stats_t fanout_300(void)
{
    static fix_t f;
    fix_open(&f, 300);
    nl_conn_set_batch_sends(f.loop, true);
    for (unsigned r = 0; r < 5; r++) {
        fix_queue_block(&f, 100, r);
        nl_conn_flush_loop(f.loop);
    }
    fix_deliver_all(&f);
    nl_conn_loop_stats_t cs = fix_stats(&f);
    fix_close_all(&f);
    return cs;
}

static void test_nl_uring_refused_by_seccomp(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        is_child = true;
        alarm(30); /* a hang fails the test instead of stalling it */
        forbid_syscall(__NR_io_uring_setup, ENOSYS);
        nl_conn_loop_stats_t cs = fanout_300();
        CHECK(cs.batch_unavailable == 1);
        CHECK(cs.batch_submits == 0);
        CHECK(cs.batch_sends == 0);
        CHECK(cs.writev_calls >= 300 * 5);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The same fan-out here, where io_uring works: batched, and not reported unavailable. */
    nl_conn_loop_stats_t cs = fanout_300();
    assert_int_equal(cs.batch_unavailable, 0);
    assert_int_equal(cs.batch_sends, 300 * 5);
    assert_int_equal(cs.batch_submits, 2 * 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_uring_sends_in_slot_order),
        cmocka_unit_test(test_nl_uring_short_send_then_eagain),
        cmocka_unit_test(test_nl_uring_errors_stay_in_their_slot),
        cmocka_unit_test(test_nl_uring_flush_short_sends),
        cmocka_unit_test(test_nl_uring_flush_eagain),
        cmocka_unit_test(test_nl_uring_flush_close_in_batch),
        cmocka_unit_test(test_nl_uring_flush_peer_reset),
        cmocka_unit_test(test_nl_uring_refused_by_seccomp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
