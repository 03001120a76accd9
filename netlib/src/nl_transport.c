/*
 * nl_transport: the connection side of the transport seam (see nl_transport.h): the plain
 * table, the descriptor a server's or client's connections share, the handshake, reads
 * without fd readiness, and the functions a transport calls.
 *
 * Descriptor: callbacks, the owner's arg, the client and the transport sit behind one pointer
 * per connection (nl_conn_int.h on the 152-byte budget). Its references are atomic: a server's
 * descriptor is shared by connections on every IO loop and by accepted sockets in flight to
 * them, and outlives the server while any of them lives.
 *
 * Reads without readiness: the fd is edge-triggered, so input that sits inside a transport (a
 * TLS record decrypted ahead, WebSocket frames that came with the upgrade request) is reported
 * by no event. Such a connection goes on a per-loop list of ids, read by a posted closure in
 * the next iteration; ids, not pointers, because it may close before its turn. A post keeps
 * the loop from sleeping, so a transport that always has input cannot starve the others: each
 * turn reads at most the usual few times per connection.
 */
#include "netlib/nl_transport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nl_conn_int.h"

/* --- plain TCP ---------------------------------------------------------------------------- */

static ssize_t plain_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    NL_UNUSED(state);
    return nl_buf_read_fd(in, nl_conn_fd(c));
}

static ssize_t plain_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    NL_UNUSED(state);
    if (iovcnt == 0)
        return 0;
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    for (;;) {
        ssize_t n = sendmsg(nl_conn_fd(c), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            return n;
        int err = -errno;
        if (err != -EINTR)
            return err;
    }
}

const nl_transport_t nl_transport_plain = {
    .name = "tcp",
    .read = plain_read,
    .writev = plain_writev,
};

/* --- descriptors -------------------------------------------------------------------------- */

void nl__conn_desc_init(nl__conn_desc_t *d, const nl_conn_cbs_t *cbs, void *arg,
                        const nl_transport_t *tp, void *tp_arg)
{
    memset(d, 0, sizeof(*d));
    d->cbs = cbs ? cbs : &nl__conn_no_cbs;
    d->arg = arg;
    /* The plain table is netlib's own path, taken without an indirect call. */
    d->tp = tp == &nl_transport_plain ? NULL : tp;
    d->tp_arg = tp_arg;
    d->refs = 1;
}

void nl__conn_desc_ref(nl__conn_desc_t *d)
{
    __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
}

void nl__conn_desc_unref(nl__conn_desc_t *d)
{
    if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) == 0 && d->release)
        d->release(d);
}

static void desc_copy_release(nl__conn_desc_t *d)
{
    nl__conn_desc_unref(d->parent);
    free(d);
}

/* A connection's own copy of its descriptor with other callbacks. Rare (no hot path reads
 * it differently), so the common case keeps sharing one. */
int nl_conn_set_cbs(nl_conn_t *c, const nl_conn_cbs_t *cbs)
{
    NL_ASSERT_OWNER(c->io.loop);
    nl__conn_desc_t *old = c->desc;
    nl__conn_desc_t *d = malloc(sizeof(*d));
    if (!d)
        return -ENOMEM;
    *d = *old;
    d->cbs = cbs ? cbs : &nl__conn_no_cbs;
    d->refs = 1;
    d->release = desc_copy_release;
    d->parent = old->parent ? old->parent : old;
    nl__conn_desc_ref(d->parent);
    c->desc = d;
    nl__conn_desc_unref(old);
    return 0;
}

/* --- handshake ---------------------------------------------------------------------------- */

/* The handshake is done: the application's connection starts here. */
static void conn_handshake_done(nl_conn_t *c)
{
    c->flags &= (uint16_t) ~(NL__CONN_HANDSHAKE | NL__CONN_HS_WANT_WRITE);
    c->state = NL_CONN_CONNECTED;
    nl__conn_update_interest(c);
    if (c->state == NL_CONN_DISCONNECTED)
        return;
    if (c->desc->client)
        nl__client_conn_ready(c->desc->client);
    if (c->desc->cbs->on_connected)
        c->desc->cbs->on_connected(c);
    /* Input that came with the last handshake bytes was taken from the socket by the
     * handshake (or sits in the transport): no edge will report it. */
    if (c->state != NL_CONN_DISCONNECTED && nl__conn_wants_read(c))
        nl__conn_handle_read(c, 0);
}

