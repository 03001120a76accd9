/*
 * gw_redis_sentinel: masters through Redis Sentinel. See gw_redis_sentinel.h.
 *
 * Each name has at most one question in flight (is_asking); a question asked while no
 * sentinel is reachable waits (is_wanted) for the link's next on_up, which asks for every
 * name anyway. The question is SENTINEL MASTER, whose answer names the configuration epoch
 * it belongs to: during a failover some sentinels still name the old master, and such an
 * answer, arriving after +switch-master, would send the owner back to it. Answers and events come
 * back by name, never by position in a reply stream, so an answer that arrives after the link moved
 * to another sentinel is still the answer about that name.
 */
#include "gw_redis_sentinel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_config.h"
#include "gw_redis_sub.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define SWITCH_CHANNEL "+switch-master"

typedef struct sentinel_master_s {
    char *name;
    /* Answers from an older configuration epoch than min_epoch are stale. A +switch-master
     * (each sentinel sends one) raises it past the epoch of the last answer followed, since a
     * failover makes a new epoch and the event carries none. */
    uint64_t epoch;
    uint64_t min_epoch;
    bool is_asking; /* a SENTINEL MASTER on its way */
    bool is_wanted; /* asked for while the link was down */
} sentinel_master_t;

struct gw_redis_sentinel_s {
    gw_redis_link_t *link;
    gw_redis_sub_t *subs[GW_REDIS_LINK_ADDRS_MAX]; /* one per sentinel: +switch-master */
    uint32_t n_subs;
    sentinel_master_t masters[GW_REDIS_SENTINEL_MASTERS_MAX];
    uint32_t n_masters;
    gw_redis_sentinel_master_cb on_master;
    void *arg;
    gw_redis_sentinel_stats_t stats;
};

/* A question on its way: the name's index (the client may be asked about it again only
 * once this one is answered). */
typedef struct sentinel_query_s {
    gw_redis_sentinel_t *s;
    uint32_t index;
} sentinel_query_t;

