/*
 * test_file: a temporary file holding a given text, for the tests that hand herald a config
 * file (test_gw_config, test_gw_config_reload, test_gw_cli; the caller unlinks it), and a
 * memory stream that captures what the config code prints.
 *
 * Thread: the test's. Include after <cmocka.h>; failures are cmocka asserts.
 */
#ifndef HERALD_TESTS_TEST_FILE_H
#define HERALD_TESTS_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a new file under /tmp; path (64 bytes) gets its name. */
static inline void test_write_temp(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/herald-test-conf.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* A memory stream for printed output (errors, a config printout); text is the caller's to
 * free after test_capture_close. */
typedef struct test_capture_s {
    FILE *fp;
    char *text;
    size_t len;
} test_capture_t;

static inline void test_capture_open(test_capture_t *c)
{
    c->text = NULL;
    c->len = 0;
    c->fp = open_memstream(&c->text, &c->len);
    assert_non_null(c->fp);
}

static inline void test_capture_close(test_capture_t *c)
{
    fclose(c->fp);
    c->fp = NULL;
}

#endif
