/*
 * lg_token: loadgen tokens through the gateway's signer (see lg_token.h).
 */
#include "lg_token.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gw_auth.h"

/* Any key will do for a server that does not verify signatures. */
static const char insecure_key[] = "herald-loadgen-insecure";

ssize_t lg_token_make(const lg_config_t *cfg, uint32_t id, char *out, size_t out_cap)
{
    char sub[LG_PREFIX_MAX + 16];
    char pattern[LG_PREFIX_MAX + 4];
    snprintf(sub, sizeof(sub), "%s-%u", cfg->channel_prefix, id);
    snprintf(pattern, sizeof(pattern), "%s:*", cfg->channel_prefix);
    const char *channels[1] = {pattern};
    const char *key = cfg->is_insecure && cfg->secret[0] == '\0' ? insecure_key : cfg->secret;
    /* Wall-clock seconds: exp is compared with the server's real-time clock. */
    int64_t now_s = (int64_t)time(NULL);
    return gw_token_sign(sub, channels, 1, now_s, (int64_t)cfg->token_ttl_s, key, strlen(key), out,
                         out_cap);
}
