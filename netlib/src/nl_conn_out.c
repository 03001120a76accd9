/*
 * nl_conn_out: a connection's output: the owned buffer, the queue of shared blocks, the
 * per-iteration flush with one sendmsg (a writev with MSG_NOSIGNAL; send for a single piece)
 * over everything queued, and the high-water mark (STYLE.md §6; Redis _writevToClient,
 * muduo sendInLoop).
 *
 * Write interest: NL_WRITE is asked of epoll only after the kernel refused bytes (a partial or
 * EAGAIN write) and dropped as soon as the queue drains, so a connection whose writes succeed
 * never costs an epoll_ctl. Invariant: a connection with output queued is either WRITE_ARMED
 * (waiting for the socket) or on the loop's dirty list (waiting for this iteration's flush).
 *
 * Memory: the owned buffer is released when a flush drains it and the block queue goes back
 * to the loop's pool, so an idle connection holds no output storage. The pool (one LIFO stack
 * per ring size, at most NL__CONN_BQ_POOL_MAX queues each) spares a fan-out a malloc and a
 * free per subscriber per flush; like the input pools, once a second the queues that sat in it
 * unused the whole time are freed, so a loop that went quiet gives the memory back (measured
 * in bench_nl_fanout under callgrind: 724 -> 582 user-mode instructions per delivery).
 * The owned buffer has a hard cap (nl__conn_out_cap): nl_conn_send past it returns -ENOBUFS
 * and queues nothing. Blocks are shared and not capped
 * here; the owner reacts at the high-water mark (drop or disconnect a slow consumer).
 */
#include "netlib/nl_conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "netlib/nl_log.h"
#include "nl_block_int.h"
#include "nl_conn_int.h"
#include "nl_uring.h"

/* iovecs per sendmsg: enough to coalesce a burst, small enough for the stack. */
#define NL__CONN_IOV_MAX 64
/* sendmsg calls per flush when each one is fully accepted (the iovec limit cut the batch). */
#define NL__CONN_WRITE_ROUNDS 16
/* Coalescing (out_coalesce): the buffer's size, and the largest average piece copied. */
#define NL__CONN_COALESCE_BYTES 65536u
#define NL__CONN_COALESCE_AVG 1024u
/* Dirty-list passes per before-sleep hook: callbacks run by a flush may queue more output. */
#define NL__CONN_FLUSH_PASSES 8
#define NL__CONN_BQ_MIN 4u
/* Emptied queues kept per ring size and loop (about 110 bytes each at the smallest size): a
 * fan-out to this many connections per loop and flush takes no malloc per delivery. */
#define NL__CONN_BQ_POOL_MAX 8192u
/* Batched sends: connections per io_uring submit, and the fewest one-piece writes in a flush
 * pass worth a batch (one send is one system call either way). */
#define NL__CONN_BATCH 256u
#define NL__CONN_BATCH_MIN 2u
/* Where a batch copies the small pieces of its connections' writes (out_coalesce's rule). */
#define NL__CONN_BATCH_ARENA (512u * 1024u)
/* Dirty-list entries kept after a burst has passed (nl__conn_flush_dirty): 8 KiB. */
#define NL__CONN_DIRTY_KEEP 1024u
/* How long a loop that could not set up its ring for lack of memory or descriptors waits
 * before it tries again: doubling from the first to the last after each failure in a row. */
#define NL__CONN_BATCH_RETRY_MS 10000u
#define NL__CONN_BATCH_RETRY_MAX_MS 600000u
/* The owned output buffer's cap is twice the high-water mark, at least 64 KiB; with no mark it
 * is the buffer default (64 MiB). Between the mark and the cap the owner has room to act. */
#define NL__CONN_OUT_CAP_MIN (65536u + NL_BUF_PREPEND)

size_t nl__conn_out_cap(uint32_t high_water)
{
    if (high_water == 0)
        return NL_BUF_DEFAULT_MAX;
    size_t cap = (size_t)high_water * 2 + NL_BUF_PREPEND;
    if (cap < NL__CONN_OUT_CAP_MIN)
        cap = NL__CONN_OUT_CAP_MIN;
    return cap > UINT32_MAX ? UINT32_MAX : cap;
}

size_t nl__conn_queued(const nl_conn_t *c)
{
    return nl_buf_readable(&c->out) + (c->bq ? c->bq->bytes : 0);
}

size_t nl_conn_output_bytes(const nl_conn_t *c)
{
    return nl__conn_queued(c);
}

/* --- the loop's output gauges --------------------------------------------------------------
 *
 * out_queued_bytes follows every byte into and out of a queue (queued, written, dropped at a
 * close), so the loop's total is known at any moment without walking its connections (the
 * admin console reads it every second). over_high_water counts the connections flagged
 * NL__CONN_OVER_HW: the flag is set or cleared whenever a connection's queue changes, so a
 * mark lowered or raised by nl_conn_set_high_water takes effect at that connection's next
 * send or write. */

