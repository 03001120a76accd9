/*
 * gw_config_value: the value syntax of herald's settings (numbers, durations, sizes, booleans,
 * HOST:PORT) and its inverse for --print-config. Kept apart from gw_config.c, which is about
 * where values come from, and shared with `herald token --ttl`.
 */
#include "gw_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Parses a decimal number followed by an optional unit suffix, returned in *unit. Leading
 * signs and blanks are refused: strtoull would take "-1" as a huge number and " 1" as 1. */
static int parse_number_unit(const char *text, uint64_t *out, const char **unit)
{
    if (text[0] < '0' || text[0] > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    *out = v;
    *unit = end;
    return 0;
}

static int scale(uint64_t v, uint64_t mult, uint64_t *out)
{
    if (v != 0 && mult > UINT64_MAX / v)
        return -ERANGE;
    *out = v * mult;
    return 0;
}

int gw_config_parse_uint(const char *text, uint64_t *out)
{
    uint64_t v;
    const char *unit;
    int rc = parse_number_unit(text, &v, &unit);
    if (rc != 0)
        return rc;
    if (*unit != '\0')
        return -EINVAL;
    *out = v;
    return 0;
}

int gw_config_parse_duration_ms(const char *text, uint64_t *out_ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    uint64_t v;
    const char *unit;
    int rc = parse_number_unit(text, &v, &unit);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(unit, units[i].unit) == 0)
            return scale(v, units[i].ms, out_ms);
    }
    return -EINVAL;
}

int gw_config_parse_size(const char *text, uint64_t *out_bytes)
{
    /* Binary multiples only: "64k", "64KB" and "64KiB" are all 65536 bytes, because nobody
     * sizing a buffer means 64,000. */
    static const struct {
        const char *unit;
        unsigned shift;
    } units[] = {{"", 0},    {"b", 0},    {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20},
                 {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}};
    uint64_t v;
    const char *unit;
    int rc = parse_number_unit(text, &v, &unit);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(unit, units[i].unit) == 0)
            return scale(v, 1ull << units[i].shift, out_bytes);
    }
    return -EINVAL;
}

int gw_config_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

int gw_config_parse_hostport(const char *text, char *host, size_t host_cap, uint16_t *port)
{
    /* The last colon splits, so a bracketed IPv6 address keeps its own colons. */
    const char *colon = strrchr(text, ':');
    if (colon == NULL)
        return -EINVAL;
    const char *h = text;
    size_t hlen = (size_t)(colon - text);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen) != NULL) {
        return -EINVAL; /* an unbracketed IPv6 address is ambiguous */
    }
    uint64_t p;
    if (hlen == 0 || gw_config_parse_uint(colon + 1, &p) != 0 || p > 65535)
        return -EINVAL;
    if (hlen >= host_cap)
        return -ENAMETOOLONG;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int gw_config_split_list(const char *text, gw_config_item_t *out, size_t cap)
{
    size_t n = 0;
    if (text[strspn(text, " \t")] == '\0')
        return 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        const char *item = p;
        size_t item_len = len;
        while (item_len > 0 && (*item == ' ' || *item == '\t')) {
            item++;
            item_len--;
        }
        while (item_len > 0 && (item[item_len - 1] == ' ' || item[item_len - 1] == '\t'))
            item_len--;
        if (item_len == 0)
            return -EINVAL;
        if (n == cap)
            return -E2BIG;
        out[n++] = (gw_config_item_t){.text = item, .len = item_len};
        if (p[len] == '\0')
            return (int)n;
        p += len + 1;
    }
}

int gw_config_parse_servers(const char *text, gw_config_server_t *out, size_t cap)
{
    gw_config_item_t items[GW_CONFIG_REDIS_SERVERS_MAX];
    int n = gw_config_split_list(
        text, items, cap < GW_CONFIG_REDIS_SERVERS_MAX ? cap : GW_CONFIG_REDIS_SERVERS_MAX);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        char item[GW_CONFIG_HOST_MAX + 16];
        if (items[i].len >= sizeof(item))
            return -EINVAL;
        memcpy(item, items[i].text, items[i].len);
        item[items[i].len] = '\0';
        if (gw_config_parse_hostport(item, out[i].host, sizeof(out[i].host), &out[i].port) < 0 ||
            out[i].port == 0)
            return -EINVAL;
        /* The ring would place one server twice, and nodes listing it once would disagree. */
        for (int j = 0; j < i; j++)
            if (out[j].port == out[i].port && strcmp(out[j].host, out[i].host) == 0)
                return -EINVAL;
    }
    return n;
}

int gw_config_parse_names(const char *text, char (*out)[GW_CONFIG_NAME_MAX], size_t cap)
{
    gw_config_item_t items[GW_CONFIG_REDIS_SERVERS_MAX];
    int n = gw_config_split_list(
        text, items, cap < GW_CONFIG_REDIS_SERVERS_MAX ? cap : GW_CONFIG_REDIS_SERVERS_MAX);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        if (items[i].len >= GW_CONFIG_NAME_MAX)
            return -EINVAL;
        for (size_t k = 0; k < items[i].len; k++) {
            unsigned char c = (unsigned char)items[i].text[k];
            if (c <= ' ' || c >= 0x7f)
                return -EINVAL; /* Sentinel's replies and events split on blanks */
        }
        memcpy(out[i], items[i].text, items[i].len);
        out[i][items[i].len] = '\0';
        for (int j = 0; j < i; j++)
            if (strcmp(out[j], out[i]) == 0)
                return -EINVAL;
    }
    return n;
}

void gw_config_format_duration(uint64_t ms, char *out, size_t cap)
{
    static const char *const unit[] = {"d", "h", "m", "s"};
    static const uint64_t div[] = {86400000, 3600000, 60000, 1000};
    for (size_t i = 0; i < sizeof(div) / sizeof(div[0]); i++) {
        if (ms != 0 && ms % div[i] == 0) {
            snprintf(out, cap, "%" PRIu64 "%s", ms / div[i], unit[i]);
            return;
        }
    }
    snprintf(out, cap, "%" PRIu64 "ms", ms);
}

void gw_config_format_size(uint64_t bytes, char *out, size_t cap)
{
    static const char *const unit[] = {"GiB", "MiB", "KiB"};
    static const unsigned shift[] = {30, 20, 10};
    for (size_t i = 0; i < sizeof(shift) / sizeof(shift[0]); i++) {
        uint64_t d = 1ull << shift[i];
        if (bytes != 0 && bytes % d == 0) {
            snprintf(out, cap, "%" PRIu64 "%s", bytes / d, unit[i]);
            return;
        }
    }
    snprintf(out, cap, "%" PRIu64, bytes);
}

const char *gw_slow_policy_str(gw_slow_policy_t policy)
{
    return policy == GW_SLOW_DISCONNECT ? "disconnect" : "drop";
}

const char *gw_engine_kind_str(gw_engine_kind_t kind)
{
    return kind == GW_ENGINE_REDIS ? "redis" : "memory";
}
