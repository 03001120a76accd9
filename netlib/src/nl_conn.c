/*
 * nl_conn: connection lifecycle, input, the per-loop id table and input pools (see nl_conn.h).
 * The output queue and its flush live in nl_conn_out.c.
 *
 * Lifetime: nl_conn_close marks the connection DISCONNECTED, takes it out of the id table and
 * the per-loop lists, removes its fd from epoll (nl__io_deinit marks the io closing, so events
 * this epoll_wait already returned for it are skipped), drops queued output, and defers the
 * rest to the end of the iteration: on_close, close(2), free. The fd stays open until then so
 * on_close can still ask for the peer address, and so its number cannot be reused by an accept
 * in the same iteration.
 *
 * Input storage: one nl_buf_read_fd per readiness. A connection holds input storage only while
 * unconsumed bytes (a partial frame) wait in it. When a read has been consumed whole, the
 * empty buffer (nl_buf_t values move with their storage) goes to a small per-loop LIFO pool,
 * and the next read on any connection of the loop with the same input cap takes it from
 * there. So a pingpong neither mallocs nor frees per message, every read lands in the same
 * cache-hot buffer whatever the number of connections, and an idle connection holds no input
 * storage at all. Measured on loopback with 1,000 connections and 16 KiB messages, keeping a
 * buffer per connection instead cost about 20% more server CPU per byte: 1,000 buffers of
 * 16 KiB do not stay in cache. Each pool keeps at most NL__CONN_POOL_BUFS buffers of at most
 * NL__CONN_INPUT_KEEP bytes, and once a second the before-sleep hook frees the ones that sat
 * unused all that time. Connections whose input cap matches none of the loop's
 * NL__CONN_POOLS pools free their storage when it empties instead.
 *
 * Input consumed elsewhere: a caller that pauses reading in on_message and handles the bytes
 * left behind later (frames pipelined behind a request it answers off the loop, such as a
 * token check) would otherwise keep a whole read buffer for a few dozen bytes, first while it
 * waits and then for good, since the recycling above runs only after on_message. So a read
 * that ends paused moves the unread bytes into storage of their own size and gives the read
 * buffer back (conn_input_compact), and nl_conn_input_settle gives back what is left once the
 * caller has consumed them. Measured with 10,000 clients sending Subscribe behind Connect,
 * one IO loop (bench_gw_idle --pipelined): 1,594-1,614 bytes of RSS per idle connection
 * before, 650-750 with the settle alone (the read buffers held through the token checks left
 * holes in the heap), 555-610 with the move too. The loop's in_held_bytes gauge counts the
 * storage its connections hold, so a test can prove that idle connections hold none.
 */
#include "netlib/nl_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netlib/nl_client.h"
#include "nl_conn_int.h"

/* Trim period of the input pools. */
#define NL__CONN_TRIM_MS 1000u
/* An empty input buffer larger than this is freed rather than pooled: one 64 KiB read still
 * fits a pooled buffer, a multi-megabyte burst does not pin its buffer. */
#define NL__CONN_INPUT_KEEP (65536u + NL_BUF_PREPEND)
#define NL__CONN_TABLE_MIN 64u
/* The smallest empty input buffer pooled: what a read allocates at least. */
#define NL__CONN_INPUT_POOL_MIN (NL_BUF_INITIAL + NL_BUF_PREPEND)
/* Back-to-back reads of one connection per readiness (conn_handle_read). */
#define NL__CONN_READS_PER_EVENT 4

/* Ids start at 1 and are never reused (a 64-bit counter does not wrap). */
static uint64_t conn_next_id = 1;

const nl_conn_cbs_t nl__conn_no_cbs;

/* --- small arrays ------------------------------------------------------------------------ */

uint32_t nl__conn_vec_push(nl__conn_vec_t *v, nl_conn_t *c)
{
    if (v->len == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 16;
        nl_conn_t **items = realloc(v->items, cap * sizeof(*items));
        if (!items)
            return NL__CONN_NO_IDX;
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len] = c;
    return v->len++;
}

nl_conn_t *nl__conn_vec_remove(nl__conn_vec_t *v, uint32_t idx)
{
    NL_ASSERT(idx < v->len);
    v->len--;
    if (idx == v->len)
        return NULL;
    v->items[idx] = v->items[v->len];
    return v->items[idx];
}

