/*
 * gw_engine_redis_query: presence and online status read back from Redis, for the Redis
 * engine (issue 18): GET /api/presence, /api/online and PresenceRequest on any node see every
 * node's clients. gw_engine_redis_presence.c writes what is read here (its header has the
 * keys). A query runs on the engine thread (E) as a few commands, each step's reply feeding
 * the next; entries of nodes no longer in herald:nodes are dropped from the answer and
 * deleted. The answer is posted to the asking loop. The live nodes themselves, with their
 * connections, answer GET /api/nodes (the admin console's cluster view).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_engine_redis_int.h"
#include "gw_state.h"
#include "gw_redis_schema.h"
#include "netlib/nl_common.h"

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
    uint64_t *expires_ms; /* the nodes query: each live node's score, when it expires */
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
    free(q->expires_ms);
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
    /* Detached: the IO loops are stopping (then freed), and nobody there waits (as pub_answer). */
    if (q->re->is_detached) {
        gw_engine_reply_drop(&q->reply);
        rp_query_free(q);
        free(a);
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
    int err = !st ? -ENOMEM : !sh->is_ready ? -EAGAIN : 0;
    if (err == 0)
        err = gw_redis_link_command(sh->link, rp_on_step, st, argc, argv, lens);
    if (err < 0) {
        free(st);
        /* -EBUSY (max_pending in flight) reaches the asker as busy, retry; down as EAGAIN. */
        q->status = err == -ENOTCONN ? -EAGAIN : err;
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
            re_presence_send(q->re, q->shard, 3, argv, NULL);
        }
    }
}

static void rp_take_presence_nodes(rp_query_t *q, const redisReply *r)
{
    rp_take_nodes(q, r);
    if (q->status == 0) {
        char key[RE_KEY_MAX];
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
    char key[RE_KEY_MAX];
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
        const char *nodes[GW_FANOUT_MAX_LOOPS];
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
            if (!is_listed && o->r.n_nodes < GW_FANOUT_MAX_LOOPS)
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
    char key[RE_KEY_MAX];
    char ls[RE_KEY_MAX];
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

/* --- nodes ---------------------------------------------------------------------------------- */

/* ZRANGEBYSCORE ... WITHSCORES: member, score, member, score. */
static void rp_take_scored_nodes(rp_query_t *q, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        q->status = -EIO;
        return;
    }
    size_t n = r->elements / 2;
    q->nodes = calloc(n ? n : 1, sizeof(*q->nodes));
    q->expires_ms = calloc(n ? n : 1, sizeof(*q->expires_ms));
    if (!q->nodes || !q->expires_ms) {
        q->status = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = r->element[2 * i];
        const redisReply *sc = r->element[2 * i + 1];
        if (m->type != REDIS_REPLY_STRING || sc->type != REDIS_REPLY_STRING)
            continue;
        if ((q->nodes[q->n_nodes] = rp_dup(m->str, m->len)) == NULL)
            continue;
        /* A score is a double as text; an expiry in ms fits one exactly. */
        q->expires_ms[q->n_nodes++] = (uint64_t)strtod(sc->str, NULL);
    }
}

static int rp_cmp_node(const void *a, const void *b)
{
    return strcmp(((const gw_engine_node_t *)a)->node, ((const gw_engine_node_t *)b)->node);
}

/* The live nodes, each with the connections of its latest heartbeat in herald:nc (0 when its
 * first heartbeat's HSET has not landed yet). */
static void rp_build_nodes(rp_query_t *q, gw_engine_result_t *res, void **scratch)
{
    typedef struct {
        gw_engine_nodes_t r;
        gw_engine_node_t nodes[];
    } out_t;
    out_t *o = calloc(1, sizeof(*o) + sizeof(o->nodes[0]) * (q->n_nodes ? q->n_nodes : 1));
    if (!o) {
        res->status = -ENOMEM;
        return;
    }
    for (uint32_t i = 0; i < q->n_nodes; i++) {
        gw_engine_node_t *n = &o->nodes[o->r.n_nodes++];
        *n = (gw_engine_node_t){.node = q->nodes[i], .expires_ms = q->expires_ms[i]};
        for (uint32_t k = 0; k < q->n_fields; k++)
            if (strcmp(q->fields[k], q->nodes[i]) == 0)
                n->connections = strtoull(q->values[k], NULL, 10);
    }
    qsort(o->nodes, o->r.n_nodes, sizeof(o->nodes[0]), rp_cmp_node);
    o->r.nodes = o->nodes;
    o->r.self = q->re->host.node_id;
    res->data = &o->r;
    *scratch = o;
}

static void rp_run_nodes(void *arg)
{
    rp_query_t *q = arg;
    char now[24];
    snprintf(now, sizeof(now), "%" PRIu64, nl_wall_ms());
    const char *zr[] = {"ZRANGEBYSCORE", GW_REDIS_NODES, now, "+inf", "WITHSCORES"};
    rp_step(q, 5, zr, NULL, rp_take_scored_nodes, rp_build_nodes);
    const char *nc[] = {"HGETALL", GW_REDIS_NODE_CONNS};
    rp_step(q, 2, nc, NULL, rp_take_hash, rp_build_nodes);
    rp_launch(q, rp_build_nodes);
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

int re_nodes(gw_engine_t *e, const gw_engine_reply_t *reply)
{
    return rp_query((redis_engine_t *)e, reply, "", 0, true, rp_run_nodes);
}
