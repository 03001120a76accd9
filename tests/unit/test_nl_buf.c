/*
 * test_nl_buf: muduo Buffer_unittest's list (append/retrieve, grow, inside grow, shrink,
 * prepend, integers, find), plus what muduo's buffer lacks: lazy storage, the readv spill,
 * searching across a reallocation, the max_bytes cap, and the stamped read (recvmsg with the
 * kernel's SO_TIMESTAMPNS receive time, on a loopback TCP pair). nl_block, the shared immutable
 * byte block that output queues hold beside buffers, has no file of its own and is tested
 * at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_block.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_common.h"

#include "test_stamp.h"

/* The storage a first use allocates: the prepend reserve plus NL_BUF_INITIAL. */
#define FIRST_CAP (NL_BUF_PREPEND + NL_BUF_INITIAL)

static int setup_buf(void **state)
{
    nl_buf_t *b = malloc(sizeof *b);
    if (b == NULL)
        return -1;
    nl_buf_init(b, 0);
    *state = b;
    return 0;
}

static int teardown_buf(void **state)
{
    nl_buf_t *b = *state;
    nl_buf_deinit(b);
    free(b);
    return 0;
}

/* Appends n bytes (in one call) of a pattern derived from their stream offset, so order
 * can be checked. */
static void append_pattern(nl_buf_t *b, size_t offset, size_t n)
{
    char *p = malloc(n + 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)((offset + i) * 7 + 3);
    assert_int_equal(nl_buf_append(b, p, n), 0);
    free(p);
}

static void check_pattern(const char *p, size_t offset, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal((uint8_t)p[i], (uint8_t)((offset + i) * 7 + 3));
}

/* One step of a buffer scenario and the four figures expected after it. */
typedef struct {
    char op; /* 'a' append n, 'r' retrieve n, 'A' retrieve all, 'R' release */
    size_t n;
    size_t readable;
    size_t writable;
    size_t prependable;
    size_t capacity;
} buf_step_t;

static void run_steps(nl_buf_t *b, const buf_step_t *steps, size_t count)
{
    size_t in = 0;  /* stream offset of the next appended byte */
    size_t out = 0; /* stream offset of the first readable byte */
    for (size_t i = 0; i < count; i++) {
        const buf_step_t *s = &steps[i];
        switch (s->op) {
        case 'a':
            append_pattern(b, in, s->n);
            in += s->n;
            break;
        case 'r':
            nl_buf_retrieve(b, s->n);
            out += s->n;
            break;
        case 'A':
            nl_buf_retrieve_all(b);
            out = in;
            break;
        case 'R':
            nl_buf_release(b);
            break;
        default:
            fail();
        }
        assert_int_equal(nl_buf_readable(b), s->readable);
        assert_int_equal(nl_buf_writable(b), s->writable);
        assert_int_equal(nl_buf_prependable(b), s->prependable);
        assert_int_equal(nl_buf_capacity(b), s->capacity);
        if (s->readable > 0)
            check_pattern(nl_buf_peek(b), out, s->readable);
    }
}

#define RUN_STEPS(b, steps) run_steps((b), (steps), sizeof(steps) / sizeof((steps)[0]))

static void test_nl_buf_init_allocates_nothing(void **state)
{
    nl_buf_t *b = *state;
    assert_int_equal(nl_buf_capacity(b), 0);
    assert_int_equal(nl_buf_readable(b), 0);
    assert_int_equal(nl_buf_writable(b), 0);
    assert_null(nl_buf_peek(b));
    assert_int_equal(nl_buf_append(b, "", 0), 0);
    assert_int_equal(nl_buf_capacity(b), 0);
    nl_buf_release(b);
    assert_int_equal(nl_buf_capacity(b), 0);
}

static void test_nl_buf_append_retrieve(void **state)
{
    static const buf_step_t steps[] = {
        {'a', 200, 200, NL_BUF_INITIAL - 200, NL_BUF_PREPEND, FIRST_CAP},
        {'r', 50, 150, NL_BUF_INITIAL - 200, NL_BUF_PREPEND + 50, FIRST_CAP},
        {'a', 0, 150, NL_BUF_INITIAL - 200, NL_BUF_PREPEND + 50, FIRST_CAP},
        {'r', 150, 0, NL_BUF_INITIAL, NL_BUF_PREPEND, FIRST_CAP},
        {'a', 10, 10, NL_BUF_INITIAL - 10, NL_BUF_PREPEND, FIRST_CAP},
        {'A', 0, 0, NL_BUF_INITIAL, NL_BUF_PREPEND, FIRST_CAP},
    };
    RUN_STEPS(*state, steps);
}