/* Sets or clears c's over-the-mark flag from its queue now. */
static void out_gauge_mark(nl_conn_t *c, nl__conn_loop_t *st)
{
    bool is_over = c->high_water != 0 && nl__conn_queued(c) >= c->high_water;
    if (is_over == ((c->flags & NL__CONN_OVER_HW) != 0))
        return;
    c->flags ^= NL__CONN_OVER_HW;
    if (is_over)
        st->stats.over_high_water++;
    else
        st->stats.over_high_water--;
}

/* n bytes left c's queue (written or dropped). */
static void out_gauge_less(nl_conn_t *c, size_t n)
{
    nl__conn_loop_t *st = nl__conn_st(c);
    st->stats.out_queued_bytes -= n;
    if (c->flags & NL__CONN_OVER_HW)
        out_gauge_mark(c, st);
}

/* --- block queue ------------------------------------------------------------------------- */

static nl__conn_bq_entry_t *bq_at(nl__conn_bq_t *q, uint32_t i)
{
    return &q->e[(q->head + i) & (q->cap - 1)];
}

/* The pool for a ring of cap entries, or NULL for a size not pooled. */
static nl__conn_bq_pool_t *bq_pool_of(nl__conn_loop_t *st, uint32_t cap)
{
    for (uint32_t k = 0; k < NL__CONN_BQ_CLASSES; k++) {
        if (cap == NL__CONN_BQ_MIN << k)
            return &st->bq_pools[k];
    }
    return NULL;
}

/* A queue of cap entries: the pool's most recently released one, else a new one. */
static nl__conn_bq_t *bq_take(nl__conn_loop_t *st, uint32_t cap)
{
    nl__conn_bq_pool_t *p = bq_pool_of(st, cap);
    if (p && p->count > 0) {
        nl__conn_bq_t *q = p->items[--p->count];
        if (p->count < p->low)
            p->low = p->count;
        return q;
    }
    return malloc(sizeof(nl__conn_bq_t) + cap * sizeof(nl__conn_bq_entry_t));
}

/* Gives an emptied queue back to its pool, or frees it (a size not pooled, a full pool, no
 * memory to grow the pool's array). */
static void bq_give(nl__conn_loop_t *st, nl__conn_bq_t *q)
{
    nl__conn_bq_pool_t *p = bq_pool_of(st, q->cap);
    if (p && p->count == p->cap && p->cap < NL__CONN_BQ_POOL_MAX) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        nl__conn_bq_t **items = realloc(p->items, cap * sizeof(*items));
        if (items) {
            p->items = items;
            p->cap = cap;
        }
    }
    if (p && p->count < p->cap) {
        p->items[p->count++] = q;
        return;
    }
    free(q);
}

void nl__conn_bq_pools_trim(nl__conn_loop_t *st, bool all)
{
    for (uint32_t k = 0; k < NL__CONN_BQ_CLASSES; k++) {
        nl__conn_bq_pool_t *p = &st->bq_pools[k];
        if (!p->items)
            continue;
        uint32_t idle = all ? p->count : p->low;
        for (uint32_t i = 0; i < idle; i++)
            free(p->items[i]);
        memmove(&p->items[0], &p->items[idle], (p->count - idle) * sizeof(p->items[0]));
        p->count -= idle;
        p->low = p->count;
        if (p->count == 0) {
            /* A quiet loop gives the array back too; the next fan-out grows it again. */
            free(p->items);
            p->items = NULL;
            p->cap = 0;
        }
    }
}

/* Makes room for one more entry, taking a queue or doubling the ring (entries move to slot 0). */
static int bq_reserve(nl_conn_t *c)
{
    nl__conn_bq_t *q = c->bq;
    if (q && q->count < q->cap)
        return 0;
    nl__conn_loop_t *st = nl__conn_st(c);
    uint32_t cap = q ? q->cap * 2 : NL__CONN_BQ_MIN;
    nl__conn_bq_t *nq = bq_take(st, cap);
    if (!nq)
        return -ENOMEM;
    if (q) {
        *nq = *q;
        for (uint32_t i = 0; i < q->count; i++)
            nq->e[i] = *bq_at(q, i);
        bq_give(st, q);
    } else {
        memset(nq, 0, sizeof(*nq));
    }
    nq->head = 0;
    nq->cap = cap;
    c->bq = nq;
    return 0;
}

