/*
 * gw_redis_link: a kept-up Redis connection. See gw_redis_link.h.
 *
 * States and their one timer (retry):
 *   CONNECTING  redisAsyncConnect started (then AUTH, when there is a password); the timer is
 *               the connect timeout, until on_up.
 *   UP          commands flow; a second timer (check) runs while commands are in flight and
 *               takes the link down when the oldest has waited past command_timeout_ms since
 *               Redis could have started it (the liveness rule in the header).
 *   DOWN        the timer is the backoff: min, doubling to max, each delay drawn from its upper
 *               half (jitter, so that nodes that lost Redis together do not return together);
 *               with several addresses each retry moves to the next; without any, no timer.
 *
 * How hiredis 0.14 ends a context, which the handlers below rely on: a connect that fails
 * calls the connect callback with REDIS_ERR and then frees the context (no disconnect
 * callback); any other end (EOF, an error, redisAsyncFree) runs every pending reply callback
 * with NULL, then the adapter's cleanup, then the disconnect callback if the context had
 * connected. redisAsyncFree from a timer or from gw_redis_link_free is thus one synchronous
 * sweep that leaves nothing behind; inside a hiredis callback it is deferred until the
 * callback returns, so a reset asked for there (depth > 0) runs from the retry timer instead.
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

typedef struct link_addr_s {
    char *host;
    uint16_t port;
} link_addr_t;

struct gw_redis_link_s {
    nl_loop_t *loop;
    redisAsyncContext *ac; /* while CONNECTING or UP */
    gw_redis_state_t state;
    link_addr_t addrs[GW_REDIS_LINK_ADDRS_MAX];
    uint32_t n_addrs; /* 0: none yet */
    uint32_t cur;     /* the address being tried or used */
    char *password;   /* NULL: no AUTH */
    uint32_t connect_timeout_ms;
    uint32_t command_timeout_ms;
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
    gw_redis_up_cb on_up;
    gw_redis_down_cb on_down;
    void *arg;
    nl_timer_t *retry; /* connect timeout, backoff, or a reset asked for inside a callback */
    nl_timer_t *check; /* command timeouts, while commands are in flight */
    uint32_t backoff_ms;
    int down_err;   /* why the context is being freed by the link itself (0: not) */
    int reset_err;  /* a reset waiting for the callback that asked for it to return */
    uint32_t depth; /* hiredis callbacks running (redisAsyncFree is deferred inside them) */
    bool is_freeing;
    bool is_up;          /* on_up was called for this context */
    bool is_connect_now; /* the next retry is immediate (set_addr) */
    uint64_t last_reply_ms;
    uint64_t rng;
    link_slot_t *ring; /* max_pending slots */
    uint32_t cap;
    uint32_t head;
    uint32_t count;
    gw_redis_link_stats_t stats;
};

#define LINK_HOST(l) ((l)->n_addrs ? (l)->addrs[(l)->cur].host : "-")
#define LINK_PORT(l) ((l)->n_addrs ? (l)->addrs[(l)->cur].port : 0u)

static void link_connect(gw_redis_link_t *l);

static uint64_t link_rand(gw_redis_link_t *l)
{
    /* xorshift64*: jitter needs spread, not secrecy. */
    l->rng ^= l->rng >> 12;
    l->rng ^= l->rng << 25;
    l->rng ^= l->rng >> 27;
    return l->rng * UINT64_C(2685821657736338717);
}

/* After a failure: the next address (if several), then the backoff, or at once when the link
 * was just moved. */
