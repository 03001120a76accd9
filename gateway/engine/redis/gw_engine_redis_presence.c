/*
 * gw_engine_redis_presence: online status, presence and join/leave events across nodes, for
 * the Redis engine (issue 18). See gw_engine_redis.c for the threads: the IO loops post what
 * changed to the engine thread (E), which writes it to Redis; gw_engine_redis_query.c reads
 * it back.
 *
 * What is kept where (gw_redis_schema.h has the names), with n = this node's id:
 *   herald:nodes      (zset, on every server) live nodes, score = when n's entry expires;
 *                     each node re-adds itself every refresh interval
 *   herald:nc         (hash, first server)    n -> its connections, with herald:nodes
 *   herald:users      (zset, first server)    users online, score = when they expire
 *   herald:u:U        (hash, U's server)      "n/L:c" connections, "n/L:s" since (Unix ms),
 *                                             "n/L:l" last seen, per node n and IO loop L
 *   herald:ls:U       (string, U's server)    when U's last connection somewhere closed
 *   herald:p:C        (hash, C's server)      client id -> "n\tsince\tuser", C's subscribers
 *   herald:!C         (pub/sub)               C's join/leave events, "\0E1 n conn\n" + frame
 * Each IO loop refreshes its users once per [presence] refresh_interval in one batch; E writes
 * a batch, and the first connections it saw in one loop iteration, as one FCALL herald_refresh
 * per RP_CHUNK users and server plus one variadic ZADD herald:users per RP_CHUNK (no reply
 * waited for). Every write goes through re_presence_send, which holds writes back in order
 * while half the link's max_pending is in flight. Both matter at scale: one command per user
 * and field, sent at once, filled the link with a loop's batch of thousands, so publishes and
 * joins were refused BUSY and the batch's tail was dropped. A connected user is refreshed at
 * least once per idle timeout (its pings are activity), so every entry lives idle_timeout + 2
 * refresh intervals past its last refresh: a node that dies leaves nothing behind once that
 * has passed. Presence entries name their node, and a query (gw_engine_redis_query.c) drops
 * and deletes those whose node is no longer in herald:nodes, so a dead node's subscribers
 * vanish within that time too.
 *
 * Join/leave events cannot wait for a listener count: the listener may be on another node.
 * With this engine every join and leave is published on herald:!C (Redis drops it when no
 * node listens), and each node delivers it to its own listeners, skipping the connection it
 * is about on the node where that connection is.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_engine_redis_int.h"
#include "gw_state.h"
#include "gw_redis_schema.h"
#include "gw_auth.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* How long an entry lives past its last refresh. */
static uint64_t rp_ttl_ms(const redis_engine_t *re)
{
    return re->presence_ttl_ms;
}

/* A command whose answer nobody waits for (writes): a failure shows in the link's stats. */
static void rp_ignore(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    NL_UNUSED(reply);
    NL_UNUSED(arg);
}

/* Presence writes held back while a link has half its max_pending in flight, in order, sent
 * as replies make room (re_presence_flush). The other half stays free for what a client waits
 * on (publishes, joins, queries), and a burst of writes (a reconnect storm's first
 * connections and subscriptions) is paced by Redis's replies instead of refused. Past
 * RP_WRITES_MAX held, writes are dropped and counted: online status then repairs itself at
 * the users' next refresh, presence at the next resync. */
#define RP_WRITES_MAX 262144u

typedef struct rp_writes_s {
    char **cmds; /* RESP, from redisFormatCommandArgv; a ring */
    int *lens;
    uint32_t head;
    uint32_t n;
    uint32_t cap;
} rp_writes_t;

static void rp_writes_clear(rp_writes_t *w)
{
    for (; w && w->n; w->n--) {
        redisFreeCommand(w->cmds[w->head]);
        w->head = (w->head + 1) % w->cap;
    }
}

