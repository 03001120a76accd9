/*
 * failover_run: one Redis failover under load. See failover_run.h.
 *
 * Threads: the publisher and each subscriber own their client; the main thread reads only
 * their atomics while they run, and everything else once they are joined.
 */
#include "failover_run.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "herald_client.h"
#include "herald_harness.h"
#include "proto_frame.h"
#include "redis_harness.h"

#define FO_CHAN "h:live"
#define FO_MASTER "herald"
#define FO_API_KEY "failover-api-key"
#define FO_SENTINELS 3
#define FO_WAIT_MS 20000
#define FO_REPORTS_MAX 256

/* --- the publisher -------------------------------------------------------------------------- */

typedef struct pub_rec_s {
    uint64_t seq;
    uint64_t offset; /* 0: local only, or refused */
    char epoch[17];
    int err; /* 0, or the Error code (refused) */
    int64_t sent_ms;
    int64_t acked_ms;
} pub_rec_t;

typedef struct publisher_s {
    pthread_t thread;
    test_client_t c;
    int rate_per_s;
    pub_rec_t *recs;
    size_t cap;
    _Atomic size_t n;
    _Atomic bool is_stopping;
    char problem[256];
} publisher_t;

/* Publishes p1, p2, ... A publish answered BUSY (its node has no master: history channels
 * are not delivered locally outside the sequence) is sent again, the same payload, at the
 * next tick: it was published nowhere. Any other error leaves the message's fate unknown (it
 * was in flight when the master died), so it is not sent again, which could give one payload
 * two offsets. */
static void *publisher_main(void *arg)
{
    publisher_t *p = arg;
    int64_t interval_ns = 1000000000ll / p->rate_per_s;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    uint64_t seq = 1;
    while (!atomic_load(&p->is_stopping)) {
        size_t n = atomic_load(&p->n);
        if (n == p->cap) {
            snprintf(p->problem, sizeof(p->problem), "the publisher ran out of records");
            break;
        }
        pub_rec_t *r = &p->recs[n];
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "p%" PRIu64, seq);
        *r = (pub_rec_t){.seq = seq, .sent_ms = test_now_ms()};
        int rc = test_client_publish_ex(&p->c, FO_CHAN, payload, (size_t)len, &r->offset, r->epoch,
                                        10000);
        r->acked_ms = test_now_ms();
        if (rc == -EPROTO && p->c.last_err_code >= 0) {
            r->err = p->c.last_err_code;
            r->offset = 0;
            if (r->err != HERALD__ERROR__CODE__BUSY)
                seq++;
        } else if (rc == 0) {
            seq++;
        } else {
            snprintf(p->problem, sizeof(p->problem), "publish %zu: %d: %s", n + 1, rc,
                     test_client_what(&p->c));
            break;
        }
        atomic_store(&p->n, n + 1);
        /* Paced by the clock, one publish in flight: at the rate asked, or as fast as the
         * answers come when they are slower. */
        next.tv_nsec += interval_ns;
        while (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return NULL;
}

/* --- the subscribers ------------------------------------------------------------------------ */

typedef struct got_s {
    uint64_t seq;
    uint64_t offset;
    char epoch[17];
} got_t;

typedef struct report_s {
    char epoch[17];
    uint64_t after;
} report_t;

typedef struct subscriber_s {
    pthread_t thread;
    test_client_t c;
    char epoch[17]; /* where it stands */
    uint64_t last;
    got_t *got;
    size_t n_got;
    size_t cap;
    report_t reports[FO_REPORTS_MAX];
    size_t n_reports;
    _Atomic uint64_t n_reports_atomic;
    _Atomic uint64_t gaps_recovered;
    _Atomic uint64_t received;
    uint64_t unsequenced;
    uint64_t duplicates;
    bool has_fin;
    _Atomic bool is_stopping;
    char problem[256];
} subscriber_t;

static void sub_report(subscriber_t *s)
{
    if (s->n_reports < FO_REPORTS_MAX) {
        report_t *r = &s->reports[s->n_reports++];
        memcpy(r->epoch, s->epoch, 17);
        r->after = s->last;
    }
    atomic_fetch_add(&s->n_reports_atomic, 1);
}

/* Drops the kept Pushes of the channel: a recovery sends them again, or covers them. */
static void sub_drop_kept_pushes(test_client_t *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n_kept; i++) {
        Herald__Frame *f = c->kept[i];
        if (f->body_case == HERALD__FRAME__BODY_PUSH && strcmp(f->push->channel, FO_CHAN) == 0)
            proto_frame_free(f);
        else
            c->kept[k++] = f;
    }
    c->n_kept = k;
}

