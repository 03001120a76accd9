/*
 * lg_token: the tokens herald-loadgen's clients present in Connect. Each client is its own
 * user, "<prefix>-<id>", allowed the channels "<prefix>:*" (its own, the group and the
 * broadcast channels). Signing reuses the gateway's JWT HS256 code (gw_token_sign), so the
 * load generator cannot drift from what the server verifies. With --insecure the token is
 * signed with a fixed dummy key: the server does not check signatures then, but may still
 * read the claims.
 *
 * Thread: any (no shared state). Ownership: the caller owns out.
 * Usage: char tok[LG_TOKEN_MAX]; n = lg_token_make(cfg, id, tok, sizeof tok);
 */
#ifndef HERALD_LOADGEN_LG_TOKEN_H
#define HERALD_LOADGEN_LG_TOKEN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lg_config.h"

#define LG_TOKEN_MAX 1024 /* bytes for one loadgen token, NUL included */

/* Writes the token of client id (NUL-terminated) to out.
 * Returns: its length; -EINVAL (a bad prefix or secret); -ENOBUFS when out is too small.
 * Thread: any. */
ssize_t lg_token_make(const lg_config_t *cfg, uint32_t id, char *out, size_t out_cap);

#endif
