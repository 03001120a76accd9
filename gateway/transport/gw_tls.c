/*
 * gw_tls: TLS under a client connection, with OpenSSL. See gw_transport.h; nl_transport.h walks
 * through how such a transport sits on netlib's seam.
 *
 * One SSL per connection, on its socket (SSL_set_fd): OpenSSL reads and writes the fd itself,
 * non-blocking, and says WANT_READ / WANT_WRITE, which netlib turns into fd interest.
 *   - Memory: no SSL exists until the client's first TLS record is in the socket whole (a
 *     peek at its header, FIONREAD for the rest): SSL_new and the first SSL_do_handshake cost
 *     about 43 KiB (the SSL, the handshake's message buffer, the read buffer), held until the
 *     handshake ends, so a client that connects and sends nothing, or a byte or a part of a
 *     record, costs this struct and its deadline timer only (measured: tests/ws/idle_rss.js).
 *     After the handshake SSL_MODE_RELEASE_BUFFERS frees the record buffers (about 34 KiB)
 *     whenever they are empty, and OpenSSL frees the handshake's buffers itself: an idle
 *     connection holds about 14 KB of OpenSSL 3.0 state that no API releases (the SSL struct
 *     7.6 KB, two AES-GCM contexts, the session, a copy of the CERT, the transcript digests,
 *     the key shares). SSL_free_buffers after the handshake was measured to free nothing more.
 *     The server's session cache is off: TLS 1.3 resumes from stateless tickets, which cost no
 *     memory here.
 *   - Renegotiation (TLS 1.2) is refused (SSL_OP_NO_RENEGOTIATION); a client that asks is
 *     counted and closed, so it cannot make the server do handshake work on a live connection.
 *   - Kernel TLS: with is_ktls and a kernel that offers it, OpenSSL installs the keys in the
 *     kernel after the handshake; when it did for sending, netlib writes to the fd directly
 *     again (and in io_uring batches), the kernel encrypting. Reads stay with SSL_read.
 *   - Rotation: the context is swapped under a mutex; a handshake takes a reference to the
 *     current one (SSL_new, at the client's first record), so connections made with the old
 *     certificate keep theirs.
 */
#include "gw_transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "gw_transport_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

struct gw_tls_s {
    pthread_mutex_t mu; /* guards ctx: swapped by a reload, referenced by each handshake */
    SSL_CTX *ctx;
};

struct gw_tls_conn_s {
    uint16_t magic; /* not a WebSocket state (gw_ws.c's WS_MAGIC) */
    SSL *ssl;       /* NULL until the client's first record is in (tls_conn_begin) */
    gw_listener_t *l;
    int fd;
    gw_hs_t hs; /* a tls listener's handshake deadline (a wss connection has the ws one) */
    bool is_renegotiating; /* the info callback saw a client ask for a new handshake */
    /* A write met WANT_WRITE: OpenSSL holds a record made of the first bytes it was given and
     * refuses a retry shorter than that record ("bad length"). The next write offers at least
     * this many bytes (0: no record pending). */
    uint16_t retry_len;
};

/* The most plaintext one TLS record carries. */
#define TLS_RECORD_MAX 16384

/* A TLS record's header: type, version (2 bytes), length (2 bytes). */
#define TLS_HEADER_LEN 5
#define TLS_TYPE_HANDSHAKE 22
/* The longest record OpenSSL takes (16 KiB of plaintext and the most a cipher adds): a header
 * claiming more is not waited for, OpenSSL refuses it at once. */
#define TLS_RECORD_WIRE_MAX (TLS_RECORD_MAX + 2048)

