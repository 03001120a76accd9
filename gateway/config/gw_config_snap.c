/*
 * gw_config_snap: immutable, reference-counted config snapshots. See gw_config.h.
 */
#include "gw_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int gw_config_snap_new(gw_config_snap_t **out, const gw_config_t *cfg, const gw_config_snap_t *prev)
{
    gw_config_snap_t *snap = calloc(1, sizeof(*snap));
    if (!snap)
        return -ENOMEM;
    snap->cfg = *cfg;
    snap->generation = prev ? prev->generation + 1 : 1;
    snap->frame_limit_bytes = cfg->max_frame_bytes;
    snap->ping_interval_max_ms = cfg->ping_interval_ms;
    if (prev && prev->frame_limit_bytes > snap->frame_limit_bytes)
        snap->frame_limit_bytes = prev->frame_limit_bytes;
    if (prev && prev->ping_interval_max_ms > snap->ping_interval_max_ms)
        snap->ping_interval_max_ms = prev->ping_interval_max_ms;
    /* The keys point into the snapshot's own copy, which never changes. */
    const char *secret = snap->cfg.token_secret;
    if (secret[0] != '\0') {
        snap->keys[0] = (gw_token_key_t){.secret = secret, .len = strlen(secret)};
        gw_config_item_t items[GW_CONFIG_PREVIOUS_SECRETS_MAX];
        int n = gw_config_split_list(snap->cfg.token_previous_secrets, items,
                                     GW_CONFIG_PREVIOUS_SECRETS_MAX);
        if (n < 0) {
            free(snap);
            return -EINVAL;
        }
        for (int i = 0; i < n; i++)
            snap->keys[1 + i] = (gw_token_key_t){.secret = items[i].text, .len = items[i].len};
        snap->n_keys = 1 + (size_t)n;
    }
    atomic_init(&snap->refs, 1);
    *out = snap;
    return 0;
}

gw_config_snap_t *gw_config_snap_ref(gw_config_snap_t *snap)
{
    /* Relaxed: the caller already holds a reference, so the count cannot reach 0 meanwhile,
     * and the new holder got the pointer through a post or a lock that orders its reads. */
    atomic_fetch_add_explicit(&snap->refs, 1, memory_order_relaxed);
    return snap;
}

void gw_config_snap_unref(gw_config_snap_t *snap)
{
    if (snap && atomic_fetch_sub_explicit(&snap->refs, 1, memory_order_acq_rel) == 1)
        free(snap);
}
