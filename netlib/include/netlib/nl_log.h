/*
 * nl_log: leveled key=value log lines on stderr, one line per event (STYLE.md §5):
 *
 *   ts=2025-01-02T03:04:05.678Z level=warn mod=netlib loop=2 ev=accept_failed fd=7 err=EMFILE
 *
 * `mod` is the NL_LOG_MODULE macro of the translation unit ("netlib" unless the build defines
 * it); `loop` is the id of the loop running on the calling thread, when there is one. Each line
 * is formatted in a stack buffer and leaves in one write(2): no lock, lines never interleave.
 * The level is tested before anything is formatted. NL_DEBUG and NL_TRACE compile to nothing
 * unless HERALD_DEBUG_LOG is defined.
 *
 * Thread: every function is safe from any thread.
 * Usage: NL_LOG(NL_WARN, "accept_failed", "fd=%d err=%s", fd, nl_strerror(err));
 *        The format holds the context keys only (at least one: gcc refuses an empty format).
 */
#ifndef HERALD_NETLIB_NL_LOG_H
#define HERALD_NETLIB_NL_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum nl_log_level_e {
    NL_ERROR = 0,
    NL_WARN = 1,
    NL_INFO = 2,
    NL_DEBUG = 3,
    NL_TRACE = 4,
} nl_log_level_t;

#ifndef NL_LOG_MODULE
#define NL_LOG_MODULE "netlib"
#endif

/* The current threshold; lines above it are not formatted. Relaxed atomic, any thread. */
extern int nl_log_threshold;

/* Sets the threshold (default NL_INFO). Thread: any. */
void nl_log_set_level(nl_log_level_t level);

/* Parses "error", "warn", "info", "debug", "trace". Returns 0, or -EINVAL. */
int nl_log_parse_level(const char *name, nl_log_level_t *out);

/* Sets this thread's loop id for the loop= key; -1 (the default) leaves the key out. */
void nl_log_set_thread_loop(int loop_id);

/* Writes s[0..len) into buf as a quoted value, "..." with \" \\ and \xNN for other bytes
 * below 0x20 or at 0x7f, cut with "..." inside the quotes when it does not fit: for values a
 * client or peer chose (user ids, library messages), so they cannot end a line, forge a key or
 * split a value. cap must be at least 8. Returns buf. Thread: any.
 * Usage: char q[NL_LOG_QUOTE_MAX]; NL_LOG(NL_INFO, "ev", "user=%s", nl_log_quote(q, sizeof(q),
 *        user, strlen(user))); */
#define NL_LOG_QUOTE_MAX 160
const char *nl_log_quote(char *buf, size_t cap, const char *s, size_t len);

/* Formats and writes one line. Use the NL_LOG macro, which checks the level first. Any byte
 * below 0x20 or at 0x7f that the format let through becomes '?': one event, one line. */
void nl_log_write(nl_log_level_t level, const char *mod, const char *ev, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define NL_LOG_ENABLED(level) ((int)(level) <= __atomic_load_n(&nl_log_threshold, __ATOMIC_RELAXED))

#define NL_LOG_EMIT(level, ev, ...)                                                                \
    do {                                                                                           \
        if (NL_LOG_ENABLED(level))                                                                 \
            nl_log_write((level), NL_LOG_MODULE, (ev), __VA_ARGS__);                               \
    } while (0)

#if defined(HERALD_DEBUG_LOG)
#define NL_LOG(level, ev, ...) NL_LOG_EMIT(level, ev, __VA_ARGS__)
#else
/* NL_DEBUG/NL_TRACE lines vanish at compile time; the level is a constant in each call. */
#define NL_LOG(level, ev, ...)                                                                     \
    do {                                                                                           \
        if ((int)(level) <= (int)NL_INFO)                                                          \
            NL_LOG_EMIT(level, ev, __VA_ARGS__);                                                   \
    } while (0)
#endif

#endif
