/*
 * gw_presence_mem: the memory engine's presence and online queries. See gw_presence_mem.h.
 *
 * A query's parts are written each by its own loop into its own slot; the atomic remaining
 * count (release on each decrement, acquire by the last) orders every slot before the merge,
 * so the merge reads them without a lock and ThreadSanitizer agrees (as gw_stats_collect).
 * Everything the answer points to (client list, client ids, merged names) lives in the query
 * and is freed after the reply callback returned.
 */
#include "gw_presence_mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_recent.h"
#include "gw_state.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

struct gw_presence_mem_s {
    const gw_engine_host_t *host;
    gw_fanout_t *hub;
    uint32_t n_loops;
    gw_recent_t *shards;    /* one per loop: the users whose hash it owns */
};

typedef enum q_kind_e {
    Q_CHANNEL = 0,
    Q_USER,
    Q_COUNTS,
} q_kind_t;

typedef struct q_s q_t;

/* One loop's share; only that loop writes it. */
typedef struct q_part_s {
    q_t *q;
    uint32_t index;
    int err;
    gw_presence_part_t chan; /* Q_CHANNEL */
    gw_online_part_t user;   /* Q_USER */
    gw_online_list_t users;  /* Q_COUNTS, several loops: the loop's users */
    uint64_t users_here;     /* Q_COUNTS: the loop's users */
    uint64_t conns_here;     /* Q_COUNTS: the loop's authenticated connections */
} q_part_t;

struct q_s {
    gw_presence_mem_t *pm;
    q_kind_t kind;
    gw_engine_reply_t reply;
    uint32_t hash;
    size_t name_len;
    char *name; /* the channel or user asked about, NUL-terminated, after the parts */
    _Atomic uint32_t remaining;
    bool is_offline_read; /* Q_USER: the owner's last-seen table was read */
    uint64_t offline_ms;  /* what it holds for the user; 0: nothing */
    /* The answer, built by the merge. */
    gw_engine_result_t res;
    gw_presence_result_t chan_res;
    gw_online_result_t user_res;
    gw_online_counts_t counts_res;
    const char *nodes[1];
    gw_presence_client_t *clients;
    char *ids; /* the client ids, back to back */
    q_part_t parts[];
};

static uint32_t owner_of(const gw_presence_mem_t *pm, uint32_t hash)
{
    return hash % pm->n_loops;
}

/* --- lifecycle ---------------------------------------------------------------------------- */

int gw_presence_mem_new(gw_presence_mem_t **out, const gw_engine_host_t *host)
{
    gw_presence_mem_t *pm = calloc(1, sizeof(*pm));
    if (!pm)
        return -ENOMEM;
    pm->host = host;
    pm->hub = host->fanout;
    pm->n_loops = host->fanout->n_loops;
    pm->shards = calloc(pm->n_loops, sizeof(*pm->shards));
    if (!pm->shards) {
        free(pm);
        return -ENOMEM;
    }
    const gw_config_t *cfg = host->cfg;
    /* The node-wide limit, shared evenly: users spread over the owners by hash. */
    uint32_t per_shard = (uint32_t)((cfg->presence_last_seen_max + pm->n_loops - 1) / pm->n_loops);
    for (uint32_t i = 0; i < pm->n_loops; i++) {
        if (gw_recent_init(&pm->shards[i], per_shard, cfg->presence_last_seen_ttl_ms) < 0) {
            gw_presence_mem_free(pm);
            return -ENOMEM;
        }
    }
    *out = pm;
    return 0;
}

void gw_presence_mem_free(gw_presence_mem_t *pm)
{
    if (!pm)
        return;
    for (uint32_t i = 0; pm->shards && i < pm->n_loops; i++)
        gw_recent_deinit(&pm->shards[i]);
    free(pm->shards);
    free(pm);
}

uint64_t gw_presence_mem_records(const gw_presence_mem_t *pm, uint32_t loop_index)
{
    return gw_recent_count(&pm->shards[loop_index]);
}

/* --- last seen ---------------------------------------------------------------------------- */

