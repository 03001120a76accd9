/*
 * gw_redis_link: a kept-up Redis connection. See gw_redis_link.h.
 *
 * States and their one timer (retry):
 *   CONNECTING  redisAsyncConnect started; the timer is the connect timeout.
 *   UP          commands flow; a second timer (check) runs while commands are in flight and
 *               takes the link down when the oldest has waited past command_timeout_ms.
 *   DOWN        the timer is the backoff: min, doubling to max, each delay drawn from its upper
 *               half (jitter, so that nodes that lost Redis together do not return together).
 *
 * How hiredis 0.14 ends a context, which the handlers below rely on: a connect that fails
 * calls the connect callback with REDIS_ERR and then frees the context (no disconnect
 * callback); any other end (EOF, an error, redisAsyncFree) runs every pending reply callback
 * with NULL, then the adapter's cleanup, then the disconnect callback if the context had
 * connected. redisAsyncFree from a timer or from gw_redis_link_free is thus one synchronous
 * sweep that leaves nothing behind.
 */
#include "gw_redis_link.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/async.h>

#include "gw_redis_adapter.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "netlib/nl_timer.h"

/* A command in flight: replies come in this order. */
typedef struct link_slot_s {
    gw_redis_reply_cb cb;
    void *arg;
    uint64_t sent_ms;
} link_slot_t;

struct gw_redis_link_s {
    nl_loop_t *loop;
    redisAsyncContext *ac; /* while CONNECTING or UP */
    gw_redis_state_t state;
    char *host;
    uint16_t port;
    uint32_t connect_timeout_ms;
    uint32_t command_timeout_ms;
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
    gw_redis_up_cb on_up;
    gw_redis_down_cb on_down;
    void *arg;
    nl_timer_t *retry; /* connect timeout or backoff */
    nl_timer_t *check; /* command timeouts, while commands are in flight */
    uint32_t backoff_ms;
    int down_err; /* why the context is being freed by the link itself (0: not) */
    bool is_freeing;
    uint64_t rng;
    link_slot_t *ring; /* max_pending slots */
    uint32_t cap;
    uint32_t head;
    uint32_t count;
    gw_redis_link_stats_t stats;
};

static void link_connect(gw_redis_link_t *l);

static uint64_t link_rand(gw_redis_link_t *l)
{
    /* xorshift64*: jitter needs spread, not secrecy. */
    l->rng ^= l->rng >> 12;
    l->rng ^= l->rng << 25;
    l->rng ^= l->rng >> 27;
    return l->rng * UINT64_C(2685821657736338717);
}

static void link_schedule_retry(gw_redis_link_t *l)
{
    l->state = GW_REDIS_DOWN;
    uint32_t d = l->backoff_ms;
    uint32_t delay = d / 2 + (uint32_t)(link_rand(l) % (d / 2 + 1));
    l->backoff_ms = d >= l->backoff_max_ms / 2 ? l->backoff_max_ms : d * 2;
    (void)nl_timer_start(l->retry, delay, 0);
}

/* hiredis errors as errno values for on_down and the logs. In the connect callback hiredis
 * has not copied the context's error into ac->err yet, so both are read. */
static int link_err(const redisAsyncContext *ac)
{
    int err = ac->err ? ac->err : ac->c.err;
    if (err == REDIS_ERR_EOF)
        return -ECONNRESET;
    if (err == REDIS_ERR_IO)
        return ac->c.flags & REDIS_CONNECTED ? -ECONNRESET : -ECONNREFUSED;
    return -EIO;
}

static void link_on_connect(const redisAsyncContext *ac, int status)
{
    gw_redis_link_t *l = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context when this returns. */
        int err = l->down_err ? l->down_err : link_err(ac);
        l->ac = NULL;
        l->down_err = 0;
        l->stats.connect_failures++;
        nl_timer_stop(l->retry);
        if (l->stats.connect_failures == 1 || l->stats.connect_failures % 100 == 0)
            NL_LOG(NL_WARN, "redis_connect_failed", "host=%s port=%u err=%s failures=%llu", l->host,
                   l->port, nl_strerror(err), (unsigned long long)l->stats.connect_failures);
        if (!l->is_freeing)
            link_schedule_retry(l);
        return;
    }
    nl_timer_stop(l->retry);
    l->state = GW_REDIS_UP;
    l->backoff_ms = l->backoff_min_ms;
    l->stats.connects++;
    /* A Redis whose host vanished leaves no EOF: TCP keepalive finds it. */
    (void)redisEnableKeepAlive((redisContext *)&ac->c);
    NL_LOG(NL_INFO, "redis_connected", "host=%s port=%u", l->host, l->port);
    if (l->on_up)
        l->on_up(l, l->arg);
}

