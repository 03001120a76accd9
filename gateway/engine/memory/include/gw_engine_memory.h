/*
 * gw_engine_memory: the embedded engine, for a single node (DESIGN.md, "Engines"): every
 * channel is owned by one IO loop (hash % loops), which keeps its offset, epoch, audience and
 * history; presence and online status are the loops' own tables (gw_presence_mem). Nothing
 * outside the process is needed. See gw_engine.h for the contract it keeps.
 *
 * Thread: as gw_engine.h. Ownership: free with gw_engine_free.
 */
#ifndef HERALD_GATEWAY_ENGINE_MEMORY_GW_ENGINE_MEMORY_H
#define HERALD_GATEWAY_ENGINE_MEMORY_GW_ENGINE_MEMORY_H

#include "gw_engine.h"

/* Creates the memory engine over host's IO loops (at most GW_FANOUT_MAX_LOOPS: a channel's
 * audience is a 64-bit mask). History rules and cap come from host->cfg (later from
 * reconfigure). Returns: 0; -ENOMEM. Thread: the node's, before the loops carry traffic.
 * Ownership: free with gw_engine_free. */
int gw_engine_memory_new(gw_engine_t **out, const gw_engine_host_t *host);

#endif