/* --- id table: open addressing, linear probing, backward-shift deletion ------------------- */

/* Fibonacci hashing spreads the sequential ids evenly over the slots. */
static uint32_t table_home(uint64_t id, uint32_t mask)
{
    return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static void table_place(nl_conn_t **table, uint32_t mask, nl_conn_t *c)
{
    uint32_t i = table_home(c->id, mask);
    while (table[i])
        i = (i + 1) & mask;
    table[i] = c;
}

static int table_resize(nl__conn_loop_t *st, uint32_t slots)
{
    nl_conn_t **table = calloc(slots, sizeof(*table));
    if (!table)
        return -ENOMEM;
    for (uint32_t i = 0; i <= st->table_mask; i++) {
        if (st->table[i])
            table_place(table, slots - 1, st->table[i]);
    }
    free(st->table);
    st->table = table;
    st->table_mask = slots - 1;
    return 0;
}

/* The table grows past 3/4 full and shrinks below 1/8, so it stays compact after a storm. */
static int table_insert(nl__conn_loop_t *st, nl_conn_t *c)
{
    uint32_t slots = st->table_mask + 1;
    if ((uint64_t)(st->table_count + 1) * 4 > (uint64_t)slots * 3) {
        int err = table_resize(st, slots * 2);
        if (err < 0)
            return err;
    }
    table_place(st->table, st->table_mask, c);
    st->table_count++;
    return 0;
}

static nl_conn_t *table_find(const nl__conn_loop_t *st, uint64_t id)
{
    uint32_t i = table_home(id, st->table_mask);
    while (st->table[i]) {
        if (st->table[i]->id == id)
            return st->table[i];
        i = (i + 1) & st->table_mask;
    }
    return NULL;
}

static void table_remove(nl__conn_loop_t *st, const nl_conn_t *c)
{
    uint32_t mask = st->table_mask;
    uint32_t i = table_home(c->id, mask);
    while (st->table[i] != c) {
        NL_ASSERT(st->table[i] != NULL);
        i = (i + 1) & mask;
    }
    /* Shift later members of the probe run back into the hole when their home slot does not
     * lie cyclically in (hole, j]; otherwise a lookup would stop at the hole. */
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!st->table[j])
            break;
        uint32_t home = table_home(st->table[j]->id, mask);
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        st->table[i] = st->table[j];
        i = j;
    }
    st->table[i] = NULL;
    st->table_count--;
    uint32_t slots = mask + 1;
    if (slots > NL__CONN_TABLE_MIN && (uint64_t)st->table_count * 8 < slots)
        (void)table_resize(st, slots / 2); /* failing to shrink costs only memory */
}

/* --- per-loop state ---------------------------------------------------------------------- */

/* --- input pools ------------------------------------------------------------------------- */

/* The pool for an input cap (0 means the buffer default), claiming a free slot if needed.
 * Returns 1 + its index, or 0 when all slots serve other caps. */
static uint8_t conn_pool_for(nl__conn_loop_t *st, size_t max_bytes)
{
    if (max_bytes == 0)
        max_bytes = NL_BUF_DEFAULT_MAX;
    for (int i = 0; i < NL__CONN_POOLS; i++) {
        if (st->pools[i].max_bytes == max_bytes)
            return (uint8_t)(i + 1);
    }
    for (int i = 0; i < NL__CONN_POOLS; i++) {
        if (st->pools[i].max_bytes == 0) {
            st->pools[i].max_bytes = max_bytes;
            return (uint8_t)(i + 1);
        }
    }
    return 0;
}

/* Before a read into a buffer without storage: take the pool's most recent buffer. Its cap is
 * the connection's own (same pool), so the value simply replaces the empty one. */
static void conn_input_take(nl__conn_loop_t *st, nl_conn_t *c)
{
    nl__conn_pool_t *p = &st->pools[c->pool - 1];
    if (p->count == 0)
        return;
    c->in = p->bufs[--p->count];
    st->stats.in_held_bytes += nl_buf_capacity(&c->in);
    if (p->count < p->low)
        p->low = p->count;
}

