/*
 * gw_listener: a node's client listeners, the handshake deadline every transport's handshake
 * runs under, and the figures they count. See gw_transport.h.
 *
 * The deadline is a timer per connection, made when the handshake starts and closed when it
 * ends: a connection holds it for the few milliseconds of a handshake, never while idle.
 */
#include "gw_transport.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "gw_transport_int.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* What a client of a ws listener closed for want of descriptors is told. */
static const char ws_refusal[] = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n";

/* At most a quarter of a small limit is reserved, so that a node under a tiny RLIMIT_NOFILE
 * still takes clients. */
int gw_listener_fd_line(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)INT_MAX)
        return 0;
    int limit = (int)rl.rlim_cur;
    int reserve = GW_LISTENER_FD_RESERVE < limit / 4 ? GW_LISTENER_FD_RESERVE : limit / 4;
    NL_LOG(NL_INFO, "fd_reserve", "nofile=%d reserved=%d", limit, reserve);
    return limit - reserve;
}

static const nl_transport_t *listener_transport(const gw_listener_t *l)
{
    if (l->kind == GW_LISTENER_WS)
        return l->tls ? &gw_wss_transport : &gw_ws_transport;
    return l->tls ? &gw_tls_transport : NULL;
}

static int listener_set_origins(gw_listener_t *l, const gw_ws_opts_t *ws)
{
    const char *list = ws && ws->allowed_origins ? ws->allowed_origins : "";
    l->is_any_origin = strcmp(list, "*") == 0;
    l->allowed_origins = strdup(list);
    return l->allowed_origins ? 0 : -ENOMEM;
}

int gw_listener_new(gw_listener_t **out, const gw_listener_opts_t *o)
{
    gw_listener_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->kind = o->kind;
    l->tls = o->tls;
    atomic_init(&l->handshake_timeout_ms,
                o->handshake_timeout_ms ? o->handshake_timeout_ms : 10000);
    atomic_init(&l->max_message_bytes, o->max_message_bytes ? o->max_message_bytes : 65536);
    snprintf(l->name, sizeof(l->name), "%s", o->name ? o->name : "tcp");
    int err = listener_set_origins(l, o->ws);
    bool is_ws = o->kind == GW_LISTENER_WS;
    nl_server_opts_t opts = {
        .host = o->host,
        .port = o->port,
        .accept_loop = o->accept_loop,
        .io_loops = o->io_loops,
        .io_loop_count = o->n_io_loops,
        .reuseport = o->reuseport,
        .cbs = o->cbs,
        .arg = o->arg,
        .high_water_bytes = o->high_water_bytes,
        .max_input_bytes = o->max_input_bytes,
        .max_fd = o->max_fd,
        /* A refusal goes out in plain bytes before any handshake: a TLS peer could not read
         * it, an HTTP client reads the 503. */
        .refusal = o->tls  ? NULL
                   : is_ws ? (const void *)ws_refusal
                           : o->refusal,
        .refusal_len = o->tls  ? 0
                       : is_ws ? sizeof(ws_refusal) - 1
                               : o->refusal_len,
        .transport = listener_transport(l),
        .transport_arg = l,
    };
    if (err == 0)
        err = nl_server_new(&l->server, &opts);
    if (err == 0)
        err = nl_server_start(l->server);
    if (err < 0) {
        NL_LOG(NL_ERROR, "listen_failed", "listener=%s host=%s port=%u err=%s", l->name,
               o->host ? o->host : "0.0.0.0", o->port, nl_strerror(err));
        gw_listener_close(l);
        gw_listener_free(l);
        return err;
    }
    l->port = nl_server_port(l->server);
    *out = l;
    return 0;
}

uint16_t gw_listener_port(const gw_listener_t *l)
{
    return l->port;
}

bool gw_listener_is_ws(const gw_listener_t *l)
{
    return l->kind == GW_LISTENER_WS;
}

void gw_listener_close(gw_listener_t *l)
{
    if (l && l->server && !l->is_closed) {
        /* The server's figures stay readable (scrapes read them after a drain began). */
        nl_server_get_stats(l->server, &l->final);
        nl_server_close(l->server);
        l->server = NULL;
        l->is_closed = true;
    }
}

void gw_listener_free(gw_listener_t *l)
{
    if (!l)
        return;
    gw_listener_close(l);
    free(l->allowed_origins);
    free(l);
}

void gw_listener_set_max_message(gw_listener_t *l, uint32_t bytes)
{
    atomic_store_explicit(&l->max_message_bytes, bytes, memory_order_relaxed);
}

void gw_listener_set_handshake_timeout(gw_listener_t *l, uint64_t timeout_ms)
{
    atomic_store_explicit(&l->handshake_timeout_ms, timeout_ms ? timeout_ms : 10000,
                          memory_order_relaxed);
}