/* Subscribes again asking for what came after (epoch, last); BUSY (its node without a master)
 * is retried. Returns 0, or -1 with s->problem. */
static int sub_recover(subscriber_t *s)
{
    if (test_client_unsubscribe(&s->c, FO_CHAN, FO_WAIT_MS) != 0) {
        snprintf(s->problem, sizeof(s->problem), "unsubscribe: %s", test_client_what(&s->c));
        return -1;
    }
    sub_drop_kept_pushes(&s->c);
    int64_t deadline = test_now_ms() + FO_WAIT_MS;
    test_sub_ok_t ok;
    for (;;) {
        int rc = test_client_subscribe_from(&s->c, FO_CHAN, s->epoch, s->last, &ok, FO_WAIT_MS);
        if (rc == 0)
            break;
        if (rc != -EPROTO || s->c.last_err_code != HERALD__ERROR__CODE__BUSY ||
            test_ms_left(deadline) == 0) {
            snprintf(s->problem, sizeof(s->problem), "recover from %s/%" PRIu64 ": %s", s->epoch,
                     s->last, test_client_what(&s->c));
            return -1;
        }
        poll(NULL, 0, 50); /* BUSY asks the client to retry shortly */
    }
    if (ok.is_recovered) {
        atomic_fetch_add(&s->gaps_recovered, 1);
        return 0;
    }
    sub_report(s);
    memcpy(s->epoch, ok.epoch, 17);
    s->last = ok.offset;
    return 0;
}

/* "p<seq>" (the payload is not NUL-terminated). */
static bool parse_seq(const uint8_t *data, size_t len, uint64_t *seq)
{
    char buf[32];
    if (len < 2 || len >= sizeof(buf) || data[0] != 'p')
        return false;
    memcpy(buf, data + 1, len - 1);
    buf[len - 1] = '\0';
    char *end = NULL;
    *seq = strtoull(buf, &end, 10);
    return end && *end == '\0' && *seq > 0;
}

/* One Push of the channel. Returns 0, or -1 with s->problem. */
static int sub_on_push(subscriber_t *s, const Herald__Push *p)
{
    uint64_t seq = 0;
    bool is_fin = p->payload.len == 3 && memcmp(p->payload.data, "fin", 3) == 0;
    if (is_fin) {
        seq = 0;
    } else if (!parse_seq(p->payload.data, p->payload.len, &seq)) {
        snprintf(s->problem, sizeof(s->problem), "a payload not from the publisher");
        return -1;
    }
    if (p->offset == 0) {
        s->unsequenced++;
        return 0;
    }
    if (strcmp(p->epoch, s->epoch) != 0) {
        /* The epoch changed: whatever came after our last offset in the old one is gone. */
        sub_report(s);
        snprintf(s->epoch, sizeof(s->epoch), "%s", p->epoch);
        s->last = 0;
    }
    if (p->offset <= s->last) {
        s->duplicates++;
        return 0;
    }
    if (p->offset > s->last + 1)
        return sub_recover(s); /* this Push comes again with the rest, or is covered */
    if (is_fin)
        s->has_fin = true; /* in order: everything before it was handled */
    else if (s->n_got < s->cap) {
        got_t *g = &s->got[s->n_got++];
        g->seq = seq;
        g->offset = p->offset;
        memcpy(g->epoch, p->epoch, 17);
    }
    s->last = p->offset;
    atomic_fetch_add(&s->received, 1);
    return 0;
}

