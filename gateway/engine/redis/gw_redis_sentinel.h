/*
 * gw_redis_sentinel: finds the masters of named Redis groups through Redis Sentinel and
 * follows their failovers, for the Redis engine's [engine] sentinels. It knows nothing of
 * herald's channels: it tells its owner "the master of name i is host:port" and the owner
 * moves its connections there (gw_redis_link_set_addr).
 *
 * A command link to one sentinel at a time, moving to the next of the list after any failure
 * (gw_redis_link's address list), asks SENTINEL MASTER for each name (all of
 * them whenever it comes up, and one when the owner asks, e.g. after its connection to that
 * master went down). A pub/sub connection to every sentinel listens for +switch-master, which
 * a sentinel publishes when a failover has chosen a new master ("<name> <old ip> <old port>
 * <new ip> <new port>"): the sentinel that led the failover says so at once, the others only
 * once its hello messages reach them (up to 2 s later), so one connection would often hear
 * late. An answer or an event is handed to on_master as it comes, the same address again
 * included: the owner decides whether anything changed. With a password, every connection
 * AUTHs first (the sentinels' requirepass).
 *
 * What Sentinel says is taken as it is: the owner checks with ROLE that the server it reaches
 * is a master, and asks again when it is not (a stale answer during a failover).
 *
 * Thread: the loop's owner only. Ownership: the caller frees it; names and addresses are
 * copied. Callbacks: on_master runs inside the loop's read handling, never before _new
 * returns; it may call gw_redis_sentinel_ask but must not free the sentinel client.
 */
#ifndef HERALD_GATEWAY_GW_REDIS_SENTINEL_H
#define HERALD_GATEWAY_GW_REDIS_SENTINEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gw_redis_link.h"
#include "netlib/nl_loop.h"

typedef struct gw_redis_sentinel_s gw_redis_sentinel_t;

/* The master of masters[index] is host:port (is_switch: a +switch-master event, else an
 * answer to SENTINEL MASTER from a configuration no older than one followed). host is valid
 * during the call. */
typedef void (*gw_redis_sentinel_master_cb)(gw_redis_sentinel_t *s, uint32_t index,
                                            const char *host, uint16_t port, bool is_switch,
                                            void *arg);

#define GW_REDIS_SENTINEL_MASTERS_MAX 16

typedef struct gw_redis_sentinel_opts_s {
    const gw_redis_addr_t *sentinels; /* 1..GW_REDIS_LINK_ADDRS_MAX */
    uint32_t n_sentinels;
    const char *const *masters; /* 1..GW_REDIS_SENTINEL_MASTERS_MAX names */
    uint32_t n_masters;
    const char *password;    /* the sentinels' AUTH; NULL or "": none */
    uint32_t timeout_ms;     /* connect and command timeout; 0: 2000 */
    uint32_t backoff_max_ms; /* between attempts (each at the next sentinel); 0: 1000 */
    gw_redis_sentinel_master_cb on_master;
    void *arg;
} gw_redis_sentinel_opts_t;

typedef struct gw_redis_sentinel_stats_s {
    uint64_t queries;       /* SENTINEL MASTER sent */
    uint64_t answers;       /* ... answered with an address */
    uint64_t unknown;       /* ... answered "No such master" */
    uint64_t errors;        /* ... answered with another error, or no address */
    uint64_t stale;         /* ... from a configuration older than one followed (dropped) */
    uint64_t switches;      /* +switch-master events for one of our names */
    uint64_t auth_failures; /* a sentinel refused the password (command link) */
    bool is_up;             /* the command link is connected to a sentinel */
} gw_redis_sentinel_stats_t;

/* Creates the client and starts connecting to the sentinels.
 * Returns: 0; -EINVAL (no sentinels, no names, too many, no on_master); -ENOMEM.
 * Thread: loop's owner. */
int gw_redis_sentinel_new(gw_redis_sentinel_t **out, nl_loop_t *loop,
                          const gw_redis_sentinel_opts_t *opts);

/* Closes both connections and frees the client (queries in flight answer nothing). NULL is
 * fine. Thread: loop's owner; not from on_master. */
void gw_redis_sentinel_free(gw_redis_sentinel_t *s);

/* Asks for the master of masters[index] now, unless a question about it is already on its
 * way; while no sentinel is reachable, when one is. Thread: loop's owner. */
void gw_redis_sentinel_ask(gw_redis_sentinel_t *s, uint32_t index);

void gw_redis_sentinel_get_stats(const gw_redis_sentinel_t *s, gw_redis_sentinel_stats_t *out);

#endif
