/*
 * test_nl_batch: batched sends (nl_conn_set_batch_sends, io_uring) on loopback. A server
 * fans blocks out to hundreds of connections, one block per connection per flush, so every
 * flush pass is a batch of one-piece writes, more than one ring's worth (256). Each client
 * checks that it got every byte of every round in order.
 *
 * - small blocks that always fit: every send goes through the ring, none one by one;
 * - 100 small blocks per connection per flush: the first 63 copied into the batch's arena and
 *   sent as one, the rest the plain way; a full arena submits early;
 * - 10,000-byte blocks that fill the sockets: the ring's short sends and -EAGAIN must leave
 *   the rest queued and written later, in order;
 * - a callback turning batching off inside a batch; a hook added late still runs before the
 *   flush; batching turned off: the same bytes, no batched send;
 * - answers queued with nl_conn_send_later: not written by the call, written by the flush, in
 *   order, batched across connections; refused past the output cap;
 * - no descriptor free for the ring at the first flush: sent one by one, and batched again
 *   once the retry is due;
 * - run as `test_nl_batch --forbid-io-uring` (a second ctest entry), the process first makes
 *   io_uring_setup fail with EPERM through seccomp, as Docker's default profile does; as
 *   `--no-send-op` (a third), io_uring_register fails with EINVAL, as on Linux 5.1-5.5, which
 *   have rings but no IORING_OP_SEND. Either way the loop falls back to one send per
 *   connection and the bytes are the same.
 *
 * Server and clients share the main loop, so the fan-out runs in a posted closure and pushes
 * each round out with nl_conn_flush_loop.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_block.h"
#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"

#include "nl_test_env.h"

#define MAX_CONNS 600

static bool is_uring_forbidden;

typedef struct fan_s fan_t;

typedef struct sub_s {
    fan_t *f;
    nl_client_t *cl;
    size_t recvd;
    bool is_mismatch;
} sub_t;

struct fan_s {
    test_env_t *e;
    size_t n_conns;
    size_t rounds;
    size_t pieces; /* blocks per connection per round (flush); 0 means 1 */
    size_t block_bytes;
    bool is_batched;
    bool is_off_in_callback; /* the first on_write_complete turns batching off */
    bool is_hook_test;       /* queue without flushing; a before-sleep hook looks */
    bool is_fd_squeezed;     /* no descriptor free while the fan-out flushes */
    bool is_setting_kept;    /* leave nl_conn_set_batch_sends as the last fan-out left it */
    size_t wc_calls;
    uint64_t fanout_short_writes; /* short writes by the end of the fan-out (all flushes) */
    nl_conn_t *srv[MAX_CONNS];
    size_t n_srv;
    sub_t subs[MAX_CONNS];
    size_t n_done;
    size_t n_refused; /* server connections left with output queued after a flush */
};

/* Byte k of the stream every client receives. */
static uint8_t stream_byte(const fan_t *f, size_t k)
{
    size_t block = k / f->block_bytes;
    return (uint8_t)(block * 131 + (k % f->block_bytes) * 7 + 1);
}

static size_t stream_len(const fan_t *f)
{
    return f->rounds * (f->pieces ? f->pieces : 1) * f->block_bytes;
}

/* The hook test's before-sleep hook: what the first server connection had queued when it ran.
 * Static, because the hook outlives the test's state (it stays on the loop until teardown). */
static nl_conn_t *hook_conn;
static size_t hook_queued;

static void hook_look(nl_loop_t *loop, void *arg)
{
    (void)loop;
    (void)arg;
    if (hook_conn) {
        hook_queued = nl_conn_output_bytes(hook_conn);
        hook_conn = NULL;
    }
}

/* Lowers the soft descriptor limit to the lowest free descriptor, so that the next one fails
 * with EMFILE. Returns the limit to restore. */