void nl__conn_handshake(nl_conn_t *c)
{
    int rc = c->desc->tp->handshake(c, *nl__conn_tp_state(c));
    if (c->state == NL_CONN_DISCONNECTED)
        return; /* the transport (or a timer it ran) closed it */
    if (rc < 0) {
        nl_conn_close(c, rc);
        return;
    }
    if (rc == NL_TRANSPORT_DONE) {
        conn_handshake_done(c);
        return;
    }
    uint16_t flags = c->flags;
    if (rc == NL_TRANSPORT_WANT_WRITE)
        c->flags |= NL__CONN_HS_WANT_WRITE;
    else
        c->flags &= (uint16_t)~NL__CONN_HS_WANT_WRITE;
    /* An unchanged interest needs no epoll_ctl: the transport saw EAGAIN, so the next edge
     * comes with the next bytes (or room). */
    if (flags != c->flags)
        nl__conn_update_interest(c);
}

/* --- reads without readiness -------------------------------------------------------------- */

static void conn_reads_run(void *arg)
{
    nl__conn_loop_t *st = arg;
    uint64_t *ids = st->read_ids;
    uint32_t len = st->read_len;
    st->read_ids = NULL;
    st->read_len = 0;
    st->read_cap = 0;
    st->is_read_posted = false;
    for (uint32_t i = 0; i < len; i++) {
        nl_conn_t *c = nl_conn_lookup(st->loop, ids[i]);
        if (!c || !(c->flags & NL__CONN_READ_QUEUED))
            continue;
        c->flags &= (uint16_t)~NL__CONN_READ_QUEUED;
        if (!(c->flags & NL__CONN_HANDSHAKE) && nl__conn_wants_read(c))
            nl__conn_handle_read(c, 0);
    }
    free(ids);
}

/* Queues a read of c for the next iteration. On ENOMEM the input waits for the next readiness
 * (or the next call). */
static void conn_read_soon(nl_conn_t *c)
{
    if (c->flags & NL__CONN_READ_QUEUED)
        return;
    nl__conn_loop_t *st = nl__conn_st(c);
    if (st->read_len == st->read_cap) {
        uint32_t cap = st->read_cap ? st->read_cap * 2 : 16;
        uint64_t *ids = realloc(st->read_ids, cap * sizeof(*ids));
        if (!ids)
            return;
        st->read_ids = ids;
        st->read_cap = cap;
    }
    if (!st->is_read_posted) {
        if (nl_loop_post(st->loop, conn_reads_run, st) < 0)
            return;
        st->is_read_posted = true;
    }
    st->read_ids[st->read_len++] = c->id;
    c->flags |= NL__CONN_READ_QUEUED;
}

void nl__conn_read_pending(nl_conn_t *c)
{
    const nl_transport_t *tp = c->desc->tp;
    if (c->state == NL_CONN_DISCONNECTED || !tp->has_pending || !nl__conn_wants_read(c))
        return;
    if (tp->has_pending(c, *nl__conn_tp_state(c)))
        conn_read_soon(c);
}

/* --- what a transport calls --------------------------------------------------------------- */

void *nl_conn_transport_state(const nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    /* Plain TCP connections have no state slot (nl__conn_tp_t). */
    return c->desc->tp ? ((const nl__conn_tp_t *)c)->state : NULL;
}

void nl_conn_transport_set_fd_writes(nl_conn_t *c, bool on)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (!c->desc->tp || !c->desc->tp->writev)
        return;
    if (on)
        c->flags &= (uint16_t) ~(NL__CONN_TP_WRITE | NL__CONN_TP_WANT_WRITE);
    else
        c->flags |= NL__CONN_TP_WRITE;
}

void nl_conn_transport_want_write(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state == NL_CONN_DISCONNECTED || !(c->flags & NL__CONN_TP_WRITE))
        return;
    c->flags |= NL__CONN_TP_WANT_WRITE;
    /* Waiting for the socket: its writability flushes. Otherwise this iteration's flush. */
    if (!(c->flags & NL__CONN_WRITE_ARMED) && nl__conn_mark_dirty(c) < 0) {
        c->flags |= NL__CONN_WRITE_ARMED; /* no memory for the list: the socket's edge will do */
        nl__conn_update_interest(c);
    }
}

void nl_conn_transport_want_read(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state != NL_CONN_DISCONNECTED)
        conn_read_soon(c);
}
