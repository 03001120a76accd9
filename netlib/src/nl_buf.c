/*
 * nl_buf: the [prepend | readable | writable] byte buffer (muduo's Buffer, with lazy storage).
 *
 * Invariants: rd <= wr <= cap <= max_bytes. With storage, an empty buffer has
 * rd == wr == NL_BUF_PREPEND (rd may dip below the mark only through nl_buf_prepend). Without
 * storage, data == NULL and cap == rd == wr == 0: an idle connection's buffer costs 24 bytes.
 */
#include "netlib/nl_buf.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "netlib/nl_common.h"

void nl_buf_init(nl_buf_t *b, size_t max_bytes)
{
    if (max_bytes == 0)
        max_bytes = NL_BUF_DEFAULT_MAX;
    /* The fields are 32-bit; a buffer of 4 GiB or more is a bug in the caller's config. */
    if (max_bytes > UINT32_MAX)
        max_bytes = UINT32_MAX;
    /* Below this not even one byte fits behind the prepend reserve. */
    if (max_bytes < NL_BUF_PREPEND + 1)
        max_bytes = NL_BUF_PREPEND + 1;
    b->data = NULL;
    b->cap = 0;
    b->rd = 0;
    b->wr = 0;
    b->max_bytes = (uint32_t)max_bytes;
}

void nl_buf_deinit(nl_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = 0;
    b->rd = 0;
    b->wr = 0;
}

void nl_buf_retrieve_all(nl_buf_t *b)
{
    /* Rewinding to the prepend mark (not to 0) keeps the cheap-prepend reserve. */
    uint32_t mark = b->data ? NL_BUF_PREPEND : 0;
    b->rd = mark;
    b->wr = mark;
}

void nl_buf_retrieve(nl_buf_t *b, size_t n)
{
    NL_ASSERT(n <= nl_buf_readable(b));
    if (n < nl_buf_readable(b))
        b->rd += (uint32_t)n;
    else
        nl_buf_retrieve_all(b);
}

void nl_buf_release(nl_buf_t *b)
{
    if (nl_buf_readable(b) != 0)
        return;
    nl_buf_deinit(b);
}

/* Bytes that may still be made readable before the buffer hits max_bytes. */
static size_t buf_room(const nl_buf_t *b)
{
    size_t used = NL_BUF_PREPEND + nl_buf_readable(b);
    return used >= b->max_bytes ? 0 : b->max_bytes - used;
}

/* The capacity to allocate so that need bytes (prepend reserve included) fit. A first
 * allocation is at least one granule and a whole number of them. */
static size_t buf_next_cap(const nl_buf_t *b, size_t need, size_t granule)
{
    size_t cap;
    if (b->cap == 0) {
        /* First use: what is asked for, rounded up to the granule (NL_BUF_INITIAL for
         * ensure_writable), so a 16 KiB message read from the spill allocates 16 KiB rather
         * than 16 KiB doubled from 1 KiB. */
        size_t body = need - NL_BUF_PREPEND;
        if (body < granule)
            body = granule;
        body = (body + granule - 1) / granule * granule;
        cap = NL_BUF_PREPEND + body;
    } else {
        cap = b->cap;
        while (cap < need)
            cap *= 2;
    }
    return cap > b->max_bytes ? b->max_bytes : cap;
}

/* Grows the storage to hold need bytes; the readable bytes end up at the prepend mark. */
static int buf_grow(nl_buf_t *b, size_t need, size_t granule)
{
    size_t cap = buf_next_cap(b, need, granule);
    size_t len = nl_buf_readable(b);
    char *p;
    if (b->rd == NL_BUF_PREPEND || len == 0) {
        /* realloc may extend in place; with nothing readable there is nothing to move. */
        p = realloc(b->data, cap);
        if (p == NULL)
            return -ENOMEM;
    } else {
        /* A realloc would copy the dead prefix too; copy only the readable bytes. Bytes are
         * readable, so there is storage. */
        NL_ASSERT(b->data != NULL);
        p = malloc(cap);
        if (p == NULL)
            return -ENOMEM;
        memcpy(p + NL_BUF_PREPEND, b->data + b->rd, len);
        free(b->data);
    }
    b->data = p;
    b->cap = (uint32_t)cap;
    b->rd = NL_BUF_PREPEND;
    b->wr = (uint32_t)(NL_BUF_PREPEND + len);
    return 0;
}

