/*
 * bench_gw_transport_pub: the broadcast's publisher, two ways.
 *
 *   client  one connection to herald's client listener (TCP, or TLS when herald's speaks TLS,
 *           with loadgen's lg_tls), Publish frames sent in bursts: the frames of a burst are
 *           queued with nl_conn_send_later and leave in the loop's flush as one write, over
 *           TLS one record. herald's TLS read takes a record per call and 4 calls per
 *           readiness, so a record per Publish would let it broadcast at most 4 messages per
 *           loop iteration (each subscriber's write then carries 4 Pushes at most); a burst
 *           keeps TLS's batches near TCP's, where one read takes every Publish there is.
 *           PublishOks are read and dropped.
 *   admin   POST /api/publish on the admin port, plain HTTP whatever the clients speak, over
 *           BT_PUB_HTTP_CONNS keep-alive connections, a request each at most; the time to each
 *           answer is kept (herald answers once its loop has taken the message).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gw_transport.h"
#include "lg_wire.h"
#include "netlib/nl_client.h"
#include "netlib/nl_common.h"
#include "proto_frame.h"

typedef struct pub_conn_s {
    struct bt_pub_s *p;
    nl_client_t *cl;
    nl_conn_t *conn;
    uint64_t sent_ns;
    bool is_up;   /* client: ConnectOk came; admin: connected */
    bool is_busy; /* admin: a request in flight */
} pub_conn_t;

struct bt_pub_s {
    bt_pub_opts_t o;
    pub_conn_t conns[BT_PUB_HTTP_CONNS];
    int n_conns;
    uint8_t *msg; /* the Publish frame or the HTTP request */
    size_t msg_len;
    size_t seq_at; /* where the sequence number goes */
    nl_buf_t scratch;
    uint64_t answers;
    uint64_t answer_ns_sum;
    uint64_t answer_ns_max;
    uint64_t errors;
};

static void pub_on_connected(nl_conn_t *c)
{
    pub_conn_t *pc = nl_client_arg(nl_client_of(c));
    bt_pub_t *p = pc->p;
    nl_conn_set_data(c, pc);
    pc->conn = c;
    if (p->o.is_admin) {
        pc->is_up = true;
        return;
    }
    Herald__Connect body = HERALD__CONNECT__INIT;
    body.token = (char *)p->o.token;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = 1;
    f.body_case = HERALD__FRAME__BODY_CONNECT;
    f.connect = &body;
    int rc = proto_frame_append(&p->scratch, &f);
    if (rc == 0)
        rc = nl_conn_send(c, nl_buf_peek(&p->scratch), nl_buf_readable(&p->scratch));
    nl_buf_retrieve_all(&p->scratch);
    if (rc < 0)
        nl_conn_close(c, rc);
}

/* Client: the ConnectOk, then PublishOks (dropped). */
static void pub_client_message(pub_conn_t *pc, nl_buf_t *in)
{
    for (;;) {
        const uint8_t *b = (const uint8_t *)nl_buf_peek(in);
        size_t hdr, body;
        if (lg_wire_split(b, nl_buf_readable(in), 1u << 20, &hdr, &body) != 1)
            return;
        if (!pc->is_up) {
            Herald__Frame *f = NULL;
            if (proto_frame_unpack(b + hdr, body, &f) == 0) {
                pc->is_up = f->body_case == HERALD__FRAME__BODY_CONNECT_OK;
                proto_frame_free(f);
            }
            if (!pc->is_up)
                pc->p->errors++;
        }
        nl_buf_retrieve(in, hdr + body);
    }
}

/* Admin: whole responses (a status line, headers, a Content-Length body). */
static void pub_admin_message(pub_conn_t *pc, nl_buf_t *in)
{
    bt_pub_t *p = pc->p;
    for (;;) {
        const char *b = nl_buf_peek(in);
        size_t n = nl_buf_readable(in);
        const char *end = memmem(b, n, "\r\n\r\n", 4);
        if (!end)
            return;
        size_t head = (size_t)(end - b) + 4;
        const char *cl = memmem(b, head, "Content-Length:", 15);
        size_t body = cl ? strtoul(cl + 15, NULL, 10) : 0;
        if (n < head + body)
            return;
        if (n < 12 || strncmp(b + 9, "200", 3) != 0)
            p->errors++;
        nl_buf_retrieve(in, head + body);
        pc->is_busy = false;
        uint64_t took = nl_now_ns() - pc->sent_ns;
        p->answer_ns_sum += took;
        p->answers++;
        if (took > p->answer_ns_max)
            p->answer_ns_max = took;
        if (p->o.on_answer)
            p->o.on_answer(p->o.arg);
    }
}

static void pub_on_message(nl_conn_t *c, nl_buf_t *in)
{
    pub_conn_t *pc = nl_conn_data(c);
    if (pc->p->o.is_admin)
        pub_admin_message(pc, in);
    else
        pub_client_message(pc, in);
}

static void pub_on_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    pub_conn_t *pc = nl_conn_data(c);
    if (!pc)
        return;
    pc->conn = NULL;
    pc->is_up = false;
    if (!pc->p->o.is_closing)
        pc->p->errors++;
}