/* The input buffer is empty: its storage goes back to the pool, or is freed. Only buffers a
 * read allocated are pooled (at least NL_BUF_INITIAL bytes), not the small ones
 * conn_input_compact makes, which the next read would have to grow at once. */
static void conn_input_recycle(nl__conn_loop_t *st, nl_conn_t *c)
{
    size_t cap = nl_buf_capacity(&c->in);
    if (cap == 0)
        return;
    st->stats.in_held_bytes -= cap;
    if (c->pool) {
        nl__conn_pool_t *p = &st->pools[c->pool - 1];
        if (p->count < NL__CONN_POOL_BUFS && cap <= NL__CONN_INPUT_KEEP &&
            cap >= NL__CONN_INPUT_POOL_MIN) {
            p->bufs[p->count++] = c->in;
            nl_buf_init(&c->in, p->max_bytes);
            return;
        }
    }
    nl_buf_release(&c->in);
}

/* Reading stopped (nl_conn_pause_read in on_message) with unread bytes that fill at most half
 * the read buffer: they move into storage of their own size, and the read buffer goes back to
 * the pool for the loop's next read (see the top of the file). Without memory for the move the
 * buffer simply stays. */
static void conn_input_compact(nl__conn_loop_t *st, nl_conn_t *c)
{
    size_t len = nl_buf_readable(&c->in);
    if (len == 0 || NL_BUF_PREPEND + len > nl_buf_capacity(&c->in) / 2)
        return;
    nl_buf_t tight;
    nl_buf_init(&tight, nl_buf_max_bytes(&c->in));
    if (nl_buf_reserve(&tight, len) < 0)
        return;
    memcpy(nl_buf_begin_write(&tight), nl_buf_peek(&c->in), len);
    nl_buf_has_written(&tight, len);
    nl_buf_retrieve_all(&c->in);
    conn_input_recycle(st, c);
    c->in = tight;
    st->stats.in_held_bytes += nl_buf_capacity(&c->in);
}

/* Frees the buffers that sat in a pool through a whole trim period (the oldest, at the
 * bottom of the LIFO), so a loop that went quiet gives its input storage back. */
static void conn_pools_trim(nl__conn_loop_t *st)
{
    for (int i = 0; i < NL__CONN_POOLS; i++) {
        nl__conn_pool_t *p = &st->pools[i];
        uint32_t idle = p->low;
        for (uint32_t k = 0; k < idle; k++)
            nl_buf_deinit(&p->bufs[k]);
        memmove(&p->bufs[0], &p->bufs[idle], (p->count - idle) * sizeof(p->bufs[0]));
        p->count -= idle;
        p->low = p->count;
    }
}

static void conn_before_sleep(nl_loop_t *loop, void *state)
{
    nl__conn_loop_t *st = state;
    if (st->dirty.len > 0)
        nl__conn_flush_dirty(st);
    uint64_t now_ms = nl_loop_now_ms(loop);
    if (now_ms - st->last_trim_ms >= NL__CONN_TRIM_MS) {
        st->last_trim_ms = now_ms;
        conn_pools_trim(st);
        nl__conn_bq_pools_trim(st, false);
    }
}

static void conn_loop_free(void *state)
{
    nl__conn_loop_t *st = state;
    if (!st)
        return;
    free(st->table);
    free(st->coalesce_buf);
    nl__conn_batch_free(st);
    nl__conn_bq_pools_trim(st, true);
    free(st->read_ids);
    free(st->dirty.items);
    free(st->dirty_spare.items);
    for (int i = 0; i < NL__CONN_POOLS; i++) {
        for (uint32_t k = 0; k < st->pools[i].count; k++)
            nl_buf_deinit(&st->pools[i].bufs[k]);
    }
    free(st);
}

nl__conn_loop_t *nl__conn_loop_state(nl_loop_t *loop, bool create)
{
    nl__loop_module_t *m = nl__loop_module(loop, NL__MODULE_CONN);
    if (m->state || !create)
        return m->state;
    nl__conn_loop_t *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->loop = loop;
    st->table = calloc(NL__CONN_TABLE_MIN, sizeof(*st->table));
    if (!st->table)
        goto fail;
    st->table_mask = NL__CONN_TABLE_MIN - 1;
    st->last_trim_ms = nl_loop_now_ms(loop);
    m->state = st;
    m->free_state = conn_loop_free;
    m->before_sleep = conn_before_sleep;
    return st;
fail:
    free(st->table);
    free(st);
    return NULL;
}