static void *subscriber_main(void *arg)
{
    subscriber_t *s = arg;
    int64_t idle_since = 0;
    while (!s->has_fin) {
        Herald__Frame *f = NULL;
        int rc = test_client_recv(&s->c, &f, 100);
        if (rc == -ETIMEDOUT) {
            if (!atomic_load(&s->is_stopping))
                continue;
            /* Stopping: the fin marker may be covered by a report; give up after a quiet 3 s. */
            if (idle_since == 0)
                idle_since = test_now_ms();
            if (test_now_ms() - idle_since > 3000)
                break;
            continue;
        }
        idle_since = 0;
        if (rc != 1) {
            snprintf(s->problem, sizeof(s->problem), "recv: %d: %s", rc, test_client_what(&s->c));
            break;
        }
        int err = 0;
        if (f->body_case == HERALD__FRAME__BODY_PUSH && strcmp(f->push->channel, FO_CHAN) == 0)
            err = sub_on_push(s, f->push);
        proto_frame_free(f);
        if (err < 0)
            break;
    }
    return NULL;
}

/* --- the cluster ---------------------------------------------------------------------------- */

typedef struct cluster_s {
    test_redis_t master;
    test_redis_t replica;
    test_sentinel_t sentinels[FO_SENTINELS];
    test_herald_t *nodes[2];
    char replica_of[8];
    char sentinel_list[128];
} cluster_t;

static void problem(fo_result_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(fo_result_t *r, const char *fmt, ...)
{
    if (r->problem[0])
        return; /* the first one */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->problem, sizeof(r->problem), fmt, ap);
    va_end(ap);
}

static int readyz(const test_herald_t *h)
{
    test_http_resp_t resp;
    if (test_http_request(h->admin_port, "GET", "/readyz", NULL, NULL, 0, 5000, &resp) != 0)
        return -1;
    int status = resp.status;
    test_http_resp_free(&resp);
    return status;
}

static double metric(const test_herald_t *h, const char *family)
{
    double v = -1;
    if (test_metric_sum(h->admin_port, FO_API_KEY, family, NULL, &v) != 0)
        return -1;
    return v;
}