static void test_nl_buf_grow(void **state)
{
    /* 350 readable + 1000 more cannot fit 1032 bytes even moved to the front: doubles. */
    static const buf_step_t steps[] = {
        {'a', 400, 400, NL_BUF_INITIAL - 400, NL_BUF_PREPEND, FIRST_CAP},
        {'r', 50, 350, NL_BUF_INITIAL - 400, NL_BUF_PREPEND + 50, FIRST_CAP},
        {'a', 1000, 1350, 2 * FIRST_CAP - NL_BUF_PREPEND - 1350, NL_BUF_PREPEND, 2 * FIRST_CAP},
        {'A', 0, 0, 2 * FIRST_CAP - NL_BUF_PREPEND, NL_BUF_PREPEND, 2 * FIRST_CAP},
        /* 10 KiB from 2064 doubles three times: 4128, 8256, 16512. */
        {'a', 10240, 10240, 16 * FIRST_CAP - NL_BUF_PREPEND - 10240, NL_BUF_PREPEND,
         16 * FIRST_CAP},
    };
    RUN_STEPS(*state, steps);
}

static void test_nl_buf_inside_grow(void **state)
{
    /* 224 writable + 500 dead bytes in front: 300 more fit after moving to the front. */
    static const buf_step_t steps[] = {
        {'a', 800, 800, NL_BUF_INITIAL - 800, NL_BUF_PREPEND, FIRST_CAP},
        {'r', 500, 300, NL_BUF_INITIAL - 800, NL_BUF_PREPEND + 500, FIRST_CAP},
        {'a', 300, 600, NL_BUF_INITIAL - 600, NL_BUF_PREPEND, FIRST_CAP},
        /* Exactly full after a move is still a move, not a grow. */
        {'r', 100, 500, NL_BUF_INITIAL - 600, NL_BUF_PREPEND + 100, FIRST_CAP},
        {'a', 524, 1024, 0, NL_BUF_PREPEND, FIRST_CAP},
    };
    RUN_STEPS(*state, steps);
}

static void test_nl_buf_release_only_when_empty(void **state)
{
    /* A first use of 2000 bytes allocates 2 KiB behind the reserve. */
    static const buf_step_t steps[] = {
        {'a', 2000, 2000, 48, NL_BUF_PREPEND, NL_BUF_PREPEND + 2048},
        {'r', 1500, 500, 48, NL_BUF_PREPEND + 1500, NL_BUF_PREPEND + 2048},
        {'R', 0, 500, 48, NL_BUF_PREPEND + 1500, NL_BUF_PREPEND + 2048},
        {'r', 500, 0, 2048, NL_BUF_PREPEND, NL_BUF_PREPEND + 2048},
        {'R', 0, 0, 0, 0, 0},
        {'R', 0, 0, 0, 0, 0},
        {'a', 100, 100, NL_BUF_INITIAL - 100, NL_BUF_PREPEND, FIRST_CAP},
    };
    RUN_STEPS(*state, steps);
    nl_buf_t *b = *state;
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    assert_null(nl_buf_peek(b));
}

static void test_nl_buf_first_use_sized_to_need(void **state)
{
    nl_buf_t *b = *state;
    /* A first append bigger than NL_BUF_INITIAL allocates it, rounded up to a KiB. */
    append_pattern(b, 0, 5000);
    assert_int_equal(nl_buf_capacity(b), NL_BUF_PREPEND + 5120);
    check_pattern(nl_buf_peek(b), 0, 5000);
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    assert_int_equal(nl_buf_ensure_writable(b, 1), 0);
    assert_int_equal(nl_buf_capacity(b), FIRST_CAP);
}

/* nl_buf_reserve: a first allocation fits the need (rounded to NL_BUF_SMALL_ROUND), not
 * NL_BUF_INITIAL; with storage it is nl_buf_ensure_writable; past the cap nothing is allocated. */