/* --- lifecycle --------------------------------------------------------------------------- */

void nl__conn_defer(nl_loop_t *loop, nl__deferred_t *d)
{
    nl__loop_defer(loop, d);
}

static void conn_on_io(nl_io_t *io, unsigned events, void *arg);

int nl__conn_new(nl_conn_t **out, nl_loop_t *loop, int fd, const nl__conn_setup_t *setup)
{
    NL_ASSERT_OWNER(loop);
    nl__conn_loop_t *st = nl__conn_loop_state(loop, true);
    if (!st)
        return -ENOMEM;
    nl__conn_desc_t *desc = setup->desc;
    const nl_transport_t *tp = desc->tp;
    /* Only a connection with a transport has the state pointer behind the plain layout. */
    nl_conn_t *c = calloc(1, tp ? sizeof(nl__conn_tp_t) : sizeof(*c));
    if (!c)
        return -ENOMEM;
    nl__io_init(&c->io, loop, fd, conn_on_io, c);
    size_t hw = setup->high_water_bytes;
    c->high_water = hw > UINT32_MAX ? UINT32_MAX : (uint32_t)hw;
    nl_buf_init(&c->in, setup->max_input_bytes);
    nl_buf_init(&c->out, nl__conn_out_cap(c->high_water));
    c->id = __atomic_fetch_add(&conn_next_id, 1, __ATOMIC_RELAXED);
    c->desc = desc;
    c->pool = conn_pool_for(st, setup->max_input_bytes);
    c->u.dirty_idx = NL__CONN_NO_IDX;
    c->state = NL_CONN_CONNECTED;
    if (tp) {
        c->flags |= (tp->read ? NL__CONN_TP_READ : 0) | (tp->writev ? NL__CONN_TP_WRITE : 0);
        if (tp->handshake) {
            c->flags |= NL__CONN_HANDSHAKE;
            c->state = NL_CONN_CONNECTING;
        }
    }
    if (table_insert(st, c) < 0) {
        free(c);
        return -ENOMEM;
    }
    if (tp && tp->open) {
        int err = tp->open(c, desc->tp_arg, desc->client != NULL, nl__conn_tp_state(c));
        if (err < 0) {
            table_remove(st, c);
            free(c);
            return err;
        }
    }
    nl__conn_desc_ref(desc);
    /* Small replies leave at once; a failure (not TCP) is harmless. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    st->stats.open++;
    nl__loop_handle_opened(loop);
    *out = c;
    return 0;
}

void nl__conn_start(nl_conn_t *c)
{
    nl__conn_update_interest(c);
    if (c->flags & NL__CONN_HANDSHAKE)
        nl__conn_handshake(c);
    else if (c->state == NL_CONN_CONNECTED && c->desc->cbs->on_connected)
        c->desc->cbs->on_connected(c);
}

/* Connections are edge-triggered: epoll reports a socket once per arrival instead of again
 * on every wait until it is drained, which spares the kernel a second poll of each ready
 * socket per wake (about 2% less server CPU per byte in the pingpong, paired runs at 1 to 1,000
 * connections).
 * The price is that a reader must know it drained the socket: see conn_handle_read. */
void nl__conn_update_interest(nl_conn_t *c)
{
    if (c->state == NL_CONN_DISCONNECTED)
        return;
    unsigned want = NL_EDGE;
    if (c->flags & NL__CONN_HANDSHAKE)
        want |= (c->flags & NL__CONN_HS_WANT_WRITE) ? NL_WRITE : NL_READ;
    else if (nl__conn_wants_read(c))
        want |= NL_READ;
    if (c->flags & NL__CONN_WRITE_ARMED)
        want |= NL_WRITE;
    int err = nl_io_set(&c->io, want);
    if (err < 0)
        nl_conn_close(c, err);
}

static void conn_finish(nl_conn_t *c)
{
    nl_loop_t *loop = c->io.loop;
    nl__conn_loop_t *st = nl__conn_st(c);
    nl__conn_desc_t *desc = c->desc;
    size_t size = desc->tp ? sizeof(nl__conn_tp_t) : sizeof(*c);
    /* on_close pairs with on_connected: a connection closed during its handshake was never
     * the application's. */
    bool is_failed = (c->flags & NL__CONN_HANDSHAKE) != 0;
    if (!is_failed && desc->cbs->on_close)
        desc->cbs->on_close(c, c->u.close_reason);
    if (desc->tp && desc->tp->free)
        desc->tp->free(c, *nl__conn_tp_state(c));
    /* The client may be freed by its finish, and with it a descriptor it embeds. */
    nl_client_t *client = desc->client;
    nl__conn_desc_unref(desc);
    if (client)
        nl__client_conn_finished(client, c, is_failed, c->u.close_reason);
    close(c->io.fd);
    st->stats.in_held_bytes -= nl_buf_capacity(&c->in);
    nl_buf_deinit(&c->in);
    nl__conn_out_drop(c);
    st->stats.open--;
    nl__loop_handle_closed(loop);
    nl__poison(c, size);
    free(c);
    /* on_close may have queued output on other connections after the flush already ran. */
    nl__conn_flush_soon(st);
}

/* The loop's deferred finish of its closing list. An on_close that closes another connection
 * appends it to the list, and it is finished in this same pass, after the ones before it. */
static void conn_finish_closing(nl__deferred_t *d)
{
    nl__conn_loop_t *st =
        (nl__conn_loop_t *)((char *)d - offsetof(nl__conn_loop_t, closing_finish));
    while (st->closing_head) {
        nl_conn_t *c = st->closing_head;
        st->closing_head = c->next_closing;
        if (!st->closing_head)
            st->closing_tail = NULL;
        conn_finish(c);
    }
    st->is_closing_queued = false;
}

void nl_conn_close(nl_conn_t *c, int reason)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state == NL_CONN_DISCONNECTED)
        return;
    nl__conn_loop_t *st = nl__conn_st(c);
    nl__conn_unmark_dirty(c);
    table_remove(st, c);
    c->state = NL_CONN_DISCONNECTED;
    c->u.close_reason = reason;
    nl__io_deinit(&c->io);
    nl__conn_out_drop(c);
    c->next_closing = NULL;
    if (st->closing_tail)
        st->closing_tail->next_closing = c;
    else
        st->closing_head = c;
    st->closing_tail = c;
    if (!st->is_closing_queued) {
        st->is_closing_queued = true;
        st->closing_finish.finish = conn_finish_closing;
        nl__conn_defer(c->io.loop, &st->closing_finish);
    }
}