/* Holds a write back. Returns false when it could not be kept (memory, RP_WRITES_MAX). */
static bool rp_writes_push(re_shard_t *sh, int argc, const char *const *argv, const size_t *lens)
{
    rp_writes_t *w = sh->writes;
    if (!w && !(w = sh->writes = calloc(1, sizeof(*w))))
        return false;
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 256;
        if (cap > RP_WRITES_MAX)
            return false;
        char **cmds = malloc(cap * sizeof(*cmds));
        int *cl = malloc(cap * sizeof(*cl));
        if (!cmds || !cl) {
            free(cmds);
            free(cl);
            return false;
        }
        for (uint32_t i = 0; i < w->n; i++) {
            cmds[i] = w->cmds[(w->head + i) % w->cap];
            cl[i] = w->lens[(w->head + i) % w->cap];
        }
        free(w->cmds);
        free(w->lens);
        w->cmds = cmds;
        w->lens = cl;
        w->head = 0;
        w->cap = cap;
    }
    char *cmd = NULL;
    long long len = redisFormatCommandArgv(&cmd, argc, (const char **)argv, lens);
    if (len < 0 || len > INT_MAX)
        return false;
    uint32_t tail = (w->head + w->n) % w->cap;
    w->cmds[tail] = cmd;
    w->lens[tail] = (int)len;
    w->n++;
    return true;
}

/* Sends what shard held back while it has room. */
static void rp_writes_drain(redis_engine_t *re, re_shard_t *sh)
{
    rp_writes_t *w = sh->writes;
    if (!w || w->n == 0)
        return;
    if (!sh->is_ready) {
        rp_writes_clear(w); /* the resync when it is back writes everything again */
        return;
    }
    while (w->n && gw_redis_link_pending(sh->link) < re_budget(re)) {
        char *cmd = w->cmds[w->head];
        if (gw_redis_link_command_resp(sh->link, rp_ignore, NULL, cmd, (size_t)w->lens[w->head]) <
            0)
            break;
        redisFreeCommand(cmd);
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
}

void re_presence_send(redis_engine_t *re, uint32_t shard, int argc, const char *const *argv,
                      const size_t *lens)
{
    re_shard_t *sh = &re->shards[shard];
    if (!sh->is_ready)
        return; /* the resync when it is back writes everything again */
    rp_writes_t *w = sh->writes;
    if ((!w || w->n == 0) && gw_redis_link_pending(sh->link) < re_budget(re) &&
        gw_redis_link_command(sh->link, rp_ignore, NULL, argc, argv, lens) == 0)
        return;
    if (!rp_writes_push(sh, argc, argv, lens))
        re_count(&re->stats.presence_dropped, 1);
}

/* --- what changed, written on E ------------------------------------------------------------- */

typedef enum rp_op_e {
    RP_ADD = 0, /* a subscriber became visible in a channel */
    RP_REMOVE,  /* it left */
    RP_ONLINE,  /* a user's first connection on a loop */
    RP_OFFLINE, /* its last one there closed */
    RP_REFRESH, /* a loop's batch */
    RP_EVENT,   /* a join/leave event to publish */
} rp_op_t;

/* One change on its way to E: strings packed in data. */
typedef struct rp_msg_s {
    redis_engine_t *re;
    uint8_t op;
    uint32_t loop;
    uint64_t u64; /* since / at / the event's subject connection */
    uint32_t n_items;
    size_t len[4];
    char data[];
} rp_msg_t;

static const char *rp_str(const rp_msg_t *m, int k)
{
    const char *p = m->data;
    for (int i = 0; i < k; i++)
        p += m->len[i] + 1;
    return p;
}

static void rp_run(void *arg);

/* Posts op with up to four strings (NULL-terminated list of (ptr, len) pairs in s/l). */
static void rp_post(redis_engine_t *re, rp_op_t op, uint32_t loop, uint64_t u64,
                    const char *const *s, const size_t *l, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += l[i] + 1;
    rp_msg_t *m = NULL;
    if (!atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        m = calloc(1, sizeof(*m) + total);
    if (!m)
        return; /* a change lost: the next refresh repairs online status */
    m->re = re;
    m->op = (uint8_t)op;
    m->loop = loop;
    m->u64 = u64;
    char *p = m->data;
    for (int i = 0; i < n; i++) {
        m->len[i] = l[i];
        memcpy(p, s[i], l[i]);
        p[l[i]] = '\0';
        p += l[i] + 1;
    }
    if (nl_loop_post(re->loop, rp_run, m) < 0)
        free(m);
}

static void rp_field(char *out, size_t cap, const redis_engine_t *re, uint32_t loop, char kind)
{
    snprintf(out, cap, "%s/%u:%c", re->host.node_id, loop, kind);
}

static void rp_write_offline(redis_engine_t *re, const char *user, size_t len, uint32_t loop,
                             uint64_t at_ms)
{
    char key[RE_KEY_MAX];
    char ls[RE_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_USER_PREFIX, user, len) < 0 ||
        gw_redis_key(ls, sizeof(ls), GW_REDIS_LAST_SEEN_PREFIX, user, len) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, user, len);
    char fc[GW_CONFIG_NAME_MAX + 24], fs[GW_CONFIG_NAME_MAX + 24], fl[GW_CONFIG_NAME_MAX + 24];
    rp_field(fc, sizeof(fc), re, loop, 'c');
    rp_field(fs, sizeof(fs), re, loop, 's');
    rp_field(fl, sizeof(fl), re, loop, 'l');
    const char *hdel[] = {"HDEL", key, fc, fs, fl};
    re_presence_send(re, shard, 5, hdel, NULL);
    char at[24];
    char ttl[24];
    snprintf(at, sizeof(at), "%" PRIu64, at_ms);
    snprintf(ttl, sizeof(ttl), "%" PRIu64, re->last_seen_ttl_ms);
    const char *set[] = {"SET", ls, at, "PX", ttl};
    re_presence_send(re, shard, 5, set, NULL);
}

static void rp_write_presence(redis_engine_t *re, const rp_msg_t *m, bool is_add)
{
    const char *chan = rp_str(m, 0);
    char key[RE_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_PRESENCE_PREFIX, chan, m->len[0]) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, chan, m->len[0]);
    const char *client_id = rp_str(m, 1);
    if (!is_add) {
        const char *argv[] = {"HDEL", key, client_id};
        re_presence_send(re, shard, 3, argv, NULL);
        return;
    }
    char value[GW_CONFIG_NAME_MAX + 32 + GW_TOKEN_SUB_MAX];
    int n = snprintf(value, sizeof(value), "%s\t%" PRIu64 "\t%s", re->host.node_id, m->u64,
                     rp_str(m, 2));
    if (n < 0 || (size_t)n >= sizeof(value))
        return;
    const char *argv[] = {"HSET", key, client_id, value};
    re_presence_send(re, shard, 4, argv, NULL);
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%u", GW_REDIS_META_TTL_MS);
    const char *expire[] = {"PEXPIRE", key, ttl};
    re_presence_send(re, shard, 3, expire, NULL);
}

