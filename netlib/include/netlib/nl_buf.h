/*
 * nl_buf: a contiguous byte buffer laid out [prepend | readable | writable] (muduo's Buffer).
 *
 * NL_BUF_PREPEND bytes are kept in front of the readable bytes so a length prefix can be put
 * before a message without a copy. Storage is allocated on first use and released by
 * nl_buf_release() once empty, so an idle connection costs no buffer memory. To make room the
 * buffer first moves its readable bytes to the front, then doubles; past max_bytes it refuses
 * with -ENOBUFS: a buffer never grows without limit.
 *
 * Any call that may write (append, ensure_writable, prepend, read_fd, release) invalidates
 * pointers returned earlier by peek/find/begin_write.
 *
 * Thread: a buffer belongs to whoever embeds it; no function here locks.
 * Ownership: the caller owns the nl_buf_t value; the buffer owns its storage (freed by deinit).
 * Usage: nl_buf_init(&b, 1 << 20); nl_buf_read_fd(&b, fd); parse nl_buf_peek(&b) ...;
 *        nl_buf_retrieve(&b, used); ... nl_buf_deinit(&b);
 */
#ifndef HERALD_NETLIB_NL_BUF_H
#define HERALD_NETLIB_NL_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Bytes kept free in front of the readable region for a cheap prepend. */
#define NL_BUF_PREPEND 8
/* First allocation (beyond the prepend area) when the buffer has no storage yet. */
#define NL_BUF_INITIAL 1024
/* nl_buf_reserve's rounding of a first allocation: malloc's own granularity. The tighter, the
 * better the holes it leaves are reused (bench_gw_idle, 2 loops: 505-507 B per connection at
 * 16, 511-513 at 64, 516-517 at 128; answers written directly: 501-503). */
#define NL_BUF_SMALL_ROUND 16
/* Default cap when nl_buf_init is given 0. */
#define NL_BUF_DEFAULT_MAX (64u * 1024 * 1024)
/* The stack spill nl_buf_read_fd reads into beyond the buffer's free space. */
#define NL_BUF_SPILL 65536

/* Transparent so it can be embedded and its accessors inlined; touch fields only via nl_buf_*. */
typedef struct nl_buf_s {
    char *data;         /* NULL until first use */
    uint32_t cap;       /* bytes allocated at data */
    uint32_t rd;        /* offset of the first readable byte */
    uint32_t wr;        /* offset of the first writable byte */
    uint32_t max_bytes; /* cap on cap */
} nl_buf_t;

/* Initialises an empty buffer without allocating. max_bytes 0 means NL_BUF_DEFAULT_MAX.
 * Thread: owner. */
void nl_buf_init(nl_buf_t *b, size_t max_bytes);

/* Frees the storage. The buffer may be init'ed again. */
void nl_buf_deinit(nl_buf_t *b);

static inline size_t nl_buf_readable(const nl_buf_t *b)
{
    return b->wr - b->rd;
}
static inline size_t nl_buf_writable(const nl_buf_t *b)
{
    return b->cap - b->wr;
}
static inline size_t nl_buf_prependable(const nl_buf_t *b)
{
    return b->rd;
}
/* First readable byte (may be NULL when empty). Invalidated by any write. */
static inline const char *nl_buf_peek(const nl_buf_t *b)
{
    return b->data ? b->data + b->rd : NULL;
}
/* Total bytes of storage held (0 when released). */
static inline size_t nl_buf_capacity(const nl_buf_t *b)
{
    return b->cap;
}

/* The cap on the buffer's capacity (nl_buf_init's max_bytes). */
static inline size_t nl_buf_max_bytes(const nl_buf_t *b)
{
    return b->max_bytes;
}

/* Consumes n readable bytes (n <= readable). When the buffer empties, the positions reset to
 * the prepend mark; storage is kept (see nl_buf_release). */
void nl_buf_retrieve(nl_buf_t *b, size_t n);
void nl_buf_retrieve_all(nl_buf_t *b);

/* Frees the storage if nothing is readable; a no-op otherwise. Used when a connection goes
 * idle, so idle connections hold no buffer memory. */
void nl_buf_release(nl_buf_t *b);

/* Makes at least n bytes writable, moving readable bytes to the front or growing.
 * Returns: 0; -ENOBUFS past max_bytes; -ENOMEM. */