void nl__conn_shut_wr(nl_conn_t *c)
{
    if (c->flags & NL__CONN_SHUT_WR)
        return;
    const nl_transport_t *tp = c->desc->tp;
    if (tp && tp->shutdown) {
        /* The transport's goodbye (close_notify, a close frame) goes before the FIN; with the
         * socket full it waits for writability (the flush that drains calls this again). */
        int rc = tp->shutdown(c, *nl__conn_tp_state(c));
        if (rc == NL_TRANSPORT_WANT_WRITE) {
            if (!(c->flags & NL__CONN_WRITE_ARMED)) {
                c->flags |= NL__CONN_WRITE_ARMED;
                nl__conn_update_interest(c);
            }
            return;
        }
        if (rc < 0) {
            nl_conn_close(c, rc);
            return;
        }
    }
    c->flags |= NL__CONN_SHUT_WR;
    if (shutdown(c->io.fd, SHUT_WR) < 0) {
        int err = -errno;
        if (err != -ENOTCONN)
            nl_conn_close(c, err);
    }
}

void nl_conn_shutdown(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->state != NL_CONN_CONNECTED)
        return;
    c->state = NL_CONN_DISCONNECTING;
    /* With output queued, the flush that drains it half-closes. */
    if (nl__conn_out_is_empty(c))
        nl__conn_shut_wr(c);
}

/* --- input ------------------------------------------------------------------------------- */

/* The peer closed its side. Output still queued is written first (a half-closed peer may still
 * read), then the connection closes with 0; sends are refused from now on. */
