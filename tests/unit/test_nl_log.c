/*
 * test_nl_log: level names, the threshold, the shape of a line (ts, level, mod, loop, ev, the
 * context), one event per line whatever bytes the context holds, the 1 KiB cut, and quoted
 * values for strings a peer chose. stderr is a pipe while a test writes; each test reads back
 * exactly what nl_log_write wrote.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "netlib/nl_log.h"

typedef struct capture_s {
    int saved_stderr;
    int read_fd;
    char text[4096];
    size_t len;
} capture_t;

/* Points stderr at a non-blocking pipe. */
static void capture_begin(capture_t *c)
{
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    c->saved_stderr = dup(STDERR_FILENO);
    assert_true(c->saved_stderr >= 0);
    assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
    close(p[1]);
    c->read_fd = p[0];
    c->len = 0;
}

/* Restores stderr and reads everything written meanwhile (a pipe holds far more than 4 KiB,
 * and the writer is this thread, so all of it is there). */
static void capture_end(capture_t *c)
{
    assert_int_equal(dup2(c->saved_stderr, STDERR_FILENO), STDERR_FILENO);
    close(c->saved_stderr);
    ssize_t n;
    while ((n = read(c->read_fd, c->text + c->len, sizeof(c->text) - 1 - c->len)) > 0)
        c->len += (size_t)n;
    close(c->read_fd);
    c->text[c->len] = '\0';
}

static size_t count_char(const char *s, size_t len, char ch)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == ch;
    return n;
}

static void test_nl_log_parse_level(void **state)
{
    (void)state;
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < 5; i++) {
        nl_log_level_t level = NL_TRACE;
        assert_int_equal(nl_log_parse_level(names[i], &level), 0);
        assert_int_equal(level, i);
    }
    nl_log_level_t level = NL_WARN;
    assert_int_equal(nl_log_parse_level("warning", &level), -EINVAL);
    assert_int_equal(nl_log_parse_level("", &level), -EINVAL);
    assert_int_equal(level, NL_WARN);
}

static void test_nl_log_line_shape_and_threshold(void **state)
{
    (void)state;
    capture_t c;
    nl_log_set_level(NL_WARN);
    capture_begin(&c);
    NL_LOG(NL_INFO, "hidden", "k=%d", 1); /* above the threshold: nothing */
    NL_LOG(NL_WARN, "shown", "fd=%d err=%s", 7, "EMFILE");
    nl_log_set_thread_loop(3);
    NL_LOG(NL_ERROR, "looped", "k=%d", 2);
    nl_log_set_thread_loop(-1);
    capture_end(&c);
    nl_log_set_level(NL_INFO);

    assert_int_equal(count_char(c.text, c.len, '\n'), 2);
    char *second = strchr(c.text, '\n') + 1;
    assert_memory_equal(c.text, "ts=", 3);
    assert_non_null(strstr(c.text, "Z level=warn mod=netlib ev=shown fd=7 err=EMFILE\n"));
    assert_null(strstr(c.text, "hidden"));
    assert_memory_equal(second, "ts=", 3);
    assert_non_null(strstr(second, " level=error mod=netlib loop=3 ev=looped k=2\n"));
}

static void test_nl_log_control_bytes_stay_on_one_line(void **state)
{
    (void)state;
    capture_t c;
    capture_begin(&c);
    /* What a user id "a\nts=... level=error ev=forged" would try without quoting. */
    NL_LOG(NL_WARN, "login", "user=%s end=1", "a\nts=x level=error ev=forged\r\t\x7f");
    capture_end(&c);
    assert_int_equal(count_char(c.text, c.len, '\n'), 1);
    assert_int_equal(c.text[c.len - 1], '\n');
    assert_non_null(strstr(c.text, "user=a?ts=x level=error ev=forged??? end=1\n"));
}

static void test_nl_log_long_line_cut_at_1k(void **state)
{
    (void)state;
    char big[3000];
    memset(big, 'v', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_t c;
    capture_begin(&c);
    NL_LOG(NL_WARN, "long", "value=%s", big);
    capture_end(&c);
    assert_int_equal(c.len, 1024);
    assert_int_equal(count_char(c.text, c.len, '\n'), 1);
    assert_int_equal(c.text[1023], '\n');
    assert_int_equal(c.text[1022], 'v');
}

static void test_nl_log_quote_escapes(void **state)
{
    (void)state;
    char q[NL_LOG_QUOTE_MAX];
    assert_string_equal(nl_log_quote(q, sizeof(q), "alice", 5), "\"alice\"");
    assert_string_equal(nl_log_quote(q, sizeof(q), "", 0), "\"\"");
    assert_string_equal(nl_log_quote(q, sizeof(q), "a b=\"c\"\\", 8), "\"a b=\\\"c\\\"\\\\\"");
    assert_string_equal(nl_log_quote(q, sizeof(q), "x\ny\x7f", 4), "\"x\\x0ay\\x7f\"");
    /* The length decides, not a NUL: an embedded NUL is shown, not an end. */
    assert_string_equal(nl_log_quote(q, sizeof(q), "a\0b", 3), "\"a\\x00b\"");
    /* UTF-8 passes through as it is. */
    assert_string_equal(nl_log_quote(q, sizeof(q), "\xc3\xa9t\xc3\xa9", 5),
                        "\"\xc3\xa9t\xc3\xa9\"");
}

static void test_nl_log_quote_cuts_inside_the_quotes(void **state)
{
    (void)state;
    char src[400];
    memset(src, 'u', sizeof(src));
    char q[NL_LOG_QUOTE_MAX];
    const char *out = nl_log_quote(q, sizeof(q), src, sizeof(src));
    size_t n = strlen(out);
    assert_true(n < sizeof(q));
    assert_int_equal(out[0], '"');
    assert_memory_equal(out + n - 4, "...\"", 4);
    assert_int_equal(count_char(out, n, 'u'), n - 5);

    /* At the smallest buffer: what fits whole is not cut; an escape is never split. */
    char small[8];
    assert_string_equal(nl_log_quote(small, sizeof(small), "ab", 2), "\"ab\"");
    assert_string_equal(nl_log_quote(small, sizeof(small), "\n\n\n\n", 4), "\"...\"");
    assert_string_equal(nl_log_quote(small, sizeof(small), "abcde", 5), "\"abcde\"");
    assert_string_equal(nl_log_quote(small, sizeof(small), "abcdef", 6), "\"ab...\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_log_parse_level),
        cmocka_unit_test(test_nl_log_line_shape_and_threshold),
        cmocka_unit_test(test_nl_log_control_bytes_stay_on_one_line),
        cmocka_unit_test(test_nl_log_long_line_cut_at_1k),
        cmocka_unit_test(test_nl_log_quote_escapes),
        cmocka_unit_test(test_nl_log_quote_cuts_inside_the_quotes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