void gw_listener_stats(const gw_listener_t *l, gw_transport_stats_t *out)
{
#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
    memset(out, 0, sizeof(*out));
    out->is_ws = l->kind == GW_LISTENER_WS;
    out->is_tls = l->tls != NULL;
    out->handshaking = LOAD(l->n.handshaking);
    out->handshakes = LOAD(l->n.handshakes);
    for (int r = 0; r < GW_HS_FAIL_REASONS; r++)
        out->handshake_failures[r] = LOAD(l->n.handshake_failures[r]);
    for (int e = 0; e < GW_WS_ERRS; e++)
        out->ws_errors[e] = LOAD(l->n.ws_errors[e]);
    out->ws_pings = LOAD(l->n.ws_pings);
    out->tls_renegotiations = LOAD(l->n.tls_renegotiations);
    out->tls_ktls = LOAD(l->n.tls_ktls);
#undef LOAD
}

void gw_listener_server_stats(const gw_listener_t *l, nl_server_stats_t *out)
{
    nl_server_stats_t st = l->final;
    if (l->server)
        nl_server_get_stats(l->server, &st);
    out->accepted += st.accepted;
    out->emfile_events += st.emfile_events;
}

const char *gw_hs_fail_str(gw_hs_fail_t r)
{
    static const char *const names[GW_HS_FAIL_REASONS] = {
        [GW_HS_FAIL_TIMEOUT] = "timeout",         [GW_HS_FAIL_CLOSED] = "closed",
        [GW_HS_FAIL_PLAINTEXT] = "plaintext",     [GW_HS_FAIL_TLS] = "tls_error",
        [GW_HS_FAIL_BAD_REQUEST] = "bad_request", [GW_HS_FAIL_TOO_LARGE] = "too_large",
        [GW_HS_FAIL_NOT_FOUND] = "not_found",     [GW_HS_FAIL_ORIGIN] = "origin",
        [GW_HS_FAIL_VERSION] = "version",         [GW_HS_FAIL_SUBPROTOCOL] = "subprotocol",
    };
    return (unsigned)r < GW_HS_FAIL_REASONS ? names[r] : "unknown";
}

const char *gw_ws_err_str(gw_ws_err_t e)
{
    static const char *const names[GW_WS_ERRS] = {
        [GW_WS_ERR_PROTOCOL] = "protocol_error",
        [GW_WS_ERR_TEXT] = "text_message",
        [GW_WS_ERR_TOO_BIG] = "too_big",
    };
    return (unsigned)e < GW_WS_ERRS ? names[e] : "unknown";
}

/* --- the handshake deadline ------------------------------------------------------------------ */

static void hs_on_deadline(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_hs_t *hs = arg;
    if (nl_conn_state(hs->c) != NL_CONN_CONNECTING)
        return;
    gw_hs_end(hs, false, GW_HS_FAIL_TIMEOUT);
    nl_conn_close(hs->c, -ETIMEDOUT);
}

int gw_hs_start(gw_hs_t *hs, gw_listener_t *l, nl_conn_t *c)
{
    hs->l = l;
    hs->c = c;
    hs->is_failed = false;
    int err = nl_timer_new(&hs->timer, nl_conn_loop(c), hs_on_deadline, hs);
    if (err == 0)
        err = nl_timer_start(
            hs->timer, atomic_load_explicit(&l->handshake_timeout_ms, memory_order_relaxed), 0);
    if (err < 0) {
        if (hs->timer)
            nl_timer_close(hs->timer, NULL);
        hs->timer = NULL;
        return err;
    }
    gw_listener_count(&l->n.handshaking, 1);
    return 0;
}

void gw_hs_end(gw_hs_t *hs, bool is_done, gw_hs_fail_t why)
{
    if (!hs->timer)
        return;
    nl_timer_close(hs->timer, NULL);
    hs->timer = NULL;
    gw_listener_count(&hs->l->n.handshaking, -1);
    if (is_done) {
        gw_listener_count(&hs->l->n.handshakes, 1);
    } else {
        hs->is_failed = true;
        gw_listener_count(&hs->l->n.handshake_failures[why], 1);
    }
}

void gw_hs_free(gw_hs_t *hs)
{
    gw_hs_end(hs, false, GW_HS_FAIL_CLOSED);
}

/* --- server frame headers --------------------------------------------------------------------- */

/* RFC 6455 section 5.2, the server's side: FIN and the binary opcode, no mask, the length in
 * 7 bits, or 126 and 16 bits, or 127 and 64 bits (network order, the shortest that holds it).
 * Written here rather than through libwslay, whose frame writer works on its own context:
 * this header is built once per message into the block every WebSocket subscriber shares. */
size_t gw_ws_header(uint8_t out[GW_WS_HEADER_MAX], size_t payload_len)
{
    out[0] = 0x80 | 0x2;
    if (payload_len < 126) {
        out[1] = (uint8_t)payload_len;
        return 2;
    }
    if (payload_len <= 0xffff) {
        out[1] = 126;
        out[2] = (uint8_t)(payload_len >> 8);
        out[3] = (uint8_t)payload_len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++)
        out[2 + i] = (uint8_t)((uint64_t)payload_len >> (56 - 8 * i));
    return 10;
}