static void conn_handle_eof(nl_conn_t *c)
{
    if (nl__conn_out_is_empty(c)) {
        nl_conn_close(c, 0);
        return;
    }
    c->flags |= NL__CONN_PEER_EOF;
    if (c->state == NL_CONN_CONNECTED)
        c->state = NL_CONN_DISCONNECTING;
    nl__conn_update_interest(c);
}

/* One read and its on_message. Returns true when the connection still reads and the socket
 * may hold more: the read took all it offered, or is_short_inconclusive says a short read proves
 * nothing (a FIN or urgent data is pending).
 *
 * With receive timestamps the read goes through recvmsg and its stamp is published in the
 * loop state, with the connection it belongs to, for the length of on_message only (see
 * nl_conn_rx_time_ns), then cleared, so no other callback can take it for its own. Without,
 * the read stays the plain readv. */
static bool conn_read_once(nl_conn_t *c, bool is_short_inconclusive)
{
    nl__conn_loop_t *st = nl__conn_st(c);
    if (c->pool && nl_buf_capacity(&c->in) == 0)
        conn_input_take(st, c);
    size_t offer = nl_buf_read_offer(&c->in);
    bool is_stamped = (c->flags & NL__CONN_RX_STAMPS) != 0;
    size_t held = nl_buf_capacity(&c->in);
    ssize_t n;
    if (c->flags & NL__CONN_TP_READ) {
        /* A transport's read says nothing by being short (one TLS record per call): it
         * reads on until -EAGAIN. */
        n = c->desc->tp->read(c, *nl__conn_tp_state(c), &c->in);
        is_short_inconclusive = true;
    } else {
        n = is_stamped ? nl_buf_read_fd_stamped(&c->in, c->io.fd, &st->rx_ns)
                       : nl_buf_read_fd(&c->in, c->io.fd);
    }
    /* The read may have allocated or grown the storage; on_message leaves it as it is. */
    st->stats.in_held_bytes += nl_buf_capacity(&c->in) - held;
    if (n > 0) {
        st->stats.bytes_in += (uint64_t)n;
        if (is_stamped)
            st->rx_conn = c;
        if (c->desc->cbs->on_message)
            c->desc->cbs->on_message(c, &c->in);
        else
            nl_buf_retrieve_all(&c->in);
        if (is_stamped) {
            st->rx_conn = NULL;
            st->rx_ns = 0;
        }
        if (c->state == NL_CONN_DISCONNECTED)
            return false;
        if (nl_buf_readable(&c->in) == 0)
            conn_input_recycle(st, c);
        else if (c->flags & NL__CONN_READ_PAUSED)
            conn_input_compact(st, c);
        return ((size_t)n == offer || is_short_inconclusive) && nl__conn_wants_read(c);
    }
    if (nl_buf_readable(&c->in) == 0)
        conn_input_recycle(st, c);
    if (n == 0) {
        conn_handle_eof(c);
    } else if (n == -ENOBUFS) {
        /* The input buffer is at its cap and on_message left it full: stop reading until
         * nl_conn_resume_read, whose epoll_ctl makes the kernel look at the socket again. A
         * frame larger than the cap is the caller's protocol error to handle. */
        c->flags |= NL__CONN_INPUT_FULL;
        nl__conn_update_interest(c);
    } else if (n != -EAGAIN) {
        nl_conn_close(c, (int)n);
    }
    return false;
}

/* A read shorter than it offered drained the socket's data; one that filled everything may
 * have left bytes behind, for which edge-triggered epoll reports nothing new. So may a read cut
 * short by a FIN that came with the data (NL_RDHUP) or by TCP's urgent mark (NL_PRI: the
 * kernel stops a read there and the bytes behind it wait). In each case the connection reads
 * again, at most NL__CONN_READS_PER_EVENT times in a row (a fast sender must not starve the
 * loop's other connections), and then asks the kernel to report it again on the next wait. */
void nl__conn_handle_read(nl_conn_t *c, unsigned events)
{
    bool is_short_inconclusive = (events & (NL_RDHUP | NL_PRI)) != 0;
    for (int i = 0; i < NL__CONN_READS_PER_EVENT; i++) {
        if (!conn_read_once(c, is_short_inconclusive))
            return;
    }
    int err = nl_io_rearm(&c->io);
    if (err < 0) {
        nl_conn_close(c, err);
        return;
    }
    /* The rearm makes epoll look at the socket again, not inside the transport. */
    if (c->flags & NL__CONN_TP_READ)
        nl__conn_read_pending(c);
}