/* A join/leave event out to every node listening: "\0E1 <node> <conn>\n" + the frame. */
static void rp_publish_event(redis_engine_t *re, const rp_msg_t *m)
{
    const char *chan = rp_str(m, 0);
    char pubsub[RE_KEY_MAX];
    if (gw_redis_key(pubsub, sizeof(pubsub), GW_REDIS_PREFIX, chan, m->len[0]) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, chan, m->len[0]);
    char head[GW_CONFIG_NAME_MAX + 48];
    head[0] = '\0';
    int hlen = 1 + snprintf(head + 1, sizeof(head) - 1, "E1 %s %u %" PRIu64 "\n", re->host.node_id,
                            m->loop, m->u64);
    size_t flen = m->len[1];
    char *body = malloc((size_t)hlen + flen);
    if (!body)
        return;
    memcpy(body, head, (size_t)hlen);
    memcpy(body + hlen, rp_str(m, 1), flen);
    const char *argv[] = {"PUBLISH", pubsub, body};
    size_t lens[] = {7, strlen(pubsub), (size_t)hlen + flen};
    re_presence_send(re, shard, 3, argv, lens);
    free(body);
}

/* A refresh batch: users and their figures packed one after another. */
typedef struct rp_item_s {
    uint64_t seen_ms;
    uint32_t conns;
    uint32_t len;
    char user[];
} rp_item_t;

/* An item's place in the batch: items are 8-byte aligned. */
static size_t rp_item_size(size_t user_len)
{
    return (sizeof(rp_item_t) + user_len + 1 + 7) & ~(size_t)7;
}

/* Users per command (FCALL herald_refresh keys, ZADD pairs). */
#define RP_CHUNK 128

/* One command of up to RP_CHUNK users, built in place: argv/lens point into buf, the keys and
 * the users' names. */
