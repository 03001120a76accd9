/*
 * gw_admin: the admin HTTP API, beside a node: its server (gw_http, which checks the API key
 * and runs the handlers on its own thread) and its routes. Every handler returns at once: the
 * work is posted to the IO loops and the answer is given later, from whichever loop finishes
 * it. The admin attaches itself to the node (gw_node_attach): the node stops it at shutdown
 * step 1 and tells it of reloads (its body and request limits).
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
 *   GET  /metrics                 Prometheus text (gw_admin_metrics.c).
 *   GET  /api/stats               the same figures as JSON.
 *   GET  /healthz                 200 {"status":"ok"} while the process runs (no API key).
 *   GET  /readyz                  200 {"status":"ready"}, or 503 {"status":"not_ready"} while
 *                                 starting, stopping, or with the engine not ready.
 *
 * Thread: gw_admin_new/free on the node's thread (main), new before gw_node_listen; handlers
 * on gw_http's thread; answers from IO loops.
 * Ownership: the admin keeps a pointer to node, which must outlive it: free the admin after
 * gw_node_run returned, before gw_node_free.
 */
#ifndef HERALD_GATEWAY_ADMIN_GW_ADMIN_H
#define HERALD_GATEWAY_ADMIN_GW_ADMIN_H

#include "gw_config.h"
#include "gw_core.h"

typedef struct gw_admin_s gw_admin_t;

/* Starts the admin API of cfg ([admin] listen, api_key, limits) beside node and attaches it.
 * Returns: 0; -EADDRINUSE and other bind errors (logged as admin_listen_failed); -ENOMEM.
 * Thread: main, before gw_node_listen. Ownership: free with gw_admin_free. */
int gw_admin_new(gw_admin_t **out, gw_node_t *node, const gw_config_t *cfg);

/* Stops the server (if still running) and frees the admin. NULL is fine. Thread: main. */
void gw_admin_free(gw_admin_t *a);

#endif