typedef struct offline_req_s {
    gw_presence_mem_t *pm;
    uint64_t at_ms;
    uint32_t hash;
    uint32_t len;
    char user[];
} offline_req_t;

static void offline_put(gw_presence_mem_t *pm, uint32_t shard, const char *user, size_t len,
                        uint32_t hash, uint64_t at_ms)
{
    /* Reports from different loops may arrive out of order: an older one does not move the
     * time back, but renews the record all the same. */
    gw_recent_t *t = &pm->shards[shard];
    uint64_t now_ms = nl_wall_ms();
    gw_recent_val_t v = {.a = at_ms};
    gw_recent_val_t old;
    if (gw_recent_get(t, user, len, hash, now_ms, &old) && old.a > at_ms)
        v.a = old.a;
    int err = gw_recent_put(t, user, len, hash, &v, now_ms);
    if (err < 0)
        NL_LOG(NL_WARN, "last_seen_lost", "err=%s", nl_strerror(err));
}

static void offline_run(void *arg)
{
    offline_req_t *req = arg;
    offline_put(req->pm, gw_fanout_loop_current()->index, req->user, req->len, req->hash,
                req->at_ms);
    free(req);
}

void gw_presence_mem_offline(gw_presence_mem_t *pm, uint32_t loop_index, const char *user,
                             size_t len, uint64_t at_ms)
{
    uint32_t hash = gw_online_hash(user, len);
    uint32_t owner = owner_of(pm, hash);
    if (owner == loop_index) {
        offline_put(pm, owner, user, len, hash, at_ms);
        return;
    }
    offline_req_t *req = malloc(sizeof(*req) + len);
    if (req) {
        req->pm = pm;
        req->at_ms = at_ms;
        req->hash = hash;
        req->len = (uint32_t)len;
        memcpy(req->user, user, len);
        if (gw_fanout_post(pm->hub, owner, offline_run, req) == 0)
            return;
        free(req);
    }
    NL_LOG(NL_WARN, "last_seen_lost", "err=%s", nl_strerror(-ENOMEM));
}

void gw_presence_mem_refresh(gw_presence_mem_t *pm, const gw_presence_batch_t *batch)
{
    gw_recent_trim(&pm->shards[batch->loop_index], nl_wall_ms());
}

/* --- queries: the loops' parts ------------------------------------------------------------ */

static void q_finish(q_t *q);

static void q_part_done(q_t *q)
{
    if (atomic_fetch_sub_explicit(&q->remaining, 1, memory_order_acq_rel) == 1)
        q_finish(q);
}

/* On IO loop part->index: its share. */
static void q_part_run(void *arg)
{
    q_part_t *part = arg;
    q_t *q = part->q;
    const gw_engine_host_t *host = q->pm->host;
    switch (q->kind) {
    case Q_CHANNEL:
        /* A client that hung up waits for nothing: its query costs no walk of the channel. */
        part->err = gw_cancel_is_set(q->reply.cancel)
                        ? -ECANCELED
                        : host->ops->presence_part(host->arg, part->index, q->name, q->name_len,
                                                   &part->chan);
        break;
    case Q_USER:
        host->ops->online_part(host->arg, part->index, q->name, q->name_len, &part->user);
        break;
    case Q_COUNTS:
        part->err =
            host->ops->counts_part(host->arg, part->index, &part->users_here, &part->conns_here,
                                   q->pm->n_loops > 1 ? &part->users : NULL);
        break;
    }
    q_part_done(q);
}

static void q_free(q_t *q)
{
    for (uint32_t i = 0; i < q->pm->n_loops; i++) {
        gw_online_list_free(&q->parts[i].chan.users);
        free(q->parts[i].chan.clients);
        gw_online_list_free(&q->parts[i].users);
    }
    free(q->clients);
    free(q->ids);
    free(q);
}

