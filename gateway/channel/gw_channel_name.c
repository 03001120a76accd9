/*
 * gw_channel_name: channel name validation and token pattern matching. Runs on every Subscribe
 * and Publish, so it is a table lookup per byte and a memcmp, with no allocation.
 */
#include "gw_channel.h"

#include <stdint.h>
#include <string.h>

/*
 * One flag per byte value: 1 for the bytes a name may hold. A table rather than a chain of
 * range tests keeps the loop branch-light; it is built by a designated initializer so the
 * allowed set reads in one place.
 */
static const uint8_t name_byte_ok[256] = {
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
    ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1,
    ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1,
    ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['_'] = 1, ['-'] = 1,
    [':'] = 1, ['.'] = 1, ['@'] = 1, ['/'] = 1, ['='] = 1,
};

static size_t effective_max(size_t max_bytes)
{
    if (max_bytes == 0)
        return GW_CHANNEL_NAME_MAX_DEFAULT;
    return max_bytes;
}

/* Checks only the bytes; the caller has checked the length. */
static gw_channel_err_t check_bytes(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < len; i++) {
        if (!name_byte_ok[p[i]])
            return GW_CHANNEL_ERR_BAD_CHAR;
    }
    return GW_CHANNEL_OK;
}

gw_channel_err_t gw_channel_name_check(const char *name, size_t len, size_t max_bytes)
{
    if (len == 0)
        return GW_CHANNEL_ERR_EMPTY;
    if (len > effective_max(max_bytes))
        return GW_CHANNEL_ERR_TOO_LONG;
    return check_bytes(name, len);
}

gw_channel_err_t gw_channel_pattern_check(const char *pattern, size_t len, size_t max_bytes)
{
    if (len == 0)
        return GW_CHANNEL_ERR_EMPTY;
    if (len == 1 && pattern[0] == '*')
        return GW_CHANNEL_OK;
    /* A trailing star is not part of the prefix; every other star is refused as a bad byte. */
    size_t prefix_len = pattern[len - 1] == '*' ? len - 1 : len;
    if (prefix_len > effective_max(max_bytes))
        return GW_CHANNEL_ERR_TOO_LONG;
    return check_bytes(pattern, prefix_len);
}

bool gw_channel_pattern_match(const char *pattern, size_t plen, const char *name, size_t nlen)
{
    if (plen == 0)
        return false;
    if (pattern[plen - 1] == '*') {
        /* "*" has an empty prefix; memcmp is skipped so a NULL name with length 0 is fine. */
        size_t prefix_len = plen - 1;
        return nlen >= prefix_len && (prefix_len == 0 || memcmp(pattern, name, prefix_len) == 0);
    }
    return plen == nlen && memcmp(pattern, name, nlen) == 0;
}

const char *gw_channel_err_str(gw_channel_err_t err)
{
    switch (err) {
    case GW_CHANNEL_OK:
        return "ok";
    case GW_CHANNEL_ERR_EMPTY:
        return "empty";
    case GW_CHANNEL_ERR_TOO_LONG:
        return "too_long";
    case GW_CHANNEL_ERR_BAD_CHAR:
        return "bad_char";
    }
    return "unknown";
}
