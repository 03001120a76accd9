/*
 * gw_session_recover: Subscribe{recover}: a client that comes back with the (epoch, offset) of
 * the last message it saw gets the ones it missed, then the live ones, with no gap and no
 * duplicate (PROTOCOL.md section 9).
 *
 * How it stays exact while publishes keep arriving: the subscriber joins its channel's entry as
 * a RECOVERING member (gw_fanout.h), which fan-out passes over, and the loop asks the engine for
 * the history after its offset. The engine answers like a join: after every message it sent
 * this loop up to the answer's latest offset. So when the answer arrives, the loop has just
 * delivered (to everyone else) exactly the messages up to that offset: the subscriber gets
 * SubscribeOk{offset = its own}, then the missed messages as Push frames (the shared blocks,
 * queued by reference), then becomes an ordinary member for what comes next. Answers that
 * cannot recover say SubscribeOk{recovered = false} with the live offset.
 *
 * Shortcuts on an entry that is already live here: a client that missed nothing, or whose
 * epoch is not the channel's, is answered at once.
 *
 * Withdrawn requests: the answer is matched to its request through a per-loop table keyed by
 * (connection id, channel), holding the request's id and a ticket unique on the loop. An
 * Unsubscribe (or a failed join) removes the record and answers the Subscribe itself; a closed
 * connection leaves it to its answer, which always comes (the engine contract). An answer
 * whose record is gone, or holds another ticket (the client unsubscribed and subscribed again
 * meanwhile: answers come in request order, so that later request's answer is still to come),
 * is dropped.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gw_engine.h"
#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_session_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* A recovery on its way: keyed by the connection id's 8 bytes, then the channel name. */
typedef struct recover_rec_s {
    uint64_t ticket;
    uint64_t req_id; /* the Subscribe's */
    gw_chankey_t key;
    char name[];
} recover_rec_t;

#define REC_ID_BYTES sizeof(uint64_t)

static recover_rec_t *rec_of(gw_chankey_t *k)
{
    return k ? (recover_rec_t *)((char *)k - offsetof(recover_rec_t, key)) : NULL;
}

/* Builds the key bytes (connection id, channel) into buf (REC_ID_BYTES + len bytes). */
static size_t rec_key(char *buf, uint64_t conn_id, const char *chan, size_t len)
{
    memcpy(buf, &conn_id, REC_ID_BYTES);
    memcpy(buf + REC_ID_BYTES, chan, len);
    return REC_ID_BYTES + len;
}

static recover_rec_t *rec_find(gw_loop_t *lp, uint64_t conn_id, const char *chan, size_t len)
{
    char key[REC_ID_BYTES + GW_CHANNEL_NAME_MAX_LIMIT];
    if (len > GW_CHANNEL_NAME_MAX_LIMIT)
        return NULL;
    size_t klen = rec_key(key, conn_id, chan, len);
    return rec_of(gw_chantab_find(&lp->recovering, key, klen, gw_chantab_hash(key, klen)));
}

static void rec_free(gw_loop_t *lp, recover_rec_t *r)
{
    gw_chantab_remove(&lp->recovering, &r->key);
    free(r);
}

/* Records a recovery of (conn_id, chan). Returns it, or NULL without memory. */
static recover_rec_t *rec_new(gw_loop_t *lp, uint64_t conn_id, const char *chan, size_t len,
                              uint64_t req_id)
{
    recover_rec_t *r = malloc(sizeof(*r) + REC_ID_BYTES + len);
    if (!r)
        return NULL;
    size_t klen = rec_key(r->name, conn_id, chan, len);
    r->key.hash = gw_chantab_hash(r->name, klen);
    r->key.name_len = (uint16_t)klen;
    r->key.user = 0;
    r->ticket = ++lp->recover_seq;
    r->req_id = req_id;
    if (gw_chantab_insert(&lp->recovering, &r->key) < 0) {
        free(r);
        return NULL;
    }
    return r;
}

