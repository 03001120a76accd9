/* nl_common: assertion, clocks, error names. */
#include "netlib/nl_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "netlib/nl_log.h"

_Noreturn void nl_panic(const char *file, int line, const char *what)
{
    nl_log_write(NL_ERROR, "netlib", "assert_failed", "file=%s line=%d cond=\"%s\"", file, line,
                 what);
    abort();
}

const char *nl_strerror(int err)
{
    if (err < 0)
        err = -err;
    /* strerrorname_np (glibc 2.32+) gives the symbolic name alerts can match on. */
    const char *name = strerrorname_np(err);
    return name ? name : "EUNKNOWN";
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t nl_now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t nl_now_ms(void)
{
    return clock_ns(CLOCK_MONOTONIC) / 1000000u;
}

uint64_t nl_wall_ms(void)
{
    return clock_ns(CLOCK_REALTIME) / 1000000u;
}
