/*
 * nl_uring: the ring behind nl_uring.h, on liburing (Debian's liburing-dev, 2.3 on Debian 12):
 * io_uring_queue_init_params sets up and maps the rings, io_uring_prep_send fills an entry,
 * io_uring_submit_and_wait publishes the entries and enters the kernel. What stays here is
 * herald's use of it: a probe for IORING_OP_SEND, a submit that waits for every send it made
 * and says which ones never reached the kernel, and slot-ordered results.
 */
#include "nl_uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Kernel entries in a row that neither submit nor complete anything before a submit gives up. */
#define NL__URING_IDLE_MAX 64
/* A slot's result before its completion arrives. */
#define NO_RESULT INT32_MIN

struct nl__uring_s {
    struct io_uring ring;
    unsigned entries; /* sends per submit */
    unsigned pending; /* prepared since the last submit */
};

/* Nothing needs an interrupt to complete, so task work may wait for the next enter (saves the
 * kernel an IPI); kernels before 5.19 reject the flag, so retry without. Not SINGLE_ISSUER: a
 * loop may be run by another thread than the one that set it up. */
static int uring_setup(struct io_uring *ring, unsigned entries)
{
    static const unsigned flag_sets[] = {IORING_SETUP_COOP_TASKRUN, 0};
    int err = -EINVAL;
    for (size_t i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        p.flags = flag_sets[i];
        err = io_uring_queue_init_params(entries, ring, &p);
        if (err != -EINVAL)
            return err;
    }
    return err;
}

/* Whether the kernel knows IORING_OP_SEND (5.6+): io_uring itself exists from 5.1, and on
 * 5.1-5.5 every send would fail with -EINVAL. Kernels before 5.6 have no probe either
 * (-EINVAL). Returns 0 when it does, -EOPNOTSUPP when it does not, or the errno of a shortage
 * (-ENOMEM), which says nothing about the kernel. The probe is registered by hand rather than
 * with io_uring_get_probe_ring, which answers NULL for a shortage and an old kernel alike. */
static int uring_probe_send(struct io_uring *ring)
{
    enum { PROBE_OPS = 256 };
    struct io_uring_probe *p = calloc(1, sizeof(*p) + PROBE_OPS * sizeof(struct io_uring_probe_op));
    if (!p)
        return -ENOMEM;
    int err = io_uring_register_probe(ring, p, PROBE_OPS);
    if (err == -EINVAL)
        err = -EOPNOTSUPP;
    else if (err == 0 && !io_uring_opcode_supported(p, IORING_OP_SEND))
        err = -EOPNOTSUPP;
    free(p);
    return err;
}

void nl__uring_close(nl__uring_t *r)
{
    if (!r)
        return;
    io_uring_queue_exit(&r->ring);
    free(r);
}

int nl__uring_open(nl__uring_t **out, unsigned entries)
{
    *out = NULL;
    nl__uring_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    int err = uring_setup(&r->ring, entries);
    if (err < 0) {
        free(r);
        return err;
    }
    err = uring_probe_send(&r->ring);
    if (err < 0) {
        nl__uring_close(r);
        return err;
    }
    r->entries = r->ring.sq.ring_entries < entries ? r->ring.sq.ring_entries : entries;
    *out = r;
    return 0;
}

unsigned nl__uring_pending(const nl__uring_t *r)
{
    return r->pending;
}

int nl__uring_prep_send(nl__uring_t *r, int fd, const void *buf, uint32_t len, int flags)
{
    if (r->pending == r->entries)
        return -ENOSPC;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe)
        return -ENOSPC;
    io_uring_prep_send(sqe, fd, buf, len, flags | MSG_DONTWAIT);
    io_uring_sqe_set_data64(sqe, r->pending);
    r->pending++;
    return 0;
}

/* Takes every completion the kernel has posted. Returns how many. */
static unsigned uring_reap(nl__uring_t *r, int32_t *res)
{
    unsigned head;
    unsigned n = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&r->ring, head, cqe)
    {
        uint64_t slot = io_uring_cqe_get_data64(cqe);
        if (slot < r->pending)
            res[slot] = cqe->res;
        n++;
    }
    io_uring_cq_advance(&r->ring, n);
    return n;
}

int nl__uring_submit(nl__uring_t *r, int32_t *res)
{
    unsigned n = r->pending;
    if (n == 0)
        return 0;
    for (unsigned i = 0; i < n; i++)
        res[i] = NO_RESULT;
    unsigned submitted = 0;
    unsigned done = 0;
    int err = 0;
    /* The kernel takes entries in order, so slots [0, submitted) are in it; an enter that
     * could not take them all returns at once, and the next submit_and_wait offers the rest
     * again. Sends with MSG_DONTWAIT complete inside the submit; the wait covers any that do
     * not. After a failed submit only the sends already in the kernel are waited for. A kernel
     * that makes no progress for many rounds counts as a failed ring. */
    for (int idle = 0; done < n && (err == 0 || done < submitted);) {
        int rc;
        if (err == 0) {
            rc = io_uring_submit_and_wait(&r->ring, n - done);
        } else {
            struct io_uring_cqe *cqe;
            rc = io_uring_wait_cqe_nr(&r->ring, &cqe, submitted - done);
        }
        if (rc < 0) {
            if (rc == -EINTR)
                continue;
            if (err != 0)
                break; /* waiting failed too: give up on the rest */
            err = rc;
        } else if (err == 0) {
            submitted += (unsigned)rc;
        }
        unsigned got = uring_reap(r, res);
        done += got;
        if (rc <= 0 && got == 0 && ++idle == NL__URING_IDLE_MAX) {
            err = err ? err : -EIO;
            break;
        }
    }
    /* Slots that never reached the kernel were not sent; those that did and never completed
     * may have been, in part. */
    for (unsigned i = 0; i < n; i++) {
        if (res[i] == NO_RESULT)
            res[i] = i < submitted ? -EIO : -ECANCELED;
    }
    r->pending = 0;
    return err;
}