typedef struct rp_cmd_s {
    int argc;
    const char *argv[8 + 4 * RP_CHUNK];
    size_t lens[8 + 4 * RP_CHUNK];
    char buf[RP_CHUNK * 64 + 64]; /* the numbers, up to three per user */
    size_t used;
} rp_cmd_t;

static void rp_cmd_arg(rp_cmd_t *c, const char *s, size_t len)
{
    c->argv[c->argc] = s;
    c->lens[c->argc++] = len;
}

/* Appends a number, formatted into the command's buffer. */
static void rp_cmd_num(rp_cmd_t *c, uint64_t v)
{
    char *at = c->buf + c->used;
    int n = snprintf(at, sizeof(c->buf) - c->used, "%" PRIu64, v);
    c->used += (size_t)n + 1;
    rp_cmd_arg(c, at, (size_t)n);
}

/* One user to write: what the loop reported, and what E derives (its key and server). */
typedef struct rp_user_s {
    const char *user;
    size_t len;
    uint32_t conns;
    uint64_t seen_ms;
    uint64_t since_ms; /* written only by a first connection (rp_write_users' has_since) */
    char *key;
    size_t key_len;
    uint32_t shard;
} rp_user_t;

/* FCALL herald_refresh for users[0..n) of loop (all on shard): fields c and l, and s with
 * has_since, then each hash's expiry. */
static void rp_send_hashes(redis_engine_t *re, uint32_t shard, uint32_t loop, bool has_since,
                           const rp_user_t *const *users, uint32_t n, rp_cmd_t *c)
{
    char fc[GW_CONFIG_NAME_MAX + 24], fl[GW_CONFIG_NAME_MAX + 24], fs[GW_CONFIG_NAME_MAX + 24];
    rp_field(fc, sizeof(fc), re, loop, 'c');
    rp_field(fl, sizeof(fl), re, loop, 'l');
    rp_field(fs, sizeof(fs), re, loop, 's');
    c->argc = 0;
    c->used = 0;
    rp_cmd_arg(c, "FCALL", 5);
    rp_cmd_arg(c, "herald_refresh", 14);
    rp_cmd_num(c, n);
    for (uint32_t i = 0; i < n; i++)
        rp_cmd_arg(c, users[i]->key, users[i]->key_len);
    rp_cmd_num(c, has_since ? 3 : 2);
    rp_cmd_arg(c, fc, strlen(fc));
    rp_cmd_arg(c, fl, strlen(fl));
    if (has_since)
        rp_cmd_arg(c, fs, strlen(fs));
    rp_cmd_num(c, rp_ttl_ms(re));
    for (uint32_t i = 0; i < n; i++) {
        rp_cmd_num(c, users[i]->conns);
        rp_cmd_num(c, users[i]->seen_ms);
        if (has_since)
            rp_cmd_num(c, users[i]->since_ms);
    }
    re_presence_send(re, shard, c->argc, c->argv, c->lens);
}

/* ZADD herald:users for users[0..n): each expires at exp. */
static void rp_send_users(redis_engine_t *re, const rp_user_t *users, uint32_t n, uint64_t exp,
                          rp_cmd_t *c)
{
    c->argc = 0;
    c->used = 0;
    rp_cmd_arg(c, "ZADD", 4);
    rp_cmd_arg(c, GW_REDIS_USERS, sizeof(GW_REDIS_USERS) - 1);
    rp_cmd_num(c, exp);
    const char *score = c->argv[2];
    size_t score_len = c->lens[2];
    c->argc = 2;
    for (uint32_t i = 0; i < n; i++) {
        rp_cmd_arg(c, score, score_len);
        rp_cmd_arg(c, users[i].user, users[i].len);
    }
    re_presence_send(re, 0, c->argc, c->argv, c->lens);
}

/* Writes users[0..n) of loop to Redis in about 2n / RP_CHUNK commands (an FCALL per chunk and
 * server, a ZADD per chunk) rather than three per user: a loop's refresh of thousands of users,
 * or a burst of connects, would otherwise fill the link's max_pending by itself, and publishes
 * and joins behind it would be refused BUSY, the batch's own tail dropped. */