/* nl_buf_ensure_writable, with granule as the rounding of a first allocation. */
static int buf_make_room(nl_buf_t *b, size_t n, size_t granule)
{
    if (nl_buf_writable(b) >= n && b->data != NULL)
        return 0;
    if (n > buf_room(b))
        return -ENOBUFS;
    size_t len = nl_buf_readable(b);
    if (b->data != NULL && b->cap >= NL_BUF_PREPEND + len + n) {
        /* Inside grow: the dead bytes before rd make enough room, so slide the readable
         * bytes back to the prepend mark instead of allocating (muduo makeSpace). */
        memmove(b->data + NL_BUF_PREPEND, b->data + b->rd, len);
        b->rd = NL_BUF_PREPEND;
        b->wr = (uint32_t)(NL_BUF_PREPEND + len);
        return 0;
    }
    return buf_grow(b, NL_BUF_PREPEND + len + n, granule);
}

int nl_buf_ensure_writable(nl_buf_t *b, size_t n)
{
    return buf_make_room(b, n, NL_BUF_INITIAL);
}

int nl_buf_reserve(nl_buf_t *b, size_t n)
{
    return buf_make_room(b, n, NL_BUF_SMALL_ROUND);
}

int nl_buf_append(nl_buf_t *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    int rc = nl_buf_ensure_writable(b, len);
    if (rc < 0)
        return rc;
    memcpy(b->data + b->wr, data, len);
    b->wr += (uint32_t)len;
    return 0;
}

void nl_buf_has_written(nl_buf_t *b, size_t n)
{
    NL_ASSERT(n <= nl_buf_writable(b));
    b->wr += (uint32_t)n;
}

int nl_buf_prepend(nl_buf_t *b, const void *data, size_t len)
{
    if (len > nl_buf_prependable(b))
        return -ENOBUFS;
    if (len == 0)
        return 0;
    b->rd -= (uint32_t)len;
    memcpy(b->data + b->rd, data, len);
    return 0;
}

const char *nl_buf_find(const nl_buf_t *b, const void *needle, size_t len)
{
    if (b->data == NULL || len == 0)
        return NULL;
    return memmem(b->data + b->rd, nl_buf_readable(b), needle, len);
}

const char *nl_buf_find_byte(const nl_buf_t *b, uint8_t c)
{
    if (b->data == NULL)
        return NULL;
    return memchr(b->data + b->rd, c, nl_buf_readable(b));
}

/* The integers are copied with memcpy: the readable bytes have no alignment. */
uint16_t nl_buf_peek_u16(const nl_buf_t *b)
{
    uint16_t v;
    NL_ASSERT(nl_buf_readable(b) >= sizeof v);
    memcpy(&v, b->data + b->rd, sizeof v);
    return be16toh(v);
}

uint32_t nl_buf_peek_u32(const nl_buf_t *b)
{
    uint32_t v;
    NL_ASSERT(nl_buf_readable(b) >= sizeof v);
    memcpy(&v, b->data + b->rd, sizeof v);
    return be32toh(v);
}

uint64_t nl_buf_peek_u64(const nl_buf_t *b)
{
    uint64_t v;
    NL_ASSERT(nl_buf_readable(b) >= sizeof v);
    memcpy(&v, b->data + b->rd, sizeof v);
    return be64toh(v);
}

uint16_t nl_buf_read_u16(nl_buf_t *b)
{
    uint16_t v = nl_buf_peek_u16(b);
    nl_buf_retrieve(b, sizeof v);
    return v;
}

uint32_t nl_buf_read_u32(nl_buf_t *b)
{
    uint32_t v = nl_buf_peek_u32(b);
    nl_buf_retrieve(b, sizeof v);
    return v;
}

uint64_t nl_buf_read_u64(nl_buf_t *b)
{
    uint64_t v = nl_buf_peek_u64(b);
    nl_buf_retrieve(b, sizeof v);
    return v;
}

int nl_buf_append_u16(nl_buf_t *b, uint16_t v)
{
    uint16_t be = htobe16(v);
    return nl_buf_append(b, &be, sizeof be);
}

int nl_buf_append_u32(nl_buf_t *b, uint32_t v)
{
    uint32_t be = htobe32(v);
    return nl_buf_append(b, &be, sizeof be);
}

int nl_buf_append_u64(nl_buf_t *b, uint64_t v)
{
    uint64_t be = htobe64(v);
    return nl_buf_append(b, &be, sizeof be);
}

/* Where one read puts its bytes: the writable space (trimmed to what max_bytes allows) and
 * the caller's stack spill. Shared by the plain and the stamped read, which differ only in
 * the system call. Both helpers are forced inline so that nl_buf_read_fd compiles to the
 * same straight-line code it was before the stamped variant existed (gcc -O2 otherwise keeps
 * buf_read_plan out of line, as it has two callers). */
#define BUF_INLINE static inline __attribute__((always_inline))
typedef struct buf_read_plan_s {
    struct iovec iov[2];
    int iovcnt;
    size_t in_place; /* bytes iov[0] takes straight into the buffer */
} buf_read_plan_t;