/* Hang-up and error arrive as NL_READ/NL_WRITE (the loop folds them into the interest), so the
 * read or write sees the error itself. */
static void conn_on_io(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    nl_conn_t *c = arg;
    if (c->flags & NL__CONN_HANDSHAKE) {
        nl__conn_handshake(c);
        return;
    }
    if (events & NL_READ) {
        nl__conn_handle_read(c, events);
        if (c->state == NL_CONN_DISCONNECTED)
            return;
    }
    if ((events & NL_WRITE) && (c->flags & NL__CONN_WRITE_ARMED))
        nl__conn_handle_write(c);
}

/* --- accessors and settings -------------------------------------------------------------- */

uint64_t nl_conn_id(const nl_conn_t *c)
{
    return c->id;
}

nl_loop_t *nl_conn_loop(const nl_conn_t *c)
{
    return c->io.loop;
}

int nl_conn_fd(const nl_conn_t *c)
{
    return c->io.fd;
}

nl_conn_state_t nl_conn_state(const nl_conn_t *c)
{
    return (nl_conn_state_t)c->state;
}

void *nl_conn_ctx(const nl_conn_t *c)
{
    return c->desc->arg;
}

nl_client_t *nl_client_of(const nl_conn_t *c)
{
    return c->desc->client;
}

void nl_conn_set_data(nl_conn_t *c, void *data)
{
    c->data = data;
}

void *nl_conn_data(const nl_conn_t *c)
{
    return c->data;
}