static void rp_write_users(redis_engine_t *re, uint32_t loop, rp_user_t *users, uint32_t n,
                           bool has_since)
{
    size_t key_cap = 0;
    for (uint32_t i = 0; i < n; i++)
        key_cap += sizeof(GW_REDIS_USER_PREFIX) + users[i].len;
    char *keys = malloc(key_cap);
    const rp_user_t **chunk = malloc(RP_CHUNK * sizeof(*chunk));
    rp_cmd_t *c = malloc(sizeof(*c));
    if (!keys || !chunk || !c) {
        free(keys);
        free(chunk);
        free(c);
        return; /* the next refresh, or the entries' expiry, repairs it */
    }
    char *at = keys;
    for (uint32_t i = 0; i < n; i++) {
        rp_user_t *u = &users[i];
        size_t cap = sizeof(GW_REDIS_USER_PREFIX) + u->len;
        u->key_len = (size_t)gw_redis_key(at, cap, GW_REDIS_USER_PREFIX, u->user, u->len);
        u->key = at;
        u->shard = gw_hashring_lookup(&re->ring, u->user, u->len);
        at += cap;
    }
    for (uint32_t s = 0; s < re->n_shards; s++) {
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (users[i].shard != s)
                continue;
            chunk[k++] = &users[i];
            if (k == RP_CHUNK) {
                rp_send_hashes(re, s, loop, has_since, chunk, k, c);
                k = 0;
            }
        }
        if (k > 0)
            rp_send_hashes(re, s, loop, has_since, chunk, k, c);
    }
    uint64_t exp = nl_wall_ms() + rp_ttl_ms(re);
    for (uint32_t i = 0; i < n; i += RP_CHUNK)
        rp_send_users(re, &users[i], n - i < RP_CHUNK ? n - i : RP_CHUNK, exp, c);
    free(c);
    free(chunk);
    free(keys);
}

/* A loop's refresh batch. */
static void rp_write_refresh(redis_engine_t *re, const rp_msg_t *m)
{
    rp_user_t *users = calloc(m->n_items ? m->n_items : 1, sizeof(*users));
    if (!users)
        return;
    const char *p = m->data;
    for (uint32_t i = 0; i < m->n_items; i++) {
        const rp_item_t *it = (const rp_item_t *)p;
        users[i] = (rp_user_t){
            .user = it->user, .len = it->len, .conns = it->conns, .seen_ms = it->seen_ms};
        p += rp_item_size(it->len);
    }
    rp_write_users(re, m->loop, users, m->n_items, false);
    free(users);
}

/* First connections wait here (RP_ONLINE messages, E only) until E is about to sleep, and go
 * out together per loop: a burst of connects costs a few commands, not three each. */
struct rp_online_s {
    rp_msg_t **msgs;
    uint32_t n;
    uint32_t cap;
};

static void rp_queue_online(redis_engine_t *re, rp_msg_t *m)
{
    rp_online_t *q = re->online;
    if (!q)
        q = re->online = calloc(1, sizeof(*q));
    if (q && q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 64;
        rp_msg_t **msgs = realloc(q->msgs, cap * sizeof(*msgs));
        if (msgs) {
            q->msgs = msgs;
            q->cap = cap;
        }
    }
    if (!q || q->n == q->cap) {
        free(m); /* no memory: the user's first refresh writes it */
        return;
    }
    q->msgs[q->n++] = m;
}

static void rp_write_online_queue(redis_engine_t *re);

void re_presence_flush(redis_engine_t *re)
{
    rp_write_online_queue(re);
    for (uint32_t i = 0; i < re->n_shards; i++)
        rp_writes_drain(re, &re->shards[i]);
}

/* Writes the first connections queued since the last flush. */
static void rp_write_online_queue(redis_engine_t *re)
{
    rp_online_t *q = re->online;
    if (!q || q->n == 0)
        return;
    rp_user_t *users = calloc(q->n, sizeof(*users));
    uint64_t now = nl_wall_ms();
    for (uint32_t loop = 0; users && loop < re->n_loops; loop++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < q->n; i++) {
            const rp_msg_t *m = q->msgs[i];
            if (m->loop == loop)
                users[n++] = (rp_user_t){.user = rp_str(m, 0),
                                         .len = m->len[0],
                                         .conns = 1,
                                         .seen_ms = now,
                                         .since_ms = now};
        }
        if (n > 0)
            rp_write_users(re, loop, users, n, true);
    }
    free(users);
    for (uint32_t i = 0; i < q->n; i++)
        free(q->msgs[i]);
    q->n = 0;
}

