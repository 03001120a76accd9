/*
 * gw_redis_sub: a pub/sub connection and its wanted channels. See gw_redis_sub.h.
 *
 * Each channel the sub knows is an entry in a gw_chantab: wanted (the caller's add minus its
 * remove) and unsubscribing (an UNSUBSCRIBE is on its way). An entry lives while either is
 * true. While the connection is down nothing is in flight: the entries that were only waiting
 * for an UNSUBSCRIBE confirmation go, and the wanted ones are subscribed again, in batches, as
 * soon as it is up.
 */
#include "gw_redis_sub.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "gw_channel.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* Channels per SUBSCRIBE when resubscribing after a connect. */
#define SUB_BATCH 256

typedef struct sub_chan_s {
    bool is_wanted;
    bool is_unsubscribing;
    gw_chankey_t key;
    char name[];
} sub_chan_t;

struct gw_redis_sub_s {
    gw_redis_link_t *link;
    gw_chantab_t chans;
    gw_redis_message_cb on_message;
    gw_redis_sub_state_cb on_state;
    gw_redis_subscribed_cb on_subscribed;
    void *arg;
    gw_redis_sub_stats_t stats;
};

static sub_chan_t *chan_of(gw_chankey_t *k)
{
    return k ? (sub_chan_t *)((char *)k - offsetof(sub_chan_t, key)) : NULL;
}

static sub_chan_t *sub_find(gw_redis_sub_t *s, const char *name, size_t len)
{
    return chan_of(gw_chantab_find(&s->chans, name, len, gw_chantab_hash(name, len)));
}

static void sub_forget(gw_redis_sub_t *s, sub_chan_t *c)
{
    gw_chantab_remove(&s->chans, &c->key);
    free(c);
}

static void sub_on_reply(redisAsyncContext *ac, void *r, void *privdata);

/* Sends verb (SUBSCRIBE or UNSUBSCRIBE) for n channels. Returns 0 or -ENOMEM; -ENOTCONN when
 * the connection is not up (the next up sends what is wanted). */
static int sub_send(gw_redis_sub_t *s, const char *verb, const char *const *names,
                    const size_t *lens, int n)
{
    redisAsyncContext *ac = gw_redis_link_context(s->link);
    if (!ac || gw_redis_link_state(s->link) != GW_REDIS_UP)
        return -ENOTCONN;
    const char *argv[SUB_BATCH + 1];
    size_t argvlen[SUB_BATCH + 1];
    NL_ASSERT(n <= SUB_BATCH);
    argv[0] = verb;
    argvlen[0] = strlen(verb);
    memcpy(argv + 1, names, sizeof(*names) * (size_t)n);
    memcpy(argvlen + 1, lens, sizeof(*lens) * (size_t)n);
    return redisAsyncCommandArgv(ac, sub_on_reply, s, n + 1, argv, argvlen) == REDIS_OK ? 0
                                                                                        : -ENOMEM;
}

static int sub_send_one(gw_redis_sub_t *s, const char *verb, const sub_chan_t *c)
{
    const char *name = c->name;
    size_t len = c->key.name_len;
    return sub_send(s, verb, &name, &len, 1);
}

/* Redis confirmed an UNSUBSCRIBE: hiredis has just dropped the channel's callback, so a
 * channel wanted again meanwhile is subscribed now. */
static void sub_on_unsubscribed(gw_redis_sub_t *s, const char *name, size_t len)
{
    sub_chan_t *c = sub_find(s, name, len);
    if (!c || !c->is_unsubscribing)
        return;
    c->is_unsubscribing = false;
    if (!c->is_wanted)
        sub_forget(s, c);
    else
        (void)sub_send_one(s, "SUBSCRIBE", c);
}

static void sub_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    NL_UNUSED(ac);
    gw_redis_sub_t *s = privdata;
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3)
        return; /* NULL: the connection ended; the next up resubscribes */
    const redisReply *kind = reply->element[0];
    const redisReply *chan = reply->element[1];
    if (kind->type != REDIS_REPLY_STRING || chan->type != REDIS_REPLY_STRING)
        return;
    if (kind->len == 7 && memcmp(kind->str, "message", 7) == 0) {
        const redisReply *data = reply->element[2];
        if (data->type != REDIS_REPLY_STRING)
            return;
        s->stats.messages++;
        s->on_message(s, chan->str, chan->len, data->str, data->len, s->arg);
    } else if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
        s->stats.subscribes++;
        sub_chan_t *c = sub_find(s, chan->str, chan->len);
        if (c && c->is_wanted && s->on_subscribed)
            s->on_subscribed(s, chan->str, chan->len, s->arg);
    } else if (kind->len == 11 && memcmp(kind->str, "unsubscribe", 11) == 0) {
        sub_on_unsubscribed(s, chan->str, chan->len);
    }
}