static int cluster_start(cluster_t *cl, fo_result_t *r)
{
    int rc = test_redis_start(&cl->master, 0);
    if (rc == 0) {
        snprintf(cl->replica_of, sizeof(cl->replica_of), "%u", cl->master.port);
        const char *replica[] = {"--replicaof", "127.0.0.1", cl->replica_of, NULL};
        rc = test_redis_start_args(&cl->replica, 0, replica);
    }
    if (rc == 0)
        rc = test_redis_await_replicas(cl->master.port, 1, FO_WAIT_MS);
    if (rc < 0) {
        problem(r, "redis-server: %s", strerror(-rc));
        return rc;
    }
    test_sentinel_opts_t so = {.master_name = FO_MASTER,
                               .master_port = cl->master.port,
                               .quorum = 2,
                               .down_after_ms = 1000,
                               .failover_timeout_ms = 3000};
    size_t len = 0;
    for (int i = 0; i < FO_SENTINELS && rc == 0; i++) {
        rc = test_sentinel_start(&cl->sentinels[i], &so);
        len += (size_t)snprintf(cl->sentinel_list + len, sizeof(cl->sentinel_list) - len,
                                "%s127.0.0.1:%u", i ? "," : "", cl->sentinels[i].port);
    }
    for (int i = 0; i < FO_SENTINELS && rc == 0; i++)
        rc = test_sentinel_await(&cl->sentinels[i], FO_MASTER, NULL, FO_SENTINELS - 1, 1,
                                 FO_WAIT_MS);
    if (rc < 0) {
        problem(r, "redis-sentinel: %s", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < 2 && rc == 0; i++) {
        const char *args[] = {"--insecure",
                              "--engine",
                              "redis",
                              "--sentinels",
                              cl->sentinel_list,
                              "--sentinel-master",
                              FO_MASTER,
                              "--io-threads",
                              "2",
                              "--api-key",
                              FO_API_KEY,
                              "--publish-rate",
                              "0",
                              "--node-id",
                              i ? "nodeb" : "nodea",
                              "--history-rules",
                              "h:*=65536/10m",
                              "--redis-timeout",
                              "1s",
                              NULL};
        test_herald_opts_t ho = {.args = args, .cpu = -1};
        rc = test_herald_start(&cl->nodes[i], &ho);
    }
    if (rc < 0) {
        problem(r, "herald: %s", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < 2; i++) {
        int64_t deadline = test_now_ms() + FO_WAIT_MS;
        while (readyz(cl->nodes[i]) != 200) {
            if (test_ms_left(deadline) == 0) {
                problem(r, "node %c never ready", 'a' + i);
                return -ETIMEDOUT;
            }
            poll(NULL, 0, 10);
        }
    }
    return 0;
}

static void cluster_stop(cluster_t *cl, fo_result_t *r)
{
    for (int i = 0; i < 2; i++) {
        if (!cl->nodes[i])
            continue;
        int rc = test_herald_stop(cl->nodes[i], 0);
        if (rc != 0)
            problem(r, "node %c exited with %d", 'a' + i, rc);
        cl->nodes[i] = NULL;
    }
    for (int i = 0; i < FO_SENTINELS; i++)
        test_sentinel_kill(&cl->sentinels[i]);
    test_redis_kill(&cl->replica);
    test_redis_kill(&cl->master);
}

/* --- the run -------------------------------------------------------------------------------- */

static int sub_start(subscriber_t *s, const test_herald_t *node, const char *user, size_t cap,
                     fo_result_t *r)
{
    s->cap = cap;
    s->got = calloc(cap, sizeof(*s->got));
    if (!s->got)
        return -ENOMEM;
    test_sub_ok_t ok;
    if (test_client_auth(&s->c, node->port, user, FO_WAIT_MS) != 0 ||
        test_client_subscribe_from(&s->c, FO_CHAN, NULL, 0, &ok, FO_WAIT_MS) != 0) {
        problem(r, "%s: %s", user, test_client_what(&s->c));
        free(s->got);
        s->got = NULL;
        return -EIO;
    }
    memcpy(s->epoch, ok.epoch, 17);
    s->last = ok.offset;
    return pthread_create(&s->thread, NULL, subscriber_main, s) == 0 ? 0 : -EAGAIN;
}

static int cmp_got(const void *a, const void *b)
{
    const got_t *x = a;
    const got_t *y = b;
    int c = strcmp(x->epoch, y->epoch);
    return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}

static int cmp_seq(const void *a, const void *b)
{
    const got_t *x = a;
    const got_t *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Every acknowledged publish at subscriber s: received, reported, or missing. */
static void account(const publisher_t *p, subscriber_t *s, fo_sub_t *out, char which,
                    fo_result_t *r)
{
    out->received = atomic_load(&s->received);
    out->unsequenced = s->unsequenced;
    out->gaps_recovered = atomic_load(&s->gaps_recovered);
    out->reports = atomic_load(&s->n_reports_atomic);
    out->duplicates = s->duplicates;
    qsort(s->got, s->n_got, sizeof(*s->got), cmp_got);
    size_t n = atomic_load(&p->n);
    for (size_t i = 0; i < n; i++) {
        const pub_rec_t *pr = &p->recs[i];
        if (pr->offset == 0)
            continue;
        got_t key = {.offset = pr->offset};
        memcpy(key.epoch, pr->epoch, 17);
        const got_t *g = bsearch(&key, s->got, s->n_got, sizeof(*s->got), cmp_got);
        if (g && g->seq == pr->seq) {
            out->acked_received++;
            continue;
        }
        if (g) {
            out->reused++;
            problem(r, "subscriber %c got p%" PRIu64 " under %s/%" PRIu64 ", given to p%" PRIu64,
                    which, g->seq, pr->epoch, pr->offset, pr->seq);
            continue;
        }
        bool is_reported = false;
        for (size_t k = 0; k < s->n_reports && !is_reported; k++)
            is_reported =
                strcmp(s->reports[k].epoch, pr->epoch) == 0 && pr->offset > s->reports[k].after;
        if (is_reported) {
            out->acked_reported++;
        } else {
            out->acked_missing++;
            problem(r, "subscriber %c neither got nor was told of p%" PRIu64 " (%s/%" PRIu64 ")",
                    which, pr->seq, pr->epoch, pr->offset);
        }
    }
    qsort(s->got, s->n_got, sizeof(*s->got), cmp_seq);
    for (size_t i = 1; i < s->n_got; i++)
        if (s->got[i].seq == s->got[i - 1].seq)
            out->twice++;
    if (out->twice)
        problem(r, "subscriber %c got %" PRIu64 " payloads under two offsets", which, out->twice);
    if (out->duplicates)
        problem(r, "subscriber %c got %" PRIu64 " offsets twice", which, out->duplicates);
    if (s->problem[0])
        problem(r, "subscriber %c: %s", which, s->problem);
}

/* An (epoch, offset) the publisher was given twice. */
static void check_publisher(publisher_t *p, fo_result_t *r)
{
    size_t n = atomic_load(&p->n);
    got_t *all = calloc(n ? n : 1, sizeof(*all));
    if (!all)
        return;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->recs[i].offset == 0)
            continue;
        all[k].seq = p->recs[i].seq;
        all[k].offset = p->recs[i].offset;
        memcpy(all[k].epoch, p->recs[i].epoch, 17);
        k++;
    }
    qsort(all, k, sizeof(*all), cmp_got);
    for (size_t i = 1; i < k; i++)
        if (cmp_got(&all[i], &all[i - 1]) == 0)
            problem(r, "p%" PRIu64 " and p%" PRIu64 " were both given %s/%" PRIu64, all[i - 1].seq,
                    all[i].seq, all[i].epoch, all[i].offset);
    free(all);
}

/* Waits (in slices) for the first +switch-master from any sentinel (the one that led the
 * failover says it first) and for each node to be ready after it was not. */
static void await_failover(cluster_t *cl, redisContext **events, int64_t t_kill, fo_result_t *r)
{
    bool was_down[2] = {false, false};
    r->switch_ms = r->ready_ms[0] = r->ready_ms[1] = -1;
    int64_t deadline = test_now_ms() + 3 * FO_WAIT_MS / 2;
    while (r->switch_ms < 0 || r->ready_ms[0] < 0 || r->ready_ms[1] < 0) {
        if (test_ms_left(deadline) == 0) {
            problem(r,
                    "no failover within %d ms (switch %" PRId64 ", ready %" PRId64 "/%" PRId64 ")",
                    3 * FO_WAIT_MS / 2, r->switch_ms, r->ready_ms[0], r->ready_ms[1]);
            return;
        }
        for (int k = 0; k < FO_SENTINELS && r->switch_ms < 0; k++) {
            uint16_t port = 0;
            int rc = events[k] ? test_sentinel_await_switch(events[k], FO_MASTER, &port, 2) : 1;
            if (rc == 0) {
                r->switch_ms = test_now_ms() - t_kill;
                if (port != cl->replica.port)
                    problem(r, "the new master is :%u, not the replica :%u", port,
                            cl->replica.port);
            } else if (rc < 0 && rc != -ETIMEDOUT) {
                problem(r, "reading +switch-master: %s", strerror(-rc));
                redisFree(events[k]);
                events[k] = NULL;
            }
        }
        for (int i = 0; i < 2; i++) {
            if (r->ready_ms[i] >= 0)
                continue;
            int status = readyz(cl->nodes[i]);
            if (status != 200)
                was_down[i] = true;
            else if (was_down[i])
                r->ready_ms[i] = test_now_ms() - t_kill;
        }
    }
}

/* The old master restarts, empty, on its port; Sentinel makes it a replica of the new one.
 * Nothing may change for the clients: no report, no recovered gap, no failover, no reconnect
 * of a node. */
static void old_master_back(cluster_t *cl, publisher_t *p, subscriber_t *subs, fo_result_t *r)
{
    uint64_t reports[2], gaps[2];
    double reconnects[2], failovers[2];
    for (int i = 0; i < 2; i++) {
        reports[i] = atomic_load(&subs[i].n_reports_atomic);
        gaps[i] = atomic_load(&subs[i].gaps_recovered);
        reconnects[i] = metric(cl->nodes[i], "herald_redis_reconnects_total");
        failovers[i] = metric(cl->nodes[i], "herald_redis_failovers_total");
    }
    int64_t t0 = test_now_ms();
    int rc = test_redis_restart(&cl->master);
    if (rc == 0)
        rc = test_redis_await_replicas(cl->replica.port, 1, 3 * FO_WAIT_MS);
    if (rc < 0) {
        problem(r, "the old master did not come back as a replica: %s", strerror(-rc));
        return;
    }
    r->old_master_back_ms = test_now_ms() - t0;
    /* Another second of publishing with the old master in place. */
    size_t n0 = atomic_load(&p->n);
    int64_t deadline = test_now_ms() + FO_WAIT_MS;
    while (atomic_load(&p->n) < n0 + (size_t)p->rate_per_s && test_ms_left(deadline) > 0)
        poll(NULL, 0, 20);
    for (int i = 0; i < 2; i++) {
        bool is_changed = atomic_load(&subs[i].n_reports_atomic) != reports[i] ||
                          atomic_load(&subs[i].gaps_recovered) != gaps[i] ||
                          metric(cl->nodes[i], "herald_redis_reconnects_total") != reconnects[i] ||
                          metric(cl->nodes[i], "herald_redis_failovers_total") != failovers[i];
        if (is_changed) {
            r->changed_at_old_master = true;
            problem(r, "node %c or its subscriber saw the old master come back", 'a' + i);
        }
    }
}

/* The master drops its replica's connection and, with a password set (CONFIG SET is not
 * replicated; the connections already open stay), refuses its reconnects: what the master
 * takes from then on, the replica lacks. */
static void replica_cut_off(cluster_t *cl, fo_result_t *r)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", cl->master.port, tv);
    redisReply *pass = c && !c->err ? redisCommand(c, "CONFIG SET requirepass cut-off") : NULL;
    redisReply *kill = pass ? redisCommand(c, "CLIENT KILL TYPE replica") : NULL;
    if (!pass || pass->type != REDIS_REPLY_STATUS || !kill || kill->type != REDIS_REPLY_INTEGER ||
        kill->integer != 1)
        problem(r, "could not cut the replica off the master");
    if (pass)
        freeReplyObject(pass);
    if (kill)
        freeReplyObject(kill);
    if (c)
        redisFree(c);
    poll(NULL, 0, 100);
}