static const nl_conn_cbs_t pub_cbs = {
    .on_connected = pub_on_connected, .on_message = pub_on_message, .on_close = pub_on_close};

/* The message, built once; each send patches the sequence number into the payload. */
static int pub_prepare(bt_pub_t *p)
{
    if (p->o.is_admin) {
        char head[256];
        int n = snprintf(head, sizeof(head),
                         "POST /api/publish?channel=fan HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "X-Api-Key: %s\r\nContent-Length: %zu\r\n\r\n",
                         p->o.api_key, p->o.payload);
        p->msg_len = (size_t)n + p->o.payload;
        if (!(p->msg = malloc(p->msg_len)))
            return -ENOMEM;
        memcpy(p->msg, head, (size_t)n);
        memset(p->msg + n, 'x', p->o.payload);
        p->seq_at = (size_t)n;
        return 0;
    }
    uint8_t *pad = malloc(p->o.payload);
    if (!pad)
        return -ENOMEM;
    memset(pad, 'x', p->o.payload);
    Herald__Publish body = HERALD__PUBLISH__INIT;
    body.channel = (char *)"fan";
    body.payload.data = pad;
    body.payload.len = p->o.payload;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = 7;
    f.body_case = HERALD__FRAME__BODY_PUBLISH;
    f.publish = &body;
    int rc = proto_frame_append(&p->scratch, &f);
    free(pad);
    if (rc < 0)
        return rc;
    p->msg_len = nl_buf_readable(&p->scratch);
    if (!(p->msg = malloc(p->msg_len)))
        return -ENOMEM;
    memcpy(p->msg, nl_buf_peek(&p->scratch), p->msg_len);
    nl_buf_retrieve_all(&p->scratch);
    p->seq_at = p->msg_len - p->o.payload; /* the payload is Publish's last field */
    return 0;
}

int bt_pub_new(bt_pub_t **out, const bt_pub_opts_t *o)
{
    bt_pub_t *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->o = *o;
    p->n_conns = o->is_admin ? BT_PUB_HTTP_CONNS : 1;
    nl_buf_init(&p->scratch, 0);
    int rc = pub_prepare(p);
    for (int k = 0; rc == 0 && k < p->n_conns; k++) {
        pub_conn_t *pc = &p->conns[k];
        pc->p = p;
        nl_client_opts_t opts = {
            .host = "127.0.0.1",
            .port = o->port,
            .connect_timeout_ms = 10000,
            .max_attempts = 3,
            .cbs = &pub_cbs,
            .arg = pc,
            .transport = o->tp ? lg_transport_ops(o->tp) : NULL,
            .transport_arg = (void *)o->tp,
        };
        rc = nl_client_new(&pc->cl, o->loop, &opts);
        if (rc == 0)
            rc = nl_client_connect(pc->cl);
    }
    *out = p; /* bt_pub_free also undoes a half-made one */
    return rc;
}

bool bt_pub_is_ready(const bt_pub_t *p)
{
    for (int k = 0; k < p->n_conns; k++)
        if (!p->conns[k].is_up)
            return false;
    return true;
}

uint64_t bt_pub_send(bt_pub_t *p, uint64_t seq, uint64_t n)
{
    uint64_t sent = 0;
    if (!p->o.is_admin) {
        pub_conn_t *pc = &p->conns[0];
        for (; sent < n && pc->conn && pc->is_up; sent++) {
            uint64_t v = seq + sent;
            memcpy(p->msg + p->seq_at, &v, sizeof(v));
            if (nl_conn_send_later(pc->conn, p->msg, p->msg_len) < 0)
                break;
        }
        return sent;
    }
    for (int k = 0; k < p->n_conns && sent < n; k++) {
        pub_conn_t *pc = &p->conns[k];
        if (!pc->conn || !pc->is_up || pc->is_busy)
            continue;
        uint64_t v = seq + sent;
        memcpy(p->msg + p->seq_at, &v, sizeof(v));
        if (nl_conn_send(pc->conn, p->msg, p->msg_len) < 0)
            continue;
        pc->is_busy = true;
        pc->sent_ns = nl_now_ns();
        sent++;
    }
    return sent;
}

void bt_pub_stats(const bt_pub_t *p, double *answer_ms_mean, double *answer_ms_max,
                  uint64_t *errors)
{
    *answer_ms_mean = p->answers ? (double)p->answer_ns_sum / (double)p->answers / 1e6 : 0;
    *answer_ms_max = (double)p->answer_ns_max / 1e6;
    *errors = p->errors;
}

void bt_pub_close(bt_pub_t *p)
{
    if (!p)
        return;
    p->o.is_closing = true;
    for (int k = 0; k < p->n_conns; k++)
        if (p->conns[k].cl)
            nl_client_close(p->conns[k].cl);
}

void bt_pub_free(bt_pub_t *p)
{
    if (!p)
        return;
    nl_buf_deinit(&p->scratch);
    free(p->msg);
    free(p);
}