static void test_nl_buf_reserve_small_first(void **state)
{
    nl_buf_t *b = *state;
    assert_int_equal(nl_buf_reserve(b, 40), 0);
    assert_int_equal(nl_buf_capacity(b), NL_BUF_PREPEND + 48); /* 40 rounded up to 16 */
    assert_int_equal(nl_buf_readable(b), 0);
    assert_true(nl_buf_writable(b) >= 40);
    append_pattern(b, 0, 40);
    /* Storage present: grows by doubling like any append, the bytes kept in order. */
    assert_int_equal(nl_buf_reserve(b, 100), 0);
    assert_true(nl_buf_capacity(b) >= NL_BUF_PREPEND + 140);
    assert_true(nl_buf_capacity(b) < FIRST_CAP);
    append_pattern(b, 40, 100);
    check_pattern(nl_buf_peek(b), 0, 140);
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    assert_int_equal(nl_buf_capacity(b), 0);
    /* A large first need is sized to it too. */
    assert_int_equal(nl_buf_reserve(b, 5000), 0);
    assert_int_equal(nl_buf_capacity(b), NL_BUF_PREPEND + 5008);
    nl_buf_release(b);

    nl_buf_t small;
    nl_buf_init(&small, 100);
    assert_int_equal(nl_buf_reserve(&small, 100), -ENOBUFS);
    assert_int_equal(nl_buf_capacity(&small), 0);
    /* Rounding never passes the cap. */
    assert_int_equal(nl_buf_reserve(&small, 90), 0);
    assert_int_equal(nl_buf_capacity(&small), 100);
    nl_buf_deinit(&small);
}

static void test_nl_buf_begin_write(void **state)
{
    nl_buf_t *b = *state;
    assert_int_equal(nl_buf_ensure_writable(b, 3000), 0);
    assert_true(nl_buf_writable(b) >= 3000);
    memcpy(nl_buf_begin_write(b), "hello", 5);
    nl_buf_has_written(b, 5);
    assert_int_equal(nl_buf_readable(b), 5);
    assert_memory_equal(nl_buf_peek(b), "hello", 5);
}

static void test_nl_buf_prepend(void **state)
{
    nl_buf_t *b = *state;
    uint32_t len = 0x01020304;
    /* No storage yet: nothing is prependable. */
    assert_int_equal(nl_buf_prepend(b, &len, sizeof len), -ENOBUFS);
    append_pattern(b, 0, 200);
    size_t writable = nl_buf_writable(b);
    assert_int_equal(nl_buf_prepend(b, &len, sizeof len), 0);
    assert_int_equal(nl_buf_readable(b), 204);
    assert_int_equal(nl_buf_writable(b), writable);
    assert_int_equal(nl_buf_prependable(b), NL_BUF_PREPEND - 4);
    assert_memory_equal(nl_buf_peek(b), &len, 4);
    check_pattern(nl_buf_peek(b) + 4, 0, 200);
    /* Four bytes are left in front: five do not fit and nothing changes. */
    assert_int_equal(nl_buf_prepend(b, "abcde", 5), -ENOBUFS);
    assert_int_equal(nl_buf_readable(b), 204);
    assert_int_equal(nl_buf_prepend(b, "abcd", 4), 0);
    assert_int_equal(nl_buf_prependable(b), 0);
    assert_memory_equal(nl_buf_peek(b), "abcd", 4);
    /* A grow afterwards keeps the bytes and restores the reserve. */
    append_pattern(b, 200, 5000);
    assert_int_equal(nl_buf_prependable(b), NL_BUF_PREPEND);
    assert_memory_equal(nl_buf_peek(b), "abcd", 4);
    check_pattern(nl_buf_peek(b) + 8, 0, 5200);
}