/* The SSL's index of its gw_tls_conn_t (ex_data), for the info callback. */
static int tls_conn_index = -1;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_init_once(void)
{
    tls_conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* The first error on OpenSSL's queue as text (and the queue emptied). */
static void tls_err_text(char *err, size_t err_len, const char *what, const char *file)
{
    unsigned long e = ERR_get_error();
    char reason[160] = "unknown error";
    if (e)
        ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    if (err && err_len)
        snprintf(err, err_len, "%s %s: %s", what, file ? file : "", reason);
}

/* A client hello after the handshake (TLS 1.2 renegotiation): noted, refused by OpenSSL
 * (SSL_OP_NO_RENEGOTIATION), and the connection closed by the read that met it. With that
 * option OpenSSL starts no handshake (no SSL_CB_HANDSHAKE_START): it answers the hello with a
 * no_renegotiation warning alert and reads on, so the alert it writes is what tells us. A
 * handshake starting after the first one is caught too, should the option ever be dropped. */
static void tls_info(const SSL *ssl, int where, int ret)
{
    bool is_refusal = (where & SSL_CB_WRITE_ALERT) && (ret & 0xff) == SSL_AD_NO_RENEGOTIATION;
    bool is_restart = (where & SSL_CB_HANDSHAKE_START) && SSL_is_init_finished(ssl);
    if (!is_refusal && !is_restart)
        return;
    gw_tls_conn_t *t = SSL_get_ex_data(ssl, tls_conn_index);
    if (t)
        t->is_renegotiating = true;
}

static SSL_CTX *tls_ctx_new(const gw_tls_opts_t *o, char *err, size_t err_len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        tls_err_text(err, err_len, "tls context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    uint64_t options = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* OpenSSL 3 reports a peer's FIN without close_notify as an error (unexpected EOF), not as
     * SSL_ERROR_SYSCALL: every client that just closed its socket was counted as an I/O error.
     * herald's frames carry their length, so a truncation cannot pass for a whole frame. */
    options |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
#ifdef SSL_OP_ENABLE_KTLS
    if (o->is_ktls)
        options |= SSL_OP_ENABLE_KTLS;
#endif
    SSL_CTX_set_options(ctx, options);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_info_callback(ctx, tls_info);
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
        tls_err_text(err, err_len, "certificate", o->cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
        tls_err_text(err, err_len, "private key", o->key_file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        tls_err_text(err, err_len, "the key does not match the certificate", o->key_file);
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

int gw_tls_new(gw_tls_t **out, const gw_tls_opts_t *opts, char *err, size_t err_len)
{
    pthread_once(&tls_once, tls_init_once);
    gw_tls_t *tls = calloc(1, sizeof(*tls));
    if (!tls)
        return -ENOMEM;
    tls->ctx = tls_ctx_new(opts, err, err_len);
    if (!tls->ctx) {
        free(tls);
        return -EINVAL;
    }
    pthread_mutex_init(&tls->mu, NULL);
    *out = tls;
    return 0;
}

int gw_tls_reload(gw_tls_t *tls, const gw_tls_opts_t *opts, char *err, size_t err_len)
{
    SSL_CTX *ctx = tls_ctx_new(opts, err, err_len);
    if (!ctx)
        return -EINVAL;
    pthread_mutex_lock(&tls->mu);
    SSL_CTX *old = tls->ctx;
    tls->ctx = ctx;
    pthread_mutex_unlock(&tls->mu);
    SSL_CTX_free(old); /* connections made with it hold their own reference */
    return 0;
}

void gw_tls_free(gw_tls_t *tls)
{
    if (!tls)
        return;
    SSL_CTX_free(tls->ctx);
    pthread_mutex_destroy(&tls->mu);
    free(tls);
}

bool gw_tls_kernel_offers_ktls(void)
{
    /* The "tls" upper-layer protocol attaches to a connected TCP socket only: try it on one
     * to ourselves. ENOENT: the kernel has no tls module. */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    bool is_ok = l >= 0 && c >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                 listen(l, 1) == 0 && getsockname(l, (struct sockaddr *)&a, &alen) == 0 &&
                 connect(c, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                 setsockopt(c, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) == 0;
    if (c >= 0)
        close(c);
    if (l >= 0)
        close(l);
    return is_ok;
}

/* --- a connection's TLS -------------------------------------------------------------------- */

gw_tls_conn_t *gw_tls_conn_new(gw_listener_t *l, nl_conn_t *c)
{
    gw_tls_conn_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->l = l;
    t->fd = nl_conn_fd(c);
    return t;
}

/* The SSL, made when the client's first record is in. Returns 0 or -ENOMEM. */
static int tls_conn_begin(gw_tls_conn_t *t)
{
    pthread_mutex_lock(&t->l->tls->mu);
    t->ssl = SSL_new(t->l->tls->ctx);
    pthread_mutex_unlock(&t->l->tls->mu);
    if (!t->ssl || SSL_set_fd(t->ssl, t->fd) != 1) {
        ERR_clear_error();
        SSL_free(t->ssl);
        t->ssl = NULL;
        return -ENOMEM;
    }
    SSL_set_ex_data(t->ssl, tls_conn_index, t);
    SSL_set_accept_state(t->ssl);
    return 0;
}

/*
 * Whether the client's first record is in the socket whole, read without taking it (the
 * bytes stay for OpenSSL). Returns 1 when it is (or when what came is no TLS handshake record
 * at all: OpenSSL refuses it and counts why), 0 to wait for more bytes, -ECONNRESET when the
 * client left first, -errno.
 *
 * Waiting costs no memory, while an SSL that has begun its handshake holds ~43 KiB until it
 * ends (or the deadline): a client that sends nothing, or one byte, or part of a record,
 * would make the server hold that for as long as the connect timeout. Waiting for a whole
 * record rather than a first byte makes a stalled client send a record (~200 bytes to 16 KiB)
 * to cost us the handshake's memory. The connection is edge-triggered: a wait ends with the
 * next bytes (or the FIN), each of which raises a new edge.
 */
static int tls_first_record(int fd)
{
    uint8_t head[TLS_HEADER_LEN];
    ssize_t n;
    do {
        n = recv(fd, head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        int err = -errno;
        return err == -EAGAIN || err == -EWOULDBLOCK ? 0 : err;
    }
    if (n == 0)
        return -ECONNRESET; /* left without a byte: counted as closed */
    if (head[0] != TLS_TYPE_HANDSHAKE)
        return 1; /* plain text, say: OpenSSL tells what it is from the first bytes */
    int queued = 0;
    if (n == TLS_HEADER_LEN) {
        size_t len = (size_t)head[3] << 8 | head[4];
        if (len > TLS_RECORD_WIRE_MAX || ioctl(fd, FIONREAD, &queued) != 0 ||
            (size_t)queued >= TLS_HEADER_LEN + len)
            return 1;
    }
    /* Part of a record: wait, unless the client shut its side (the bytes it sent are all it
     * will: then it left, as an empty stream would). */
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return -ECONNRESET;
    return 0;
}

void gw_tls_conn_free(gw_tls_conn_t *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    free(t);
}

/* A failed handshake's reason: plain text (an HTTP request, say) on a TLS port is told apart
 * from the rest. */
static gw_hs_fail_t tls_fail_reason(void)
{
    unsigned long e = ERR_peek_error();
    int reason = ERR_GET_REASON(e);
    ERR_clear_error();
    if (reason == SSL_R_HTTP_REQUEST || reason == SSL_R_HTTPS_PROXY_REQUEST ||
        reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG)
        return GW_HS_FAIL_PLAINTEXT;
    return GW_HS_FAIL_TLS;
}

int gw_tls_conn_handshake(gw_tls_conn_t *t, gw_hs_t *hs)
{
    if (!t->ssl) {
        int go = tls_first_record(t->fd);
        if (go <= 0)
            return go == 0 ? NL_TRANSPORT_WANT_READ : go;
        if (tls_conn_begin(t) < 0)
            return -ENOMEM;
    }
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1)
        return NL_TRANSPORT_DONE;
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ)
        return NL_TRANSPORT_WANT_READ;
    if (e == SSL_ERROR_WANT_WRITE)
        return NL_TRANSPORT_WANT_WRITE;
    /* The peer left (a FIN reads as ZERO_RETURN with SSL_OP_IGNORE_UNEXPECTED_EOF): counted
     * as closed by the transport's free, not as a TLS error. */
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
        ERR_clear_error();
        return -ECONNRESET;
    }
    gw_hs_end(hs, false, tls_fail_reason());
    return -EPROTO;
}

ssize_t gw_tls_conn_read(gw_tls_conn_t *t, void *buf, size_t len)
{
    size_t n = 0;
    int rc = SSL_read_ex(t->ssl, buf, len, &n);
    if (t->is_renegotiating) {
        gw_listener_count(&t->l->n.tls_renegotiations, 1);
        ERR_clear_error();
        return -EPROTO;
    }
    if (rc == 1)
        return (ssize_t)n;
    int e = SSL_get_error(t->ssl, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        return -EAGAIN; /* the caller asks netlib for writability (see gw_tls_read) */
    case SSL_ERROR_ZERO_RETURN:
        return 0; /* close_notify */
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0)
            return 0; /* EOF without close_notify (OpenSSL 1.1): as the end of the stream */
        ERR_clear_error();
        return -EIO;
    default:
        ERR_clear_error();
        return -EPROTO;
    }
}

/* Copies up to cap bytes of iov, from piece i at offset off on, into out. Returns the bytes. */
static size_t tls_gather(char *out, size_t cap, const struct iovec *iov, int iovcnt, int i,
                         size_t off)
{
    size_t n = 0;
    for (; i < iovcnt && n < cap; i++, off = 0) {
        size_t k = iov[i].iov_len - off;
        if (k > cap - n)
            k = cap - n;
        memcpy(out + n, (const char *)iov[i].iov_base + off, k);
        n += k;
    }
    return n;
}

/*
 * Two rules of OpenSSL's that netlib's writev contract (nl_transport.h) does not give for free:
 * - With SSL_MODE_ENABLE_PARTIAL_WRITE an SSL_write_ex that succeeds may have taken one record
 *   (16 KiB) only, with the socket far from full: so each piece is written until it is all
 *   taken or OpenSSL says WANT_WRITE. A short count while the socket still had room broke the
 *   contract (short means full): netlib then waited for a writability edge the kernel never
 *   sends, and a Push over 32 KiB (or a burst coalesced past that) stalled the connection.
 * - After WANT_WRITE the retry must offer at least the pending record's bytes. netlib offers the
 *   same bytes, but not always cut into the same pieces: a write of many small pieces is copied
 *   into one (nl_conn_out.c's coalescing) or not, depending on what else is queued, so the
 *   first piece of the retry can be one 100-byte Push where OpenSSL holds a 16 KiB record. The
 *   retry then failed with "bad length" and the connection hung (seen with a subscriber that
 *   stopped reading while small and large Pushes were queued). So a first piece shorter than
 *   retry_len is made up from the pieces after it.
 */
ssize_t gw_tls_conn_writev(gw_tls_conn_t *t, const struct iovec *iov, int iovcnt)
{
    size_t total = 0;
    int i = 0;
    size_t off = 0; /* taken of iov[i] */
    while (i < iovcnt) {
        const char *p = (const char *)iov[i].iov_base + off;
        size_t left = iov[i].iov_len - off;
        if (left == 0) {
            i++;
            off = 0;
            continue;
        }
        char gathered[TLS_RECORD_MAX];
        if (left < t->retry_len) {
            left = tls_gather(gathered, t->retry_len, iov, iovcnt, i, off);
            p = gathered;
        }
        size_t n = 0;
        int rc = SSL_write_ex(t->ssl, p, left, &n);
        if (rc != 1) {
            int e = SSL_get_error(t->ssl, rc);
            if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                t->retry_len = (uint16_t)(left < TLS_RECORD_MAX ? left : TLS_RECORD_MAX);
                return total > 0 ? (ssize_t)total : -EAGAIN;
            }
            ERR_clear_error();
            return total > 0 ? (ssize_t)total : -EPIPE;
        }
        t->retry_len = 0;
        total += n;
        /* n may span pieces when they were gathered. */
        for (off += n; i < iovcnt && off >= iov[i].iov_len; i++)
            off -= iov[i].iov_len;
    }
    return (ssize_t)total;
}

bool gw_tls_conn_has_pending(const gw_tls_conn_t *t)
{
    return t->ssl && SSL_pending(t->ssl) > 0;
}

int gw_tls_conn_shutdown(gw_tls_conn_t *t)
{
    if (!t->ssl || !SSL_is_init_finished(t->ssl))
        return NL_TRANSPORT_DONE;
    int rc = SSL_shutdown(t->ssl);
    if (rc >= 0)
        return NL_TRANSPORT_DONE;
    if (SSL_get_error(t->ssl, rc) == SSL_ERROR_WANT_WRITE)
        return NL_TRANSPORT_WANT_WRITE;
    ERR_clear_error();
    return NL_TRANSPORT_DONE; /* nothing better to say: the half-close follows */
}

void gw_tls_conn_after_handshake(gw_tls_conn_t *t, nl_conn_t *c)
{
#ifdef SSL_OP_ENABLE_KTLS
    if (BIO_get_ktls_send(SSL_get_wbio(t->ssl))) {
        gw_listener_count(&t->l->n.tls_ktls, 1);
        nl_conn_transport_set_fd_writes(c, true);
    }
#else
    NL_UNUSED(t);
    NL_UNUSED(c);
#endif
}

/* --- the tls listener's transport ---------------------------------------------------------- */

static int tls_open(nl_conn_t *c, void *arg, bool is_client, void **state)
{
    NL_UNUSED(is_client);
    gw_listener_t *l = arg;
    gw_tls_conn_t *t = gw_tls_conn_new(l, c);
    if (!t)
        return -ENOMEM;
    int err = gw_hs_start(&t->hs, l, c);
    if (err < 0) {
        gw_tls_conn_free(t);
        return err;
    }
    *state = t;
    return 0;
}

static int tls_handshake(nl_conn_t *c, void *state)
{
    gw_tls_conn_t *t = state;
    int rc = gw_tls_conn_handshake(t, &t->hs);
    if (rc == NL_TRANSPORT_DONE) {
        gw_hs_end(&t->hs, true, 0);
        gw_tls_conn_after_handshake(t, c);
    }
    return rc;
}

static ssize_t tls_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    gw_tls_conn_t *t = state;
    /* A record holds at most 16 KiB: room for one, or the input is at its cap. */
    if (nl_buf_ensure_writable(in, 16384) < 0 && nl_buf_writable(in) == 0)
        return -ENOBUFS;
    ssize_t n = gw_tls_conn_read(t, nl_buf_begin_write(in), nl_buf_writable(in));
    if (n > 0)
        nl_buf_has_written(in, (size_t)n);
    else if (n == -EAGAIN && SSL_want_write(t->ssl))
        nl_conn_transport_want_write(c); /* a read that must write first (a key update) */
    return n;
}

static ssize_t tls_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    gw_tls_conn_t *t = state;
    ssize_t n = gw_tls_conn_writev(t, iov, iovcnt);
    if (iovcnt == 0 && SSL_want_read(t->ssl))
        nl_conn_transport_want_read(c); /* the write a read waited for is done */
    return n;
}

static bool tls_has_pending(const nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    return gw_tls_conn_has_pending(state);
}

static int tls_shutdown(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    return gw_tls_conn_shutdown(state);
}

static void tls_free(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    gw_tls_conn_t *t = state;
    gw_hs_free(&t->hs);
    gw_tls_conn_free(t);
}

const nl_transport_t gw_tls_transport = {
    .name = "tls",
    .open = tls_open,
    .handshake = tls_handshake,
    .read = tls_read,
    .writev = tls_writev,
    .has_pending = tls_has_pending,
    .shutdown = tls_shutdown,
    .free = tls_free,
};