static void link_schedule_retry(gw_redis_link_t *l)
{
    l->state = GW_REDIS_DOWN;
    l->reset_err = 0; /* down already */
    if (l->n_addrs > 1)
        l->cur = (l->cur + 1) % l->n_addrs;
    if (l->n_addrs == 0) {
        nl_timer_stop(l->retry); /* nowhere to go until set_addr */
        return;
    }
    if (l->is_connect_now) {
        l->is_connect_now = false;
        (void)nl_timer_start(l->retry, 0, 0);
        return;
    }
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

static void link_count_connect_failure(gw_redis_link_t *l, int err)
{
    l->stats.connect_failures++;
    if (l->stats.connect_failures == 1 || l->stats.connect_failures % 100 == 0)
        NL_LOG(NL_WARN, "redis_connect_failed", "host=%s port=%u err=%s failures=%llu",
               LINK_HOST(l), LINK_PORT(l), nl_strerror(err),
               (unsigned long long)l->stats.connect_failures);
}

/* Connected (and authenticated): commands may flow. */
static void link_up(gw_redis_link_t *l)
{
    nl_timer_stop(l->retry);
    l->state = GW_REDIS_UP;
    l->is_up = true;
    l->backoff_ms = l->backoff_min_ms;
    l->last_reply_ms = nl_loop_now_ms(l->loop);
    l->stats.connects++;
    NL_LOG(NL_INFO, "redis_connected", "host=%s port=%u", LINK_HOST(l), LINK_PORT(l));
    if (l->on_up) {
        l->depth++;
        l->on_up(l, l->arg);
        l->depth--;
    }
}

static int link_push(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                     const char *const *argv, const size_t *argvlen, const char *cmd, size_t len);

/* AUTH's answer: up, or refused (a wrong password is retried with the backoff, and said once
 * per hundred refusals; the password itself is never logged). */
static void link_on_auth(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(arg);
    if (!reply)
        return; /* the connection ended: its disconnect handles it */
    if (reply->type == REDIS_REPLY_ERROR) {
        l->stats.auth_failures++;
        if (l->stats.auth_failures == 1 || l->stats.auth_failures % 100 == 0)
            NL_LOG(NL_ERROR, "redis_auth_failed", "host=%s port=%u err=\"%.*s\" failures=%llu",
                   LINK_HOST(l), LINK_PORT(l), (int)(reply->len < 120 ? reply->len : 120),
                   reply->str, (unsigned long long)l->stats.auth_failures);
        gw_redis_link_reset(l, -EACCES);
        return;
    }
    link_up(l);
}

static void link_on_connect(const redisAsyncContext *ac, int status)
{
    gw_redis_link_t *l = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context when this returns. */
        int err = l->down_err ? l->down_err : link_err(ac);
        l->ac = NULL;
        l->down_err = 0;
        nl_timer_stop(l->retry);
        link_count_connect_failure(l, err);
        if (!l->is_freeing)
            link_schedule_retry(l);
        return;
    }
    /* A Redis whose host vanished leaves no EOF: TCP keepalive finds it. */
    (void)redisEnableKeepAlive((redisContext *)&ac->c);
    if (!l->password) {
        link_up(l);
        return;
    }
    /* AUTH first, still CONNECTING (callers' commands wait for on_up); the connect timeout
     * keeps running until it is answered. */
    const char *argv[] = {"AUTH", l->password};
    l->depth++;
    if (link_push(l, link_on_auth, NULL, 2, argv, NULL, NULL, 0) < 0)
        gw_redis_link_reset(l, -ENOMEM);
    l->depth--;
}

static void link_on_disconnect(const redisAsyncContext *ac, int status)
{
    NL_UNUSED(status);
    gw_redis_link_t *l = ac->data;
    int err = l->down_err ? l->down_err : ac->err ? link_err(ac) : -ECONNRESET;
    bool was_up = l->is_up;
    l->ac = NULL;
    l->down_err = 0;
    l->is_up = false;
    l->state = GW_REDIS_DOWN;
    nl_timer_stop(l->check);
    nl_timer_stop(l->retry);
    if (l->is_freeing)
        return;
    if (!was_up) {
        link_count_connect_failure(l, err); /* lost while authenticating */
        link_schedule_retry(l);
        return;
    }
    l->stats.disconnects++;
    NL_LOG(NL_WARN, "redis_disconnected", "host=%s port=%u err=%s", LINK_HOST(l), LINK_PORT(l),
           nl_strerror(err));
    if (l->on_down) {
        l->depth++;
        l->on_down(l, err, l->arg);
        l->depth--;
    }
    link_schedule_retry(l);
}

