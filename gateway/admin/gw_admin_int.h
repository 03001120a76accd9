/*
 * gw_admin_int.h: what the admin API's files share: gw_admin.c (server and routes) and
 * gw_admin_metrics.c (the snapshot written out). Private to the admin.
 */
#ifndef HERALD_GATEWAY_GW_ADMIN_INT_H
#define HERALD_GATEWAY_GW_ADMIN_INT_H

#include <stddef.h>

#include "gw_admin.h"
#include "gw_engine.h"
#include "gw_http.h"
#include "gw_metrics.h"
#include "gw_core.h"

struct gw_admin_s {
    gw_node_t *node;
    gw_http_t *http;
};

/* Writes snap, engine's own families and the admin server's figures as Prometheus text or
 * JSON. Returns: 0 with *out (malloc'd, NUL-terminated; the caller frees it) and *len; or the
 * gw_metrics_end error. Thread: any. */
int gw_admin_render(const gw_stats_snapshot_t *snap, const gw_engine_t *engine,
                    const gw_http_stats_t *http, gw_metrics_format_t format, char **out,
                    size_t *len);

#endif
