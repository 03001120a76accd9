/*
 * gw_engine_redis_presence: online status, presence and join/leave events across nodes, for
 * the Redis engine (issue 18). See gw_engine_redis.c for the threads: the IO loops post what
 * changed to the engine thread (E), which writes it to Redis; queries read it back.
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
 * Each IO loop refreshes its users once per [presence] refresh_interval in one batch, which
 * E turns into one pipelined round of HSETs and expiries (one command per user and key, no
 * reply waited for). A connected user is refreshed at least once per idle timeout (its pings
 * are activity), so every entry lives idle_timeout + 2 refresh intervals past its last
 * refresh: a node that dies leaves nothing behind once that has passed. Presence entries
 * name their node, and a query drops (and deletes) those whose node is no longer in
 * herald:nodes, so a dead node's subscribers vanish within that time too.
 *
 * Join/leave events cannot wait for a listener count: the listener may be on another node.
 * With this engine every join and leave is published on herald:!C (Redis drops it when no
 * node listens), and each node delivers it to its own listeners, skipping the connection it
 * is about on the node where that connection is.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel_name.h"
#include "gw_engine_redis_int.h"
#include "gw_presence.h"
#include "gw_redis_schema.h"
#include "gw_session.h"
#include "gw_token.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define RP_KEY_MAX (32 + GW_CHANNEL_NAME_MAX_LIMIT + GW_CONFIG_NAME_MAX)

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

static void rp_send(redis_engine_t *re, uint32_t shard, int argc, const char *const *argv,
                    const size_t *lens)
{
    re_shard_t *sh = &re->shards[shard];
    if (sh->is_ready)
        (void)gw_redis_link_command(sh->link, rp_ignore, NULL, argc, argv, lens);
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
    snprintf(out, cap, "%s/%u:%c", re->node->node_id, loop, kind);
}

static void rp_write_user(redis_engine_t *re, const char *user, size_t len, uint32_t loop,
                          uint64_t conns, uint64_t since_ms, uint64_t seen_ms)
{
    char key[RP_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_USER_PREFIX, user, len) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, user, len);
    char fc[GW_CONFIG_NAME_MAX + 24], fs[GW_CONFIG_NAME_MAX + 24], fl[GW_CONFIG_NAME_MAX + 24];
    char vc[24], vs[24], vl[24], ttl[24], exp[24];
    rp_field(fc, sizeof(fc), re, loop, 'c');
    rp_field(fs, sizeof(fs), re, loop, 's');
    rp_field(fl, sizeof(fl), re, loop, 'l');
    snprintf(vc, sizeof(vc), "%" PRIu64, conns);
    snprintf(vs, sizeof(vs), "%" PRIu64, since_ms);
    snprintf(vl, sizeof(vl), "%" PRIu64, seen_ms);
    snprintf(ttl, sizeof(ttl), "%" PRIu64, rp_ttl_ms(re));
    snprintf(exp, sizeof(exp), "%" PRIu64, nl_wall_ms() + rp_ttl_ms(re));
    if (since_ms) {
        const char *argv[] = {"HSET", key, fc, vc, fs, vs, fl, vl};
        rp_send(re, shard, 8, argv, NULL);
    } else {
        const char *argv[] = {"HSET", key, fc, vc, fl, vl};
        rp_send(re, shard, 6, argv, NULL);
    }
    const char *expire[] = {"PEXPIRE", key, ttl};
    rp_send(re, shard, 3, expire, NULL);
    const char *users[] = {"ZADD", GW_REDIS_USERS, exp, NULL};
    size_t lens[] = {4, strlen(GW_REDIS_USERS), strlen(exp), len};
    users[3] = user;
    rp_send(re, 0, 4, users, lens);
}

static void rp_write_offline(redis_engine_t *re, const char *user, size_t len, uint32_t loop,
                             uint64_t at_ms)
{
    char key[RP_KEY_MAX];
    char ls[RP_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_USER_PREFIX, user, len) < 0 ||
        gw_redis_key(ls, sizeof(ls), GW_REDIS_LAST_SEEN_PREFIX, user, len) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, user, len);
    char fc[GW_CONFIG_NAME_MAX + 24], fs[GW_CONFIG_NAME_MAX + 24], fl[GW_CONFIG_NAME_MAX + 24];
    rp_field(fc, sizeof(fc), re, loop, 'c');
    rp_field(fs, sizeof(fs), re, loop, 's');
    rp_field(fl, sizeof(fl), re, loop, 'l');
    const char *hdel[] = {"HDEL", key, fc, fs, fl};
    rp_send(re, shard, 5, hdel, NULL);
    char at[24];
    char ttl[24];
    snprintf(at, sizeof(at), "%" PRIu64, at_ms);
    snprintf(ttl, sizeof(ttl), "%" PRIu64, re->last_seen_ttl_ms);
    const char *set[] = {"SET", ls, at, "PX", ttl};
    rp_send(re, shard, 5, set, NULL);
}

static void rp_write_presence(redis_engine_t *re, const rp_msg_t *m, bool is_add)
{
    const char *chan = rp_str(m, 0);
    char key[RP_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_PRESENCE_PREFIX, chan, m->len[0]) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, chan, m->len[0]);
    const char *client_id = rp_str(m, 1);
    if (!is_add) {
        const char *argv[] = {"HDEL", key, client_id};
        rp_send(re, shard, 3, argv, NULL);
        return;
    }
    char value[GW_CONFIG_NAME_MAX + 32 + GW_TOKEN_SUB_MAX];
    int n = snprintf(value, sizeof(value), "%s\t%" PRIu64 "\t%s", re->node->node_id, m->u64,
                     rp_str(m, 2));
    if (n < 0 || (size_t)n >= sizeof(value))
        return;
    const char *argv[] = {"HSET", key, client_id, value};
    rp_send(re, shard, 4, argv, NULL);
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%u", GW_REDIS_META_TTL_MS);
    const char *expire[] = {"PEXPIRE", key, ttl};
    rp_send(re, shard, 3, expire, NULL);
}

/* A join/leave event out to every node listening: "\0E1 <node> <conn>\n" + the frame. */
static void rp_publish_event(redis_engine_t *re, const rp_msg_t *m)
{
    const char *chan = rp_str(m, 0);
    char pubsub[RP_KEY_MAX];
    if (gw_redis_key(pubsub, sizeof(pubsub), GW_REDIS_PREFIX, chan, m->len[0]) < 0)
        return;
    uint32_t shard = gw_hashring_lookup(&re->ring, chan, m->len[0]);
    char head[GW_CONFIG_NAME_MAX + 48];
    head[0] = '\0';
    int hlen = 1 + snprintf(head + 1, sizeof(head) - 1, "E1 %s %u %" PRIu64 "\n", re->node->node_id,
                            m->loop, m->u64);
    size_t flen = m->len[1];
    char *body = malloc((size_t)hlen + flen);
    if (!body)
        return;
    memcpy(body, head, (size_t)hlen);
    memcpy(body + hlen, rp_str(m, 1), flen);
    const char *argv[] = {"PUBLISH", pubsub, body};
    size_t lens[] = {7, strlen(pubsub), (size_t)hlen + flen};
    re_shard_t *sh = &re->shards[shard];
    if (sh->is_ready)
        (void)gw_redis_link_command(sh->link, rp_ignore, NULL, 3, argv, lens);
    free(body);
}

