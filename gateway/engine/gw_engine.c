/*
 * gw_engine: what every engine shares: epochs, the requests that travel to an engine and back,
 * and the rule that an answer follows the messages batched before it. See gw_engine.h.
 *
 * Why an answer goes out right after the batch for its loop: a poster's posts run in order, so
 * a join answer posted after the batch lands after every message the engine sent that loop
 * before the join took effect, and before every later one (gw_engine.h's contract). A history
 * answer the same way, up to its latest offset.
 */
#include "gw_engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

uint64_t gw_engine_epoch_seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
        seed = nl_now_ns() ^ ((uint64_t)getpid() << 32);
    return seed;
}

const char *gw_recovery_str(gw_recovery_t r)
{
    static const char *const names[GW_RECOVERY_RESULTS] = {
        [GW_RECOVERY_RECOVERED] = "recovered",     [GW_RECOVERY_EPOCH_CHANGED] = "epoch_changed",
        [GW_RECOVERY_NOT_COVERED] = "not_covered", [GW_RECOVERY_NO_HISTORY] = "no_history",
        [GW_RECOVERY_TOO_LARGE] = "too_large",
    };
    return (unsigned)r < GW_RECOVERY_RESULTS ? names[r] : "unknown";
}

/* --- cancel flags ------------------------------------------------------------------------- */

gw_cancel_t *gw_cancel_new(void)
{
    gw_cancel_t *c = malloc(sizeof(*c));
    if (c) {
        atomic_init(&c->refs, 1);
        atomic_init(&c->is_cancelled, false);
    }
    return c;
}

gw_cancel_t *gw_cancel_ref(gw_cancel_t *c)
{
    if (c)
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}

void gw_cancel_unref(gw_cancel_t *c)
{
    /* acq_rel, as gw_msg_unref: the last holder sees every other holder's reads done. */
    if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        free(c);
}

/* --- publish ------------------------------------------------------------------------------ */

gw_engine_pub_t *gw_engine_pub_new(void *engine, const gw_engine_msg_t *m, uint32_t hash,
                                   const gw_engine_reply_t *reply)
{
    gw_engine_pub_t *p = malloc(sizeof(*p) + m->chan_len + 1 + m->key_len + m->len);
    if (!p)
        return NULL;
    p->engine = engine;
    p->reply = *reply;
    memset(&p->result, 0, sizeof(p->result));
    p->hash = hash;
    p->chan_len = (uint32_t)m->chan_len;
    p->key_len = (uint32_t)m->key_len;
    p->payload_len = m->len;
    memcpy(p->data, m->chan, m->chan_len);
    p->data[m->chan_len] = '\0';
    if (m->key_len)
        memcpy(p->data + m->chan_len + 1, m->key, m->key_len);
    if (m->len)
        memcpy(p->data + m->chan_len + 1 + m->key_len, m->payload, m->len);
    return p;
}

void gw_engine_pub_reply_run(void *arg)
{
    gw_engine_pub_t *p = arg;
    p->reply.cb(&p->reply, &p->result);
    free(p);
}

/* --- join --------------------------------------------------------------------------------- */

gw_engine_join_t *gw_engine_join_new(void *engine, uint32_t loop_index, const char *chan,
                                     size_t chan_len, uint32_t hash)
{
    gw_engine_join_t *j = malloc(sizeof(*j) + chan_len + 1);
    if (!j)
        return NULL;
    memset(j, 0, sizeof(*j));
    j->engine = engine;
    j->loop_index = loop_index;
    j->hash = hash;
    j->chan_len = (uint32_t)chan_len;
    memcpy(j->chan, chan, chan_len);
    j->chan[chan_len] = '\0';
    return j;
}

/* On the joining loop. */
static void join_answer_run(void *arg)
{
    gw_engine_join_t *j = arg;
    gw_fanout_loop_t *fl = gw_fanout_loop_current();
    gw_sub_joined(&fl->subs, j->chan, j->chan_len, j->hash, j->status, j->offset, j->epoch);
    free(j);
}

void gw_engine_join_answer(gw_fanout_t *hub, gw_fanout_outbox_t *out, gw_engine_join_t *j)
{
    gw_fanout_loop_t *here = gw_fanout_here(hub);
    if (here && here->index == j->loop_index) {
        join_answer_run(j);
        return;
    }
    /* Messages already batched for the joiner predate the join: send them first. */
    if (out)
        gw_fanout_outbox_flush_target(out, j->loop_index);
    if (gw_fanout_post(hub, j->loop_index, join_answer_run, j) < 0) {
        NL_LOG(NL_ERROR, "join_reply_lost", "loop=%u", j->loop_index);
        free(j);
    }
}

/* --- history ------------------------------------------------------------------------------ */

gw_engine_hist_t *gw_engine_hist_new(void *engine, uint32_t loop_index, const char *chan,
                                     size_t chan_len, uint32_t hash, uint64_t since, uint64_t epoch,
                                     uint64_t max_bytes, const gw_engine_reply_t *reply)
{
    gw_engine_hist_t *h = calloc(1, sizeof(*h) + chan_len + 1);
    if (!h)
        return NULL;
    h->engine = engine;
    h->reply = *reply;
    h->loop_index = loop_index;
    h->hash = hash;
    h->epoch = epoch;
    h->max_bytes = max_bytes;
    memcpy(h->chan, chan, chan_len);
    h->answer.chan = h->chan;
    h->answer.chan_len = chan_len;
    h->answer.since = since;
    return h;
}

int gw_engine_hist_add(gw_engine_hist_t *h, gw_msg_t *m)
{
    if (h->n_msgs == h->cap_msgs) {
        uint32_t cap = h->cap_msgs ? h->cap_msgs * 2 : 16;
        gw_msg_t **v = realloc(h->msgs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        h->msgs = v;
        h->cap_msgs = cap;
    }
    h->msgs[h->n_msgs++] = gw_msg_ref(m);
    return 0;
}

void gw_engine_hist_free(gw_engine_hist_t *h)
{
    for (uint32_t i = 0; i < h->n_msgs; i++)
        gw_msg_unref(h->msgs[i]);
    free(h->msgs);
    free(h);
}

/* On the asking loop: the answer, then the references go. */
static void hist_answer_run(void *arg)
{
    gw_engine_hist_t *h = arg;
    h->answer.msgs = h->msgs;
    h->answer.n_msgs = h->n_msgs;
    gw_engine_result_t res = {.status = h->status, .data = &h->answer};
    h->reply.cb(&h->reply, &res);
    gw_engine_hist_free(h);
}

void gw_engine_hist_answer(gw_fanout_t *hub, gw_fanout_outbox_t *out, gw_engine_hist_t *h)
{
    gw_fanout_loop_t *here = gw_fanout_here(hub);
    if (here && here->index == h->loop_index) {
        hist_answer_run(h);
        return;
    }
    if (out)
        gw_fanout_outbox_flush_target(out, h->loop_index);
    if (gw_fanout_post(hub, h->loop_index, hist_answer_run, h) < 0) {
        /* The subscriber would wait for ever; answering on this thread is not allowed. */
        NL_LOG(NL_ERROR, "history_reply_lost", "loop=%u", h->loop_index);
        gw_engine_hist_free(h);
    }
}