static int q_start(gw_presence_mem_t *pm, q_kind_t kind, const char *name, size_t len,
                   const gw_engine_reply_t *reply)
{
    if (!gw_fanout_here(pm->hub) && pm->host->ops->is_stopping(pm->host->arg))
        return -ESHUTDOWN;
    uint32_t n = pm->n_loops;
    q_t *q = calloc(1, sizeof(*q) + sizeof(q->parts[0]) * n + len + 1);
    if (!q)
        return -ENOMEM;
    q->pm = pm;
    q->kind = kind;
    q->reply = *reply;
    q->name = (char *)&q->parts[n];
    memcpy(q->name, name, len);
    q->name[len] = '\0';
    q->name_len = len;
    q->hash = gw_online_hash(name, len);
    atomic_init(&q->remaining, n);
    for (uint32_t i = 0; i < n; i++) {
        q->parts[i].q = q;
        q->parts[i].index = i;
    }
    for (uint32_t i = 0; i < n; i++) {
        int err = gw_fanout_post(pm->hub, i, q_part_run, &q->parts[i]);
        if (err < 0) {
            /* That slot stays empty and is counted as failed; the query still completes. */
            q->parts[i].err = err;
            q_part_done(q);
        }
    }
    return 0;
}

/* --- queries: the merge ------------------------------------------------------------------- */

static int merge_channel(q_t *q)
{
    gw_presence_result_t *r = &q->chan_res;
    uint32_t n = q->pm->n_loops;
    uint64_t listed = 0;
    uint64_t limit = 0;
    gw_online_list_t *lists[GW_FANOUT_MAX_LOOPS] = {0};
    for (uint32_t i = 0; i < n; i++) {
        r->num_clients += q->parts[i].chan.num_clients;
        listed += q->parts[i].chan.n_clients;
        lists[i] = &q->parts[i].chan.users;
        if (q->parts[i].chan.limit > limit)
            limit = q->parts[i].chan.limit; /* the same on every loop but during a reload */
    }
    int64_t users = gw_online_list_distinct(lists, n);
    if (users < 0)
        return (int)users;
    r->num_users = (uint64_t)users;
    if (listed > limit)
        listed = limit;
    size_t id_cap = GW_CONFIG_NAME_MAX + 24;
    if (listed > 0) {
        q->clients = calloc(listed, sizeof(*q->clients));
        q->ids = malloc(listed * id_cap);
        if (!q->clients || !q->ids)
            return -ENOMEM;
    }
    for (uint32_t i = 0; i < n && r->n_clients < listed; i++) {
        const gw_presence_part_t *p = &q->parts[i].chan;
        for (uint32_t k = 0; k < p->n_clients && r->n_clients < listed; k++) {
            gw_presence_client_t *c = &q->clients[r->n_clients];
            char *id = q->ids + (size_t)r->n_clients * id_cap;
            size_t unused;
            snprintf(id, id_cap, "%s-%" PRIu64, q->pm->host->node_id, p->clients[k].conn_id);
            c->user = gw_online_list_name(&p->users, p->clients[k].user_off, &unused);
            c->client_id = id;
            c->connected_at_ms = p->clients[k].connected_at_ms;
            r->n_clients++;
        }
    }
    r->chan = q->name;
    r->clients = q->clients;
    r->is_truncated = r->n_clients < r->num_clients;
    q->res.data = r;
    return 0;
}

static int merge_user(q_t *q)
{
    gw_online_result_t *r = &q->user_res;
    r->user = q->name;
    r->user_len = q->name_len;
    r->since_ms = UINT64_MAX;
    for (uint32_t i = 0; i < q->pm->n_loops; i++) {
        const q_part_t *p = &q->parts[i];
        if (p->user.connections == 0)
            continue;
        r->connections += p->user.connections;
        if (p->user.since_ms < r->since_ms)
            r->since_ms = p->user.since_ms;
        if (p->user.last_seen_ms > r->last_seen_ms)
            r->last_seen_ms = p->user.last_seen_ms;
    }
    if (r->connections > 0) {
        q->nodes[0] = q->pm->host->node_id;
        r->nodes = q->nodes;
        r->n_nodes = 1;
    } else {
        r->since_ms = 0;
        r->last_seen_ms = q->offline_ms;
    }
    q->res.data = r;
    return 0;
}