/* A refresh batch: users and their figures packed one after another. */
typedef struct rp_item_s {
    uint64_t seen_ms;
    uint32_t conns;
    uint32_t len;
    char user[];
} rp_item_t;

static void rp_run(void *arg)
{
    rp_msg_t *m = arg;
    redis_engine_t *re = m->re;
    switch ((rp_op_t)m->op) {
    case RP_ADD:
    case RP_REMOVE:
        rp_write_presence(re, m, m->op == RP_ADD);
        break;
    case RP_ONLINE: {
        uint64_t now = nl_wall_ms();
        rp_write_user(re, rp_str(m, 0), m->len[0], m->loop, 1, now, now);
        break;
    }
    case RP_OFFLINE:
        rp_write_offline(re, rp_str(m, 0), m->len[0], m->loop, m->u64);
        break;
    case RP_REFRESH: {
        const char *p = m->data;
        for (uint32_t i = 0; i < m->n_items; i++) {
            const rp_item_t *it = (const rp_item_t *)p;
            rp_write_user(re, it->user, it->len, m->loop, it->conns, 0, it->seen_ms);
            p += (sizeof(*it) + it->len + 1 + 7) & ~(size_t)7;
        }
        break;
    }
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

static void rp_pack_item(const gw_presence_batch_item_t *it, void *arg)
{
    rp_pack_t *pk = arg;
    size_t size = (sizeof(rp_item_t) + it->user_len + 1 + 7) & ~(size_t)7;
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
    /* Users are at most 1 KiB (tokens cap sub far below): size the copy from the count. */
    size_t cap = (size_t)batch->n_users * ((sizeof(rp_item_t) + GW_TOKEN_SUB_MAX + 8));
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
    nl_block_t *b = ev->block;
    const char *s[] = {ev->chan, (const char *)nl_block_data(b)};
    size_t l[] = {ev->chan_len, nl_block_len(b)};
    rp_post((redis_engine_t *)e, RP_EVENT, ev->subject_loop, ev->subject_conn, s, l, 2);
}

/* --- this node's heartbeat ------------------------------------------------------------------ */

static void rp_run_resync(void *arg)
{
    gw_loop_t *lp = arg;
    gw_session_presence_resync(lp);
}

void re_presence_server_ready(redis_engine_t *re)
{
    /* This node first, on every server: a write of its own that a query sees is then always
     * behind its heartbeat on the same connection, so no query takes it for a dead node's. */
    re->next_heartbeat_ms = 0;
    re_presence_tick(re);
    /* Before the node is ready there is no session to tell about (nor, at start, any IO loop
     * to post to: the engine starts first). Its readiness is stored after every loop is up. */
    if (re->is_detached || !atomic_load(&re->node->is_ready))
        return;
    for (uint32_t i = 0; i < re->n_loops; i++)
        (void)nl_loop_post(re->node->loops[i].loop, rp_run_resync, &re->node->loops[i]);
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
    snprintf(conns, sizeof(conns), "%" PRIu64,
             atomic_load_explicit(&re->node->connections, memory_order_relaxed));
    const char *node = re->node->node_id;
    for (uint32_t i = 0; i < re->n_shards; i++) {
        const char *zadd[] = {"ZADD", GW_REDIS_NODES, exp, node};
        rp_send(re, i, 4, zadd, NULL);
    }
    const char *hset[] = {"HSET", GW_REDIS_NODE_CONNS, node, conns};
    rp_send(re, 0, 4, hset, NULL);
}

/* --- queries -------------------------------------------------------------------------------- */

/* A query and what its replies brought, answered when the last of its commands returns. */
typedef struct rp_query_s {
    redis_engine_t *re;
    gw_engine_reply_t reply;
    int pending; /* commands not answered yet */
    int status;
    uint32_t shard;
    /* Live nodes (herald:nodes above now), strings owned here. */
    char **nodes;
    uint32_t n_nodes;
    /* Presence: the hash's entries (client id, value), owned here. */
    char **fields;
    char **values;
    uint32_t n_fields;
    /* Online: the user's last seen when offline; counts: users. */
    uint64_t number;
    char name[]; /* the channel or user asked about */
} rp_query_t;

static void rp_query_free(rp_query_t *q)
{
    for (uint32_t i = 0; i < q->n_nodes; i++)
        free(q->nodes[i]);
    for (uint32_t i = 0; i < q->n_fields; i++) {
        free(q->fields[i]);
        free(q->values[i]);
    }
    free(q->nodes);
    free(q->fields);
    free(q->values);
    free(q);
}

static bool rp_is_live(const rp_query_t *q, const char *node, size_t len)
{
    for (uint32_t i = 0; i < q->n_nodes; i++)
        if (strlen(q->nodes[i]) == len && memcmp(q->nodes[i], node, len) == 0)
            return true;
    return false;
}

static char *rp_dup(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

/* Copies an array reply of strings (ZRANGEBYSCORE) into the live nodes. */
static void rp_take_nodes(rp_query_t *q, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        q->status = -EIO;
        return;
    }
    q->nodes = calloc(r->elements ? r->elements : 1, sizeof(*q->nodes));
    if (!q->nodes) {
        q->status = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            (q->nodes[q->n_nodes] = rp_dup(r->element[i]->str, r->element[i]->len)) != NULL)
            q->n_nodes++;
}

/* Copies an HGETALL reply into the fields and values. */
static void rp_take_hash(rp_query_t *q, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        q->status = -EIO;
        return;
    }
    size_t n = r->elements / 2;
    q->fields = calloc(n ? n : 1, sizeof(*q->fields));
    q->values = calloc(n ? n : 1, sizeof(*q->values));
    if (!q->fields || !q->values) {
        q->status = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *f = r->element[2 * i];
        const redisReply *v = r->element[2 * i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        q->fields[q->n_fields] = rp_dup(f->str, f->len);
        q->values[q->n_fields] = rp_dup(v->str, v->len);
        if (q->fields[q->n_fields] && q->values[q->n_fields])
            q->n_fields++;
    }
}

/* The answer, where the asker wants it. res->data is built by the caller in done. */
typedef struct rp_answer_s {
    rp_query_t *q;
    gw_engine_result_t res;
    void (*build)(rp_query_t *q, gw_engine_result_t *res, void **scratch);
} rp_answer_t;

static void rp_answer_run(void *arg)
{
    rp_answer_t *a = arg;
    void *scratch = NULL;
    if (a->res.status == 0)
        a->build(a->q, &a->res, &scratch);
    a->q->reply.cb(&a->q->reply, &a->res);
    free(scratch);
    rp_query_free(a->q);
    free(a);
}

static void rp_answer(rp_query_t *q,
                      void (*build)(rp_query_t *q, gw_engine_result_t *res, void **scratch))
{
    rp_answer_t *a = calloc(1, sizeof(*a));
    if (!a) {
        rp_query_free(q);
        return; /* the asker never hears: logged by the caller's deadline, if any */
    }
    a->q = q;
    a->res.status = q->status;
    a->build = build;
    if (!q->reply.loop) {
        rp_answer_run(a);
        return;
    }
    if (nl_loop_post(q->reply.loop, rp_answer_run, a) < 0) {
        rp_query_free(q);
        free(a);
    }
}

/* Each reply of a query lands here; the last answers. */
typedef struct rp_step_s {
    rp_query_t *q;
    void (*take)(rp_query_t *q, const redisReply *r);
    void (*build)(rp_query_t *q, gw_engine_result_t *res, void **scratch);
} rp_step_t;

static void rp_on_step(gw_redis_link_t *l, redisReply *reply, void *arg)
{
    NL_UNUSED(l);
    rp_step_t *st = arg;
    rp_query_t *q = st->q;
    if (!reply)
        q->status = -EIO;
    else if (q->status == 0)
        st->take(q, reply);
    if (--q->pending == 0)
        rp_answer(q, st->build);
    free(st);
}

/* Sends one command of q; its reply goes to take, and the last to build. */
static void rp_step(rp_query_t *q, int argc, const char *const *argv, const size_t *lens,
                    void (*take)(rp_query_t *, const redisReply *),
                    void (*build)(rp_query_t *, gw_engine_result_t *, void **))
{
    rp_step_t *st = malloc(sizeof(*st));
    if (st)
        *st = (rp_step_t){.q = q, .take = take, .build = build};
    re_shard_t *sh = &q->re->shards[q->shard];
    q->pending++;
    if (!st || !sh->is_ready ||
        gw_redis_link_command(sh->link, rp_on_step, st, argc, argv, lens) < 0) {
        free(st);
        q->status = sh->is_ready ? -ENOMEM : -EAGAIN;
        q->pending--;
    }
}

static void rp_take_nothing(rp_query_t *q, const redisReply *r)
{
    NL_UNUSED(q);
    NL_UNUSED(r);
}

static void rp_take_number(rp_query_t *q, const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        q->number = (uint64_t)r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        q->number = strtoull(r->str, NULL, 10);
}

/* Starts the live-node read every query needs. */
static void rp_ask_nodes(rp_query_t *q, void (*build)(rp_query_t *, gw_engine_result_t *, void **))
{
    char now[24];
    snprintf(now, sizeof(now), "%" PRIu64, nl_wall_ms());
    const char *argv[] = {"ZRANGEBYSCORE", GW_REDIS_NODES, now, "+inf"};
    rp_step(q, 4, argv, NULL, rp_take_nodes, build);
}

/* Fails q now (nothing was sent) or lets its replies answer it. */
static void rp_launch(rp_query_t *q, void (*build)(rp_query_t *, gw_engine_result_t *, void **))
{
    if (q->pending == 0)
        rp_answer(q, build);
}

/* --- presence ------------------------------------------------------------------------------- */

static int rp_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Presence: the live entries of herald:p:C (dead nodes' are deleted on the way). */
static void rp_build_presence(rp_query_t *q, gw_engine_result_t *res, void **scratch)
{
    typedef struct {
        gw_presence_result_t r;
        gw_presence_client_t clients[];
    } out_t;
    uint32_t limit = q->re->presence_max_clients;
    out_t *o = calloc(1, sizeof(*o) + sizeof(o->clients[0]) * (q->n_fields ? q->n_fields : 1));
    const char **users = calloc(q->n_fields ? q->n_fields : 1, sizeof(*users));
    if (!o || !users) {
        free(o);
        free(users);
        res->status = -ENOMEM;
        return;
    }
    uint32_t n_users = 0;
    for (uint32_t i = 0; i < q->n_fields; i++) {
        /* value: node \t since \t user */
        char *v = q->values[i];
        char *t1 = strchr(v, '\t');
        char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2 || !rp_is_live(q, v, (size_t)(t1 - v)))
            continue;
        o->r.num_clients++;
        users[n_users++] = t2 + 1;
        if (o->r.n_clients < limit)
            o->clients[o->r.n_clients++] = (gw_presence_client_t){
                .user = t2 + 1,
                .client_id = q->fields[i],
                .connected_at_ms = strtoull(t1 + 1, NULL, 10),
            };
    }
    qsort(users, n_users, sizeof(*users), rp_cmp_str);
    for (uint32_t i = 0; i < n_users; i++)
        o->r.num_users += i == 0 || strcmp(users[i], users[i - 1]) != 0;
    free(users);
    o->r.chan = q->name;
    o->r.clients = o->clients;
    o->r.is_truncated = o->r.n_clients < o->r.num_clients;
    res->data = &o->r;
    *scratch = o;
}

/* Deletes the entries of nodes that are gone (no answer awaited). */
static void rp_prune(rp_query_t *q, const char *key)
{
    for (uint32_t i = 0; i < q->n_fields; i++) {
        const char *v = q->values[i];
        const char *t = strchr(v, '\t');
        if (t && !rp_is_live(q, v, (size_t)(t - v))) {
            const char *argv[] = {"HDEL", key, q->fields[i]};
            rp_send(q->re, q->shard, 3, argv, NULL);
        }
    }
}

static void rp_take_presence_nodes(rp_query_t *q, const redisReply *r)
{
    rp_take_nodes(q, r);
    if (q->status == 0) {
        char key[RP_KEY_MAX];
        if (gw_redis_key(key, sizeof(key), GW_REDIS_PRESENCE_PREFIX, q->name, strlen(q->name)) > 0)
            rp_prune(q, key);
    }
}

static rp_query_t *rp_query_new(redis_engine_t *re, const gw_engine_reply_t *reply,
                                const char *name, size_t len)
{
    rp_query_t *q = calloc(1, sizeof(*q) + len + 1);
    if (!q)
        return NULL;
    q->re = re;
    q->reply = *reply;
    memcpy(q->name, name, len);
    q->shard = gw_hashring_lookup(&re->ring, name, len);
    return q;
}

/* On E. */
static void rp_run_presence(void *arg)
{
    rp_query_t *q = arg;
    char key[RP_KEY_MAX];
    if (gw_redis_key(key, sizeof(key), GW_REDIS_PRESENCE_PREFIX, q->name, strlen(q->name)) < 0) {
        q->status = -EINVAL;
    } else {
        const char *hgetall[] = {"HGETALL", key};
        rp_step(q, 2, hgetall, NULL, rp_take_hash, rp_build_presence);
        char now[24];
        snprintf(now, sizeof(now), "%" PRIu64, nl_wall_ms());
        const char *zr[] = {"ZRANGEBYSCORE", GW_REDIS_NODES, now, "+inf"};
        rp_step(q, 4, zr, NULL, rp_take_presence_nodes, rp_build_presence);
    }
    rp_launch(q, rp_build_presence);
}

/* --- online --------------------------------------------------------------------------------- */

/* One user: the fields "node/loop:c|s|l" of herald:u:U whose node is live. */
static void rp_build_user(rp_query_t *q, gw_engine_result_t *res, void **scratch)
{
    typedef struct {
        gw_online_result_t r;
        const char *nodes[GW_NODE_MAX_LOOPS];
    } out_t;
    out_t *o = calloc(1, sizeof(*o));
    if (!o) {
        res->status = -ENOMEM;
        return;
    }
    for (uint32_t i = 0; i < q->n_fields; i++) {
        const char *f = q->fields[i];
        const char *slash = strrchr(f, '/');
        const char *colon = strrchr(f, ':');
        if (!slash || !colon || colon < slash || !rp_is_live(q, f, (size_t)(slash - f)))
            continue;
        uint64_t v = strtoull(q->values[i], NULL, 10);
        if (colon[1] == 'c') {
            o->r.connections += v;
            bool is_listed = false;
            for (uint32_t k = 0; k < o->r.n_nodes; k++)
                is_listed |= strncmp(o->nodes[k], f, (size_t)(slash - f)) == 0 &&
                             o->nodes[k][slash - f] == '/';
            if (!is_listed && o->r.n_nodes < GW_NODE_MAX_LOOPS)
                o->nodes[o->r.n_nodes++] = f; /* "node/loop:c": the node up to the slash */
        } else if (colon[1] == 's' && v && (o->r.since_ms == 0 || v < o->r.since_ms)) {
            o->r.since_ms = v;
        } else if (colon[1] == 'l' && v > o->r.last_seen_ms) {
            o->r.last_seen_ms = v;
        }
    }
    /* Node names end at the slash: cut them there (the fields are this query's own). */
    for (uint32_t k = 0; k < o->r.n_nodes; k++)
        *strrchr((char *)o->nodes[k], '/') = '\0';
    if (o->r.connections == 0) {
        o->r.since_ms = 0;
        o->r.last_seen_ms = q->number; /* herald:ls:U, when it went */
        o->r.n_nodes = 0;
    }
    o->r.user = q->name;
    o->r.user_len = strlen(q->name);
    o->r.nodes = o->nodes;
    res->data = &o->r;
    *scratch = o;
}

static void rp_run_user(void *arg)
{
    rp_query_t *q = arg;
    char key[RP_KEY_MAX];
    char ls[RP_KEY_MAX];
    size_t len = strlen(q->name);
    if (gw_redis_key(key, sizeof(key), GW_REDIS_USER_PREFIX, q->name, len) < 0 ||
        gw_redis_key(ls, sizeof(ls), GW_REDIS_LAST_SEEN_PREFIX, q->name, len) < 0) {
        q->status = -EINVAL;
    } else {
        const char *hgetall[] = {"HGETALL", key};
        rp_step(q, 2, hgetall, NULL, rp_take_hash, rp_build_user);
        const char *get[] = {"GET", ls};
        rp_step(q, 2, get, NULL, rp_take_number, rp_build_user);
        rp_ask_nodes(q, rp_build_user);
    }
    rp_launch(q, rp_build_user);
}

/* Counts: users online (herald:users, expired ones removed first) and the live nodes'
 * connections (herald:nc). */
static void rp_build_counts(rp_query_t *q, gw_engine_result_t *res, void **scratch)
{
    gw_online_counts_t *c = calloc(1, sizeof(*c));
    if (!c) {
        res->status = -ENOMEM;
        return;
    }
    c->users = q->number;
    for (uint32_t i = 0; i < q->n_fields; i++)
        if (rp_is_live(q, q->fields[i], strlen(q->fields[i])))
            c->connections += strtoull(q->values[i], NULL, 10);
    res->data = c;
    *scratch = c;
}

static void rp_run_counts(void *arg)
{
    rp_query_t *q = arg;
    char now[24];
    snprintf(now, sizeof(now), "%" PRIu64, nl_wall_ms());
    const char *trim[] = {"ZREMRANGEBYSCORE", GW_REDIS_USERS, "-inf", now};
    rp_step(q, 4, trim, NULL, rp_take_nothing, rp_build_counts);
    const char *card[] = {"ZCARD", GW_REDIS_USERS};
    rp_step(q, 2, card, NULL, rp_take_number, rp_build_counts);
    const char *nc[] = {"HGETALL", GW_REDIS_NODE_CONNS};
    rp_step(q, 2, nc, NULL, rp_take_hash, rp_build_counts);
    rp_ask_nodes(q, rp_build_counts);
    rp_launch(q, rp_build_counts);
}

static int rp_query(redis_engine_t *re, const gw_engine_reply_t *reply, const char *name,
                    size_t len, bool is_first_server, nl_loop_post_cb run)
{
    if (atomic_load_explicit(&re->is_closed, memory_order_relaxed))
        return -ESHUTDOWN;
    rp_query_t *q = rp_query_new(re, reply, name, len);
    if (!q)
        return -ENOMEM;
    if (is_first_server)
        q->shard = 0;
    int err = nl_loop_post(re->loop, run, q);
    if (err < 0)
        free(q);
    return err;
}

int re_presence(gw_engine_t *e, const char *chan, size_t len, const gw_engine_reply_t *reply)
{
    return rp_query((redis_engine_t *)e, reply, chan, len, false, rp_run_presence);
}

int re_online(gw_engine_t *e, const char *user, size_t len, const gw_engine_reply_t *reply)
{
    return rp_query((redis_engine_t *)e, reply, user, len, false, rp_run_user);
}

int re_online_counts(gw_engine_t *e, const gw_engine_reply_t *reply)
{
    return rp_query((redis_engine_t *)e, reply, "", 0, true, rp_run_counts);
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
    bool is_mine = (size_t)(sp1 - p) == strlen(re->node->node_id) &&
                   memcmp(p, re->node->node_id, (size_t)(sp1 - p)) == 0;
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
        if (nl_loop_post(re->node->loops[target].loop, gw_presence_event_run, ref) < 0)
            gw_event_unref(ref);
    }
    gw_event_unref(ev);
    return true;
}