static struct rlimit squeeze_fds(void)
{
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    struct rlimit tight = {.rlim_cur = (rlim_t)lowest, .rlim_max = old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
    assert_int_equal(dup(0), -1);
    assert_int_equal(errno, EMFILE);
    return old;
}

static void fan_out(void *arg)
{
    fan_t *f = arg;
    nl_loop_t *loop = f->e->loop;
    struct rlimit fd_limit = {0};
    if (f->is_fd_squeezed)
        fd_limit = squeeze_fds();
    if (!f->is_setting_kept)
        nl_conn_set_batch_sends(loop, f->is_batched);
    if (f->is_hook_test) {
        /* Added long after the connections' state (and its flush) exists on this loop. */
        hook_conn = f->srv[0];
        assert_int_equal(nl_loop_add_before_sleep(loop, hook_look, NULL), 0);
    }
    size_t pieces = f->pieces ? f->pieces : 1;
    for (size_t r = 0; r < f->rounds; r++) {
        for (size_t p = 0; p < pieces; p++) {
            nl_block_t *b = nl_block_new(f->block_bytes);
            assert_non_null(b);
            size_t at = (r * pieces + p) * f->block_bytes;
            for (size_t k = 0; k < f->block_bytes; k++)
                nl_block_data(b)[k] = (char)stream_byte(f, at + k);
            for (size_t i = 0; i < f->n_srv; i++)
                assert_int_equal(nl_conn_send_block(f->srv[i], b), 0);
            nl_block_unref(b);
        }
        if (!f->is_hook_test)
            nl_conn_flush_loop(loop);
    }
    if (f->is_fd_squeezed)
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &fd_limit), 0);
    for (size_t i = 0; i < f->n_srv; i++)
        f->n_refused += nl_conn_output_bytes(f->srv[i]) > 0;
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(loop, &cs);
    f->fanout_short_writes = cs.short_writes;
}

static void srv_connected(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    fan_t *f = e->test;
    assert_true(f->n_srv < f->n_conns);
    /* Loopback starts a socket's send buffer at megabytes; a fixed small one makes the large
     * rounds overflow it. With Nagle on, sends share segments, so the buffer fills in the
     * middle of one and the kernel takes part of it (with TCP_NODELAY every send is its own
     * segment and the buffer fills between two). */
    int sndbuf = 32768;
    assert_int_equal(setsockopt(nl_conn_fd(c), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
    assert_int_equal(nl_conn_set_nodelay(c, false), 0);
    f->srv[f->n_srv++] = c;
    if (f->n_srv == f->n_conns)
        assert_int_equal(nl_loop_post(e->loop, fan_out, f), 0);
}

static void srv_close(nl_conn_t *c, int reason)
{
    (void)reason;
    test_env_report_close(c);
}

/* Runs inside the flush's batch, between the settling of two of its sends. */
static void srv_write_complete(nl_conn_t *c)
{
    test_env_t *e = nl_conn_ctx(c);
    fan_t *f = e->test;
    if (f->wc_calls++ == 0 && f->is_off_in_callback)
        nl_conn_set_batch_sends(e->loop, false);
}

static const nl_conn_cbs_t srv_cbs = {
    .on_connected = srv_connected, .on_write_complete = srv_write_complete, .on_close = srv_close};

static void sub_message(nl_conn_t *c, nl_buf_t *in)
{
    sub_t *s = nl_conn_ctx(c);
    const fan_t *f = s->f;
    size_t total = stream_len(f);
    const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
    size_t n = nl_buf_readable(in);
    for (size_t k = 0; k < n && !s->is_mismatch; k++)
        s->is_mismatch = s->recvd + k >= total || p[k] != stream_byte(f, s->recvd + k);
    s->recvd += n;
    nl_buf_retrieve_all(in);
    if (s->recvd == total)
        s->f->n_done++;
}

static const nl_conn_cbs_t sub_cbs = {.on_message = sub_message};

static bool fan_done(test_env_t *e)
{
    const fan_t *f = e->test;
    return f->n_done == f->n_conns;
}

static bool srv_all_closed(test_env_t *e)
{
    const fan_t *f = e->test;
    return e->srv_closed == f->n_srv;
}

/* Runs one fan-out and checks every client's stream; returns the loop's figures. */
static nl_conn_loop_stats_t fan_run(void **state, fan_t *f)
{
    test_env_t *e = *state;
    f->e = e;
    e->test = f;
    if (!e->srv)
        test_env_serve(e, 0, &srv_cbs, 0);
    for (size_t i = 0; i < f->n_conns; i++) {
        f->subs[i].f = f;
        f->subs[i].cl = test_env_client(e, &sub_cbs, &f->subs[i]);
    }
    test_env_run_until(e, fan_done);
    for (size_t i = 0; i < f->n_conns; i++) {
        assert_false(f->subs[i].is_mismatch);
        assert_int_equal(f->subs[i].recvd, stream_len(f));
    }
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    /* Every byte is out: batched, coalesced and short sends took all of it off the gauge. */
    assert_int_equal(cs.out_queued_bytes, 0);
    for (size_t i = 0; i < f->n_conns; i++)
        nl_client_close(f->subs[i].cl);
    test_env_run_until(e, srv_all_closed);
    e->srv_closed = 0; /* counted per fan-out */
    return cs;
}

/* 600 connections x 20 rounds of 100 bytes: each flush is three ring submits (256 + 256 +
 * 88), every send accepted whole. */
static void test_nl_batch_small_blocks(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){.n_conns = 600, .rounds = 20, .block_bytes = 100, .is_batched = true};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    if (is_uring_forbidden) {
        assert_int_equal(cs.batch_submits, 0);
        assert_int_equal(cs.batch_sends, 0);
    } else {
        assert_int_equal(cs.batch_sends, 600 * 20);
        assert_int_equal(cs.batch_submits, 3 * 20);
    }
    free(f);
}

/* 300 connections x 5 rounds of 100 blocks of 100 bytes (50 KB each: no socket fills). One
 * write holds 63 pieces: those are copied into the batch's arena and sent as one, and the
 * other 37 follow by the plain path (copied into one as well). 83 connections fill the
 * 512 KiB arena, so a flush takes four submits where the 256-entry ring alone would take
 * two. */
static void test_nl_batch_coalesced(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f =
        (fan_t){.n_conns = 300, .rounds = 5, .pieces = 100, .block_bytes = 100, .is_batched = true};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    assert_int_equal(cs.coalesced_writes, 2 * 300 * 5);
    if (is_uring_forbidden) {
        assert_int_equal(cs.batch_sends, 0);
    } else {
        assert_int_equal(cs.batch_sends, 300 * 5);
        assert_int_equal(cs.writev_calls, 300 * 5);
        assert_int_equal(cs.batch_submits, 4 * 5);
    }
    free(f);
}

/* 64 connections x 300 rounds of 10,000 bytes (3 MB each) with nobody reading during the
 * fan-out: the sockets fill, the flushes get short sends (10,000 does not divide the kernel's
 * 64 KiB segments, so a send is cut mid-block) and -EAGAIN, and the rest waits for the
 * socket. */
static void test_nl_batch_full_sockets(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){.n_conns = 64, .rounds = 300, .block_bytes = 10000, .is_batched = true};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    assert_int_equal(f->n_refused, 64);
    /* Every write of the fan-out went through a flush: through the ring when it exists. */
    assert_true(f->fanout_short_writes > 0);
    if (is_uring_forbidden)
        assert_int_equal(cs.batch_sends, 0);
    else
        assert_true(cs.batch_sends >= 64);
    free(f);
}