static void test_nl_buf_integers(void **state)
{
    static const struct {
        int width;
        uint64_t value;
        uint8_t wire[8];
    } rows[] = {
        {2, 0x0000, {0, 0}},
        {2, 0x0102, {1, 2}},
        {2, 0xffff, {0xff, 0xff}},
        {4, 0x01020304, {1, 2, 3, 4}},
        {4, 0xfffffffe, {0xff, 0xff, 0xff, 0xfe}},
        {8, 0x0102030405060708ull, {1, 2, 3, 4, 5, 6, 7, 8}},
        {8, 0xffffffffffffffffull, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
        {8, 0, {0}},
    };
    nl_buf_t *b = *state;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t w = (size_t)rows[i].width;
        int rc = w == 2   ? nl_buf_append_u16(b, (uint16_t)rows[i].value)
                 : w == 4 ? nl_buf_append_u32(b, (uint32_t)rows[i].value)
                          : nl_buf_append_u64(b, rows[i].value);
        assert_int_equal(rc, 0);
        assert_int_equal(nl_buf_readable(b), w);
        assert_memory_equal(nl_buf_peek(b), rows[i].wire, w);
        uint64_t peeked = w == 2   ? nl_buf_peek_u16(b)
                          : w == 4 ? nl_buf_peek_u32(b)
                                   : nl_buf_peek_u64(b);
        assert_int_equal(peeked, rows[i].value);
        assert_int_equal(nl_buf_readable(b), w);
        uint64_t read = w == 2   ? nl_buf_read_u16(b)
                        : w == 4 ? nl_buf_read_u32(b)
                                 : nl_buf_read_u64(b);
        assert_int_equal(read, rows[i].value);
        assert_int_equal(nl_buf_readable(b), 0);
    }
    /* Back to back, at odd offsets. */
    assert_int_equal(nl_buf_append(b, "x", 1), 0);
    assert_int_equal(nl_buf_append_u32(b, 7), 0);
    assert_int_equal(nl_buf_append_u16(b, 9), 0);
    assert_int_equal(nl_buf_append_u64(b, 11), 0);
    nl_buf_retrieve(b, 1);
    assert_int_equal(nl_buf_read_u32(b), 7);
    assert_int_equal(nl_buf_read_u16(b), 9);
    assert_int_equal(nl_buf_read_u64(b), 11);
    assert_int_equal(nl_buf_readable(b), 0);
}

static void test_nl_buf_find(void **state)
{
    static const char text[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
    static const struct {
        const char *needle;
        ptrdiff_t offset; /* -1: not found */
    } rows[] = {
        {"\r\n", 14},  {"\r\n\r\n", 23}, {"GET", 0}, {"body", 27},
        {"bodyx", -1}, {"\n\n", -1},     {"y", 30},  {"", -1},
    };
    nl_buf_t *b = *state;
    assert_null(nl_buf_find(b, "\r\n", 2));
    assert_null(nl_buf_find_byte(b, '\n'));
    assert_int_equal(nl_buf_append(b, text, sizeof text - 1), 0);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *p = nl_buf_find(b, rows[i].needle, strlen(rows[i].needle));
        if (rows[i].offset < 0)
            assert_null(p);
        else
            assert_int_equal(p - nl_buf_peek(b), rows[i].offset);
    }
    assert_int_equal(nl_buf_find_byte(b, '\n') - nl_buf_peek(b), 15);
    assert_int_equal(nl_buf_find_byte(b, 'G') - nl_buf_peek(b), 0);
    assert_null(nl_buf_find_byte(b, 'z'));
    /* Only readable bytes are searched: after retrieving, the first CRLF is the Host one. */
    nl_buf_retrieve(b, 16);
    assert_int_equal(nl_buf_find(b, "\r\n", 2) - nl_buf_peek(b), 7);
    assert_null(nl_buf_find(b, "GET", 3));
    nl_buf_retrieve_all(b);
    assert_null(nl_buf_find(b, "\r\n", 2));
}

static void test_nl_buf_find_across_reallocation(void **state)
{
    nl_buf_t *b = *state;
    /* Readable bytes start past the front, so the grow also moves them. */
    append_pattern(b, 0, 600);
    nl_buf_retrieve(b, 500);
    assert_int_equal(nl_buf_append(b, "key: value\r\n", 12), 0);
    const char *p = nl_buf_find(b, "\r\n", 2);
    assert_non_null(p);
    ptrdiff_t before = p - nl_buf_peek(b);
    assert_int_equal(before, 110);
    size_t cap = nl_buf_capacity(b);
    /* Enough to reallocate; the old pointer p is dead from here on. */
    append_pattern(b, 0, 4 * NL_BUF_INITIAL);
    assert_true(nl_buf_capacity(b) > cap);
    assert_int_equal(nl_buf_prependable(b), NL_BUF_PREPEND);
    p = nl_buf_find(b, "\r\n", 2);
    assert_non_null(p);
    assert_int_equal(p - nl_buf_peek(b), before);
    assert_memory_equal(p - 10, "key: value", 10);
    /* The pattern before the key holds no 'k' (x * 7 + 3 == 'k' needs x % 256 == 88). */
    assert_int_equal(nl_buf_find_byte(b, 'k') - nl_buf_peek(b), 100);
}

