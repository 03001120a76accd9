/*
 * gw_history_rules: parsing and matching `[history] rules`. See gw_config.h.
 *
 * The parser walks the text once, item by item, copying each pattern into the rules' own text
 * buffer; counts and ages go through the config's own value parsers so "5m" means here what it
 * means everywhere else.
 */
#include "gw_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gw_channel.h"

__attribute__((format(printf, 3, 4))) static int rules_fail(char *err, size_t cap, const char *fmt,
                                                            ...)
{
    if (err && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* p[0..*len) without blanks at either end. */
static const char *trim(const char *p, size_t *len)
{
    while (*len > 0 && is_blank(p[0])) {
        p++;
        (*len)--;
    }
    while (*len > 0 && is_blank(p[*len - 1]))
        (*len)--;
    return p;
}

/* Copies p[0..len) into a NUL-terminated buffer of cap bytes. Returns false if it does not
 * fit. */
static bool copy_value(char *out, size_t cap, const char *p, size_t len)
{
    if (len >= cap)
        return false;
    memcpy(out, p, len);
    out[len] = '\0';
    return true;
}

/* One "pattern=count[/age]" item (already trimmed, non-empty). */
static int rules_parse_item(gw_history_rules_t *out, size_t *text_used, const char *item,
                            size_t len, char *err, size_t cap)
{
    const char *eq = memchr(item, '=', len);
    if (!eq)
        return rules_fail(err, cap, "'%.*s': expected pattern=count[/age]", (int)len, item);
    size_t plen = (size_t)(eq - item);
    const char *pat = trim(item, &plen);
    if (gw_channel_pattern_check(pat, plen, GW_CHANNEL_NAME_MAX_LIMIT) != GW_CHANNEL_OK)
        return rules_fail(err, cap, "'%.*s': '%.*s' is not a channel pattern", (int)len, item,
                          (int)plen, pat);
    size_t vlen = len - (size_t)(eq - item) - 1;
    const char *val = eq + 1;
    const char *slash = memchr(val, '/', vlen);
    size_t clen = slash ? (size_t)(slash - val) : vlen;
    const char *cnt = trim(val, &clen);
    char buf[32];
    uint64_t count = 0;
    if (!copy_value(buf, sizeof(buf), cnt, clen) || gw_config_parse_uint(buf, &count) < 0 ||
        count > GW_HISTORY_COUNT_MAX)
        return rules_fail(err, cap, "'%.*s': the count must be 0..%u", (int)len, item,
                          GW_HISTORY_COUNT_MAX);
    uint64_t age_ms = 0;
    if (slash) {
        size_t alen = vlen - (size_t)(slash - val) - 1;
        const char *age = trim(slash + 1, &alen);
        if (!copy_value(buf, sizeof(buf), age, alen) ||
            gw_config_parse_duration_ms(buf, &age_ms) < 0 || age_ms < 1000 ||
            age_ms > GW_HISTORY_AGE_MAX_MS)
            return rules_fail(err, cap, "'%.*s': the age must be a duration from 1s to 30d",
                              (int)len, item);
    }
    if (*text_used + plen + 1 > sizeof(out->text)) {
        rules_fail(err, cap, "the rules are longer than %d bytes", GW_HISTORY_RULES_TEXT_MAX - 1);
        return -E2BIG;
    }
    gw_history_rule_t *r = &out->rule[out->n++];
    r->pattern_off = (uint16_t)*text_used;
    r->pattern_len = (uint16_t)plen;
    r->count = (uint32_t)count;
    r->age_ms = age_ms;
    memcpy(out->text + *text_used, pat, plen);
    out->text[*text_used + plen] = '\0';
    *text_used += plen + 1;
    return 0;
}

int gw_history_rules_parse(const char *text, gw_history_rules_t *out, char *err, size_t err_cap)
{
    memset(out, 0, sizeof(*out));
    if (err && err_cap > 0)
        err[0] = '\0';
    gw_config_item_t items[GW_HISTORY_RULES_MAX];
    int n = gw_config_split_list(text, items, GW_HISTORY_RULES_MAX);
    if (n == -E2BIG) {
        rules_fail(err, err_cap, "more than %d rules", GW_HISTORY_RULES_MAX);
        return -E2BIG;
    }
    if (n < 0)
        return rules_fail(err, err_cap, "an empty rule between commas");
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int rc = rules_parse_item(out, &used, items[i].text, items[i].len, err, err_cap);
        if (rc < 0) {
            memset(out, 0, sizeof(*out));
            return rc;
        }
    }
    return 0;
}

const gw_history_rule_t *gw_history_rules_match(const gw_history_rules_t *rules, const char *name,
                                                size_t len)
{
    for (uint32_t i = 0; i < rules->n; i++) {
        const gw_history_rule_t *r = &rules->rule[i];
        if (gw_channel_pattern_match(rules->text + r->pattern_off, r->pattern_len, name, len))
            return r;
    }
    return NULL;
}
