/*
 * bench_gw_transport_tlsmem: what one server-side TLS connection keeps in memory, counted
 * rather than guessed. OpenSSL's allocator is hooked (CRYPTO_set_mem_functions, before
 * anything in the process used OpenSSL) so that every block records its size, which side
 * allocated it (the server SSL or the client SSL: the code around each call says) and
 * OpenSSL's own file and line. A server SSL set up as herald's gw_tls.c sets it
 * (SSL_MODE_RELEASE_BUFFERS, session cache off, renegotiation off, a P-256 certificate from the
 * test CA) and a client SSL talk over a socketpair, as over a socket: the server's live bytes
 * are read after SSL_new, after the handshake, and after a message each way; then the live
 * blocks are summed by OpenSSL source file. The same again without SSL_MODE_RELEASE_BUFFERS,
 * and with TLS 1.2, for comparison. malloc's own overhead (about 8-16 bytes a block) is not
 * in these sums; RSS per connection (bench_gw_transport --mode idle) has it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bench_gw_transport.h"

enum { SIDE_OTHER = 0, SIDE_SERVER = 1, SIDE_CLIENT = 2, SIDES = 3 };

/* A block's header, in front of what OpenSSL gets; 16-byte aligned. */
typedef struct blk_s {
    struct blk_s *prev;
    struct blk_s *next;
    const char *file;
    size_t size;
    int line;
    int side;
    int gen; /* the measurement it was allocated in */
    char pad[4];
} blk_t;

static blk_t live_head = {.prev = &live_head, .next = &live_head};
static size_t live_bytes[SIDES];
static size_t live_blocks[SIDES];
static int side_now = SIDE_OTHER;
static int gen_now;

static void blk_link(blk_t *b)
{
    b->next = live_head.next;
    b->prev = &live_head;
    live_head.next->prev = b;
    live_head.next = b;
    live_bytes[b->side] += b->size;
    live_blocks[b->side]++;
}

static void blk_unlink(blk_t *b)
{
    b->prev->next = b->next;
    b->next->prev = b->prev;
    live_bytes[b->side] -= b->size;
    live_blocks[b->side]--;
}

static void *mem_malloc(size_t num, const char *file, int line)
{
    blk_t *b = malloc(sizeof(*b) + num);
    if (!b)
        return NULL;
    *b = (blk_t){.file = file, .size = num, .line = line, .side = side_now, .gen = gen_now};
    blk_link(b);
    return b + 1;
}

static void mem_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    if (!p)
        return;
    blk_t *b = (blk_t *)p - 1;
    blk_unlink(b);
    free(b);
}

static void *mem_realloc(void *p, size_t num, const char *file, int line)
{
    if (!p)
        return mem_malloc(num, file, line);
    blk_t *b = (blk_t *)p - 1;
    blk_unlink(b);
    blk_t *nb = realloc(b, sizeof(*nb) + num);
    if (!nb) {
        blk_link(b);
        return NULL;
    }
    nb->size = num;
    nb->file = file;
    nb->line = line;
    blk_link(nb); /* stays with the side that first allocated it */
    return nb + 1;
}