static void test_nl_buf_cap_enobufs(void **state)
{
    nl_buf_t *b = *state;
    nl_buf_deinit(b);
    nl_buf_init(b, 4096);
    size_t room = 4096 - NL_BUF_PREPEND;
    append_pattern(b, 0, room - 1);
    assert_int_equal(nl_buf_capacity(b), 4096);
    /* Two bytes do not fit: refused whole, nothing appended. */
    assert_int_equal(nl_buf_append(b, "ab", 2), -ENOBUFS);
    assert_int_equal(nl_buf_readable(b), room - 1);
    assert_int_equal(nl_buf_ensure_writable(b, 2), -ENOBUFS);
    assert_int_equal(nl_buf_append(b, "a", 1), 0);
    assert_int_equal(nl_buf_append_u16(b, 1), -ENOBUFS);
    assert_int_equal(nl_buf_readable(b), room);
    assert_int_equal(nl_buf_capacity(b), 4096);
    /* Retrieving frees room again, by moving to the front instead of growing. */
    nl_buf_retrieve(b, 100);
    assert_int_equal(nl_buf_append(b, "x", 1), 0);
    assert_int_equal(nl_buf_capacity(b), 4096);
    assert_int_equal(nl_buf_prependable(b), NL_BUF_PREPEND);
    check_pattern(nl_buf_peek(b), 100, room - 1 - 100);
}

/* A non-blocking pipe whose capacity is raised to 1 MiB, so a 200 KiB write fits whole. */
static void big_pipe(int fds[2])
{
    assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    assert_true(fcntl(fds[1], F_SETPIPE_SZ, 1 << 20) >= 1 << 20);
}

static void write_pattern(int fd, size_t offset, size_t n)
{
    char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)((offset + i) * 7 + 3);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    free(p);
}

static void test_nl_buf_read_fd_spill(void **state)
{
    nl_buf_t *b = *state;
    int fds[2];
    big_pipe(fds);
    const size_t total = 200 * 1024;
    write_pattern(fds[1], 0, total);
    /* Storage with little free space: one call must take free space + the whole spill. */
    append_pattern(b, 0, 100);
    nl_buf_retrieve_all(b);
    append_pattern(b, 0, 100);
    size_t free_space = nl_buf_writable(b);
    assert_int_equal(free_space, NL_BUF_INITIAL - 100);
    ssize_t n = nl_buf_read_fd(b, fds[0]);
    assert_true(n > (ssize_t)free_space);
    assert_int_equal(n, free_space + NL_BUF_SPILL);
    assert_int_equal(nl_buf_readable(b), 100 + (size_t)n);
    check_pattern(nl_buf_peek(b), 0, 100);
    check_pattern(nl_buf_peek(b) + 100, 0, (size_t)n);
    nl_buf_retrieve(b, 100);
    size_t got = (size_t)n;
    int calls = 1;
    while (got < total) {
        n = nl_buf_read_fd(b, fds[0]);
        assert_true(n > 0);
        got += (size_t)n;
        assert_true(++calls <= 4);
    }
    assert_int_equal(got, total);
    assert_int_equal(nl_buf_readable(b), total);
    check_pattern(nl_buf_peek(b), 0, total);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), -EAGAIN);
    close(fds[1]);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 0);
    close(fds[0]);
}

static void test_nl_buf_read_fd_no_storage(void **state)
{
    nl_buf_t *b = *state;
    int fds[2];
    big_pipe(fds);
    /* Woken with nothing to read: EAGAIN, and still no storage. */
    assert_int_equal(nl_buf_read_fd(b, fds[0]), -EAGAIN);
    assert_int_equal(nl_buf_capacity(b), 0);
    assert_null(nl_buf_peek(b));
    /* A small message allocates the first-use size, not the spill. */
    write_pattern(fds[1], 0, 10);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 10);
    assert_int_equal(nl_buf_capacity(b), FIRST_CAP);
    check_pattern(nl_buf_peek(b), 0, 10);
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    /* With no storage the read goes to the spill only, and storage fits what arrived. */
    write_pattern(fds[1], 0, 100 * 1024);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), NL_BUF_SPILL);
    assert_int_equal(nl_buf_capacity(b), NL_BUF_PREPEND + NL_BUF_SPILL);
    check_pattern(nl_buf_peek(b), 0, NL_BUF_SPILL);
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    write_pattern(fds[1], 100 * 1024, 1);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 100 * 1024 - NL_BUF_SPILL + 1);
    assert_int_equal(nl_buf_capacity(b), NL_BUF_PREPEND + 37 * 1024);
    check_pattern(nl_buf_peek(b), NL_BUF_SPILL, 100 * 1024 - NL_BUF_SPILL + 1);
    /* EOF on an empty, released buffer allocates nothing either. */
    nl_buf_retrieve_all(b);
    nl_buf_release(b);
    close(fds[1]);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 0);
    assert_int_equal(nl_buf_capacity(b), 0);
    close(fds[0]);
}

