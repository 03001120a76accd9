/*
 * gw_admin: the admin HTTP API's routes, on gw_http (which checks the API key and runs the
 * handlers on its own thread). Every handler returns at once: the work is posted to the IO
 * loops and the answer is given later, from whichever loop finishes it.
 *
 *   POST /api/publish?channel=C   body = payload (raw bytes). 200 {"offset":N,
 *                                 "epoch":"<16 hex>"}; 400 for a bad or missing channel;
 *                                 503 while the node stops.
 *   GET  /api/presence?channel=C  who is in channel C: 200 {"channel":C,"num_clients":N,
 *                                 "num_users":U,"truncated":B,"clients":[{"user":...,
 *                                 "client_id":...,"connected_at_ms":...}]} (at most
 *                                 [presence] max_clients listed; the counts are exact);
 *                                 400 for a bad or missing channel.
 *   GET  /api/online?user=U       one user's status: 200 {"user":U,"online":B,
 *                                 "connections":N,"nodes":[...],"since_ms":T (online only),
 *                                 "last_seen_ms":T or null}; 400 for an empty, over-long or
 *                                 non-UTF-8 user id.
 *   GET  /api/online              200 {"users":N,"connections":M}: users online, each once.
 *   GET  /metrics                 Prometheus text (gw_stats_render).
 *   GET  /api/stats               the same figures as JSON.
 *   GET  /healthz                 200 {"status":"ok"} while the process runs (no API key).
 *   GET  /readyz                  200 {"status":"ready"}, or 503 {"status":"not_ready"} while
 *                                 starting, stopping, or with the engine not ready.
 *
 * Thread: gw_admin_register on the node's thread before gw_http_start; handlers on gw_http's
 * thread; answers from IO loops.
 * Ownership: the routes keep a pointer to node, which must outlive the HTTP server.
 */
#ifndef HERALD_GATEWAY_GW_ADMIN_H
#define HERALD_GATEWAY_GW_ADMIN_H

#include "gw_http.h"

typedef struct gw_node_s gw_node_t;

/* Registers the routes above on http for node.
 * Returns: 0; the first gw_http_route error. Thread: the node's, before gw_http_start. */
int gw_admin_register(gw_http_t *http, gw_node_t *node);

#endif