/* The link ends its own context (a timeout, a reset): the sweep runs every callback now.
 * Never inside a hiredis callback (redisAsyncFree would be deferred): see gw_redis_link_reset. */
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
        l->is_up = false;
        if (!l->is_freeing) {
            link_count_connect_failure(l, err);
            link_schedule_retry(l);
        }
    }
}

static void link_on_retry(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_redis_link_t *l = arg;
    if (l->reset_err) {
        int err = l->reset_err;
        l->reset_err = 0;
        if (l->ac) {
            link_abort(l, err);
            return;
        }
    }
    if (l->state == GW_REDIS_CONNECTING) {
        l->stats.timeouts++;
        NL_LOG(NL_WARN, "redis_connect_timeout", "host=%s port=%u timeout_ms=%u", LINK_HOST(l),
               LINK_PORT(l), l->connect_timeout_ms);
        link_abort(l, -ETIMEDOUT);
        return;
    }
    if (l->state == GW_REDIS_DOWN)
        link_connect(l);
}

/* The liveness rule (header): the oldest command's wait counts from when Redis could have
 * started it, the later of its sending and the last reply. */
static void link_on_check(nl_timer_t *t, void *arg)
{
    gw_redis_link_t *l = arg;
    if (l->count == 0) {
        nl_timer_stop(t);
        return;
    }
    uint64_t sent_ms = l->ring[l->head].sent_ms;
    uint64_t since_ms = sent_ms > l->last_reply_ms ? sent_ms : l->last_reply_ms;
    uint64_t now_ms = nl_loop_now_ms(l->loop);
    uint64_t waited_ms = now_ms > since_ms ? now_ms - since_ms : 0;
    if (waited_ms <= l->command_timeout_ms)
        return;
    l->stats.timeouts++;
    NL_LOG(NL_WARN, "redis_command_timeout",
           "host=%s port=%u silent_ms=%llu oldest_ms=%llu pending=%u", LINK_HOST(l), LINK_PORT(l),
           (unsigned long long)waited_ms, (unsigned long long)(now_ms - sent_ms), l->count);
    link_abort(l, -ETIMEDOUT);
}

static void link_connect(gw_redis_link_t *l)
{
    if (l->n_addrs == 0) {
        l->state = GW_REDIS_DOWN;
        return;
    }
    l->state = GW_REDIS_CONNECTING;
    const link_addr_t *a = &l->addrs[l->cur];
    redisAsyncContext *ac = redisAsyncConnect(a->host, a->port);
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
        link_count_connect_failure(l, err);
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
    if (reply) {
        l->stats.replies++;
        l->last_reply_ms = nl_loop_now_ms(l->loop);
    } else {
        l->stats.dropped++;
    }
    l->depth++;
    slot.cb(l, reply, slot.arg);
    l->depth--;
}

/* Queues a command in the ring and hands it to hiredis, whatever the state (AUTH goes out
 * before the link is UP). */