void gw_session_recover_deinit(gw_loop_t *lp)
{
    gw_chantab_t *t = &lp->recovering;
    for (uint32_t k = 0; t->slots && k <= t->mask; k++)
        free(rec_of(gw_chantab_slot(t, k)));
    gw_chantab_deinit(t);
}

/* Ends a recovery without an answer from the engine: the record goes, the Subscribe is
 * answered with err. The member must already be out of the channel. */
static void recover_abort(gw_loop_t *lp, gw_session_t *s, const char *chan, size_t len,
                          gw_proto_err_t err)
{
    recover_rec_t *r = rec_find(lp, nl_conn_id(s->member.conn), chan, len);
    gw_session_presence_unlisten(lp, s, chan, len); /* join/leave events were asked with it */
    if (!r)
        return;
    uint64_t req_id = r->req_id;
    rec_free(lp, r);
    gw_session_error(lp, s, req_id, err, err == GW_PERR_BUSY ? 1000 : 0);
    gw_session_wake(lp, s); /* requests of the channel may wait for this answer */
}

void gw_session_recover_withdrawn(gw_loop_t *lp, gw_session_t *s, const char *chan, size_t len)
{
    recover_abort(lp, s, chan, len, GW_PERR_CANCELLED);
}

void gw_session_recover_failed(gw_loop_t *lp, gw_session_t *s, const char *chan, size_t len,
                               int status)
{
    recover_abort(lp, s, chan, len,
                  status == -EAGAIN || status == -ESHUTDOWN ? GW_PERR_BUSY : GW_PERR_INTERNAL);
}

/* Queues the missed messages after the SubscribeOk. Returns how many were queued. */
static uint32_t recover_send_missed(gw_loop_t *lp, gw_session_t *s, const gw_engine_history_t *a)
{
    uint32_t queued = 0;
    for (uint32_t i = 0; i < a->n_msgs; i++) {
        if (s->state == GW_SESSION_CLOSING)
            break;
        queued += gw_fanout_deliver_one(&lp->fo, &s->member, a->msgs[i]);
    }
    return queued;
}

/* The engine's answer, on the subscriber's loop: r->u64 = (connection id, ticket). */
static void recover_on_history(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_loop_t *lp = gw_loop_current();
    const gw_engine_history_t *a = res->data;
    recover_rec_t *rec = rec_find(lp, r->u64[0], a->chan, a->chan_len);
    if (!rec || rec->ticket != r->u64[1])
        return; /* withdrawn; a later request's answer is still to come if any */
    uint64_t req_id = rec->req_id;
    rec_free(lp, rec);
    gw_session_t *s = gw_session_lookup(lp->fo.loop, r->u64[0], GW_SESSION_AUTHENTICATED);
    if (!s)
        return;
    /* Requests of the channel that wait for this answer look again once it is out. */
    gw_session_wake(lp, s);
    uint32_t hash = gw_sub_hash(a->chan, a->chan_len);
    gw_sub_entry_t *e = gw_sub_find(&lp->fo.subs, a->chan, a->chan_len, hash);
    if (!e || gw_sub_recovered(&s->member, e) < 0)
        return; /* cannot be: the record leaves with the membership */
    if (res->status < 0 || !gw_sub_entry_is_active(e)) {
        uint64_t unused;
        (void)gw_sub_remove(&lp->fo.subs, &s->member, a->chan, a->chan_len, hash, &unused);
        gw_session_presence_unlisten(lp, s, a->chan, a->chan_len);
        gw_session_error(lp, s, req_id, GW_PERR_INTERNAL, 0);
        return;
    }
    /* The engine's latest offset is what this loop delivered last (the answer's ordering);
     * were it not, the missed messages would not meet the live ones, so nothing is claimed. */
    bool is_exact = a->latest == gw_sub_entry_offset(e) && a->epoch == gw_sub_entry_epoch(e);
    bool is_recovered = a->result == GW_RECOVERY_RECOVERED && is_exact;
    gw_recovery_t result = is_exact ? a->result : GW_RECOVERY_NOT_COVERED;
    lp->stats.recoveries[result]++;
    gw_session_send_subscribe_ok(lp, s, req_id, is_recovered ? a->since : gw_sub_entry_offset(e),
                                 gw_sub_entry_epoch(e), is_recovered, a->is_recoverable);
    if (is_recovered)
        (void)recover_send_missed(lp, s, a);
    gw_session_presence_joined(lp, s, a->chan, a->chan_len);
}

