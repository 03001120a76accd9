/*
 * gw_admin: the admin HTTP API, beside a node: its server (gw_http, which checks the API key
 * and runs the handlers on its own thread), its routes and the console. Every handler returns
 * at once: the work is posted to the IO loops (or the engine) and the answer is given later,
 * from whichever thread finishes it. The admin attaches itself to the node (gw_node_attach):
 * the node stops it at shutdown step 1 and tells it of reloads (its body and request limits).
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
 *   GET  /api/nodes               the nodes sharing the engine (Redis), as its shared state
 *                                 lists them: 200 {"node":<this node's id>,"nodes":[{"node":
 *                                 ...,"connections":N (at its latest heartbeat),"expires_ms":
 *                                 T (Unix ms: gone unless it heartbeats before)}]}, sorted by
 *                                 node; 501 on the memory engine.
 *   GET  /metrics                 Prometheus text (gw_admin_metrics.c).
 *   GET  /api/stats               the same figures as JSON.
 *   GET  /api/console             one sample of what the console draws, from the same
 *                                 collection as /metrics (the family each field is, in []):
 *                                 200 {"time_ms":T (Unix ms),"uptime_ms":U
 *                                 [herald_uptime_seconds],"node":ID,"engine":"memory"|"redis",
 *                                 "ready":B,"draining":B,"connections":N [herald_connections],
 *                                 "max_connections":N,"users_online":N or null
 *                                 [herald_users_online; over several loops counted at most
 *                                 every 5 s, the last count in between],"channels":N
 *                                 [herald_channels],
 *                                 "subscriptions":N [herald_subscriptions],"publishes_total":N
 *                                 [herald_publishes_total],"deliveries_total":N
 *                                 [herald_deliveries_total],"slow_consumer_drops_total":N,
 *                                 "queue_depth":N [herald_loop_queue_depth],
 *                                 "output_queued_bytes":N [herald_output_queued_bytes],
 *                                 "slow_consumers":N [herald_slow_consumers],"pool":{
 *                                 "queue_depth" [herald_pool_queue_depth],"capacity","threads",
 *                                 "rejected_total"},"loops":[{"connections","queue_depth",
 *                                 "output_queued_bytes","slow_consumers","deliveries_total"}]
 *                                 (one per IO loop, {loop="i"} in /metrics; the top-level
 *                                 figures are their sums),"engine_servers":[{"server":
 *                                 "host:port","up":B,"pending_commands":N
 *                                 [herald_redis_pending_commands],"max_pending":N}] (empty on
 *                                 the memory engine)}. Counters stay counters: the page makes
 *                                 rates from two samples' uptime_ms.
 *   GET  /console                 the console (gw_admin_console.c): a page that asks for the
 *                                 API key once (kept in the tab's sessionStorage), polls
 *                                 /api/console every second and draws the last five minutes;
 *                                 with /console/console.js and /console/console.css. No key
 *                                 needed (they hold no data); a Content-Security-Policy keeps
 *                                 the page to this origin.
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