/*
 * One read into the writable space plus the stack spill, so a single syscall takes up to
 * writable + 64 KiB whatever the buffer's current size, and a small buffer grows only by what
 * actually arrived (muduo readFd). The spill is trimmed to what max_bytes still allows, so a
 * byte is never read from the socket that the buffer cannot then keep.
 * Returns: 0, or -ENOBUFS when the buffer has no room left.
 */
BUF_INLINE size_t buf_read_in_place(const nl_buf_t *b, size_t room)
{
    size_t in_place = b->data != NULL ? nl_buf_writable(b) : 0;
    return in_place > room ? room : in_place;
}

BUF_INLINE size_t buf_read_spill(size_t room, size_t in_place)
{
    size_t spill_len = room - in_place;
    return spill_len > NL_BUF_SPILL ? NL_BUF_SPILL : spill_len;
}

size_t nl_buf_read_offer(const nl_buf_t *b)
{
    size_t room = buf_room(b);
    size_t in_place = buf_read_in_place(b, room);
    return in_place + buf_read_spill(room, in_place);
}

BUF_INLINE int buf_read_plan(const nl_buf_t *b, char *spill, buf_read_plan_t *p)
{
    size_t room = buf_room(b);
    if (room == 0)
        return -ENOBUFS;
    size_t in_place = buf_read_in_place(b, room);
    size_t spill_len = buf_read_spill(room, in_place);

    p->iovcnt = 0;
    p->in_place = in_place;
    if (in_place > 0) {
        p->iov[p->iovcnt].iov_base = b->data + b->wr;
        p->iov[p->iovcnt].iov_len = in_place;
        p->iovcnt++;
    }
    if (spill_len > 0) {
        p->iov[p->iovcnt].iov_base = spill;
        p->iov[p->iovcnt].iov_len = spill_len;
        p->iovcnt++;
    }
    return 0;
}

/* Settles a read's result: n bytes landed (n >= 0) or the read failed (n = -errno). */
BUF_INLINE ssize_t buf_read_done(nl_buf_t *b, const char *spill, const buf_read_plan_t *p,
                                 ssize_t n)
{
    if (n < 0) {
        /* EWOULDBLOCK equals EAGAIN on Linux; callers test one value. */
        return n == -EWOULDBLOCK ? -EAGAIN : n;
    }
    if ((size_t)n <= p->in_place) {
        b->wr += (uint32_t)n;
        return n;
    }
    b->wr += (uint32_t)p->in_place;
    /* Cannot be -ENOBUFS: the spill was trimmed to the room left. */
    int rc = nl_buf_append(b, spill, (size_t)n - p->in_place);
    if (rc < 0)
        return rc;
    return n;
}

ssize_t nl_buf_read_fd(nl_buf_t *b, int fd)
{
    char spill[NL_BUF_SPILL];
    buf_read_plan_t p;
    if (buf_read_plan(b, spill, &p) < 0)
        return -ENOBUFS;
    ssize_t n;
    do {
        n = readv(fd, p.iov, p.iovcnt);
    } while (n < 0 && errno == EINTR);
    return buf_read_done(b, spill, &p, n < 0 ? -errno : n);
}

/*
 * The same read through recvmsg, with room for the SCM_TIMESTAMPNS control message that
 * SO_TIMESTAMPNS makes the kernel attach. For TCP the kernel reports the receive time of the
 * last segment the read consumed (tcp_recvmsg keeps the stamp of each skb it copies from), so
 * a read that takes several segments reports the latest of them. The control buffer leaves
 * room for a second message (another option the caller may have set, such as TCP_INQ); if
 * more arrive they are cut (MSG_CTRUNC), which costs the stamp at worst, never data.
 */
ssize_t nl_recv_stamped(int fd, struct iovec *iov, int iovcnt, uint64_t *stamp_ns)
{
    *stamp_ns = 0;
    union {
        char bytes[2 * CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {
        .msg_iov = iov,
        .msg_iovlen = (size_t)iovcnt,
        .msg_control = ctl.bytes,
        .msg_controllen = sizeof(ctl.bytes),
    };
    ssize_t n;
    do {
        n = recvmsg(fd, &mh, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    /* A truncated control message may hold a partial stamp: none then. */
    bool is_ctl_whole = !(mh.msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); n > 0 && is_ctl_whole && cm;
         cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS &&
            cm->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            *stamp_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    }
    return n;
}

ssize_t nl_buf_read_fd_stamped(nl_buf_t *b, int fd, uint64_t *stamp_ns)
{
    char spill[NL_BUF_SPILL];
    *stamp_ns = 0;
    buf_read_plan_t p;
    if (buf_read_plan(b, spill, &p) < 0)
        return -ENOBUFS;
    return buf_read_done(b, spill, &p, nl_recv_stamped(fd, p.iov, p.iovcnt, stamp_ns));
}
