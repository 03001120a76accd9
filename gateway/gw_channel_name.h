/*
 * gw_channel_name: what a channel name may look like, and how a token's channel patterns match
 * names.
 *
 * A channel name is 1..max_bytes bytes (GW_CHANNEL_NAME_MAX_DEFAULT = 128 unless the config
 * says otherwise), each byte one of
 *
 *     A-Z a-z 0-9 _ - : . @ / =
 *
 * No spaces, no control bytes, no UTF-8, and never '*': the star is reserved for patterns, so a
 * name can never be mistaken for one. ':' is the conventional namespace separator
 * ("chat:room1", "user:42").
 *
 * A pattern is what a token's `channels` claim lists. Three forms:
 *   - "*" alone matches every valid name;
 *   - "prefix*" (one trailing star) matches every name that starts with prefix, the name equal
 *     to prefix included: "chat:*" matches "chat:room1" and "chat:", not "chat";
 *   - anything else must be a valid name and matches only itself.
 * A star anywhere but at the end ("*chat", "a*b", "**") makes the pattern invalid. The prefix of
 * a star pattern may be empty only in "*" itself, and is at most max_bytes bytes.
 *
 * Thread: every function is pure and safe from any thread.
 * Ownership: nothing is allocated; strings are borrowed for the duration of the call.
 * Usage: gw_channel_name_check(name, len, cfg->max_channel_bytes) on every Subscribe and
 * Publish, then gw_channel_pattern_match(pattern, plen, name, len) per pattern of the token
 * (gw_token_claims_allow() does that loop).
 */
#ifndef HERALD_GATEWAY_GW_CHANNEL_NAME_H
#define HERALD_GATEWAY_GW_CHANNEL_NAME_H

#include <stdbool.h>
#include <stddef.h>

/* The default and the ceiling for the configurable name length. */
#define GW_CHANNEL_NAME_MAX_DEFAULT 128
#define GW_CHANNEL_NAME_MAX_LIMIT 1024

/* Why a name or a pattern was refused. 0 is "valid"; every error is negative. */
typedef enum gw_channel_err_e {
    GW_CHANNEL_OK = 0,
    GW_CHANNEL_ERR_EMPTY = -1,    /* zero bytes */
    GW_CHANNEL_ERR_TOO_LONG = -2, /* more than max_bytes */
    GW_CHANNEL_ERR_BAD_CHAR = -3, /* a byte outside the allowed set (in a pattern: a misplaced *) */
} gw_channel_err_t;

/* Checks that name[0..len) is a valid channel name of at most max_bytes bytes.
 * Returns: GW_CHANNEL_OK, GW_CHANNEL_ERR_EMPTY, GW_CHANNEL_ERR_TOO_LONG (checked before the
 *          characters), GW_CHANNEL_ERR_BAD_CHAR. max_bytes 0 means GW_CHANNEL_NAME_MAX_DEFAULT.
 * Thread: any. */
gw_channel_err_t gw_channel_name_check(const char *name, size_t len, size_t max_bytes);

/* Checks that pattern[0..len) is a valid pattern (see the header comment) whose prefix is at
 * most max_bytes bytes (a star pattern may thus be max_bytes + 1 bytes long).
 * Returns: as gw_channel_name_check(); a misplaced star is GW_CHANNEL_ERR_BAD_CHAR.
 * Thread: any. */
gw_channel_err_t gw_channel_pattern_check(const char *pattern, size_t len, size_t max_bytes);

/* Tells whether pattern[0..plen) matches name[0..nlen). Neither is validated here: validate
 * patterns when the token is accepted and names when the request arrives.
 * Returns: true on a match.
 * Thread: any. */
bool gw_channel_pattern_match(const char *pattern, size_t plen, const char *name, size_t nlen);

/* Returns a static snake_case text for an error ("empty", "too_long", "bad_char", "ok").
 * Thread: any. Ownership: static string. */
const char *gw_channel_err_str(gw_channel_err_t err);

#endif