void re_presence_deinit(redis_engine_t *re)
{
    for (uint32_t i = 0; i < re->n_shards; i++) {
        rp_writes_t *w = re->shards[i].writes;
        rp_writes_clear(w);
        if (w) {
            free(w->cmds);
            free(w->lens);
            free(w);
        }
        re->shards[i].writes = NULL;
    }
    rp_online_t *q = re->online;
    if (!q)
        return;
    for (uint32_t i = 0; i < q->n; i++)
        free(q->msgs[i]);
    free(q->msgs);
    free(q);
    re->online = NULL;
}

static void rp_run(void *arg)
{
    rp_msg_t *m = arg;
    redis_engine_t *re = m->re;
    switch ((rp_op_t)m->op) {
    case RP_ADD:
    case RP_REMOVE:
        rp_write_presence(re, m, m->op == RP_ADD);
        break;
    case RP_ONLINE:
        rp_queue_online(re, m);
        return; /* the queue owns m */
    case RP_OFFLINE:
        rp_write_online_queue(re); /* a first connection queued before it goes first */
        rp_write_offline(re, rp_str(m, 0), m->len[0], m->loop, m->u64);
        break;
    case RP_REFRESH:
        rp_write_refresh(re, m);
        break;
    case RP_EVENT:
        rp_publish_event(re, m);
        break;
    }
    free(m);
}

/* --- the engine ops from the IO loops ------------------------------------------------------- */

void re_presence_add(gw_engine_t *e, uint32_t loop, const char *chan, size_t len,
                     const gw_presence_client_t *who)
{
    const char *s[] = {chan, who->client_id, who->user};
    size_t l[] = {len, strlen(who->client_id), strlen(who->user)};
    rp_post((redis_engine_t *)e, RP_ADD, loop, who->connected_at_ms, s, l, 3);
}

void re_presence_remove(gw_engine_t *e, uint32_t loop, const char *chan, size_t len,
                        const char *client_id)
{
    const char *s[] = {chan, client_id};
    size_t l[] = {len, strlen(client_id)};
    rp_post((redis_engine_t *)e, RP_REMOVE, loop, 0, s, l, 2);
}

void re_user_online(gw_engine_t *e, uint32_t loop, const char *user, size_t len)
{
    rp_post((redis_engine_t *)e, RP_ONLINE, loop, 0, &user, &len, 1);
}

void re_user_offline(gw_engine_t *e, uint32_t loop, const char *user, size_t len, uint64_t at_ms)
{
    rp_post((redis_engine_t *)e, RP_OFFLINE, loop, at_ms, &user, &len, 1);
}

typedef struct rp_pack_s {
    char *p;
    char *end;
    uint32_t n;
} rp_pack_t;

static void rp_size_item(const gw_presence_batch_item_t *it, void *arg)
{
    *(size_t *)arg += rp_item_size(it->user_len);
}

static void rp_pack_item(const gw_presence_batch_item_t *it, void *arg)
{
    rp_pack_t *pk = arg;
    size_t size = rp_item_size(it->user_len);
    if (pk->p + size > pk->end)
        return;
    rp_item_t *item = (rp_item_t *)pk->p;
    item->seen_ms = it->last_seen_ms;
    item->conns = it->connections;
    item->len = (uint32_t)it->user_len;
    memcpy(item->user, it->user, it->user_len);
    item->user[it->user_len] = '\0';
    pk->p += size;
    pk->n++;
}

void re_refresh(gw_engine_t *e, const gw_presence_batch_t *batch)
{
    redis_engine_t *re = (redis_engine_t *)e;
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return;
    size_t cap = 0;
    gw_presence_batch_foreach(batch, rp_size_item, &cap);
    rp_msg_t *m = calloc(1, sizeof(*m) + cap);
    if (!m)
        return;
    m->re = re;
    m->op = RP_REFRESH;
    m->loop = batch->loop_index;
    rp_pack_t pk = {.p = m->data, .end = m->data + cap};
    gw_presence_batch_foreach(batch, rp_pack_item, &pk);
    m->n_items = pk.n;
    if (nl_loop_post(re->loop, rp_run, m) < 0)
        free(m);
}