static void test_nl_buf_read_fd_cap(void **state)
{
    nl_buf_t *b = *state;
    nl_buf_deinit(b);
    nl_buf_init(b, 4096);
    int fds[2];
    big_pipe(fds);
    write_pattern(fds[1], 0, 10000);
    /* The read is trimmed to the room left, so no byte is taken that cannot be kept. */
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 4096 - NL_BUF_PREPEND);
    assert_int_equal(nl_buf_capacity(b), 4096);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), -ENOBUFS);
    assert_int_equal(nl_buf_readable(b), 4096 - NL_BUF_PREPEND);
    check_pattern(nl_buf_peek(b), 0, 4096 - NL_BUF_PREPEND);
    /* After consuming some, the rest arrives in order and nothing was lost. */
    nl_buf_retrieve(b, 1000);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), 1000);
    check_pattern(nl_buf_peek(b), 1000, 4096 - NL_BUF_PREPEND);
    nl_buf_retrieve_all(b);
    size_t got = 4096 - NL_BUF_PREPEND + 1000;
    while (got < 10000) {
        ssize_t n = nl_buf_read_fd(b, fds[0]);
        assert_true(n > 0);
        check_pattern(nl_buf_peek(b), got, (size_t)n);
        got += (size_t)n;
        nl_buf_retrieve_all(b);
    }
    assert_int_equal(got, 10000);
    assert_int_equal(nl_buf_read_fd(b, fds[0]), -EAGAIN);
    close(fds[0]);
    close(fds[1]);
    /* A bad descriptor is an error returned, not an abort. */
    assert_int_equal(nl_buf_read_fd(b, fds[0]), -EBADF);
}

/* Waits (10 s at most) until fd has at least its SO_RCVLOWAT bytes to read, or EOF. */
static void wait_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
}

static void set_rcvlowat(int fd, int bytes)
{
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)), 0);
}

static void test_nl_buf_read_fd_stamped_tcp(void **state)
{
    nl_buf_t *b = *state;
    int fds[2];
    test_tcp_pair(fds, true);
    test_stamps_warm_up(fds);
    /* Nothing to read: -EAGAIN, and the stamp is cleared whatever it held. */
    uint64_t stamp = 42;
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), -EAGAIN);
    assert_int_equal(stamp, 0);
    assert_int_equal(nl_buf_capacity(b), 0);

    /* A small message: its stamp lies between the send and the end of the read. */
    uint64_t t0 = test_realtime_ns();
    write_pattern(fds[1], 0, 100);
    wait_readable(fds[0]);
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), 100);
    uint64_t t1 = test_realtime_ns();
    assert_true(stamp != 0);
    assert_true(t0 <= stamp && stamp <= t1);
    check_pattern(nl_buf_peek(b), 0, 100);
    nl_buf_retrieve_all(b);

    /* 32 KiB, all in the socket before the read (SO_RCVLOWAT holds poll back until then):
     * one read takes the 1 KiB of writable space plus the spill, and is stamped too. */
    const size_t big = 32 * 1024;
    assert_int_equal(nl_buf_writable(b), NL_BUF_INITIAL);
    set_rcvlowat(fds[0], (int)big);
    uint64_t t2 = test_realtime_ns();
    write_pattern(fds[1], 100, big);
    wait_readable(fds[0]);
    stamp = 0;
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), (ssize_t)big);
    uint64_t t3 = test_realtime_ns();
    assert_true(stamp > t1);
    assert_true(t2 <= stamp && stamp <= t3);
    assert_int_equal(nl_buf_readable(b), big);
    check_pattern(nl_buf_peek(b), 100, big);
    nl_buf_retrieve_all(b);
    set_rcvlowat(fds[0], 1);

    /* EOF: 0 bytes, no stamp. */
    close(fds[1]);
    wait_readable(fds[0]);
    stamp = 42;
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), 0);
    assert_int_equal(stamp, 0);
    close(fds[0]);
}