static void link_on_disconnect(const redisAsyncContext *ac, int status)
{
    NL_UNUSED(status);
    gw_redis_link_t *l = ac->data;
    int err = l->down_err ? l->down_err : ac->err ? link_err(ac) : -ECONNRESET;
    l->ac = NULL;
    l->down_err = 0;
    l->state = GW_REDIS_DOWN;
    l->stats.disconnects++;
    nl_timer_stop(l->check);
    if (l->is_freeing)
        return;
    NL_LOG(NL_WARN, "redis_disconnected", "host=%s port=%u err=%s", l->host, l->port,
           nl_strerror(err));
    if (l->on_down)
        l->on_down(l, err, l->arg);
    link_schedule_retry(l);
}

/* The link ends its own context (a timeout): the sweep runs every callback now. */
static void link_abort(gw_redis_link_t *l, int err)
{
    if (!l->ac)
        return;
    l->down_err = err;
    l->state = GW_REDIS_DOWN; /* the dropped commands' callbacks may not send new ones */
    redisAsyncFree(l->ac);
    /* A context that never connected gets no disconnect callback. */
    if (l->ac) {
        l->ac = NULL;
        l->down_err = 0;
        if (!l->is_freeing)
            link_schedule_retry(l);
    }
}

static void link_on_retry(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_redis_link_t *l = arg;
    if (l->state == GW_REDIS_CONNECTING) {
        l->stats.timeouts++;
        l->stats.connect_failures++;
        NL_LOG(NL_WARN, "redis_connect_timeout", "host=%s port=%u timeout_ms=%u", l->host, l->port,
               l->connect_timeout_ms);
        link_abort(l, -ETIMEDOUT);
        return;
    }
    link_connect(l);
}

static void link_on_check(nl_timer_t *t, void *arg)
{
    gw_redis_link_t *l = arg;
    if (l->count == 0) {
        nl_timer_stop(t);
        return;
    }
    uint64_t waited_ms = nl_loop_now_ms(l->loop) - l->ring[l->head].sent_ms;
    if (waited_ms <= l->command_timeout_ms)
        return;
    l->stats.timeouts++;
    NL_LOG(NL_WARN, "redis_command_timeout", "host=%s port=%u waited_ms=%llu pending=%u", l->host,
           l->port, (unsigned long long)waited_ms, l->count);
    link_abort(l, -ETIMEDOUT);
}

static void link_connect(gw_redis_link_t *l)
{
    l->state = GW_REDIS_CONNECTING;
    redisAsyncContext *ac = redisAsyncConnect(l->host, l->port);
    int err = 0;
    if (!ac) {
        err = -ENOMEM;
    } else if (ac->err) {
        err = link_err(ac);
    } else {
        err = gw_redis_adapter_attach(l->loop, ac);
    }
    if (err < 0) {
        if (ac)
            redisAsyncFree(ac);
        l->stats.connect_failures++;
        link_schedule_retry(l);
        return;
    }
    ac->data = l;
    l->ac = ac;
    redisAsyncSetConnectCallback(ac, link_on_connect);
    redisAsyncSetDisconnectCallback(ac, link_on_disconnect);
    (void)nl_timer_start(l->retry, l->connect_timeout_ms, 0);
}

/* Every hiredis reply callback: the oldest command's. */
static void link_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    NL_UNUSED(ac);
    gw_redis_link_t *l = privdata;
    NL_ASSERT(l->count > 0);
    link_slot_t slot = l->ring[l->head];
    l->head = (l->head + 1) % l->cap;
    l->count--;
    if (reply)
        l->stats.replies++;
    else
        l->stats.dropped++;
    slot.cb(l, reply, slot.arg);
}

