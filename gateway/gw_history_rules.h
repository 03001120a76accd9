/*
 * gw_history_rules: which channels keep history, and how much: `[history] rules`.
 *
 * The setting is a comma-separated list of `pattern=count[/age]`:
 *
 *     chat:*=100/5m, news=20/1h, feed:*=1000, chat:tmp*=0
 *
 * pattern is a token pattern (gw_channel_name.h: "*", "prefix*" or an exact name); count is
 * how many of the channel's latest messages it keeps (1..GW_HISTORY_COUNT_MAX, or 0 for none);
 * age (a duration, "30s", "5m", "1h") drops messages older than that, and without it only the
 * count bounds the history. The first rule whose pattern matches a channel decides, so put
 * exceptions before the general rule ("chat:tmp*=0, chat:*=100"). A channel no rule matches
 * keeps nothing. Blanks around items and around '=' and '/' are ignored.
 *
 * Thread: every function is pure; a parsed gw_history_rules_t is a value (copy it freely) and
 * may be read from any thread that owns its copy.
 * Ownership: nothing is allocated; the rules hold a copy of the text they came from.
 * Usage: gw_history_rules_parse(cfg->history_rules, &rules, err, sizeof(err)) once per config;
 *        r = gw_history_rules_match(&rules, name, len) when a channel's state is made.
 */
#ifndef HERALD_GATEWAY_GW_HISTORY_RULES_H
#define HERALD_GATEWAY_GW_HISTORY_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rules in one setting, and the longest setting (bytes, NUL included). */
#define GW_HISTORY_RULES_MAX 32
#define GW_HISTORY_RULES_TEXT_MAX 1024
/* Most messages one channel may keep. */
#define GW_HISTORY_COUNT_MAX 65536
/* Longest age a rule may give: 30 days. */
#define GW_HISTORY_AGE_MAX_MS (30ull * 24 * 3600 * 1000)

/* What one channel keeps. count 0: nothing. age_ms 0: no age bound. */
typedef struct gw_history_rule_s {
    uint16_t pattern_off; /* into gw_history_rules_t.text */
    uint16_t pattern_len;
    uint32_t count;
    uint64_t age_ms;
} gw_history_rule_t;

typedef struct gw_history_rules_s {
    uint32_t n;
    gw_history_rule_t rule[GW_HISTORY_RULES_MAX];
    char text[GW_HISTORY_RULES_TEXT_MAX]; /* the patterns, each NUL-terminated */
} gw_history_rules_t;

/* Parses text (NUL-terminated; "" gives no rules) into *out. On failure err (err_cap bytes,
 * may be NULL) says which item and why, and *out is left empty.
 * Returns: 0; -EINVAL (syntax, bad pattern, count or age out of range); -E2BIG (more than
 * GW_HISTORY_RULES_MAX items or text too long). Thread: any. */
int gw_history_rules_parse(const char *text, gw_history_rules_t *out, char *err, size_t err_cap);

/* The first rule matching name[0..len), or NULL when none does. A matching rule with count 0
 * is returned too (it says "keep nothing"); gw_history_rule_keeps tells. Thread: any. */
const gw_history_rule_t *gw_history_rules_match(const gw_history_rules_t *rules, const char *name,
                                                size_t len);

/* Whether r (may be NULL) keeps anything. */
static inline bool gw_history_rule_keeps(const gw_history_rule_t *r)
{
    return r && r->count > 0;
}

/* The pattern of rule r of rules, NUL-terminated. */
static inline const char *gw_history_rule_pattern(const gw_history_rules_t *rules,
                                                  const gw_history_rule_t *r)
{
    return rules->text + r->pattern_off;
}

#endif