static int link_push(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                     const char *const *argv, const size_t *argvlen, const char *cmd, size_t len)
{
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

/* A command either way: argv (argc > 0) or one already in RESP (cmd, len). */
static int link_send(gw_redis_link_t *l, gw_redis_reply_cb cb, void *arg, int argc,
                     const char *const *argv, const size_t *argvlen, const char *cmd, size_t len)
{
    if (l->state != GW_REDIS_UP || !l->ac)
        return -ENOTCONN;
    return link_push(l, cb, arg, argc, argv, argvlen, cmd, len);
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

static void link_addrs_clear(gw_redis_link_t *l)
{
    for (uint32_t i = 0; i < l->n_addrs; i++)
        free(l->addrs[i].host);
    l->n_addrs = 0;
    l->cur = 0;
}

int gw_redis_link_new(gw_redis_link_t **out, nl_loop_t *loop, const gw_redis_link_opts_t *opts)
{
    bool has_host = opts->host && opts->host[0];
    uint32_t n_addrs = has_host ? 1 : opts->n_addrs;
    if (n_addrs > GW_REDIS_LINK_ADDRS_MAX || (!has_host && n_addrs > 0 && !opts->addrs))
        return -EINVAL;
    gw_redis_link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
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
    bool is_ok = true;
    for (uint32_t i = 0; i < n_addrs; i++) {
        const char *host = has_host ? opts->host : opts->addrs[i].host;
        l->addrs[i].host = host ? strdup(host) : NULL;
        l->addrs[i].port = has_host ? opts->port : opts->addrs[i].port;
        l->n_addrs++;
        is_ok = is_ok && l->addrs[i].host && l->addrs[i].host[0];
    }
    if (opts->password && opts->password[0])
        is_ok = is_ok && (l->password = strdup(opts->password)) != NULL;
    /* Different nodes start at different addresses of a list, so that they spread out. */
    if (l->n_addrs > 1)
        l->cur = (uint32_t)(link_rand(l) % l->n_addrs);
    l->ring = calloc(l->cap, sizeof(*l->ring));
    if (!is_ok || !l->ring || nl_timer_new(&l->retry, loop, link_on_retry, l) < 0 ||
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
    link_addrs_clear(l);
    if (l->password) {
        explicit_bzero(l->password, strlen(l->password));
        free(l->password);
    }
    free(l);
}

void gw_redis_link_reset(gw_redis_link_t *l, int err)
{
    if (!l->ac)
        return;
    if (l->depth > 0) {
        /* redisAsyncFree would wait for the callback to return; the retry timer runs the
         * reset right after. */
        if (!l->reset_err)
            l->reset_err = err ? err : -ECONNRESET;
        (void)nl_timer_start(l->retry, 0, 0);
        return;
    }
    link_abort(l, err);
}

int gw_redis_link_set_addr(gw_redis_link_t *l, const char *host, uint16_t port)
{
    if (!host || !host[0])
        return -EINVAL;
    if (l->n_addrs == 1 && l->addrs[0].port == port && strcmp(l->addrs[0].host, host) == 0)
        return 0;
    char *h = strdup(host);
    if (!h)
        return -ENOMEM;
    /* Down first, so that the log line and on_down name the address being left. */
    l->backoff_ms = l->backoff_min_ms;
    l->is_connect_now = true;
    if (l->ac && l->depth == 0)
        link_abort(l, -ENOTCONN);
    link_addrs_clear(l);
    l->addrs[0] = (link_addr_t){.host = h, .port = port};
    l->n_addrs = 1;
    if (l->ac) {
        gw_redis_link_reset(l, -ENOTCONN); /* inside a callback: right after it */
    } else if (!l->is_freeing) {
        l->is_connect_now = false;
        l->state = GW_REDIS_DOWN;
        (void)nl_timer_start(l->retry, 0, 0);
    }
    return 1;
}

void gw_redis_link_connect_now(gw_redis_link_t *l)
{
    if (l->state != GW_REDIS_DOWN || l->n_addrs == 0 || l->is_freeing)
        return;
    l->backoff_ms = l->backoff_min_ms;
    (void)nl_timer_start(l->retry, 0, 0);
}

gw_redis_addr_t gw_redis_link_addr(const gw_redis_link_t *l)
{
    if (l->n_addrs == 0)
        return (gw_redis_addr_t){.host = NULL, .port = 0};
    return (gw_redis_addr_t){.host = l->addrs[l->cur].host, .port = l->addrs[l->cur].port};
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