/* A callback inside a batch turns batching off: the batch finishes, its memory is freed only
 * when the flush ends (ASan sees any use after), and later flushes send one by one. */
static void test_nl_batch_off_in_callback(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){.n_conns = 300,
                 .rounds = 5,
                 .block_bytes = 100,
                 .is_batched = true,
                 .is_off_in_callback = true};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    assert_true(f->wc_calls >= 300 * 5);
    if (!is_uring_forbidden) {
        /* The first submit's 256 sends, then none. */
        assert_int_equal(cs.batch_sends, 256);
        assert_int_equal(cs.batch_submits, 1);
    }
    free(f);
}

/* A before-sleep hook added after the connections' flush exists still runs before it, so
 * what a hook queues (herald's cross-loop fan-out) leaves in the same iteration. */
static void test_nl_batch_hooks_before_flush(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){
        .n_conns = 4, .rounds = 1, .block_bytes = 100, .is_batched = true, .is_hook_test = true};
    hook_queued = 0;
    (void)fan_run(state, f);
    assert_int_equal(hook_queued, 100);
    free(f);
}

/* Batching off: the same bytes, one send per connection. */
static void test_nl_batch_off(void **state)
{
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){.n_conns = 600, .rounds = 20, .block_bytes = 100, .is_batched = false};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    assert_int_equal(cs.batch_submits, 0);
    assert_int_equal(cs.batch_sends, 0);
    assert_true(cs.writev_calls >= 600 * 20);
    free(f);
}

/* --- answers: nl_conn_send_later ------------------------------------------------------ */

#define ANSWER_CONNS 300
#define ANSWER_ROUNDS 20
#define ANSWER_BYTES 40

/* Each client sends a 40-byte request per round; the server answers each with its bytes
 * reversed through nl_conn_send_later, which must queue (not write) and leave the writing to
 * the iteration's flush, batched across connections. */