void re_event(gw_engine_t *e, gw_event_t *ev)
{
    nl_block_t *b = ev->blocks.tcp;
    const char *s[] = {ev->chan, (const char *)nl_block_data(b)};
    size_t l[] = {ev->chan_len, nl_block_len(b)};
    rp_post((redis_engine_t *)e, RP_EVENT, ev->subject_loop, ev->subject_conn, s, l, 2);
}

/* --- this node's heartbeat ------------------------------------------------------------------ */

/* On IO loop i: its sessions tell the engine everything again. */
static void rp_run_resync(void *arg)
{
    redis_engine_t *re = arg;
    re->host.ops->resync(re->host.arg, gw_fanout_loop_current()->index);
}

void re_presence_server_ready(redis_engine_t *re)
{
    /* This node first, on every server: a write of its own that a query sees is then always
     * behind its heartbeat on the same connection, so no query takes it for a dead node's. */
    re->next_heartbeat_ms = 0;
    re_presence_tick(re);
    /* Before the node is ready there is no session to tell about (nor, at start, any IO loop
     * to post to: the engine starts first). Its readiness is stored after every loop is up. */
    if (re->is_detached || !re->host.ops->is_ready(re->host.arg))
        return;
    for (uint32_t i = 0; i < re->n_loops; i++)
        (void)gw_fanout_post(re->hub, i, rp_run_resync, re);
}

void re_presence_tick(redis_engine_t *re)
{
    uint64_t now = nl_wall_ms();
    if (now < re->next_heartbeat_ms)
        return;
    re->next_heartbeat_ms = now + re->presence_refresh_ms;
    char exp[24];
    char conns[24];
    snprintf(exp, sizeof(exp), "%" PRIu64, now + rp_ttl_ms(re));
    snprintf(conns, sizeof(conns), "%" PRIu64, re->host.ops->connections(re->host.arg));
    const char *node = re->host.node_id;
    for (uint32_t i = 0; i < re->n_shards; i++) {
        const char *zadd[] = {"ZADD", GW_REDIS_NODES, exp, node};
        re_presence_send(re, i, 4, zadd, NULL);
    }
    const char *hset[] = {"HSET", GW_REDIS_NODE_CONNS, node, conns};
    re_presence_send(re, 0, 4, hset, NULL);
}

/* --- events arriving from Redis ------------------------------------------------------------- */

bool re_presence_on_event(redis_engine_t *re, re_chan_t *c, const char *data, size_t len)
{
    static const char magic[] = {'\0', 'E', '1', ' '};
    if (len < sizeof(magic) || memcmp(data, magic, sizeof(magic)) != 0)
        return false;
    const char *p = data + sizeof(magic);
    const char *end = data + len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *sp1 = nl ? memchr(p, ' ', (size_t)(nl - p)) : NULL;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(nl - sp1 - 1)) : NULL;
    if (!sp2)
        return true; /* malformed: dropped */
    /* The connection the event is about is skipped only on the node it is on. */
    bool is_mine = (size_t)(sp1 - p) == strlen(re->host.node_id) &&
                   memcmp(p, re->host.node_id, (size_t)(sp1 - p)) == 0;
    uint32_t loop = is_mine ? (uint32_t)strtoul(sp1 + 1, NULL, 10) : UINT32_MAX;
    uint64_t conn = is_mine ? strtoull(sp2 + 1, NULL, 10) : 0;
    gw_event_t *ev =
        gw_event_from_frame(c->name, c->key.name_len, nl + 1, (size_t)(end - nl - 1), loop, conn);
    if (!ev)
        return true;
    for (uint64_t mask = re->is_detached ? 0 : c->loop_mask; mask; mask &= mask - 1) {
        uint32_t target = (uint32_t)__builtin_ctzll(mask);
        re_flush_loop(re, target);
        gw_event_t *ref = gw_event_ref(ev);
        if (gw_fanout_post(re->hub, target, gw_presence_event_run, ref) < 0)
            gw_event_unref(ref);
    }
    gw_event_unref(ev);
    return true;
}
