/*
 * lg_transport: the run's transport choice and what its connections share (see
 * lg_transport.h).
 */
#include "lg_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_tls.h"
#include "netlib/nl_common.h"

static bool is_ip_literal(const char *name)
{
    struct in_addr a4;
    struct in6_addr a6;
    return inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1;
}

int lg_transport_new(lg_transport_t **out, const lg_transport_opts_t *opts, char *err,
                     size_t err_len)
{
    lg_transport_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->kind = opts->kind;
    t->is_tls_insecure = opts->is_tls_insecure;
    t->handshake_timeout_ms = opts->handshake_timeout_ms;
    t->on_fail = opts->on_fail;
    const char *name =
        opts->tls_server_name && opts->tls_server_name[0] ? opts->tls_server_name : opts->host;
    if (strlen(name) >= sizeof(t->server_name)) {
        snprintf(err, err_len, "server name too long: %s", name);
        free(t);
        return -EINVAL;
    }
    strcpy(t->server_name, name);
    t->is_server_name_ip = is_ip_literal(name);
    /* RFC 7230 section 5.4: an IPv6 literal goes in brackets. */
    snprintf(t->host_header, sizeof(t->host_header), strchr(opts->host, ':') ? "[%s]:%u" : "%s:%u",
             opts->host, opts->port);
    if (lg_transport_is_tls(t->kind)) {
        int rc = lg_tls_ctx_new(t, opts->tls_ca_file, err, err_len);
        if (rc < 0) {
            free(t);
            return rc;
        }
    }
    *out = t;
    return 0;
}

void lg_transport_free(lg_transport_t *t)
{
    if (!t)
        return;
    lg_tls_ctx_free(t);
    free(t);
}

const nl_transport_t *lg_transport_ops(const lg_transport_t *t)
{
    switch (t->kind) {
    case LG_TRANSPORT_TLS:
        return &lg_tls_transport;
    case LG_TRANSPORT_WS:
    case LG_TRANSPORT_WSS:
        return &lg_ws_transport;
    default:
        return NULL;
    }
}

void lg_transport_fail(const lg_transport_t *t, nl_conn_t *c, const char *reason)
{
    if (t->on_fail)
        t->on_fail(c, reason);
}

/* The deadline's timer: a handshake still running is cut off. */
static void deadline_fire(nl_timer_t *timer, void *arg)
{
    NL_UNUSED(timer);
    nl_conn_t *c = arg;
    if (nl_conn_state(c) == NL_CONN_CONNECTING)
        nl_conn_close(c, -ETIMEDOUT);
}

int lg_transport_deadline_start(const lg_transport_t *t, nl_conn_t *c, nl_timer_t **timer)
{
    *timer = NULL;
    if (t->handshake_timeout_ms == 0)
        return 0;
    int rc = nl_timer_new(timer, nl_conn_loop(c), deadline_fire, c);
    if (rc < 0)
        return rc;
    rc = nl_timer_start(*timer, t->handshake_timeout_ms, 0);
    if (rc < 0)
        lg_transport_deadline_stop(timer);
    return rc;
}

void lg_transport_deadline_stop(nl_timer_t **timer)
{
    if (*timer)
        nl_timer_close(*timer, NULL);
    *timer = NULL;
}