typedef struct answer_s {
    test_env_t *e;
    size_t n_connected;
    size_t n_done;
    size_t n_not_queued; /* answers found already written when send_later returned */
    bool is_mismatch;
    struct answer_cli_s {
        struct answer_s *a;
        nl_conn_t *conn;
        size_t round;
    } cli[ANSWER_CONNS];
} answer_t;

static void answer_request(char *out, size_t cli, size_t round)
{
    for (size_t k = 0; k < ANSWER_BYTES; k++)
        out[k] = (char)('a' + (cli * 7 + round * 3 + k) % 26);
}

static void answer_srv_message(nl_conn_t *c, nl_buf_t *in)
{
    test_env_t *e = nl_conn_ctx(c);
    answer_t *a = e->test;
    while (nl_buf_readable(in) >= ANSWER_BYTES) {
        char rev[ANSWER_BYTES];
        const char *p = nl_buf_peek(in);
        for (size_t k = 0; k < ANSWER_BYTES; k++)
            rev[k] = p[ANSWER_BYTES - 1 - k];
        nl_buf_retrieve(in, ANSWER_BYTES);
        size_t before = nl_conn_output_bytes(c);
        assert_int_equal(nl_conn_send_later(c, rev, sizeof(rev)), 0);
        a->n_not_queued += nl_conn_output_bytes(c) != before + sizeof(rev);
    }
}

static const nl_conn_cbs_t answer_srv_cbs = {.on_message = answer_srv_message,
                                             .on_close = srv_close};

static void answer_send_round(struct answer_cli_s *cl)
{
    char req[ANSWER_BYTES];
    answer_request(req, (size_t)(cl - cl->a->cli), cl->round);
    assert_int_equal(nl_conn_send(cl->conn, req, sizeof(req)), 0);
}

static void answer_cli_connected(nl_conn_t *c)
{
    struct answer_cli_s *cl = nl_conn_ctx(c);
    cl->conn = c;
    if (++cl->a->n_connected < ANSWER_CONNS)
        return;
    for (size_t i = 0; i < ANSWER_CONNS; i++) /* all at once: one burst for the server */
        answer_send_round(&cl->a->cli[i]);
}

static void answer_cli_message(nl_conn_t *c, nl_buf_t *in)
{
    struct answer_cli_s *cl = nl_conn_ctx(c);
    answer_t *a = cl->a;
    while (nl_buf_readable(in) >= ANSWER_BYTES && cl->round < ANSWER_ROUNDS) {
        char req[ANSWER_BYTES];
        answer_request(req, (size_t)(cl - a->cli), cl->round);
        const char *p = nl_buf_peek(in);
        for (size_t k = 0; k < ANSWER_BYTES; k++)
            a->is_mismatch |= p[k] != req[ANSWER_BYTES - 1 - k];
        nl_buf_retrieve(in, ANSWER_BYTES);
        if (++cl->round == ANSWER_ROUNDS)
            a->n_done++;
        else
            answer_send_round(cl);
    }
}

static const nl_conn_cbs_t answer_cli_cbs = {.on_connected = answer_cli_connected,
                                             .on_message = answer_cli_message};

static bool answers_done(test_env_t *e)
{
    const answer_t *a = e->test;
    return a->n_done == ANSWER_CONNS;
}

static bool answer_srv_closed(test_env_t *e)
{
    return e->srv_closed == ANSWER_CONNS;
}

static void test_nl_batch_send_later(void **state)
{
    test_env_t *e = *state;
    answer_t *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    a->e = e;
    e->test = a;
    nl_conn_set_batch_sends(e->loop, true);
    test_env_serve(e, 0, &answer_srv_cbs, 0);
    nl_client_t *cls[ANSWER_CONNS];
    for (size_t i = 0; i < ANSWER_CONNS; i++) {
        a->cli[i].a = a;
        cls[i] = test_env_client(e, &answer_cli_cbs, &a->cli[i]);
    }
    test_env_run_until(e, answers_done);
    assert_false(a->is_mismatch);
    assert_int_equal(a->n_not_queued, 0);
    nl_conn_loop_stats_t cs;
    nl_conn_get_loop_stats(e->loop, &cs);
    /* The clients' requests are direct sends; the answers, queued, went out with the flushes:
     * batched (several per submit) unless io_uring is forbidden here. */
    if (is_uring_forbidden) {
        assert_int_equal(cs.batch_sends, 0);
    } else {
        assert_true(cs.batch_sends >= ANSWER_CONNS);
        assert_true(cs.batch_submits < cs.batch_sends);
    }
    /* Past the output cap (twice the high-water mark, at least 64 KiB) nothing is queued. */
    nl_conn_t *c = a->cli[0].conn;
    nl_conn_set_high_water(c, 1000);
    static char big[70 * 1024];
    assert_int_equal(nl_conn_send_later(c, big, sizeof(big)), -ENOBUFS);
    assert_int_equal(nl_conn_output_bytes(c), 0);
    assert_int_equal(nl_conn_send_later(c, big, 1000), 0);
    assert_int_equal(nl_conn_output_bytes(c), 1000);
    for (size_t i = 0; i < ANSWER_CONNS; i++)
        nl_client_close(cls[i]);
    test_env_run_until(e, answer_srv_closed);
    free(a);
}

