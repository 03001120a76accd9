/*
 * gw_engine_redis: the engine for several nodes (DESIGN.md, "Engines"): channels, offsets,
 * history and cross-node fan-out in Redis, through hiredis on a netlib loop of its own; presence
 * and online status in Redis keys with expiry. See gw_engine.h for the contract it keeps, and
 * README.md for the keys it writes and how a backend publishes without herald.
 *
 * Thread: as gw_engine.h. Ownership: free with gw_engine_free.
 */
#ifndef HERALD_GATEWAY_ENGINE_REDIS_GW_ENGINE_REDIS_H
#define HERALD_GATEWAY_ENGINE_REDIS_GW_ENGINE_REDIS_H

#include "gw_engine.h"

/* Creates the Redis engine over host's IO loops and the servers of host->cfg's [engine] redis;
 * it starts its own thread and connects at once (a Redis that is not there yet is retried
 * with backoff; meanwhile the engine is not ready).
 * Returns: 0; -EINVAL (no servers, bad list); -ENOMEM; a thread start error. Thread: the
 * node's, before the IO loops start. Ownership: free with gw_engine_free. */
int gw_engine_redis_new(gw_engine_t **out, const gw_engine_host_t *host);

#endif
