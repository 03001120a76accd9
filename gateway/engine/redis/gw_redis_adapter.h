/*
 * gw_redis_adapter: runs a hiredis async context on a netlib loop, the way hiredis's own
 * adapters (adapters/ae.h, libevent.h) run it on theirs: hiredis asks for read and write
 * interest through five hooks (addRead, delRead, addWrite, delWrite, cleanup), and the
 * adapter turns them into one nl_io's interest and calls redisAsyncHandleRead/Write when the
 * fd is ready. Debian 12's hiredis is 0.14.1: no timer hook, so command timeouts are the
 * caller's (gw_redis_link runs them on netlib timers).
 *
 * The fd is watched level-triggered: hiredis reads once per redisAsyncHandleRead, and what is
 * left in the socket is reported again by the next wait.
 *
 * Lifetime: hiredis calls cleanup when the context is freed (redisAsyncFree, a disconnect, a
 * failed connect), possibly from inside a reply callback that the adapter's own read event
 * started. cleanup closes the nl_io (netlib frees it at the end of the iteration and delivers
 * no more of its events) and frees the adapter state, which nothing touches afterwards.
 *
 * Thread: the loop's owner only, like everything on ac.
 * Ownership: the adapter's state belongs to ac (freed by its cleanup hook); the loop is the
 * caller's and must outlive ac.
 */
#ifndef HERALD_GATEWAY_GW_REDIS_ADAPTER_H
#define HERALD_GATEWAY_GW_REDIS_ADAPTER_H

#include <hiredis/async.h>

#include "netlib/nl_loop.h"

/* Attaches ac (from redisAsyncConnect, not yet attached) to loop. Attach before
 * redisAsyncSetConnectCallback: setting it asks for write interest to see the connect finish.
 * Returns: 0; -EEXIST (ac already has an adapter); -ENOMEM; the nl_io_new error. ac is
 * untouched on failure (free it with redisAsyncFree). Thread: loop's owner. */
int gw_redis_adapter_attach(nl_loop_t *loop, redisAsyncContext *ac);

#endif