static void on_retry_due(nl_timer_t *t, void *arg)
{
    (void)t;
    *(bool *)arg = true;
}

static bool retry_due(test_env_t *e)
{
    return *(bool *)e->test;
}

/* No descriptor for the ring when the loop first flushes (a process at its limit): the
 * fan-out goes out one send per connection, and the setup is tried again later (10 s after a
 * first shortage) rather than given up for good: the next fan-out after that is batched. */
static void test_nl_batch_fd_shortage(void **state)
{
    test_env_t *e = *state;
    fan_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *f = (fan_t){
        .n_conns = 50, .rounds = 5, .block_bytes = 100, .is_batched = true, .is_fd_squeezed = true};
    nl_conn_loop_stats_t cs = fan_run(state, f);
    assert_int_equal(cs.batch_sends, 0);
    assert_true(cs.writev_calls >= 50 * 5);
    if (!is_uring_forbidden) {
        bool is_due = false;
        nl_timer_t *t;
        assert_int_equal(nl_timer_new(&t, e->loop, on_retry_due, &is_due), 0);
        assert_int_equal(nl_timer_start(t, 10100, 0), 0);
        e->test = &is_due;
        test_env_run_until(e, retry_due);
        nl_timer_close(t, NULL);
        *f = (fan_t){.n_conns = 50, .rounds = 5, .block_bytes = 100, .is_setting_kept = true};
        cs = fan_run(state, f);
        assert_int_equal(cs.batch_sends, 50 * 5);
    }
    free(f);
}

/* Makes system call nr fail with err in this process from now on (seccomp filter). */
static void forbid_syscall(int nr, int err)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        exit(1);
    }
}

/* The mode main chose: io_uring_setup forbidden (as Docker's default profile does), or
 * io_uring_register failing with EINVAL (a 5.1-5.5 kernel: a ring, but no probe and no
 * IORING_OP_SEND). */
static int forbidden_nr = -1;

/* The batched tests need io_uring; a machine that forbids it fails them rather than passing
 * them untested. In a forbidding mode, checks that the filter works. */
static int uring_check(void **state)
{
    (void)state;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    long fd = syscall(__NR_io_uring_setup, 4, &p);
    if (forbidden_nr == __NR_io_uring_setup) {
        assert_true(fd < 0 && errno == EPERM);
        return 0;
    }
    if (fd < 0) {
        fprintf(stderr, "io_uring_setup: %s: this machine cannot test batched sends\n",
                strerror(errno));
        return -1;
    }
    if (forbidden_nr == __NR_io_uring_register) {
        struct io_uring_probe probe;
        memset(&probe, 0, sizeof(probe));
        assert_int_equal(syscall(__NR_io_uring_register, (int)fd, IORING_REGISTER_PROBE, &probe, 0),
                         -1);
        assert_int_equal(errno, EINVAL);
    }
    close((int)fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--forbid-io-uring") == 0)
        forbidden_nr = __NR_io_uring_setup;
    else if (argc > 1 && strcmp(argv[1], "--no-send-op") == 0)
        forbidden_nr = __NR_io_uring_register;
    if (forbidden_nr >= 0) {
        is_uring_forbidden = true;
        forbid_syscall(forbidden_nr, forbidden_nr == __NR_io_uring_setup ? EPERM : EINVAL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nl_batch_small_blocks, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_coalesced, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_full_sockets, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_off_in_callback, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_hooks_before_flush, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_off, test_env_setup, test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_fd_shortage, test_env_setup,
                                        test_env_teardown),
        cmocka_unit_test_setup_teardown(test_nl_batch_send_later, test_env_setup,
                                        test_env_teardown),
    };
    return cmocka_run_group_tests(tests, uring_check, NULL);
}