/* The entry is live here and the answer needs no history: the client missed nothing, or it
 * cannot recover whatever the history holds. Returns false when the engine must be asked. */
static bool recover_answer_now(gw_loop_t *lp, gw_session_t *s, uint64_t id, gw_sub_entry_t *e,
                               bool has_epoch, uint64_t epoch, uint64_t since)
{
    uint64_t offset = gw_sub_entry_offset(e);
    bool is_same_epoch = has_epoch && epoch == gw_sub_entry_epoch(e);
    if (is_same_epoch && since < offset)
        return false;
    size_t len;
    const char *name = gw_sub_entry_name(e, &len);
    bool is_recoverable =
        lp->node->engine->ops->is_recoverable(lp->node->engine, lp->fo.index, name, len);
    gw_sub_entry_t *added = NULL;
    int rc = gw_sub_add(&lp->fo.subs, &s->member, name, len, e->key.hash, id, &added);
    if (rc != 1) {
        gw_session_presence_unlisten(lp, s, name, len);
        gw_session_error(lp, s, id, GW_PERR_INTERNAL, 0);
        return true;
    }
    bool is_recovered = is_same_epoch && since == offset;
    gw_recovery_t result = is_recovered      ? GW_RECOVERY_RECOVERED
                           : !is_recoverable ? GW_RECOVERY_NO_HISTORY
                           : is_same_epoch   ? GW_RECOVERY_NOT_COVERED
                                             : GW_RECOVERY_EPOCH_CHANGED;
    lp->stats.recoveries[result]++;
    gw_session_send_subscribe_ok(lp, s, id, offset, gw_sub_entry_epoch(added), is_recovered,
                                 is_recoverable);
    gw_session_presence_joined(lp, s, name, len);
    return true;
}

void gw_session_subscribe_recover(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f,
                                  const char *name, size_t len)
{
    const Herald__Subscribe *sub = f->subscribe;
    uint64_t epoch = 0;
    bool has_epoch = sub->epoch && proto_epoch_parse(sub->epoch, &epoch) == 0;
    uint32_t hash = gw_sub_hash(name, len);
    gw_sub_entry_t *e = gw_sub_find(&lp->fo.subs, name, len, hash);
    if (e && gw_sub_entry_is_active(e) &&
        recover_answer_now(lp, s, f->id, e, has_epoch, epoch, sub->offset))
        return;
    uint64_t conn_id = nl_conn_id(s->member.conn);
    recover_rec_t *rec = rec_new(lp, conn_id, name, len, f->id);
    if (!rec || gw_sub_add_recovering(&lp->fo.subs, &s->member, name, len, hash, NULL) < 0) {
        if (rec)
            rec_free(lp, rec);
        gw_session_presence_unlisten(lp, s, name, len);
        gw_session_error(lp, s, f->id, GW_PERR_INTERNAL, 0);
        return;
    }
    gw_engine_reply_t reply = {
        .loop = lp->fo.loop, .cb = recover_on_history, .u64 = {conn_id, rec->ticket}};
    /* The missed messages queue behind whatever the client has not read yet; past the
     * high-water mark it would be a slow consumer at once, so that is the most they may be. */
    uint64_t max_bytes = lp->fo.high_water_bytes ? lp->fo.high_water_bytes : UINT64_MAX;
    int err = gw_engine_history(lp->node->engine, lp->fo.index, name, len, hash, sub->offset,
                                has_epoch ? epoch : 0, max_bytes, &reply);
    if (err < 0) {
        uint64_t unused;
        (void)gw_sub_remove(&lp->fo.subs, &s->member, name, len, hash, &unused);
        recover_abort(lp, s, name, len, err == -ESHUTDOWN ? GW_PERR_BUSY : GW_PERR_INTERNAL);
    }
}