static int merge_counts(q_t *q)
{
    gw_online_counts_t *r = &q->counts_res;
    uint32_t n = q->pm->n_loops;
    gw_online_list_t *lists[GW_FANOUT_MAX_LOOPS] = {0};
    for (uint32_t i = 0; i < n; i++) {
        r->connections += q->parts[i].conns_here;
        r->users += q->parts[i].users_here;
        lists[i] = &q->parts[i].users;
    }
    /* One loop's table holds each user once; several loops' lists overlap where a user is
     * connected through more than one. */
    if (n > 1) {
        int64_t users = gw_online_list_distinct(lists, n);
        if (users < 0)
            return (int)users;
        r->users = (uint64_t)users;
    }
    q->res.data = r;
    return 0;
}

static void q_reply_run(void *arg)
{
    q_t *q = arg;
    q->reply.cb(&q->reply, &q->res);
    q_free(q);
}

/* On the owner of a user found on no loop: its last-seen record, then the answer. */
static void q_offline_run(void *arg)
{
    q_t *q = arg;
    gw_recent_val_t v;
    if (gw_recent_get(&q->pm->shards[gw_fanout_loop_current()->index], q->name, q->name_len,
                      q->hash, nl_wall_ms(), &v))
        q->offline_ms = v.a;
    q_finish(q);
}

/* A user with no connection left: its last-seen record is read on its owner only now, after
 * the loops answered. A loop that saw the user's last connection close posted the record to
 * the owner before it answered, so that post is in the owner's queue before this one; read
 * together with the loops' answers, it could be missed by a query that crossed it. Returns
 * whether the read went out (the answer then waits for it). */
static bool q_read_offline(q_t *q)
{
    uint64_t connections = 0;
    for (uint32_t i = 0; i < q->pm->n_loops; i++)
        connections += q->parts[i].user.connections;
    if (connections > 0)
        return false;
    int err = gw_fanout_post(q->pm->hub, owner_of(q->pm, q->hash), q_offline_run, q);
    return err == 0; /* without the post, the answer says "not known" */
}

/* On the thread that brought the count to zero (an IO loop, or the caller when no post went
 * out), or on the owner after its last-seen read: merges and answers. */
static void q_finish(q_t *q)
{
    int err = 0;
    for (uint32_t i = 0; i < q->pm->n_loops && err == 0; i++)
        err = q->parts[i].err;
    if (err == 0 && q->kind == Q_USER && !q->is_offline_read) {
        q->is_offline_read = true;
        if (q_read_offline(q))
            return;
    }
    if (err == 0)
        err = q->kind == Q_CHANNEL ? merge_channel(q)
              : q->kind == Q_USER  ? merge_user(q)
                                   : merge_counts(q);
    q->res.status = err;
    if (err < 0)
        q->res.data = NULL;
    gw_fanout_loop_t *cur = gw_fanout_loop_current();
    if (q->reply.loop == NULL || (cur && q->reply.loop == cur->loop)) {
        q_reply_run(q);
        return;
    }
    int perr = gw_fanout_post_to(q->pm->hub, q->reply.loop, q_reply_run, q);
    if (perr < 0) {
        /* Answering here would run the callback on the wrong thread: the answer is lost. */
        NL_LOG(NL_ERROR, "presence_reply_lost", "err=%s", nl_strerror(perr));
        q_free(q);
    }
}

int gw_presence_mem_channel(gw_presence_mem_t *pm, const char *chan, size_t len,
                            const gw_engine_reply_t *reply)
{
    return q_start(pm, Q_CHANNEL, chan, len, reply);
}

int gw_presence_mem_user(gw_presence_mem_t *pm, const char *user, size_t len,
                         const gw_engine_reply_t *reply)
{
    return q_start(pm, Q_USER, user, len, reply);
}

int gw_presence_mem_counts(gw_presence_mem_t *pm, const gw_engine_reply_t *reply)
{
    return q_start(pm, Q_COUNTS, "", 0, reply);
}
