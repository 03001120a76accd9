/*
 * gw_redis_link: one connection to one Redis server, kept up on a netlib loop: a non-blocking
 * connect with a timeout, an optional AUTH, reconnects with exponential backoff and jitter
 * after any failure, a liveness rule for the commands in flight (below), and a bound on
 * commands in flight (past it a command is refused with -EBUSY at once rather than growing
 * memory). The Redis engine builds on it; it knows nothing of herald's channels.
 *
 * Replies come in command order (Redis answers a connection's commands in order), so the
 * link keeps its commands in a ring: each slot holds the caller's callback, its argument and
 * when it was sent, and every hiredis callback pops the oldest slot. Commands are sent only
 * while the link is UP: a command while it is down fails with -ENOTCONN, and commands in
 * flight when it goes down get their callback with reply NULL, once each, in order (hiredis
 * runs pending callbacks with NULL when a context is freed). Nothing is resent by the link:
 * the caller knows what is safe to repeat.
 *
 * Liveness: a slow Redis is not a dead one. Redis runs a connection's commands one after the
 * other, so the oldest command in flight could not start before the reply to the one before
 * it arrived. Its wait counts from then (or from its sending, if later): a link with
 * thousands of commands queued behind a busy but healthy Redis keeps receiving replies and
 * stays up however long the queue takes, while a Redis that sends nothing at all for
 * command_timeout_ms with a command waiting (stopped, hung, gone without a FIN) takes the
 * link down, like one that died.
 *
 * Addresses: a link has one address, or a list it tries in turn (each attempt after a failure
 * moves to the next: a Sentinel client's sentinels), or none yet (it waits for
 * gw_redis_link_set_addr: a Redis engine that asks Sentinel for its master first).
 * gw_redis_link_set_addr moves a link to another address at once (a failover).
 *
 * Not for SUBSCRIBE: hiredis routes pushed messages to per-channel callbacks, not in command
 * order (gw_redis_sub takes that part).
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

/* The link went down (it had been up): err is -ECONNRESET, -ETIMEDOUT (no reply within the
 * command timeout), -ENOTCONN (gw_redis_link_set_addr moved it), -EIO (another hiredis
 * error)... Commands in flight were already dropped. */
typedef void (*gw_redis_down_cb)(gw_redis_link_t *l, int err, void *arg);

/* One Redis address (the strings are copied by whoever takes it). */
typedef struct gw_redis_addr_s {
    const char *host; /* an address or name; names resolve with a blocking lookup */
    uint16_t port;
} gw_redis_addr_t;

#define GW_REDIS_LINK_ADDRS_MAX 16

typedef struct gw_redis_link_opts_s {
    const char *host; /* NULL or "": addrs below, or no address yet (gw_redis_link_set_addr) */
    uint16_t port;
    const gw_redis_addr_t *addrs; /* without host: n_addrs addresses, tried in turn */
    uint32_t n_addrs;             /* at most GW_REDIS_LINK_ADDRS_MAX */
    const char *password;         /* AUTH with it before on_up; NULL or "": none */
    uint32_t connect_timeout_ms;  /* 0: 2000 */
    uint32_t command_timeout_ms;  /* 0: 2000 */
    uint32_t backoff_min_ms;      /* first reconnect delay; 0: 100 */
    uint32_t backoff_max_ms;      /* the delay doubles up to this; 0: 5000 */
    uint32_t max_pending;         /* commands in flight; 0: 10000 */
    gw_redis_up_cb on_up;         /* may be NULL */
    gw_redis_down_cb on_down;     /* may be NULL */
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
    uint64_t auth_failures;    /* AUTH refused */
} gw_redis_link_stats_t;

/* Creates a link and starts connecting (when it has an address). The addresses and the
 * password are copied.
 * Returns: 0; -EINVAL (more than GW_REDIS_LINK_ADDRS_MAX addresses); -ENOMEM. Thread: loop's
 * owner. Callbacks: none before this returns (a connect that fails at once is retried after
 * the backoff). */
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

/* Takes the link down as if it had failed with err (commands in flight answered NULL,
 * on_down, reconnect after the backoff): for a caller that found the server unhealthy through
 * another connection, or not what it wants (a replica where a master was expected). No-op
 * unless UP or CONNECTING. From outside the link's callbacks it happens now; from inside one
 * (a reply, on_up), once that callback has returned. Thread: loop's owner. */
void gw_redis_link_reset(gw_redis_link_t *l, int err);

/* Moves the link to host:port (copied), its only address from now on: when that differs from
 * where it is, the connection (if any) goes down with -ENOTCONN (commands in flight answered
 * NULL, on_down if it was up) and the link connects to the new address at once, its backoff
 * reset. Returns: 1 (moved), 0 (already there), -EINVAL (no host), -ENOMEM. Thread: loop's
 * owner; not from the link's own callbacks. */
int gw_redis_link_set_addr(gw_redis_link_t *l, const char *host, uint16_t port);

/* A link waiting out its backoff tries again now, its backoff reset: for a caller that found
 * the server back through another connection. No-op unless DOWN with an address.
 * Thread: loop's owner. */
void gw_redis_link_connect_now(gw_redis_link_t *l);

/* The address the link is at or trying (host NULL when it has none yet). Valid until the next
 * gw_redis_link_set_addr. */
gw_redis_addr_t gw_redis_link_addr(const gw_redis_link_t *l);

gw_redis_state_t gw_redis_link_state(const gw_redis_link_t *l);

/* Commands in flight now. */
uint32_t gw_redis_link_pending(const gw_redis_link_t *l);

void gw_redis_link_get_stats(const gw_redis_link_t *l, gw_redis_link_stats_t *out);

/* The hiredis context while UP or CONNECTING (for tests and for gw_redis_sub), else NULL. */
struct redisAsyncContext *gw_redis_link_context(gw_redis_link_t *l);

#endif