/* Queues b, taking over one reference the caller holds. */
static void bq_push(nl_conn_t *c, nl_block_t *b)
{
    nl__conn_bq_t *q = c->bq;
    nl__conn_bq_entry_t *e = bq_at(q, q->count);
    /* Owned bytes appended since the previous block go out before this one. */
    size_t pre = nl_buf_readable(&c->out) - q->pre_total;
    e->block = b;
    e->pre = (uint32_t)pre;
    q->pre_total += pre;
    q->bytes += nl__block_len(b);
    q->count++;
}

static void bq_free(nl_conn_t *c)
{
    nl__conn_bq_t *q = c->bq;
    if (!q)
        return;
    for (uint32_t i = 0; i < q->count; i++)
        nl_block_unref(bq_at(q, i)->block);
    bq_give(nl__conn_st(c), q);
    c->bq = NULL;
}

void nl__conn_out_drop(nl_conn_t *c)
{
    nl__conn_loop_t *st = nl__conn_st(c);
    st->stats.out_queued_bytes -= nl__conn_queued(c);
    bq_free(c);
    nl_buf_retrieve_all(&c->out);
    nl_buf_release(&c->out);
    out_gauge_mark(c, st); /* the queue is empty: a closing connection counts no more */
}

/* --- dirty list -------------------------------------------------------------------------- */

int nl__conn_mark_dirty(nl_conn_t *c)
{
    if (c->u.dirty_idx != NL__CONN_NO_IDX)
        return 0;
    uint32_t idx = nl__conn_vec_push(&nl__conn_st(c)->dirty, c);
    if (idx == NL__CONN_NO_IDX)
        return -ENOMEM;
    c->u.dirty_idx = idx;
    return 0;
}

void nl__conn_unmark_dirty(nl_conn_t *c)
{
    if (c->u.dirty_idx == NL__CONN_NO_IDX)
        return;
    nl_conn_t *moved = nl__conn_vec_remove(&nl__conn_st(c)->dirty, c->u.dirty_idx);
    if (moved)
        moved->u.dirty_idx = c->u.dirty_idx;
    c->u.dirty_idx = NL__CONN_NO_IDX;
}

/* --- writing ----------------------------------------------------------------------------- */

/* Fills iov with the queue in stream order from its front: for each block the owned bytes
 * before it, then the block (minus what was written of the head block), then the owned bytes
 * after the last block. Stops early at max entries. Returns the count; *total gets the bytes. */
static int out_build_iov(nl_conn_t *c, struct iovec *iov, int max, size_t *total)
{
    char *owned = (char *)nl_buf_peek(&c->out);
    size_t off = 0;
    size_t sum = 0;
    int n = 0;
    nl__conn_bq_t *q = c->bq;
    uint32_t count = q ? q->count : 0;
    uint32_t i = 0;
    for (; i < count && n + 2 <= max; i++) {
        nl__conn_bq_entry_t *e = bq_at(q, i);
        if (e->pre > 0) {
            iov[n++] = (struct iovec){owned + off, e->pre};
            off += e->pre;
            sum += e->pre;
        }
        size_t skip = i == 0 ? q->head_off : 0;
        size_t len = nl__block_len(e->block) - skip;
        iov[n++] = (struct iovec){nl_block_data(e->block) + skip, len};
        sum += len;
    }
    size_t tail = nl_buf_readable(&c->out) - off;
    if (i == count && tail > 0 && n < max) {
        iov[n++] = (struct iovec){owned + off, tail};
        sum += tail;
    }
    *total = sum;
    return n;
}

/* Drops n written bytes from the front of the queue. */
static void out_consume(nl_conn_t *c, size_t n)
{
    size_t written = n;
    nl__conn_bq_t *q = c->bq;
    while (n > 0 && q && q->count > 0) {
        nl__conn_bq_entry_t *e = bq_at(q, 0);
        if (e->pre > 0) {
            size_t k = n < e->pre ? n : e->pre;
            nl_buf_retrieve(&c->out, k);
            e->pre -= (uint32_t)k;
            q->pre_total -= k;
            n -= k;
            continue;
        }
        size_t left = nl__block_len(e->block) - q->head_off;
        size_t k = n < left ? n : left;
        q->head_off += (uint32_t)k;
        q->bytes -= k;
        n -= k;
        if (k == left) {
            nl_block_unref(e->block);
            q->head = (q->head + 1) & (q->cap - 1);
            q->count--;
            q->head_off = 0;
        }
    }
    if (n > 0)
        nl_buf_retrieve(&c->out, n);
    out_gauge_less(c, written);
}