/* Runs one handshake step of ssl as side; returns 1 when done, 0 to go on, -1 on failure. */
static int step(SSL *ssl, int side)
{
    side_now = side;
    int rc = SSL_do_handshake(ssl);
    side_now = SIDE_OTHER;
    if (rc == 1)
        return 1;
    int e = SSL_get_error(ssl, rc);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

/* Reads what there is on ssl as side (the client takes the server's session tickets so). */
static void drain(SSL *ssl, int side)
{
    char buf[4096];
    size_t n;
    side_now = side;
    while (SSL_read_ex(ssl, buf, sizeof(buf), &n) == 1)
        ;
    ERR_clear_error();
    side_now = SIDE_OTHER;
}

/* Sums the server's live blocks by OpenSSL source file and prints the largest. */
typedef struct by_file_s {
    const char *file;
    size_t bytes;
    size_t blocks;
} by_file_t;

static void print_by_file(void)
{
    by_file_t agg[64];
    size_t n = 0;
    for (blk_t *b = live_head.next; b != &live_head; b = b->next) {
        if (b->side != SIDE_SERVER || b->gen != gen_now)
            continue;
        const char *f = b->file ? b->file : "?";
        size_t k = 0;
        while (k < n && strcmp(agg[k].file, f) != 0)
            k++;
        if (k == n && n < 64)
            agg[n++] = (by_file_t){.file = f};
        if (k < 64) {
            agg[k].bytes += b->size;
            agg[k].blocks++;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (agg[j].bytes > agg[i].bytes) {
                by_file_t t = agg[i];
                agg[i] = agg[j];
                agg[j] = t;
            }
    for (size_t i = 0; i < n && i < 8; i++)
        printf("      %6zu B in %3zu blocks  %s\n", agg[i].bytes, agg[i].blocks, agg[i].file);
}

/* One connection: server SSL on one end of a socketpair, client on the other. */
static int measure(SSL_CTX *sctx, SSL_CTX *cctx, const char *label, bool is_detail)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        return -1;
    gen_now++;
    size_t base = live_bytes[SIDE_SERVER];
    size_t base_blocks = live_blocks[SIDE_SERVER];
    side_now = SIDE_SERVER;
    SSL *s = SSL_new(sctx);
    SSL_set_fd(s, sv[0]);
    SSL_set_accept_state(s);
    side_now = SIDE_CLIENT;
    SSL *c = SSL_new(cctx);
    SSL_set_fd(c, sv[1]);
    SSL_set_connect_state(c);
    side_now = SIDE_OTHER;
    size_t after_new = live_bytes[SIDE_SERVER] - base;
    int sd = 0, cd = 0;
    for (int k = 0; k < 100 && (sd != 1 || cd != 1); k++) {
        if (cd != 1 && (cd = step(c, SIDE_CLIENT)) < 0)
            break;
        if (sd != 1 && (sd = step(s, SIDE_SERVER)) < 0)
            break;
    }
    if (sd != 1 || cd != 1) {
        fprintf(stderr, "tls-memory: the handshake failed\n");
        ERR_print_errors_fp(stderr);
        return -1;
    }
    drain(c, SIDE_CLIENT);
    drain(s, SIDE_SERVER);
    size_t after_hs = live_bytes[SIDE_SERVER] - base;
    size_t blocks_hs = live_blocks[SIDE_SERVER] - base_blocks;
    /* A Push's worth out, a Ping's worth in. */
    char msg[160] = {0};
    size_t n;
    side_now = SIDE_SERVER;
    SSL_write_ex(s, msg, sizeof(msg), &n);
    drain(c, SIDE_CLIENT);
    side_now = SIDE_CLIENT;
    SSL_write_ex(c, msg, 8, &n);
    drain(s, SIDE_SERVER);
    size_t after_msg = live_bytes[SIDE_SERVER] - base;
    if (label)
        printf("  %-44s SSL_new %6zu B, after the handshake %6zu B (%zu blocks), after a "
               "message each way %6zu B\n",
               label, after_new, after_hs, blocks_hs, after_msg);
    else
        printf("  (the first connection also filled OpenSSL's one-time caches: %zu B after its "
               "handshake, left out below)\n",
               after_hs);
    if (is_detail && label) {
        printf("    the server connection's live bytes by OpenSSL source file, after the "
               "message:\n");
        print_by_file();
    }
    side_now = SIDE_SERVER;
    SSL_free(s);
    side_now = SIDE_CLIENT;
    SSL_free(c);
    side_now = SIDE_OTHER;
    close(sv[0]);
    close(sv[1]);
    return 0;
}

static SSL_CTX *server_ctx(const char *dir, bool is_release)
{
    char cert[300], key[300];
    snprintf(cert, sizeof(cert), "%s/server.pem", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    long mode = SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
    SSL_CTX_set_mode(ctx, is_release ? mode | SSL_MODE_RELEASE_BUFFERS : mode);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int bt_tls_memory(const char *dir)
{
    if (!CRYPTO_set_mem_functions(mem_malloc, mem_realloc, mem_free)) {
        fprintf(stderr, "tls-memory: OpenSSL allocated before its allocator could be hooked\n");
        return -1;
    }
    printf("== tls-memory: one server-side TLS connection (OpenSSL %s), P-256 certificate, "
           "bytes OpenSSL holds for it\n",
           OpenSSL_version(OPENSSL_VERSION));
    SSL_CTX *rel = server_ctx(dir, true);
    SSL_CTX *keep = server_ctx(dir, false);
    SSL_CTX *c13 = SSL_CTX_new(TLS_client_method());
    SSL_CTX *c12 = SSL_CTX_new(TLS_client_method());
    if (!rel || !keep || !c13 || !c12)
        return -1;
    SSL_CTX_set_max_proto_version(c12, TLS1_2_VERSION);
    /* A first connection fills process-wide caches (fetched algorithms, provider tables),
     * allocated during its calls but not its own: measured, then left out. */
    int rc = measure(rel, c13, NULL, false);
    if (rc == 0)
        rc = measure(rel, c12, NULL, false);
    if (rc == 0)
        rc = measure(rel, c13, "TLS 1.3, SSL_MODE_RELEASE_BUFFERS (herald)", true);
    if (rc == 0)
        rc = measure(rel, c12, "TLS 1.2, SSL_MODE_RELEASE_BUFFERS", false);
    if (rc == 0)
        rc = measure(keep, c13, "TLS 1.3, buffers kept", false);
    SSL_CTX_free(rel);
    SSL_CTX_free(keep);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
    return rc;
}