static int sentinel_find(const gw_redis_sentinel_t *s, const char *name, size_t len)
{
    for (uint32_t i = 0; i < s->n_masters; i++)
        if (strlen(s->masters[i].name) == len && memcmp(s->masters[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

/* "6379" as a port, or 0. */
static uint16_t sentinel_port(const char *text, size_t len)
{
    uint64_t v = 0;
    char buf[8];
    if (len == 0 || len >= sizeof(buf))
        return 0;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (gw_config_parse_uint(buf, &v) < 0 || v == 0 || v > 65535)
        return 0;
    return (uint16_t)v;
}

/* A field of SENTINEL MASTER's flat [key, value, ...] answer, or NULL. */
static const redisReply *sentinel_field(const redisReply *r, const char *key)
{
    size_t len = strlen(key);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        const redisReply *v = r->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING && k->len == len &&
            memcmp(k->str, key, len) == 0)
            return v;
    }
    return NULL;
}

static void sentinel_count_error(gw_redis_sentinel_t *s, const sentinel_master_t *m,
                                 const char *what, size_t len)
{
    s->stats.errors++;
    if (s->stats.errors == 1 || s->stats.errors % 100 == 0)
        NL_LOG(NL_WARN, "redis_sentinel_error", "name=%s err=\"%.*s\" times=%llu", m->name,
               (int)(len < 120 ? len : 120), what, (unsigned long long)s->stats.errors);
}

/* SENTINEL MASTER's answer: the address, and the configuration epoch it belongs to. */
static void sentinel_on_answer(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    sentinel_query_t *q = arg;
    gw_redis_sentinel_t *s = q->s;
    sentinel_master_t *m = &s->masters[q->index];
    uint32_t index = q->index;
    free(q);
    m->is_asking = false;
    if (!reply) {
        m->is_wanted = true; /* the link went down: asked again when it is back */
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR && strstr(reply->str, "No such master")) {
        s->stats.unknown++;
        if (s->stats.unknown == 1 || s->stats.unknown % 100 == 0)
            NL_LOG(NL_WARN, "redis_sentinel_unknown_master", "name=%s times=%llu", m->name,
                   (unsigned long long)s->stats.unknown);
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY) {
        sentinel_count_error(s, m, reply->type == REDIS_REPLY_ERROR ? reply->str : "not a master",
                             reply->type == REDIS_REPLY_ERROR ? reply->len : 12);
        return;
    }
    const redisReply *ip = sentinel_field(reply, "ip");
    const redisReply *port_text = sentinel_field(reply, "port");
    const redisReply *epoch_text = sentinel_field(reply, "config-epoch");
    uint16_t port = port_text ? sentinel_port(port_text->str, port_text->len) : 0;
    uint64_t epoch = 0;
    if (!ip || port == 0 || ip->len >= GW_CONFIG_HOST_MAX || !epoch_text ||
        gw_config_parse_uint(epoch_text->str, &epoch) < 0) {
        sentinel_count_error(s, m, "not an address", 14);
        return;
    }
    /* A sentinel that has not heard of the last failover yet still names the old master: an
     * answer from an older configuration than one already followed is stale. */
    if (epoch < m->min_epoch) {
        s->stats.stale++;
        return;
    }
    m->epoch = epoch;
    m->min_epoch = epoch;
    char host[GW_CONFIG_HOST_MAX];
    memcpy(host, ip->str, ip->len);
    host[ip->len] = '\0';
    s->stats.answers++;
    s->on_master(s, index, host, port, false, s->arg);
}

void gw_redis_sentinel_ask(gw_redis_sentinel_t *s, uint32_t index)
{
    NL_ASSERT(index < s->n_masters);
    sentinel_master_t *m = &s->masters[index];
    if (m->is_asking)
        return;
    sentinel_query_t *q = malloc(sizeof(*q));
    if (!q) {
        m->is_wanted = true;
        return;
    }
    *q = (sentinel_query_t){.s = s, .index = index};
    const char *argv[] = {"SENTINEL", "MASTER", m->name};
    if (gw_redis_link_command(s->link, sentinel_on_answer, q, 3, argv, NULL) < 0) {
        free(q);
        m->is_wanted = true; /* no sentinel now: when the link is up */
        return;
    }
    m->is_asking = true;
    m->is_wanted = false;
    s->stats.queries++;
}

static void sentinel_on_up(gw_redis_link_t *l, void *arg)
{
    NL_UNUSED(l);
    gw_redis_sentinel_t *s = arg;
    s->stats.is_up = true;
    for (uint32_t i = 0; i < s->n_masters; i++)
        gw_redis_sentinel_ask(s, i);
}

static void sentinel_on_down(gw_redis_link_t *l, int err, void *arg)
{
    gw_redis_sentinel_t *s = arg;
    s->stats.is_up = false;
    /* A sentinel that answers nothing (hung) would leave its events connection hanging too,
     * where no command times out: that one reconnects as well. */
    if (err != -ETIMEDOUT)
        return;
    gw_redis_addr_t a = gw_redis_link_addr(l);
    for (uint32_t i = 0; a.host && i < s->n_subs; i++) {
        gw_redis_addr_t b = gw_redis_link_addr(gw_redis_sub_link(s->subs[i]));
        if (b.host && b.port == a.port && strcmp(b.host, a.host) == 0)
            gw_redis_link_reset(gw_redis_sub_link(s->subs[i]), err);
    }
}

/* "+switch-master <name> <old ip> <old port> <new ip> <new port>". */
static void sentinel_on_event(gw_redis_sub_t *sub, const char *chan, size_t chan_len,
                              const char *data, size_t len, void *arg)
{
    NL_UNUSED(sub);
    gw_redis_sentinel_t *s = arg;
    if (chan_len != sizeof(SWITCH_CHANNEL) - 1 || memcmp(chan, SWITCH_CHANNEL, chan_len) != 0)
        return;
    const char *word[5];
    size_t word_len[5];
    size_t n = 0;
    for (size_t i = 0; i < len && n < 5;) {
        while (i < len && data[i] == ' ')
            i++;
        size_t start = i;
        while (i < len && data[i] != ' ')
            i++;
        if (i > start) {
            word[n] = data + start;
            word_len[n++] = i - start;
        }
    }
    if (n != 5)
        return;
    int index = sentinel_find(s, word[0], word_len[0]);
    uint16_t port = sentinel_port(word[4], word_len[4]);
    if (index < 0 || port == 0 || word_len[3] >= GW_CONFIG_HOST_MAX)
        return;
    char host[GW_CONFIG_HOST_MAX];
    memcpy(host, word[3], word_len[3]);
    host[word_len[3]] = '\0';
    s->stats.switches++;
    if (s->masters[index].min_epoch < s->masters[index].epoch + 1)
        s->masters[index].min_epoch = s->masters[index].epoch + 1;
    NL_LOG(NL_INFO, "redis_sentinel_switch", "name=%s from=%.*s:%.*s to=%s:%u",
           s->masters[index].name, (int)word_len[1], word[1], (int)word_len[2], word[2], host,
           port);
    s->on_master(s, (uint32_t)index, host, port, true, s->arg);
}

int gw_redis_sentinel_new(gw_redis_sentinel_t **out, nl_loop_t *loop,
                          const gw_redis_sentinel_opts_t *opts)
{
    if (opts->n_sentinels == 0 || opts->n_sentinels > GW_REDIS_LINK_ADDRS_MAX ||
        opts->n_masters == 0 || opts->n_masters > GW_REDIS_SENTINEL_MASTERS_MAX || !opts->on_master)
        return -EINVAL;
    gw_redis_sentinel_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->on_master = opts->on_master;
    s->arg = opts->arg;
    int err = 0;
    for (uint32_t i = 0; i < opts->n_masters; i++) {
        s->masters[i].name = strdup(opts->masters[i]);
        s->n_masters++;
        if (!s->masters[i].name)
            err = -ENOMEM;
    }
    uint32_t timeout_ms = opts->timeout_ms ? opts->timeout_ms : 2000;
    /* Short backoff: each attempt goes to the next sentinel, and one of them is up. */
    uint32_t backoff_max_ms = opts->backoff_max_ms ? opts->backoff_max_ms : 1000;
    if (err == 0) {
        gw_redis_link_opts_t lo = {
            .addrs = opts->sentinels,
            .n_addrs = opts->n_sentinels,
            .password = opts->password,
            .connect_timeout_ms = timeout_ms,
            .command_timeout_ms = timeout_ms,
            .backoff_min_ms = 50,
            .backoff_max_ms = backoff_max_ms,
            .max_pending = 4 * GW_REDIS_SENTINEL_MASTERS_MAX,
            .on_up = sentinel_on_up,
            .on_down = sentinel_on_down,
            .arg = s,
        };
        err = gw_redis_link_new(&s->link, loop, &lo);
    }
    /* Every sentinel's events, not one's: the sentinel that leads a failover announces it at
     * once, the others only once they hear of it (hello messages, every 2 s). */
    for (uint32_t i = 0; err == 0 && i < opts->n_sentinels; i++) {
        gw_redis_sub_opts_t so = {
            .host = opts->sentinels[i].host,
            .port = opts->sentinels[i].port,
            .password = opts->password,
            .connect_timeout_ms = timeout_ms,
            .backoff_min_ms = 50,
            .backoff_max_ms = backoff_max_ms,
            .on_message = sentinel_on_event,
            .arg = s,
        };
        err = gw_redis_sub_new(&s->subs[i], loop, &so);
        if (err == 0) {
            s->n_subs++;
            err = gw_redis_sub_add(s->subs[i], SWITCH_CHANNEL, sizeof(SWITCH_CHANNEL) - 1);
        }
    }
    if (err < 0) {
        gw_redis_sentinel_free(s);
        return err;
    }
    *out = s;
    return 0;
}

void gw_redis_sentinel_free(gw_redis_sentinel_t *s)
{
    if (!s)
        return;
    /* The link first: its queries are answered NULL while the masters are still here. */
    gw_redis_link_free(s->link);
    for (uint32_t i = 0; i < s->n_subs; i++)
        gw_redis_sub_free(s->subs[i]);
    for (uint32_t i = 0; i < s->n_masters; i++)
        free(s->masters[i].name);
    free(s);
}

void gw_redis_sentinel_get_stats(const gw_redis_sentinel_t *s, gw_redis_sentinel_stats_t *out)
{
    gw_redis_link_stats_t ls;
    gw_redis_link_get_stats(s->link, &ls);
    *out = s->stats;
    out->auth_failures = ls.auth_failures;
}
