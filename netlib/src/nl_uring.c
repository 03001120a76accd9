/*
 * nl_uring: the ring behind nl_uring.h. The layout follows the kernel's io_uring ABI
 * (linux/io_uring.h): a submission ring of indexes into an array of entries, a completion
 * ring, both shared with the kernel through mmap. Indexes run free and are masked; the
 * kernel reads our tail with acquire semantics, so entries are written before the tail is
 * published with a release store, and completions are read after an acquire load of its tail.
 */
#include "nl_uring.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* io_uring_enter calls in a row that neither submit nor complete anything before a submit
 * gives up. */
#define NL__URING_IDLE_MAX 64
/* A slot's result before its completion arrives. */
#define NO_RESULT INT32_MIN

struct nl__uring_s {
    int fd;
    unsigned entries;
    unsigned *sq_ktail;
    unsigned *sq_array;
    unsigned sq_mask;
    unsigned sq_tail; /* ours: published to *sq_ktail at submit */
    unsigned pending; /* prepared since the last submit */
    struct io_uring_sqe *sqes;
    unsigned *cq_khead;
    unsigned *cq_ktail;
    unsigned cq_mask;
    struct io_uring_cqe *cqes;
    void *sq_map;
    size_t sq_map_len;
    void *cq_map; /* == sq_map with IORING_FEAT_SINGLE_MMAP */
    size_t cq_map_len;
    size_t sqes_len;
};

static int uring_setup(unsigned entries, struct io_uring_params *p)
{
    /* Nothing needs an interrupt to complete, so task work may wait for the next enter
     * (saves the kernel an IPI); kernels before 5.19 reject the flag, so retry without.
     * Not SINGLE_ISSUER: a loop may be run by another thread than the one that set it up. */
    static const unsigned flag_sets[] = {IORING_SETUP_COOP_TASKRUN, 0};
    for (size_t i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
        memset(p, 0, sizeof(*p));
        p->flags = flag_sets[i];
        long fd = syscall(__NR_io_uring_setup, entries, p);
        if (fd >= 0)
            return (int)fd;
        if (errno != EINVAL)
            return -errno;
    }
    return -EINVAL;
}

/* Whether the kernel knows IORING_OP_SEND (5.6+): io_uring itself exists from 5.1, and on
 * 5.1-5.5 every send would fail with -EINVAL. Kernels before 5.6 have no probe either
 * (-EINVAL). Returns 0 when it does, -EOPNOTSUPP when it does not, or the errno of a shortage
 * (-ENOMEM), which says nothing about the kernel. */
static int uring_probe_send(int fd)
{
    enum { PROBE_OPS = 256 };
    struct io_uring_probe *p = calloc(1, sizeof(*p) + PROBE_OPS * sizeof(struct io_uring_probe_op));
    if (!p)
        return -ENOMEM;
    int err = 0;
    if (syscall(__NR_io_uring_register, fd, IORING_REGISTER_PROBE, p, PROBE_OPS) != 0)
        err = errno == EINVAL ? -EOPNOTSUPP : -errno;
    else if (p->last_op < IORING_OP_SEND || !(p->ops[IORING_OP_SEND].flags & IO_URING_OP_SUPPORTED))
        err = -EOPNOTSUPP;
    free(p);
    return err;
}

static void *uring_map(int fd, size_t len, off_t what)
{
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, what);
    return m == MAP_FAILED ? NULL : m;
}

void nl__uring_close(nl__uring_t *r)
{
    if (!r)
        return;
    if (r->sqes)
        munmap(r->sqes, r->sqes_len);
    if (r->cq_map && r->cq_map != r->sq_map)
        munmap(r->cq_map, r->cq_map_len);
    if (r->sq_map)
        munmap(r->sq_map, r->sq_map_len);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}

int nl__uring_open(nl__uring_t **out, unsigned entries)
{
    *out = NULL;
    nl__uring_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    struct io_uring_params p;
    r->fd = uring_setup(entries, &p);
    int err = r->fd < 0 ? r->fd : uring_probe_send(r->fd);
    if (err < 0) {
        nl__uring_close(r);
        return err;
    }
    r->sq_map_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_map_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single) {
        if (r->cq_map_len > r->sq_map_len)
            r->sq_map_len = r->cq_map_len;
        r->cq_map_len = r->sq_map_len;
    }
    r->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sq_map = uring_map(r->fd, r->sq_map_len, IORING_OFF_SQ_RING);
    if (r->sq_map)
        r->cq_map = single ? r->sq_map : uring_map(r->fd, r->cq_map_len, IORING_OFF_CQ_RING);
    if (r->cq_map)
        r->sqes = uring_map(r->fd, r->sqes_len, IORING_OFF_SQES);
    if (!r->sqes) {
        err = -errno;
        nl__uring_close(r);
        return err;
    }
    char *sq = r->sq_map;
    char *cq = r->cq_map;
    r->entries = p.sq_entries < entries ? p.sq_entries : entries;
    r->sq_ktail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->sq_mask = *(unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_tail = *r->sq_ktail;
    r->cq_khead = (unsigned *)(cq + p.cq_off.head);
    r->cq_ktail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = *(unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
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
    unsigned idx = r->sq_tail & r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[idx];
    memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = IORING_OP_SEND;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = len;
    sqe->msg_flags = (uint32_t)(flags | MSG_DONTWAIT);
    sqe->user_data = r->pending;
    r->sq_array[idx] = idx;
    r->sq_tail++;
    r->pending++;
    return 0;
}

/* Takes every completion the kernel has posted. Returns how many. */
static unsigned uring_reap(nl__uring_t *r, int32_t *res)
{
    unsigned head = *r->cq_khead;
    unsigned tail = __atomic_load_n(r->cq_ktail, __ATOMIC_ACQUIRE);
    unsigned n = tail - head;
    for (; head != tail; head++) {
        const struct io_uring_cqe *cqe = &r->cqes[head & r->cq_mask];
        if (cqe->user_data < r->pending)
            res[cqe->user_data] = cqe->res;
    }
    __atomic_store_n(r->cq_khead, head, __ATOMIC_RELEASE);
    return n;
}

static long uring_enter(nl__uring_t *r, unsigned to_submit, unsigned min_complete)
{
    return syscall(__NR_io_uring_enter, r->fd, to_submit, min_complete, IORING_ENTER_GETEVENTS,
                   NULL, 0);
}

int nl__uring_submit(nl__uring_t *r, int32_t *res)
{
    unsigned n = r->pending;
    if (n == 0)
        return 0;
    for (unsigned i = 0; i < n; i++)
        res[i] = NO_RESULT;
    __atomic_store_n(r->sq_ktail, r->sq_tail, __ATOMIC_RELEASE);
    unsigned submitted = 0;
    unsigned done = 0;
    int err = 0;
    /* The kernel takes entries in order, so slots [0, submitted) are in it. Sends with
     * MSG_DONTWAIT complete inside the submit; the wait covers any that do not. A kernel that
     * makes no progress for many rounds counts as a failed ring. */
    for (int idle = 0; done < n && (err == 0 || done < submitted);) {
        unsigned to_submit = err == 0 ? n - submitted : 0;
        long rc = uring_enter(r, to_submit, (err == 0 ? n : submitted) - done);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            if (err != 0)
                break; /* waiting failed too: give up on the rest */
            err = -errno;
        } else {
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
    for (unsigned i = 0; i < n; i++)
        if (res[i] == NO_RESULT)
            res[i] = i < submitted ? -EIO : -ECANCELED;
    r->pending = 0;
    return err;
}