static void test_nl_buf_read_fd_stamped_off(void **state)
{
    nl_buf_t *b = *state;
    int fds[2];
    /* Without SO_TIMESTAMPNS the kernel attaches nothing: the bytes arrive, the stamp is 0. */
    test_tcp_pair(fds, false);
    write_pattern(fds[1], 0, 10);
    wait_readable(fds[0]);
    uint64_t stamp = 42;
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), 10);
    assert_int_equal(stamp, 0);
    check_pattern(nl_buf_peek(b), 0, 10);
    close(fds[1]);
    close(fds[0]);
    /* A full buffer refuses before any system call (the descriptor is closed by now). */
    nl_buf_deinit(b);
    nl_buf_init(b, 4096);
    append_pattern(b, 0, 4096 - NL_BUF_PREPEND);
    stamp = 42;
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), -ENOBUFS);
    assert_int_equal(stamp, 0);
    /* And an error is returned as nl_buf_read_fd returns it. */
    nl_buf_retrieve_all(b);
    assert_int_equal(nl_buf_read_fd_stamped(b, fds[0], &stamp), -EBADF);
    assert_int_equal(stamp, 0);
}

static void test_nl_block_ref_unref(void **state)
{
    NL_UNUSED(state);
    nl_block_t *b = nl_block_new(100);
    assert_non_null(b);
    assert_int_equal(nl_block_len(b), 100);
    memset(nl_block_data(b), 'x', 100);
    assert_ptr_equal(nl_block_ref(b), b);
    assert_ptr_equal(nl_block_ref(b), b);
    nl_block_unref(b);
    nl_block_unref(b);
    /* Still alive with one reference: the bytes are intact (ASan would flag a free). */
    assert_int_equal(nl_block_data(b)[99], 'x');
    nl_block_unref(b); /* the last: freed, which the leak checker confirms */
    nl_block_unref(NULL);
    nl_block_t *empty = nl_block_new(0);
    assert_non_null(empty);
    assert_int_equal(nl_block_len(empty), 0);
    nl_block_unref(empty);
    assert_null(nl_block_new(SIZE_MAX));
}

enum { BLOCK_THREADS = 4, BLOCK_ROUNDS = 100000 };

static void *block_worker(void *arg)
{
    nl_block_t *b = arg;
    for (int i = 0; i < BLOCK_ROUNDS; i++) {
        nl_block_ref(b);
        if (nl_block_data(b)[0] != 'y')
            abort();
        nl_block_unref(b);
    }
    nl_block_unref(b); /* the reference the main thread took for this worker */
    return NULL;
}

static void test_nl_block_shared_across_threads(void **state)
{
    NL_UNUSED(state);
    nl_block_t *b = nl_block_new(64);
    assert_non_null(b);
    memset(nl_block_data(b), 'y', 64);
    pthread_t threads[BLOCK_THREADS];
    for (int i = 0; i < BLOCK_THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, block_worker, nl_block_ref(b)), 0);
    for (int i = 0; i < BLOCK_THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    assert_int_equal(nl_block_data(b)[63], 'y');
    nl_block_unref(b);
}

#define BUF_TEST(f) cmocka_unit_test_setup_teardown(f, setup_buf, teardown_buf)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BUF_TEST(test_nl_buf_init_allocates_nothing),
        BUF_TEST(test_nl_buf_append_retrieve),
        BUF_TEST(test_nl_buf_grow),
        BUF_TEST(test_nl_buf_inside_grow),
        BUF_TEST(test_nl_buf_release_only_when_empty),
        BUF_TEST(test_nl_buf_first_use_sized_to_need),
        BUF_TEST(test_nl_buf_reserve_small_first),
        BUF_TEST(test_nl_buf_begin_write),
        BUF_TEST(test_nl_buf_prepend),
        BUF_TEST(test_nl_buf_integers),
        BUF_TEST(test_nl_buf_find),
        BUF_TEST(test_nl_buf_find_across_reallocation),
        BUF_TEST(test_nl_buf_cap_enobufs),
        BUF_TEST(test_nl_buf_read_fd_spill),
        BUF_TEST(test_nl_buf_read_fd_no_storage),
        BUF_TEST(test_nl_buf_read_fd_cap),
        BUF_TEST(test_nl_buf_read_fd_stamped_tcp),
        BUF_TEST(test_nl_buf_read_fd_stamped_off),
        cmocka_unit_test(test_nl_block_ref_unref),
        cmocka_unit_test(test_nl_block_shared_across_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
