/*
 * gw_admin_int.h: what the admin API's files share: gw_admin.c (server and routes),
 * gw_admin_metrics.c (the snapshot written out) and gw_admin_console.c (the console's page
 * and its figures). Private to the admin.
 */
#ifndef HERALD_GATEWAY_GW_ADMIN_INT_H
#define HERALD_GATEWAY_GW_ADMIN_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_admin.h"
#include "gw_engine.h"
#include "gw_http.h"
#include "gw_metrics.h"
#include "gw_core.h"

struct gw_admin_s {
    gw_node_t *node;
    gw_http_t *http;
    /* The console's users online (gw_admin_console.c), counted over the loops at most every
     * GW_ADMIN_CONSOLE_USERS_MS: when a count was last asked for (the HTTP thread's), and
     * the last count (stored by the loop that rendered it; -1 before the first). */
    uint64_t console_users_asked_ms;
    _Atomic int64_t console_users;
};

#define GW_ADMIN_CONSOLE_USERS_MS 5000

/* Writes snap, engine's own families and the admin server's figures as Prometheus text or
 * JSON. Returns: 0 with *out (malloc'd, NUL-terminated; the caller frees it) and *len; or the
 * gw_metrics_end error. Thread: any. */
int gw_admin_render(const gw_stats_snapshot_t *snap, const gw_engine_t *engine,
                    const gw_http_stats_t *http, gw_metrics_format_t format, char **out,
                    size_t *len);

/* Writes a finished snapshot as an answer's body. Returns: 0 with *out (malloc'd; the caller
 * frees it) and *len; or a negative errno. Thread: the loop that finished the collection. */
typedef int (*gw_admin_render_cb)(gw_admin_t *a, const gw_stats_snapshot_t *snap, char **out,
                                  size_t *len);

/* Collects a stats snapshot from every loop, leaving out what flags name (gw_stats_flags_t),
 * and answers req with what render writes of it, as content_type (NULL: JSON); 503 while the
 * node stops, 500 when rendering fails. Thread: the HTTP thread (a handler). */
void gw_admin_collect(gw_http_req_t *req, gw_admin_t *a, unsigned flags, gw_admin_render_cb render,
                      const char *content_type);

/* Registers the console's routes: its files (public: they hold no data) and GET /api/console.
 * Returns: as gw_http_route. Thread: the admin's owner, before gw_http_start. */
int gw_admin_console_routes(gw_http_t *http, gw_admin_t *a);

#endif