/*
 * A fan-out queues one small block per message on each connection, so a flush hands the
 * kernel tens of pieces of ~150 bytes per write; the kernel's per-piece cost then outweighs
 * one copy into a contiguous buffer. When a write has several pieces averaging at most
 * NL__CONN_COALESCE_AVG bytes and fits NL__CONN_COALESCE_BYTES, they are copied into the
 * loop's buffer and written as one. The bytes and their order are the same, so a partial
 * write is accounted exactly as before. Measured (bench_gw_fanout --mode throughput,
 * alternating runs): 3.12 -> 3.66, 2.44 -> 2.64, 2.20 -> 3.25M deliveries/s. Large pieces
 * (a 16 KiB pingpong block) are not copied. Returns the new iovec count.
 */
static bool out_is_coalescible(int cnt, size_t total)
{
    return cnt >= 2 && total <= NL__CONN_COALESCE_BYTES &&
           total <= (size_t)cnt * NL__CONN_COALESCE_AVG;
}

/* Copies the pieces to dst in order; returns the bytes copied. */
static size_t out_gather(char *dst, const struct iovec *iov, int cnt)
{
    size_t at = 0;
    for (int k = 0; k < cnt; k++) {
        memcpy(dst + at, iov[k].iov_base, iov[k].iov_len);
        at += iov[k].iov_len;
    }
    return at;
}

static int out_coalesce(nl__conn_loop_t *st, struct iovec *iov, int cnt, size_t total)
{
    if (!out_is_coalescible(cnt, total))
        return cnt;
    if (!st->coalesce_buf && !(st->coalesce_buf = malloc(NL__CONN_COALESCE_BYTES)))
        return cnt; /* no memory: write the pieces as they are */
    iov[0] = (struct iovec){st->coalesce_buf, out_gather(st->coalesce_buf, iov, cnt)};
    st->stats.coalesced_writes++;
    return 1;
}

/* Whether a flush writes c now: not closed, and not waiting for the socket (its NL_WRITE
 * event flushes it then). */
static bool out_is_flushable(const nl_conn_t *c)
{
    return c->state != NL_CONN_DISCONNECTED && !(c->flags & NL__CONN_WRITE_ARMED);
}

/* out_write's results besides 0 (drained) and a negative errno (dead connection). */
enum {
    OUT_FULL = 1,   /* the kernel refused part of a write: the socket is full */
    OUT_BUDGET = 2, /* NL__CONN_WRITE_ROUNDS writes went out whole and more is queued */
};

/* One write through the connection's transport (nl_transport.h): its writev takes the
 * iovecs, and with nothing queued (cnt 0) writes only its own pending bytes. Returning all
 * it was given means nothing of its own is left either. */
static ssize_t out_tp_writev(nl_conn_t *c, const struct iovec *iov, int cnt, size_t total)
{
    ssize_t n = c->desc->tp->writev(c, *nl__conn_tp_state(c), iov, cnt);
    if (n >= 0 && (size_t)n == total)
        c->flags &= (uint16_t)~NL__CONN_TP_WANT_WRITE;
    return n;
}

/* Writes what is queued. Returns 0 when the queue drained, OUT_FULL, OUT_BUDGET, or a negative
 * errno for a dead connection. */
