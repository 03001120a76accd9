/*
 * nl_log: one key=value line per event, formatted on the stack and written with one write(2)
 * so lines from different threads never interleave and no lock is taken.
 */
#include "netlib/nl_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int nl_log_threshold = NL_INFO;

static _Thread_local int tls_loop_id = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static bool is_control(unsigned char ch)
{
    return ch < 0x20 || ch == 0x7f;
}

/* Bytes that s[i] takes inside the quotes. */
static size_t quoted_len(unsigned char ch)
{
    return is_control(ch) ? 4 : (ch == '"' || ch == '\\') ? 2 : 1;
}

const char *nl_log_quote(char *buf, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    static const char cut[] = "...";
    size_t whole = 0;
    for (size_t i = 0; i < len && whole <= cap; i++)
        whole += quoted_len((unsigned char)s[i]);
    /* Bytes that may hold s's characters: all but the two quotes and the NUL, less the cut
     * mark when s does not fit whole. */
    size_t room = cap - 3;
    if (whole > room)
        room -= sizeof(cut) - 1;
    size_t n = 0;
    buf[n++] = '"';
    size_t i = 0;
    for (; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        size_t need = quoted_len(ch);
        if (n - 1 + need > room)
            break;
        if (need == 4) {
            buf[n++] = '\\';
            buf[n++] = 'x';
            buf[n++] = hex[ch >> 4];
            buf[n++] = hex[ch & 15];
            continue;
        }
        if (need == 2)
            buf[n++] = '\\';
        buf[n++] = (char)ch;
    }
    if (i < len) {
        memcpy(buf + n, cut, sizeof(cut) - 1);
        n += sizeof(cut) - 1;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

void nl_log_set_level(nl_log_level_t level)
{
    __atomic_store_n(&nl_log_threshold, (int)level, __ATOMIC_RELAXED);
}

int nl_log_parse_level(const char *name, nl_log_level_t *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (nl_log_level_t)i;
            return 0;
        }
    }
    return -EINVAL;
}

void nl_log_set_thread_loop(int loop_id)
{
    tls_loop_id = loop_id;
}

void nl_log_write(nl_log_level_t level, const char *mod, const char *ev, const char *fmt, ...)
{
    /* 1 KiB is enough for every line we log; a longer one is cut and still ends in '\n'. */
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);

    int lvl = (int)level;
    if (lvl < 0 || lvl > NL_TRACE)
        lvl = NL_ERROR;
    int n = snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s mod=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[lvl], mod);
    if (tls_loop_id >= 0 && n < (int)sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n, " loop=%d", tls_loop_id);
    if (n < (int)sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n, " ev=%s", ev);
    if (fmt && fmt[0] && n < (int)sizeof(line) - 1) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (n > (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 1;
    for (int i = 0; i < n; i++) {
        if (is_control((unsigned char)line[i]))
            line[i] = '?';
    }
    line[n++] = '\n';
    /* One write: short writes to stderr are not retried, a log line is not worth a loop. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