int fo_run(const fo_opts_t *o, fo_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->first_accepted_ms = r->old_master_back_ms = -1;
    cluster_t cl;
    memset(&cl, 0, sizeof(cl));
    publisher_t pub;
    memset(&pub, 0, sizeof(pub));
    subscriber_t subs[2];
    memset(subs, 0, sizeof(subs));
    bool is_pub_running = false;
    bool is_sub_running[2] = {false, false};
    int rc = cluster_start(&cl, r);
    pub.rate_per_s = o->rate_per_s > 0 ? o->rate_per_s : 100;
    pub.cap = (size_t)pub.rate_per_s * 180 + 1000;
    pub.recs = calloc(pub.cap, sizeof(*pub.recs));
    if (rc == 0 && !pub.recs)
        rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < 2; i++) {
        rc = sub_start(&subs[i], cl.nodes[i], i ? "sub-b" : "sub-a", pub.cap + 16, r);
        is_sub_running[i] = rc == 0;
    }
    if (rc == 0 && test_client_auth(&pub.c, cl.nodes[0]->port, "pub", FO_WAIT_MS) != 0) {
        problem(r, "publisher: %s", test_client_what(&pub.c));
        rc = -EIO;
    }
    if (rc == 0) {
        rc = pthread_create(&pub.thread, NULL, publisher_main, &pub) == 0 ? 0 : -EAGAIN;
        is_pub_running = rc == 0;
    }
    redisContext *events[FO_SENTINELS] = {NULL};
    for (int k = 0; rc == 0 && k < FO_SENTINELS; k++) {
        events[k] = test_sentinel_subscribe(&cl.sentinels[k], NULL);
        if (!events[k]) {
            problem(r, "could not subscribe to a sentinel's events");
            rc = -EIO;
        }
    }
    int64_t t_kill = 0;
    int64_t t_cut = 0;
    if (rc == 0) {
        poll(NULL, 0, o->before_ms);
        if (o->is_verbose)
            fprintf(stderr, "failover_run: %zu published; SIGKILL to the master\n",
                    atomic_load(&pub.n));
        if (o->is_replica_behind) {
            t_cut = test_now_ms();
            replica_cut_off(&cl, r);
        }
        t_kill = test_now_ms();
        test_redis_kill(&cl.master);
        await_failover(&cl, events, t_kill, r);
        /* A node slow to follow: its log says where the time went. */
        for (int i = 0; i < 2 && o->is_verbose; i++)
            if (r->switch_ms >= 0 && r->ready_ms[i] > r->switch_ms + 500)
                test_herald_dump_log(cl.nodes[i], 6000);
        if (o->is_verbose)
            fprintf(stderr,
                    "failover_run: +switch-master after %" PRId64 " ms, nodes ready after %" PRId64
                    "/%" PRId64 " ms\n",
                    r->switch_ms, r->ready_ms[0], r->ready_ms[1]);
        poll(NULL, 0, o->after_ms);
        if (o->is_old_master_back && !r->problem[0])
            old_master_back(&cl, &pub, subs, r);
    }
    for (int k = 0; k < FO_SENTINELS; k++)
        if (events[k])
            redisFree(events[k]);
    if (is_pub_running) {
        atomic_store(&pub.is_stopping, true);
        pthread_join(pub.thread, NULL);
        if (pub.problem[0])
            problem(r, "publisher: %s", pub.problem);
        /* The marker that tells the subscribers everything was sent. */
        if (test_client_publish(&pub.c, FO_CHAN, "fin", 3, NULL, FO_WAIT_MS) != 0)
            problem(r, "the last publish: %s", test_client_what(&pub.c));
    }
    for (int i = 0; i < 2; i++) {
        if (!is_sub_running[i])
            continue;
        atomic_store(&subs[i].is_stopping, true);
        pthread_join(subs[i].thread, NULL);
    }
    size_t n = atomic_load(&pub.n);
    r->published = n;
    bool is_outage = false; /* a publish after the kill went unanswered with an offset */
    for (size_t i = 0; i < n; i++) {
        const pub_rec_t *pr = &pub.recs[i];
        if (pr->err == HERALD__ERROR__CODE__BUSY)
            r->refused++;
        else if (pr->err)
            r->unknown++;
        else if (pr->offset == 0)
            r->local_only++;
        else
            r->acked++;
        if (t_cut && pr->offset && pr->acked_ms >= t_cut && pr->sent_ms < t_kill)
            r->unreplicated++;
        if (!t_kill || pr->sent_ms < t_kill)
            continue;
        if (pr->offset == 0)
            is_outage = true;
        else
            r->acked_after_kill++;
        /* The first publish given an offset once the outage showed. */
        if (pr->offset && is_outage && r->first_accepted_ms < 0)
            r->first_accepted_ms = pr->acked_ms - t_kill;
    }
    if (rc == 0) {
        check_publisher(&pub, r);
        for (int i = 0; i < 2; i++) {
            account(&pub, &subs[i], &r->sub[i], (char)('a' + i), r);
            if (!subs[i].has_fin && !r->problem[0])
                problem(r, "subscriber %c never got the last message", 'a' + i);
            r->failovers[i] = metric(cl.nodes[i], "herald_redis_failovers_total");
            r->epoch_resets += metric(cl.nodes[i], "herald_redis_epoch_resets_total");
        }
        /* More than one epoch change: the logs say which node forced which. */
        for (int i = 0; i < 2 && o->is_verbose && r->epoch_resets > 1; i++)
            test_herald_dump_log(cl.nodes[i], 8000);
    }
    test_client_close(&pub.c);
    for (int i = 0; i < 2; i++) {
        test_client_close(&subs[i].c);
        free(subs[i].got);
    }
    free(pub.recs);
    cluster_stop(&cl, r);
    return rc;
}