int nl_conn_peer(const nl_conn_t *c, char *out, size_t out_len)
{
    struct sockaddr_storage ss = {0};
    socklen_t len = sizeof(ss);
    if (getpeername(c->io.fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    char ip[INET6_ADDRSTRLEN];
    int n;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        n = snprintf(out, out_len, "%s:%u", ip, (unsigned)ntohs(sin->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
        n = snprintf(out, out_len, "[%s]:%u", ip, (unsigned)ntohs(sin6->sin6_port));
    } else {
        return -EAFNOSUPPORT;
    }
    return (n < 0 || (size_t)n >= out_len) ? -ENOSPC : 0;
}

/* Gives b a new cap. A buffer holding storage is rebuilt around its readable bytes (a copy;
 * these settings change rarely); if they do not fit under the new cap the old one stays. */
static bool conn_buf_recap(nl_buf_t *b, size_t max_bytes)
{
    if (nl_buf_capacity(b) == 0) {
        nl_buf_init(b, max_bytes);
        return true;
    }
    nl_buf_t nb;
    nl_buf_init(&nb, max_bytes);
    if (nl_buf_append(&nb, nl_buf_peek(b), nl_buf_readable(b)) < 0) {
        nl_buf_deinit(&nb);
        return false;
    }
    nl_buf_deinit(b);
    *b = nb;
    return true;
}

void nl_conn_set_high_water(nl_conn_t *c, size_t bytes)
{
    NL_ASSERT_OWNER(c->io.loop);
    c->high_water = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
    (void)conn_buf_recap(&c->out, nl__conn_out_cap(c->high_water));
}

void nl_conn_set_max_input(nl_conn_t *c, size_t bytes)
{
    NL_ASSERT_OWNER(c->io.loop);
    /* The pool follows the cap the buffer really has: a buffer holding more than the new cap
     * keeps its old one. */
    nl__conn_loop_t *st = nl__conn_st(c);
    size_t held = nl_buf_capacity(&c->in);
    if (conn_buf_recap(&c->in, bytes))
        c->pool = conn_pool_for(st, bytes);
    st->stats.in_held_bytes += nl_buf_capacity(&c->in) - held;
    if (c->flags & NL__CONN_INPUT_FULL) {
        c->flags &= (uint16_t)~NL__CONN_INPUT_FULL;
        nl__conn_update_interest(c);
        if (c->flags & NL__CONN_TP_READ)
            nl__conn_read_pending(c);
    }
}

void nl_conn_input_settle(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (nl_buf_readable(&c->in) == 0)
        conn_input_recycle(nl__conn_st(c), c);
}

void nl_conn_pause_read(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    c->flags |= NL__CONN_READ_PAUSED;
    nl__conn_update_interest(c);
}

void nl_conn_resume_read(nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    c->flags &= (uint16_t) ~(NL__CONN_READ_PAUSED | NL__CONN_INPUT_FULL);
    nl__conn_update_interest(c);
    /* epoll_ctl re-examines the socket; input a transport holds needs a read of its own. */
    if (c->flags & NL__CONN_TP_READ)
        nl__conn_read_pending(c);
}

int nl_conn_set_nodelay(nl_conn_t *c, bool on)
{
    int v = on ? 1 : 0;
    if (setsockopt(c->io.fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) < 0)
        return -errno;
    return 0;
}

int nl_conn_set_rx_timestamps(nl_conn_t *c, bool on)
{
    NL_ASSERT_OWNER(c->io.loop);
    if (c->flags & NL__CONN_TP_READ)
        return -EOPNOTSUPP; /* the transport reads, not recvmsg */
    int v = on ? 1 : 0;
    if (setsockopt(c->io.fd, SOL_SOCKET, SO_TIMESTAMPNS, &v, sizeof(v)) < 0)
        return -errno;
    if (on)
        c->flags |= NL__CONN_RX_STAMPS;
    else
        c->flags &= (uint16_t)~NL__CONN_RX_STAMPS;
    return 0;
}

uint64_t nl_conn_rx_time_ns(const nl_conn_t *c)
{
    NL_ASSERT_OWNER(c->io.loop);
    const nl__conn_loop_t *st = nl__conn_st(c);
    return st->rx_conn == c ? st->rx_ns : 0;
}

/* --- lookups across threads -------------------------------------------------------------- */

nl_conn_t *nl_conn_lookup(nl_loop_t *loop, uint64_t conn_id)
{
    NL_ASSERT_OWNER(loop);
    nl__conn_loop_t *st = nl__conn_loop_state(loop, false);
    return st ? table_find(st, conn_id) : NULL;
}

typedef struct conn_send_to_s {
    nl_loop_t *loop;
    uint64_t id;
    size_t len;
    char data[];
} conn_send_to_t;

/* Runs on the owner: the id is the weak reference, so a connection gone meanwhile is simply
 * not found. A refused send (closing, -ENOBUFS) is dropped and counted the same way. */
static void conn_send_to_run(void *arg)
{
    conn_send_to_t *m = arg;
    nl__conn_loop_t *st = nl__conn_loop_state(m->loop, true);
    nl_conn_t *c = st ? table_find(st, m->id) : NULL;
    if (!c || nl_conn_send(c, m->data, m->len) < 0) {
        if (st)
            st->stats.send_to_dropped++;
    }
    free(m);
}

int nl_conn_send_to(nl_loop_t *loop, uint64_t conn_id, const void *data, size_t len)
{
    conn_send_to_t *m = malloc(sizeof(*m) + len);
    if (!m)
        return -ENOMEM;
    m->loop = loop;
    m->id = conn_id;
    m->len = len;
    if (len > 0)
        memcpy(m->data, data, len);
    int err = nl_loop_post(loop, conn_send_to_run, m);
    if (err < 0)
        free(m);
    return err;
}

void nl_conn_get_loop_stats(nl_loop_t *loop, nl_conn_loop_stats_t *out)
{
    NL_ASSERT_OWNER(loop);
    nl__conn_loop_t *st = nl__conn_loop_state(loop, false);
    if (st)
        *out = st->stats;
    else
        memset(out, 0, sizeof(*out));
}

void nl_conn_flush_loop(nl_loop_t *loop)
{
    NL_ASSERT_OWNER(loop);
    nl__conn_loop_t *st = nl__conn_loop_state(loop, false);
    if (st && st->dirty.len > 0)
        nl__conn_flush_dirty(st);
}

int nl__sockaddr_parse(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    if (!host || inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        if (!host)
            sin->sin_addr.s_addr = htonl(INADDR_ANY);
        *len = sizeof(*sin);
        return 0;
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        *len = sizeof(*sin6);
        return 0;
    }
    return -EINVAL;
}