/* Connected: every wanted channel, in batches. */
static void sub_on_up(gw_redis_link_t *l, void *arg)
{
    NL_UNUSED(l);
    gw_redis_sub_t *s = arg;
    const char *names[SUB_BATCH];
    size_t lens[SUB_BATCH];
    int n = 0;
    gw_chantab_t *t = &s->chans;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
        sub_chan_t *c = chan_of(gw_chantab_slot(t, i));
        if (!c || !c->is_wanted)
            continue;
        names[n] = c->name;
        lens[n] = c->key.name_len;
        if (++n == SUB_BATCH) {
            (void)sub_send(s, "SUBSCRIBE", names, lens, n);
            n = 0;
        }
    }
    if (n > 0)
        (void)sub_send(s, "SUBSCRIBE", names, lens, n);
    if (s->on_state)
        s->on_state(s, 0, s->arg);
}

/* Down: nothing is in flight any more; entries kept only for a confirmation go. Collected
 * first, since removing from the table moves entries under a walk. */
static void sub_on_down(gw_redis_link_t *l, int err, void *arg)
{
    NL_UNUSED(l);
    gw_redis_sub_t *s = arg;
    gw_chantab_t *t = &s->chans;
    sub_chan_t **gone = NULL;
    size_t n_gone = 0;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
        sub_chan_t *c = chan_of(gw_chantab_slot(t, i));
        if (!c || !c->is_unsubscribing)
            continue;
        c->is_unsubscribing = false;
        if (c->is_wanted)
            continue;
        sub_chan_t **v = realloc(gone, (n_gone + 1) * sizeof(*v));
        if (!v)
            continue; /* kept, unwanted: forgotten at the next confirmation or free */
        gone = v;
        gone[n_gone++] = c;
    }
    for (size_t i = 0; i < n_gone; i++)
        sub_forget(s, gone[i]);
    free(gone);
    if (s->on_state)
        s->on_state(s, err, s->arg);
}

int gw_redis_sub_new(gw_redis_sub_t **out, nl_loop_t *loop, const gw_redis_sub_opts_t *opts)
{
    if (!opts->on_message)
        return -EINVAL;
    gw_redis_sub_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->on_message = opts->on_message;
    s->on_state = opts->on_state;
    s->on_subscribed = opts->on_subscribed;
    s->arg = opts->arg;
    int err = gw_chantab_init(&s->chans);
    if (err < 0) {
        free(s);
        return err;
    }
    gw_redis_link_opts_t lo = {
        .host = opts->host,
        .port = opts->port,
        .addrs = opts->addrs,
        .n_addrs = opts->n_addrs,
        .password = opts->password,
        .connect_timeout_ms = opts->connect_timeout_ms,
        .backoff_min_ms = opts->backoff_min_ms,
        .backoff_max_ms = opts->backoff_max_ms,
        .max_pending = 1, /* the link's command ring is not used (but for AUTH) */
        .on_up = sub_on_up,
        .on_down = sub_on_down,
        .arg = s,
    };
    err = gw_redis_link_new(&s->link, loop, &lo);
    if (err < 0) {
        gw_chantab_deinit(&s->chans);
        free(s);
        return err;
    }
    *out = s;
    return 0;
}

void gw_redis_sub_free(gw_redis_sub_t *s)
{
    if (!s)
        return;
    gw_redis_link_free(s->link);
    gw_chantab_t *t = &s->chans;
    for (uint32_t i = 0; t->slots && i <= t->mask; i++)
        free(chan_of(gw_chantab_slot(t, i)));
    gw_chantab_deinit(t);
    free(s);
}

int gw_redis_sub_add(gw_redis_sub_t *s, const char *chan, size_t len)
{
    sub_chan_t *c = sub_find(s, chan, len);
    if (c) {
        if (c->is_wanted)
            return 0;
        c->is_wanted = true;
        s->stats.wanted++;
        /* With an UNSUBSCRIBE on its way, it is subscribed again at the confirmation. */
        if (!c->is_unsubscribing)
            (void)sub_send_one(s, "SUBSCRIBE", c);
        return 0;
    }
    if (len > UINT16_MAX)
        return -EINVAL;
    c = calloc(1, sizeof(*c) + len + 1);
    if (!c)
        return -ENOMEM;
    memcpy(c->name, chan, len);
    c->key.hash = gw_chantab_hash(chan, len);
    c->key.name_len = (uint16_t)len;
    c->is_wanted = true;
    if (gw_chantab_insert(&s->chans, &c->key) < 0) {
        free(c);
        return -ENOMEM;
    }
    s->stats.wanted++;
    (void)sub_send_one(s, "SUBSCRIBE", c); /* down: the next up sends it */
    return 0;
}

int gw_redis_sub_remove(gw_redis_sub_t *s, const char *chan, size_t len)
{
    sub_chan_t *c = sub_find(s, chan, len);
    if (!c || !c->is_wanted)
        return -ENOENT;
    c->is_wanted = false;
    s->stats.wanted--;
    if (c->is_unsubscribing)
        return 0;
    if (sub_send_one(s, "UNSUBSCRIBE", c) == 0)
        c->is_unsubscribing = true;
    else
        sub_forget(s, c); /* down: nothing to undo on the server */
    return 0;
}

gw_redis_link_t *gw_redis_sub_link(gw_redis_sub_t *s)
{
    return s->link;
}

void gw_redis_sub_get_stats(const gw_redis_sub_t *s, gw_redis_sub_stats_t *out)
{
    *out = s->stats;
}