/* A command either way: argv (argc > 0) or one already in RESP (cmd, len). */
static int link_send(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                     const char *const *argv, const size_t *argvlen, const char *cmd, size_t len)
{
    if (l->state != GW_REDIS_UP || !l->ac)
        return -ENOTCONN;
    if (l->count == l->cap) {
        l->stats.refused_busy++;
        return -EBUSY;
    }
    uint32_t tail = (l->head + l->count) % l->cap;
    l->ring[tail] = (link_slot_t){.cb = cb, .arg = arg, .sent_ms = nl_loop_now_ms(l->loop)};
    l->count++;
    int rc = argc > 0 ? redisAsyncCommandArgv(l->ac, link_on_reply, l, argc, (const char **)argv,
                                              argvlen)
                      : redisAsyncFormattedCommand(l->ac, link_on_reply, l, cmd, len);
    if (rc != REDIS_OK) {
        l->count--;
        /* Refused while hiredis sweeps a context that is ending (from a dropped command's
         * callback): the link is as good as down. */
        return l->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING) ? -ENOTCONN : -ENOMEM;
    }
    l->stats.commands++;
    if (!nl_timer_is_active(l->check)) {
        uint32_t tick = l->command_timeout_ms / 4 < 10 ? 10 : l->command_timeout_ms / 4;
        (void)nl_timer_start(l->check, tick, tick);
    }
    return 0;
}

int gw_redis_link_command(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                          const char *const *argv, const size_t *argvlen)
{
    return argc > 0 ? link_send(l, cb, arg, argc, argv, argvlen, NULL, 0) : -EINVAL;
}

int gw_redis_link_command_resp(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, const char *cmd,
                               size_t len)
{
    return link_send(l, cb, arg, 0, NULL, NULL, cmd, len);
}

int gw_redis_link_new(gw_redis_link_t **out, nl_loop_t *loop, const gw_redis_link_opts_t *opts)
{
    if (!opts->host || !opts->host[0])
        return -EINVAL;
    gw_redis_link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
    l->port = opts->port;
    l->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms : 2000;
    l->command_timeout_ms = opts->command_timeout_ms ? opts->command_timeout_ms : 2000;
    l->backoff_min_ms = opts->backoff_min_ms ? opts->backoff_min_ms : 100;
    l->backoff_max_ms = opts->backoff_max_ms ? opts->backoff_max_ms : 5000;
    if (l->backoff_max_ms < l->backoff_min_ms)
        l->backoff_max_ms = l->backoff_min_ms;
    l->backoff_ms = l->backoff_min_ms;
    l->cap = opts->max_pending ? opts->max_pending : 10000;
    l->on_up = opts->on_up;
    l->on_down = opts->on_down;
    l->arg = opts->arg;
    if (getrandom(&l->rng, sizeof(l->rng), 0) != sizeof(l->rng) || l->rng == 0)
        l->rng = nl_now_ns() | 1;
    l->host = strdup(opts->host);
    l->ring = calloc(l->cap, sizeof(*l->ring));
    if (!l->host || !l->ring || nl_timer_new(&l->retry, loop, link_on_retry, l) < 0 ||
        nl_timer_new(&l->check, loop, link_on_check, l) < 0) {
        gw_redis_link_free(l);
        return -ENOMEM;
    }
    link_connect(l);
    *out = l;
    return 0;
}

void gw_redis_link_free(gw_redis_link_t *l)
{
    if (!l)
        return;
    l->is_freeing = true;
    if (l->ac)
        link_abort(l, 0);
    if (l->retry)
        nl_timer_close(l->retry, NULL);
    if (l->check)
        nl_timer_close(l->check, NULL);
    free(l->ring);
    free(l->host);
    free(l);
}

void gw_redis_link_reset(gw_redis_link_t *l, int err)
{
    link_abort(l, err);
}

gw_redis_state_t gw_redis_link_state(const gw_redis_link_t *l)
{
    return l->state;
}

uint32_t gw_redis_link_pending(const gw_redis_link_t *l)
{
    return l->count;
}

void gw_redis_link_get_stats(const gw_redis_link_t *l, gw_redis_link_stats_t *out)
{
    *out = l->stats;
}

redisAsyncContext *gw_redis_link_context(gw_redis_link_t *l)
{
    return l->ac;
}
