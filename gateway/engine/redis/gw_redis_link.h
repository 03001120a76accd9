/*
 * gw_redis_link: one connection to one Redis server, kept up on a netlib loop: a non-blocking
 * connect with a timeout, reconnects with exponential backoff and jitter after any failure,
 * command timeouts (a reply not back within command_timeout_ms takes the connection down, so
 * a Redis that hangs is treated like one that died), and a bound on commands in flight (past
 * it a command is refused with -EBUSY at once rather than growing memory). The Redis engine
 * builds on it; it knows nothing of herald's channels.
 *
 * Replies come in command order (Redis answers a connection's commands in order), so the
 * link keeps its commands in a ring: each slot holds the caller's callback, its argument and
 * when it was sent, and every hiredis callback pops the oldest slot. Commands are sent only
 * while the link is UP: a command while it is down fails with -ENOTCONN, and commands in
 * flight when it goes down get their callback with reply NULL, once each, in order (hiredis
 * runs pending callbacks with NULL when a context is freed). Nothing is resent by the link:
 * the caller knows what is safe to repeat.
 *
 * Not for SUBSCRIBE: hiredis routes pushed messages to per-channel callbacks, not in command
 * order (gw_redis_sub will take that part).
 *
 * Thread: everything on the loop's owner thread, callbacks included.
 * Ownership: the caller owns the link (gw_redis_link_free); never free it from inside one of
 * its own callbacks (post the free instead). Replies are hiredis's, valid during the callback.
 * Usage: gw_redis_link_new(&l, loop, &opts) (connects at once); in on_up, send commands with
 *        gw_redis_link_command; each callback handles reply == NULL (dropped); on_down tells
 *        the link is reconnecting.
 */
#ifndef HERALD_GATEWAY_GW_REDIS_LINK_H
#define HERALD_GATEWAY_GW_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "netlib/nl_loop.h"

typedef struct gw_redis_link_s gw_redis_link_t;

typedef enum gw_redis_state_e {
    GW_REDIS_DOWN = 0,       /* waiting to reconnect (backoff) */
    GW_REDIS_CONNECTING = 1, /* connect in progress */
    GW_REDIS_UP = 2,
} gw_redis_state_t;

/* A command finished: reply is Redis's answer (an error reply is a reply), or NULL when the
 * command was dropped (the link went down, timed out, or is being freed). */
typedef void (*gw_redis_reply_cb)(gw_redis_link_t *l, redisReply *reply, void *arg);

/* The link came up (after a connect or a reconnect). */
typedef void (*gw_redis_up_cb)(gw_redis_link_t *l, void *arg);

/* The link went down: err is -ECONNREFUSED, -ECONNRESET, -ETIMEDOUT (connect or command
 * timeout), -EIO (another hiredis error)... Commands in flight were already dropped. */
typedef void (*gw_redis_down_cb)(gw_redis_link_t *l, int err, void *arg);

typedef struct gw_redis_link_opts_s {
    const char *host; /* an address or name; names resolve with a blocking lookup */
    uint16_t port;
    uint32_t connect_timeout_ms; /* 0: 2000 */
    uint32_t command_timeout_ms; /* 0: 2000 */
    uint32_t backoff_min_ms;     /* first reconnect delay; 0: 100 */
    uint32_t backoff_max_ms;     /* the delay doubles up to this; 0: 5000 */
    uint32_t max_pending;        /* commands in flight; 0: 10000 */
    gw_redis_up_cb on_up;        /* may be NULL */
    gw_redis_down_cb on_down;    /* may be NULL */
    void *arg;
} gw_redis_link_opts_t;

typedef struct gw_redis_link_stats_s {
    uint64_t commands;         /* sent */
    uint64_t replies;          /* answered (error replies included) */
    uint64_t dropped;          /* callbacks run with NULL */
    uint64_t refused_busy;     /* -EBUSY: max_pending reached */
    uint64_t timeouts;         /* connects and commands that timed out */
    uint64_t connects;         /* successful connects */
    uint64_t connect_failures; /* failed connect attempts */
    uint64_t disconnects;      /* UP -> DOWN */
} gw_redis_link_stats_t;

/* Creates a link and starts connecting. host is copied.
 * Returns: 0; -EINVAL (no host); -ENOMEM. Thread: loop's owner. Callbacks: none before this
 * returns (a connect that fails at once is retried after the backoff). */
int gw_redis_link_new(gw_redis_link_t **out, nl_loop_t *loop, const gw_redis_link_opts_t *opts);

/* Disconnects and frees the link: commands in flight get their callback with NULL first
 * (on_down is not called). NULL is fine. Thread: loop's owner; not from the link's callbacks. */
void gw_redis_link_free(gw_redis_link_t *l);

/* Sends one command (argv[0..argc) with lengths argvlen; NULL argvlen: strlen of each).
 * Returns: 0 (cb will run once, never before this returns); -ENOTCONN (not UP); -EBUSY
 * (max_pending commands in flight); -ENOMEM. Thread: loop's owner. */
int gw_redis_link_command(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                          const char *const *argv, const size_t *argvlen);

/* The same for a command already in RESP (redisFormatCommandArgv), copied by hiredis: for a
 * caller that holds commands back and sends them later. Returns: as gw_redis_link_command. */
int gw_redis_link_command_resp(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, const char *cmd,
                               size_t len);

/* Takes the link down now as if it had failed with err (commands in flight answered NULL,
 * on_down, reconnect after the backoff): for a caller that found the server unhealthy through
 * another connection. No-op unless UP or CONNECTING. Thread: loop's owner; not from the link's
 * callbacks. */
void gw_redis_link_reset(gw_redis_link_t *l, int err);

gw_redis_state_t gw_redis_link_state(const gw_redis_link_t *l);

/* Commands in flight now. */
uint32_t gw_redis_link_pending(const gw_redis_link_t *l);

void gw_redis_link_get_stats(const gw_redis_link_t *l, gw_redis_link_stats_t *out);

/* The hiredis context while UP or CONNECTING (for tests and for gw_redis_sub), else NULL. */
struct redisAsyncContext *gw_redis_link_context(gw_redis_link_t *l);

#endif
