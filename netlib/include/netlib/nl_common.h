/*
 * nl_common: what every netlib module shares: the assertion that stays on in release builds,
 * the unused-parameter marker, monotonic clocks and error text.
 *
 * Thread: everything here is safe from any thread.
 */
#ifndef HERALD_NETLIB_NL_COMMON_H
#define HERALD_NETLIB_NL_COMMON_H

#include <stdint.h>

#define NL_UNUSED(x) ((void)(x))

/* Bugs abort; input never does. NL_ASSERT stays on whatever NDEBUG says (STYLE.md §4). */
#define NL_ASSERT(cond)                                                                           \
    do {                                                                                          \
        if (__builtin_expect(!(cond), 0))                                                         \
            nl_panic(__FILE__, __LINE__, #cond);                                                  \
    } while (0)

/* Logs the failed condition with file and line as one ev=assert_failed line, then aborts. */
_Noreturn void nl_panic(const char *file, int line, const char *what);

/* Returns the text for a negative errno (as returned by netlib), e.g. "ECONNRESET".
 * Thread: any. Ownership: the string is static. */
const char *nl_strerror(int err);

/* Monotonic clock in nanoseconds / milliseconds (CLOCK_MONOTONIC). Thread: any. */
uint64_t nl_now_ns(void);
uint64_t nl_now_ms(void);

/* Wall clock in milliseconds since the Unix epoch (CLOCK_REALTIME). Thread: any. */
uint64_t nl_wall_ms(void);

#endif
