/*
 * gw_redis_sub: one Redis pub/sub connection and the set of channels it should be subscribed
 * to. The caller says which channels it wants (gw_redis_sub_add / _remove, idempotent); the
 * module subscribes them whenever the connection is up, again after every reconnect, and hands
 * each message to on_message. Built on gw_redis_link for connecting and backoff; SUBSCRIBE
 * replies do not come in command order (hiredis routes them by channel), so they bypass the
 * link's command ring and go to hiredis directly.
 *
 * A wanted channel is subscribed at most once: a remove sends UNSUBSCRIBE, and an add that
 * comes before Redis confirmed it waits for the confirmation and then subscribes again (hiredis
 * 0.14 drops a channel's callback when the UNSUBSCRIBE confirmation arrives, so a SUBSCRIBE
 * sent before it would be forgotten). Messages published while the connection was down are
 * lost, which is pub/sub's at-most-once promise; on_up tells the caller when to look for what
 * it may have missed.
 *
 * Thread: the loop's owner only. Ownership: the caller frees the sub; names are copied.
 * Callbacks: on_message runs inside the loop's read handling; it must not free the sub.
 */
#ifndef HERALD_GATEWAY_GW_REDIS_SUB_H
#define HERALD_GATEWAY_GW_REDIS_SUB_H

#include <stddef.h>
#include <stdint.h>

#include "gw_redis_link.h"
#include "netlib/nl_loop.h"

typedef struct gw_redis_sub_s gw_redis_sub_t;

typedef void (*gw_redis_message_cb)(gw_redis_sub_t *s, const char *chan, size_t chan_len,
                                    const char *data, size_t len, void *arg);
/* Every wanted channel's SUBSCRIBE was sent after a (re)connect (up), or the connection went
 * down (err < 0). */
typedef void (*gw_redis_sub_state_cb)(gw_redis_sub_t *s, int err, void *arg);
/* Redis confirmed the SUBSCRIBE of chan: every message published from now on reaches
 * on_message (after each reconnect too). */
typedef void (*gw_redis_subscribed_cb)(gw_redis_sub_t *s, const char *chan, size_t chan_len,
                                       void *arg);

typedef struct gw_redis_sub_opts_s {
    const char *host; /* host, port, addrs, n_addrs, password: as gw_redis_link_opts_t */
    uint16_t port;
    const gw_redis_addr_t *addrs;
    uint32_t n_addrs;
    const char *password;
    uint32_t connect_timeout_ms;
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
    gw_redis_message_cb on_message;
    gw_redis_sub_state_cb on_state;       /* may be NULL */
    gw_redis_subscribed_cb on_subscribed; /* may be NULL */
    void *arg;
} gw_redis_sub_opts_t;

typedef struct gw_redis_sub_stats_s {
    uint64_t wanted;     /* channels wanted now */
    uint64_t subscribes; /* SUBSCRIBE confirmations */
    uint64_t messages;   /* messages handed to on_message */
} gw_redis_sub_stats_t;

/* Creates the sub and starts connecting. Returns: 0; -EINVAL; -ENOMEM. Thread: loop's owner. */
int gw_redis_sub_new(gw_redis_sub_t **out, nl_loop_t *loop, const gw_redis_sub_opts_t *opts);

/* Closes the connection and frees the sub. NULL is fine. Thread: loop's owner. */
void gw_redis_sub_free(gw_redis_sub_t *s);

/* Wants chan[0..len) (subscribed now if up). Returns: 0; -ENOMEM. */
int gw_redis_sub_add(gw_redis_sub_t *s, const char *chan, size_t len);

/* No longer wants it. Returns: 0; -ENOENT (not wanted). */
int gw_redis_sub_remove(gw_redis_sub_t *s, const char *chan, size_t len);

/* The connection under the sub (its state, stats, reset, gw_redis_link_set_addr). */
gw_redis_link_t *gw_redis_sub_link(gw_redis_sub_t *s);

void gw_redis_sub_get_stats(const gw_redis_sub_t *s, gw_redis_sub_stats_t *out);

#endif
