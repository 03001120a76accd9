/*
 * libFuzzer target for gateway/gw_channel_name.c: channel names from Subscribe, Publish and
 * the admin API, and token patterns (clang -fsanitize=fuzzer,address,undefined).
 *
 * Input layout: byte 0 picks max_bytes (b % 40, so 0 means the default and the length limit
 * is easy to reach), byte 1 where the rest splits into a pattern and a name.
 *
 * Beyond "no crash, no UB" it checks every answer against a plain restatement of the rules in
 * gw_channel.h:
 *   - a name is valid exactly when it is 1..max bytes of the allowed set, and the error says
 *     which rule failed first (empty, then length, then bytes);
 *   - a valid name is also a valid pattern that matches itself, and "*" and name + "*" are
 *     valid patterns that match it;
 *   - a pattern is valid exactly when it is "*", a valid name, or a valid name and a star;
 *   - between a valid pattern and a valid name, match is prefix or exact comparison.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gw_channel.h"
#include "netlib/nl_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool byte_allowed(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("_-:.@/=", c) != NULL);
}

/* The name rules, restated. */
static gw_channel_err_t ref_name_check(const char *s, size_t len, size_t max_bytes)
{
    if (len == 0)
        return GW_CHANNEL_ERR_EMPTY;
    if (len > (max_bytes == 0 ? GW_CHANNEL_NAME_MAX_DEFAULT : max_bytes))
        return GW_CHANNEL_ERR_TOO_LONG;
    for (size_t i = 0; i < len; i++) {
        if (!byte_allowed((uint8_t)s[i]))
            return GW_CHANNEL_ERR_BAD_CHAR;
    }
    return GW_CHANNEL_OK;
}

static bool ref_pattern_valid(const char *p, size_t len, size_t max_bytes)
{
    if (len == 1 && p[0] == '*')
        return true;
    if (len >= 2 && p[len - 1] == '*')
        return ref_name_check(p, len - 1, max_bytes) == GW_CHANNEL_OK;
    return ref_name_check(p, len, max_bytes) == GW_CHANNEL_OK;
}

static bool ref_match(const char *p, size_t plen, const char *name, size_t nlen)
{
    if (p[plen - 1] == '*')
        return nlen >= plen - 1 && memcmp(p, name, plen - 1) == 0;
    return plen == nlen && memcmp(p, name, nlen) == 0;
}

static void check_name(const char *name, size_t len, size_t max_bytes)
{
    gw_channel_err_t rc = gw_channel_name_check(name, len, max_bytes);
    NL_ASSERT(rc == ref_name_check(name, len, max_bytes));
    NL_ASSERT(strcmp(gw_channel_err_str(rc), "unknown") != 0);
    if (rc != GW_CHANNEL_OK)
        return;
    NL_ASSERT(gw_channel_pattern_check(name, len, max_bytes) == GW_CHANNEL_OK);
    NL_ASSERT(gw_channel_pattern_match(name, len, name, len));
    NL_ASSERT(gw_channel_pattern_match("*", 1, name, len));
    char star[GW_CHANNEL_NAME_MAX_LIMIT + 2];
    if (len < sizeof(star) - 1) {
        memcpy(star, name, len);
        star[len] = '*';
        NL_ASSERT(gw_channel_pattern_check(star, len + 1, max_bytes) == GW_CHANNEL_OK);
        NL_ASSERT(gw_channel_pattern_match(star, len + 1, name, len));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max_bytes = data[0] % 40;
    size_t split = data[1];
    const char *rest = (const char *)data + 2;
    size_t len = size - 2;
    if (split > len)
        split = len;
    const char *pattern = rest;
    size_t plen = split;
    const char *name = rest + split;
    size_t nlen = len - split;

    check_name(name, nlen, max_bytes);
    check_name(pattern, plen, max_bytes);

    gw_channel_err_t prc = gw_channel_pattern_check(pattern, plen, max_bytes);
    NL_ASSERT((prc == GW_CHANNEL_OK) == ref_pattern_valid(pattern, plen, max_bytes));
    NL_ASSERT(prc != GW_CHANNEL_ERR_EMPTY || plen == 0);
    /* Matching never reads past either string, validated or not. */
    bool is_match = gw_channel_pattern_match(pattern, plen, name, nlen);
    if (prc == GW_CHANNEL_OK && ref_name_check(name, nlen, max_bytes) == GW_CHANNEL_OK)
        NL_ASSERT(is_match == ref_match(pattern, plen, name, nlen));
    return 0;
}