int nl_buf_ensure_writable(nl_buf_t *b, size_t n);

/* As nl_buf_ensure_writable, except that a buffer with no storage gets only n bytes (rounded
 * up to NL_BUF_SMALL_ROUND) instead of at least NL_BUF_INITIAL. For small, short-lived contents:
 * an answer queued until the loop's flush, whose 1 KiB block freed moments later would leave a
 * hole in the heap between long-lived objects (measured: 40-65 bytes more RSS per idle
 * connection after a connect ramp). Returns: 0; -ENOBUFS past max_bytes; -ENOMEM. */
int nl_buf_reserve(nl_buf_t *b, size_t n);

/* Appends len bytes. Returns: 0; -ENOBUFS past max_bytes (nothing appended); -ENOMEM. */
int nl_buf_append(nl_buf_t *b, const void *data, size_t len);

/* Writable region for filling in place after nl_buf_ensure_writable, then commit with
 * nl_buf_has_written(b, n), n <= writable. */
static inline char *nl_buf_begin_write(nl_buf_t *b)
{
    return b->data + b->wr;
}
void nl_buf_has_written(nl_buf_t *b, size_t n);

/* Puts len bytes in front of the readable bytes. Returns: 0; -ENOBUFS when fewer than len
 * bytes are prependable. */
int nl_buf_prepend(nl_buf_t *b, const void *data, size_t len);

/* Finds the first occurrence of needle in the readable bytes. Returns a pointer into the
 * buffer, or NULL. Invalidated by any write. */
const char *nl_buf_find(const nl_buf_t *b, const void *needle, size_t len);
const char *nl_buf_find_byte(const nl_buf_t *b, uint8_t c);

/* Network-order integers. peek_* require readable >= width; read_* also retrieve it. */
uint16_t nl_buf_peek_u16(const nl_buf_t *b);
uint32_t nl_buf_peek_u32(const nl_buf_t *b);
uint64_t nl_buf_peek_u64(const nl_buf_t *b);
uint16_t nl_buf_read_u16(nl_buf_t *b);
uint32_t nl_buf_read_u32(nl_buf_t *b);
uint64_t nl_buf_read_u64(nl_buf_t *b);
int nl_buf_append_u16(nl_buf_t *b, uint16_t v);
int nl_buf_append_u32(nl_buf_t *b, uint32_t v);
int nl_buf_append_u64(nl_buf_t *b, uint64_t v);

/* Reads what the socket holds with one readv into the writable space plus a NL_BUF_SPILL
 * stack spill, then appends the spilled part. Returns: bytes read (> 0); 0 on EOF; -EAGAIN;
 * -ENOBUFS when the buffer is at max_bytes (nothing read); other negative errno.
 * With no storage yet, the first read goes to the stack spill only, so a connection that is
 * woken and sends nothing allocates nothing. */
ssize_t nl_buf_read_fd(nl_buf_t *b, int fd);

/* The bytes the next nl_buf_read_fd would offer the kernel (writable space plus spill, within
 * max_bytes). A read that returns exactly this much may have left more in the socket; a
 * shorter one drained it, which is what an edge-triggered reader needs to know. */
size_t nl_buf_read_offer(const nl_buf_t *b);

/* As nl_buf_read_fd, through recvmsg, also taking the kernel's receive timestamp: with
 * SO_TIMESTAMPNS set on fd, *stamp_ns is the CLOCK_REALTIME time in ns at which the last
 * segment this read consumed reached the socket (for TCP; the datagram's time for UDP).
 * Returns: as nl_buf_read_fd. *stamp_ns is 0 when the read returned no bytes or the kernel
 * attached no stamp (the option is off, or the socket type has none).
 * Thread: the buffer's owner. Ownership: nothing retained. */
ssize_t nl_buf_read_fd_stamped(nl_buf_t *b, int fd, uint64_t *stamp_ns);

/* The system call under nl_buf_read_fd_stamped, for readers with their own storage: recvmsg
 * of fd into iov[0..iovcnt) (EINTR retried) with the SO_TIMESTAMPNS stamp in *stamp_ns, as
 * above (0 when none, or when the control message came truncated).
 * Returns: the bytes read (0 at EOF); negative errno. Thread: any. */
ssize_t nl_recv_stamped(int fd, struct iovec *iov, int iovcnt, uint64_t *stamp_ns);

#endif