static int out_write(nl_conn_t *c, nl__conn_loop_t *st)
{
    for (int round = 0; round < NL__CONN_WRITE_ROUNDS; round++) {
        struct iovec iov[NL__CONN_IOV_MAX];
        size_t total;
        int cnt = out_build_iov(c, iov, NL__CONN_IOV_MAX, &total);
        if (cnt == 0 && !(c->flags & NL__CONN_TP_WANT_WRITE))
            return 0;
        cnt = out_coalesce(st, iov, cnt, total);
        ssize_t n;
        if (c->flags & NL__CONN_TP_WRITE) {
            n = out_tp_writev(c, iov, cnt, total);
        } else if (cnt == 1) {
            /* One piece (a coalesced write, or one block): send skips sendmsg's copy of the
             * msghdr and iovec, about 3% of a 150-byte loopback write here. */
            n = send(c->io.fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else {
            struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
            n = sendmsg(c->io.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        st->stats.writev_calls++;
        if (n < 0) {
            /* A transport returns its error; errno is whatever its last call left there. */
            int err = c->flags & NL__CONN_TP_WRITE ? (int)n : -errno;
            if (err == -EINTR)
                continue;
            return err == -EAGAIN ? OUT_FULL : err;
        }
        st->stats.bytes_out += (uint64_t)n;
        out_consume(c, (size_t)n);
        if ((size_t)n < total) {
            st->stats.short_writes++;
            return OUT_FULL;
        }
    }
    return nl__conn_out_is_empty(c) ? 0 : OUT_BUDGET;
}

/* Acts on out_write's result: close on error, wait for the socket when it is full, and when
 * drained release the storage, drop NL_WRITE, finish a shutdown or a peer EOF, and tell the
 * owner. */
static void out_settle(nl_conn_t *c, int rc)
{
    if (rc < 0) {
        nl_conn_close(c, rc);
        return;
    }
    if (rc > 0) {
        /* The fd is edge-triggered. A full socket reports the edge when it empties; the
         * epoll_ctl that adds NL_WRITE checks the socket at once. Only a spent budget with
         * NL_WRITE already on has no edge coming and must ask for one. */
        if (!(c->flags & NL__CONN_WRITE_ARMED)) {
            c->flags |= NL__CONN_WRITE_ARMED;
            nl__conn_update_interest(c);
        } else if (rc == OUT_BUDGET) {
            int err = nl_io_rearm(&c->io);
            if (err < 0)
                nl_conn_close(c, err);
        }
        return;
    }
    bq_free(c);
    nl_buf_release(&c->out);
    if (c->flags & NL__CONN_WRITE_ARMED) {
        c->flags &= (uint16_t)~NL__CONN_WRITE_ARMED;
        nl__conn_update_interest(c);
    }
    if (c->flags & NL__CONN_PEER_EOF) {
        nl_conn_close(c, 0);
        return;
    }
    if (c->state == NL_CONN_DISCONNECTING)
        nl__conn_shut_wr(c);
    if (c->state == NL_CONN_DISCONNECTED)
        return;
    c->flags &= (uint16_t)~NL__CONN_WC_PENDING;
    if (c->desc->cbs->on_write_complete)
        c->desc->cbs->on_write_complete(c);
}

void nl__conn_handle_write(nl_conn_t *c)
{
    out_settle(c, out_write(c, nl__conn_st(c)));
}

/* Only keeps the loop from sleeping: the flush itself is the loop's module before-sleep step,
 * which runs after every hook, so what a hook queues (a fan-out to other loops) still goes
 * first. */
static void conn_flush_posted(void *arg)
{
    nl__conn_loop_t *st = arg;
    st->is_flush_posted = false;
}

void nl__conn_flush_soon(nl__conn_loop_t *st)
{
    if (st->dirty.len == 0 || st->is_flush_posted)
        return;
    /* A post from the owner thread does not ring the eventfd, and the loop does not block
     * while posts are queued. On ENOMEM the flush waits for the next wake-up. */
    if (nl_loop_post(st->loop, conn_flush_posted, st) == 0)
        st->is_flush_posted = true;
}

/* --- batched sends ------------------------------------------------------------------------
 *
 * A fan-out leaves one small write on each of thousands of connections. Where the kernel has
 * io_uring, a flush pass hands every connection whose queue is one piece (one block, or only
 * owned bytes) to the kernel NL__CONN_BATCH at a time in one system call each (nl_uring.h),
 * instead of one send per connection. Measured on this VM: 150-byte loopback writes to 4,000
 * sockets cost 5.0-6.9 us each with send and 3.5-4.9 us through the ring. A queue of small
 * pieces that out_coalesce would copy is copied into the batch's arena and sent as one piece;
 * other queues of several pieces (large blocks) take the plain path. Results are applied
 * exactly as a send's: the same consume, the same settle. No callback runs between preparing
 * a batch and its submit, so the buffers it points into stay put. */

typedef struct nl__conn_batch_s {
    nl__uring_t *ring;
    char *arena; /* NL__CONN_BATCH_ARENA bytes; NULL: nothing is coalesced in a batch */
    size_t arena_used;
    nl_conn_t *conn[NL__CONN_BATCH];
    uint32_t len[NL__CONN_BATCH];
    int32_t res[NL__CONN_BATCH];
} nl__conn_batch_t;

void nl__conn_batch_free(nl__conn_loop_t *st)
{
    if (!st->batch)
        return;
    nl__uring_close(st->batch->ring);
    free(st->batch->arena);
    free(st->batch);
    st->batch = NULL;
}

/* Whether b can take sends now: batching on and its ring alive. */
static bool batch_live(const nl__conn_loop_t *st)
{
    return !st->is_batch_off && st->batch && st->batch->ring;
}

/* The batch state, created on first use; NULL when batching is off or unavailable. A kernel
 * without io_uring (or IORING_OP_SEND) turns batching off for good; a shortage (memory,
 * descriptors) is retried after 10 s, then 20 s, and so on up to 10 min. */
static nl__conn_batch_t *batch_get(nl__conn_loop_t *st)
{
    if (st->batch || st->is_batch_off)
        return batch_live(st) ? st->batch : NULL;
    uint64_t now_ms = nl_loop_now_ms(st->loop);
    if (now_ms < st->batch_retry_ms)
        return NULL;
    nl__conn_batch_t *b = malloc(sizeof(*b));
    int err = b ? nl__uring_open(&b->ring, NL__CONN_BATCH) : -ENOMEM;
    if (err < 0) {
        free(b);
        if (err == -ENOMEM || err == -EMFILE || err == -ENFILE || err == -EAGAIN) {
            uint32_t delay =
                st->batch_retry_delay_ms ? st->batch_retry_delay_ms * 2 : NL__CONN_BATCH_RETRY_MS;
            if (delay > NL__CONN_BATCH_RETRY_MAX_MS)
                delay = NL__CONN_BATCH_RETRY_MAX_MS;
            st->batch_retry_delay_ms = delay;
            st->batch_retry_ms = now_ms + delay;
            NL_LOG(NL_WARN, "batch_sends_retry", "err=%s retry_ms=%u", nl_strerror(err), delay);
        } else {
            st->is_batch_off = true;
            st->stats.batch_unavailable = 1;
            NL_LOG(NL_INFO, "batch_sends_unavailable", "err=%s", nl_strerror(err));
        }
        return NULL;
    }
    b->arena = malloc(NL__CONN_BATCH_ARENA);
    b->arena_used = 0;
    st->batch = b;
    st->batch_retry_delay_ms = 0;
    return b;
}

void nl_conn_set_batch_sends(nl_loop_t *loop, bool on)
{
    NL_ASSERT_OWNER(loop);
    nl__conn_loop_t *st = nl__conn_loop_state(loop, true);
    if (!st)
        return;
    st->is_batch_off = !on;
    /* Inside a flush (a callback) the batch may be in use: the flush frees it at its end. */
    if (!on && !st->is_flushing)
        nl__conn_batch_free(st);
    /* The ring now, while descriptors are to spare: set up lazily, by a flush at the process's
     * descriptor limit, it took the one a listener had just freed from its spare (EMFILE), and
     * pending peers then hung in the backlog instead of being closed (test_gw_limits). */
    if (on)
        (void)batch_get(st);
}

/* Closes the ring for good after it failed; the batch itself is freed when the flush ends. */
static void batch_fail(nl__conn_loop_t *st, nl__conn_batch_t *b, int err)
{
    NL_LOG(NL_WARN, "batch_sends_failed", "err=%s", nl_strerror(err));
    nl__uring_close(b->ring);
    b->ring = NULL;
    st->is_batch_off = true;
}

/* The outcome of slot i's send, as out_write's result. */
static int batch_result(nl__conn_loop_t *st, nl__conn_batch_t *b, nl_conn_t *c, int32_t res,
                        uint32_t len)
{
    if (res == -EINVAL || res == -EOPNOTSUPP) {
        /* The ring refused the operation itself (a kernel without IORING_OP_SEND that the
         * probe missed): nothing was sent. The plain way reports the socket's own error. */
        if (b->ring)
            batch_fail(st, b, res);
        return out_write(c, st);
    }
    if (res == -EINTR || res == -ECANCELED)
        return out_write(c, st); /* never sent: the plain way */
    if (res < 0)
        return res == -EAGAIN ? OUT_FULL : res; /* -EIO: unknown whether sent; close */
    st->stats.batch_sends++;
    st->stats.bytes_out += (uint64_t)res;
    out_consume(c, (size_t)res);
    if ((uint32_t)res < len) {
        st->stats.short_writes++;
        return OUT_FULL;
    }
    /* More than the batch took: the queue had more pieces than one write holds, or a
     * callback settled earlier in this batch queued more. */
    return nl__conn_queued(c) > 0 ? out_write(c, st) : 0;
}

static void batch_submit(nl__conn_loop_t *st, nl__conn_batch_t *b)
{
    unsigned n = nl__uring_pending(b->ring);
    if (n == 0)
        return;
    int err = nl__uring_submit(b->ring, b->res);
    if (err < 0)
        batch_fail(st, b, err); /* the ring may hold stale entries: never used again */
    else
        st->stats.batch_submits++;
    for (unsigned i = 0; i < n; i++) {
        nl_conn_t *c = b->conn[i];
        if (c->state != NL_CONN_DISCONNECTED)
            out_settle(c, batch_result(st, b, c, b->res[i], b->len[i]));
    }
    b->arena_used = 0;
}

/* batch_piece's answers besides 0 (c takes the plain path). */
enum { PIECE_READY = 1, PIECE_ARENA_FULL = 2 };

/* Finds the one piece c's queue goes out as in a batch: the queue itself when it is one
 * piece, or its small pieces copied into the arena (out_coalesce's rule). */
static int batch_piece(nl__conn_loop_t *st, nl__conn_batch_t *b, nl_conn_t *c, const void **piece,
                       size_t *total)
{
    struct iovec iov[NL__CONN_IOV_MAX];
    int cnt = out_build_iov(c, iov, NL__CONN_IOV_MAX, total);
    if (*total > UINT32_MAX)
        return 0;
    if (cnt == 1) {
        *piece = iov[0].iov_base;
        return PIECE_READY;
    }
    if (!b->arena || !out_is_coalescible(cnt, *total))
        return 0;
    if (NL__CONN_BATCH_ARENA - b->arena_used < *total)
        return PIECE_ARENA_FULL;
    *piece = b->arena + b->arena_used;
    b->arena_used += out_gather(b->arena + b->arena_used, iov, cnt);
    st->stats.coalesced_writes++;
    return PIECE_READY;
}

/* Sends the pass's one-piece and coalescible writes in batches. Moves the connections left
 * for the plain path to the front of v and returns their count. */
static uint32_t flush_batched(nl__conn_loop_t *st, nl__conn_vec_t *v)
{
    nl__conn_batch_t *b = v->len >= NL__CONN_BATCH_MIN ? batch_get(st) : NULL;
    if (!b)
        return v->len;
    /* b stays allocated until the flush ends; batch_live says whether it still sends. */
    uint32_t rest = 0;
    for (uint32_t i = 0; i < v->len; i++) {
        nl_conn_t *c = v->items[i];
        if (!out_is_flushable(c))
            continue;
        if (c->flags & NL__CONN_TP_WRITE) {
            v->items[rest++] = c; /* a transport writes its own way, one call each */
            continue;
        }
        const void *piece = NULL;
        size_t total = 0;
        int got = batch_live(st) ? batch_piece(st, b, c, &piece, &total) : 0;
        if (got == PIECE_ARENA_FULL) {
            /* Send what the arena holds (callbacks run), then look at c afresh. */
            batch_submit(st, b);
            if (!out_is_flushable(c))
                continue;
            got = batch_live(st) ? batch_piece(st, b, c, &piece, &total) : 0;
        }
        if (got != PIECE_READY) {
            v->items[rest++] = c;
            continue;
        }
        unsigned slot = nl__uring_pending(b->ring);
        b->conn[slot] = c;
        b->len[slot] = (uint32_t)total;
        (void)nl__uring_prep_send(b->ring, c->io.fd, piece, (uint32_t)total, MSG_NOSIGNAL);
        if (slot + 1 == NL__CONN_BATCH)
            batch_submit(st, b);
    }
    if (batch_live(st))
        batch_submit(st, b);
    return rest;
}

/* Each pass takes the whole list, so output queued by callbacks during a pass goes to the
 * next one. Connections closed meanwhile are still allocated (freed after the hooks) and are
 * skipped on their state. */
void nl__conn_flush_dirty(nl__conn_loop_t *st)
{
    /* A callback run by a pass (on_write_complete) that asks for a flush gets none: the pass
     * holds both dirty arrays, and what it queued is picked up by the next pass. */
    if (st->is_flushing)
        return;
    st->is_flushing = true;
    for (int pass = 0; pass < NL__CONN_FLUSH_PASSES && st->dirty.len > 0; pass++) {
        nl__conn_vec_t batch = st->dirty;
        st->dirty = st->dirty_spare;
        st->dirty.len = 0;
        for (uint32_t i = 0; i < batch.len; i++)
            batch.items[i]->u.dirty_idx = NL__CONN_NO_IDX;
        uint32_t rest = flush_batched(st, &batch);
        for (uint32_t i = 0; i < rest; i++) {
            nl_conn_t *c = batch.items[i];
            if (!out_is_flushable(c))
                continue;
            out_settle(c, out_write(c, st));
        }
        /* An array a burst grew (one entry per connection it touched) goes once a pass uses
         * less than a quarter of it, so the loop does not keep it for good. */
        if (batch.cap > NL__CONN_DIRTY_KEEP && (uint64_t)batch.len * 4 < batch.cap) {
            free(batch.items);
            batch = (nl__conn_vec_t){0};
        }
        batch.len = 0;
        st->dirty_spare = batch;
    }
    st->is_flushing = false;
    if (st->batch && !batch_live(st))
        nl__conn_batch_free(st); /* turned off, or its ring failed, during the flush */
    nl__conn_flush_soon(st);
}

/* --- sending ----------------------------------------------------------------------------- */

/* n bytes joined c's queue. Counted at once, before anything that may close c (whose close
 * takes the whole queue off the gauge). */
static void out_gauge_more(nl_conn_t *c, size_t n)
{
    nl__conn_loop_t *st = nl__conn_st(c);
    st->stats.out_queued_bytes += n;
    if (c->high_water != 0)
        out_gauge_mark(c, st);
}

static void out_check_high_water(nl_conn_t *c, size_t before)
{
    if (c->high_water == 0 || !c->desc->cbs->on_high_water || c->state == NL_CONN_DISCONNECTED)
        return;
    size_t now = nl__conn_queued(c);
    if (before < c->high_water && now >= c->high_water)
        c->desc->cbs->on_high_water(c, now);
}

/* Writes straight to the socket. Returns bytes written (0 when the socket is full), or a
 * negative errno for a dead connection. */
static ssize_t out_write_direct(nl_conn_t *c, const void *data, size_t len)
{
    if (c->flags & NL__CONN_TP_WRITE) {
        struct iovec iov = {(void *)data, len};
        ssize_t n = out_tp_writev(c, &iov, 1, len);
        if (n >= 0)
            nl__conn_st(c)->stats.bytes_out += (uint64_t)n;
        return n == -EAGAIN ? 0 : n;
    }
    for (;;) {
        ssize_t n = send(c->io.fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            nl__conn_st(c)->stats.bytes_out += (uint64_t)n;
            return n;
        }
        int err = -errno;
        if (err == -EAGAIN)
            return 0;
        if (err != -EINTR)
            return err;
    }
}

/* nl_conn_send (is_now: write straight to the socket when nothing is queued) and
 * nl_conn_send_later (queue for the iteration's flush). */
static int out_send(nl_conn_t *c, const void *data, size_t len, bool is_now)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state != NL_CONN_CONNECTED)
        return -ENOTCONN;
    if (len == 0)
        return 0;
    size_t owned = nl_buf_readable(&c->out);
    size_t limit = nl__conn_out_cap(c->high_water) - NL_BUF_PREPEND;
    /* Checked up front so a send is queued whole or not at all, never half written. (owned can
     * exceed limit after nl_conn_set_high_water lowered the cap.) */
    if (owned >= limit || len > limit - owned)
        return -ENOBUFS;
    size_t before = nl__conn_queued(c);
    bool is_idle = nl__conn_out_is_empty(c) && !(c->flags & NL__CONN_WRITE_ARMED);
    size_t done = 0;
    if (is_idle && is_now) {
        ssize_t n = out_write_direct(c, data, len);
        if (n < 0) {
            nl_conn_close(c, (int)n);
            return 0;
        }
        done = (size_t)n;
        if (done == len) {
            /* Owed, not called here: a sender inside on_write_complete would recurse. */
            if (c->desc->cbs->on_write_complete) {
                c->flags |= NL__CONN_WC_PENDING;
                (void)nl__conn_mark_dirty(c);
            }
            return 0;
        }
    }
    /* Later: on the dirty list before anything is queued, so queued bytes always have a flush
     * or the socket's readiness coming (the invariant at the top). */
    bool is_marking = is_idle && !is_now && c->u.dirty_idx == NL__CONN_NO_IDX;
    if (is_marking && nl__conn_mark_dirty(c) < 0)
        return -ENOMEM;
    /* Most queued sends are small answers released by the next flush: a first buffer sized to
     * fit (see nl_buf_reserve), not 1 KiB. */
    int err = nl_buf_capacity(&c->out) == 0 ? nl_buf_reserve(&c->out, len - done) : 0;
    if (err == 0)
        err = nl_buf_append(&c->out, (const char *)data + done, len - done);
    if (err < 0) {
        if (done > 0)
            nl_conn_close(c, err); /* part of the message is on the wire: the stream is broken */
        else if (is_marking)
            nl__conn_unmark_dirty(c); /* nothing queued: no flush, no on_write_complete */
        return err;
    }
    out_gauge_more(c, len - done);
    if (is_idle && is_now) {
        /* The kernel took less than all: wait for the socket. */
        c->flags |= NL__CONN_WRITE_ARMED;
        nl__conn_update_interest(c);
    }
    out_check_high_water(c, before);
    return 0;
}

int nl_conn_send(nl_conn_t *c, const void *data, size_t len)
{
    return out_send(c, data, len, true);
}

int nl_conn_send_later(nl_conn_t *c, const void *data, size_t len)
{
    return out_send(c, data, len, false);
}

int nl_conn_send_block_ref(nl_conn_t *c, nl_block_t *b)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state != NL_CONN_CONNECTED)
        return -ENOTCONN;
    if (nl__block_len(b) == 0) {
        nl_block_unref(b); /* nothing to send: the reference is used up */
        return 0;
    }
    if (bq_reserve(c) < 0)
        return -ENOMEM;
    if (!(c->flags & NL__CONN_WRITE_ARMED) && nl__conn_mark_dirty(c) < 0)
        return -ENOMEM;
    size_t before = nl__conn_queued(c);
    bq_push(c, b);
    out_gauge_more(c, nl__block_len(b));
    out_check_high_water(c, before);
    return 0;
}

int nl_conn_send_block(nl_conn_t *c, nl_block_t *b)
{
    nl_block_ref(b);
    int err = nl_conn_send_block_ref(c, b);
    if (err < 0)
        nl_block_unref(b);
    return err;
}
