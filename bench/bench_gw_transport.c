/*
 * bench_gw_transport: issue 23's transport figures, herald over plain TCP, WebSocket, TLS and
 * WebSocket over TLS (wss), side by side in one run.
 *
 *   broadcast  --subs subscribers (10,000) on one channel, herald --io-threads 1 with its loop
 *              pinned to CPU 0 (--pin-io-threads; its admin and engine threads unpinned), this
 *              process (the fleet and the publisher, one netlib loop) on CPU 1. The
 *              publisher sends --payload byte messages (128) as fast as delivery keeps up (at
 *              most --window messages in flight to the whole fleet, in bursts of a quarter of
 *              it: bench_gw_transport_pub.c says why) for --seconds (8); after
 *              a one-second warm-up: deliveries/s, herald's CPU per delivery (schedstat of all
 *              its threads), herald's and the fleet's share of their CPU, and a zero-loss
 *              check (every subscriber every offset, in order).
 *   idle       --idle-conns idle authenticated connections (10,000; signed tokens, each on its
 *              own channel plus a shared one, as bench_gw_idle), a fresh herald per run
 *              (--io-threads 1): herald's RSS growth per connection.
 *   tls-memory in this process, what one server-side TLS connection holds, counted with
 *              OpenSSL's allocator hooks: the SSL object, then after a TLS 1.3 handshake (and
 *              after a 1.2 one), then after a message each way, with the context set up as
 *              herald's gw_tls.c sets it (SSL_MODE_RELEASE_BUFFERS, no session cache).
 *
 * Every mode runs the transports --rounds times (3), in an order that turns each round
 * (tcp ws tls wss, then wss tls ws tcp, ...), so a machine that speeds up or slows down does
 * not favour one transport; every run is printed, then the medians and the ratios to TCP of
 * the runs made in the same round. The clients are herald-loadgen's own transports
 * (loadgen/lg_tls.c, lg_ws.c: client TLS verifying against a test CA made here with openssl,
 * masked WebSocket frames). The publisher sends Publish frames on a connection of its own to
 * herald's client listener (TLS when that speaks TLS), or with --publisher admin posts to the
 * admin API (plain HTTP whatever the subscribers speak; herald answers once its loop took the
 * message, which under a broadcast of 10,000 took 100-300 ms here and then set the rate).
 * Kernel TLS: herald asks for it; the log says whether the kernel offered it (ev=ktls_*).
 *
 * Usage: bench_gw_transport [--mode all|broadcast|idle|tls-memory] [--transports tcp,ws,tls,wss]
 *        [--subs N] [--idle-conns N] [--payload B] [--seconds S] [--window W (<= 64)] [--rounds R]
 *        [--publisher client|admin] [--unpinned] [--herald PATH]
 * --unpinned: herald's loop and the fleet go where the scheduler puts them (other work on the
 * machine then takes whichever CPU is free, rather than the pinned loop's).
 * This is a benchmark program, never a ctest case (STYLE.md §9).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_gw_transport.h"
#include "herald_harness.h"
#include "lg_transport.h"
#include "lg_wire.h"
#include "netlib/nl_client.h"
#include "netlib/nl_common.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_timer.h"
#include "proto_frame.h"

#define SECRET "bench-transport-secret-0123456789ab"
#define API_KEY "bench-transport-key"
#define SETUP_S 300
#define DRAIN_S 60
#define IN_FLIGHT_CONNECTS 256

/* --- the fleet: subscribers and a publisher on one netlib loop ------------------------------ */

enum { SUB_CONNECTING, SUB_AUTH, SUB_SUBSCRIBING, SUB_READY, SUB_GONE };

typedef struct sub_s {
    struct fleet_s *fl;
    nl_client_t *cl;
    nl_conn_t *conn;
    uint64_t next; /* the offset of "fan" expected next */
    uint32_t index;
    uint8_t state;
    uint8_t pending; /* SubscribeOks awaited */
} sub_t;

typedef struct fleet_s {
    const bt_opts_t *o;
    nl_loop_t *loop;
    lg_transport_t *tp;  /* the subscribers' transport (NULL: tcp) */
    uint16_t port;       /* the subscribers' port */
    uint16_t admin_port; /* the publisher's */
    bool is_idle;        /* idle mode: own channel + shared, signed tokens */
    char **tokens;       /* idle mode: one per subscriber */
    const char *token;   /* broadcast: everyone's */
    sub_t *subs;
    size_t n;
    size_t started;
    size_t ready;
    size_t failed;
    size_t gone; /* closed after being ready */
    uint64_t delivered;
    uint64_t lost;
    uint64_t other;
    bt_pub_t *pub;
    lg_transport_t *ptp; /* the client publisher's, when herald's client listener speaks TLS */
    uint16_t tcp_port;
    bool is_publishing;
    uint64_t sent;
    nl_buf_t scratch;
} fleet_t;

static void sub_on_connected(nl_conn_t *c);
static void sub_on_message(nl_conn_t *c, nl_buf_t *in);
static void sub_on_close(nl_conn_t *c, int reason);
static const nl_conn_cbs_t sub_cbs = {
    .on_connected = sub_on_connected, .on_message = sub_on_message, .on_close = sub_on_close};

static int send_frame(fleet_t *fl, nl_conn_t *c, const Herald__Frame *f)
{
    int rc = proto_frame_append(&fl->scratch, f);
    if (rc == 0)
        rc = nl_conn_send(c, nl_buf_peek(&fl->scratch), nl_buf_readable(&fl->scratch));
    nl_buf_retrieve_all(&fl->scratch);
    return rc;
}

static void sub_subscribe(sub_t *s, uint64_t id, char *channel)
{
    Herald__Subscribe body = HERALD__SUBSCRIBE__INIT;
    body.channel = channel;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = HERALD__FRAME__BODY_SUBSCRIBE;
    f.subscribe = &body;
    if (send_frame(s->fl, s->conn, &f) == 0)
        s->pending++;
}

static void sub_on_connected(nl_conn_t *c)
{
    sub_t *s = nl_client_arg(nl_client_of(c));
    fleet_t *fl = s->fl;
    nl_conn_set_data(c, s);
    s->conn = c;
    s->state = SUB_AUTH;
    Herald__Connect body = HERALD__CONNECT__INIT;
    body.token = (char *)(fl->is_idle ? fl->tokens[s->index] : fl->token);
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = 1;
    f.body_case = HERALD__FRAME__BODY_CONNECT;
    f.connect = &body;
    if (send_frame(fl, c, &f) < 0)
        nl_conn_close(c, -EIO);
}

/* A frame that is not a Push: ConnectOk, SubscribeOk, or a failure. */
static void sub_frame(sub_t *s, const Herald__Frame *f)
{
    fleet_t *fl = s->fl;
    if (f->body_case == HERALD__FRAME__BODY_CONNECT_OK && s->state == SUB_AUTH) {
        s->state = SUB_SUBSCRIBING;
        char name[32];
        if (fl->is_idle) {
            snprintf(name, sizeof(name), "user:%u", s->index);
            sub_subscribe(s, 2, name);
            snprintf(name, sizeof(name), "shared");
        } else {
            snprintf(name, sizeof(name), "fan");
        }
        sub_subscribe(s, 3, name);
    } else if (f->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK && s->state == SUB_SUBSCRIBING) {
        if (f->id == 3)
            s->next = f->subscribe_ok->offset + 1;
        if (--s->pending == 0) {
            s->state = SUB_READY;
            fl->ready++;
        }
    } else {
        fl->other++;
    }
}

static void publish_top_up(fleet_t *fl);

static void sub_on_message(nl_conn_t *c, nl_buf_t *in)
{
    sub_t *s = nl_conn_data(c);
    fleet_t *fl = s->fl;
    bool is_push = false;
    while (nl_conn_state(c) == NL_CONN_CONNECTED) {
        const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
        size_t hdr, body;
        int rc = lg_wire_split(p, nl_buf_readable(in), 1u << 20, &hdr, &body);
        if (rc <= 0) {
            if (rc < 0)
                nl_conn_close(c, -EPROTO);
            break;
        }
        lg_push_t push;
        if (lg_wire_push(p + hdr, body, &push) == 1) {
            if (push.offset != s->next)
                fl->lost++;
            s->next = push.offset + 1;
            fl->delivered++;
            is_push = true;
        } else {
            Herald__Frame *f = NULL;
            if (proto_frame_unpack(p + hdr, body, &f) == 0) {
                sub_frame(s, f);
                proto_frame_free(f);
            } else {
                fl->other++;
            }
        }
        nl_buf_retrieve(in, hdr + body);
    }
    if (is_push)
        publish_top_up(fl);
}

static void sub_on_close(nl_conn_t *c, int reason)
{
    NL_UNUSED(reason);
    sub_t *s = nl_conn_data(c);
    if (!s)
        return;
    if (s->state == SUB_READY)
        s->fl->gone++;
    else
        s->fl->failed++;
    s->state = SUB_GONE;
    s->conn = NULL;
}

static void sub_on_retry(nl_client_t *cl, int status, bool will_retry, uint64_t delay_ms)
{
    NL_UNUSED(delay_ms);
    sub_t *s = nl_client_arg(cl);
    if (status == -ECANCELED || will_retry)
        return;
    s->state = SUB_GONE;
    s->fl->failed++;
}

static int sub_start(fleet_t *fl, sub_t *s)
{
    nl_client_opts_t opts = {
        .host = "127.0.0.1",
        .port = fl->port,
        .connect_timeout_ms = 60000,
        .max_attempts = 5,
        .cbs = &sub_cbs,
        .on_retry = sub_on_retry,
        .arg = s,
        .transport = fl->tp ? lg_transport_ops(fl->tp) : NULL,
        .transport_arg = fl->tp,
    };
    s->state = SUB_CONNECTING;
    int rc = nl_client_new(&s->cl, fl->loop, &opts);
    if (rc == 0)
        rc = nl_client_connect(s->cl);
    return rc;
}

/* --- publishing ------------------------------------------------------------------------- */

static void publish_on_answer(void *arg)
{
    publish_top_up(arg);
}

/* Keeps --window messages in flight to the whole fleet (deliveries not yet made, counted in
 * messages). The client publisher sends once a quarter of the window is free, all that is free
 * in one burst; the admin one a message per free connection. */
static void publish_top_up(fleet_t *fl)
{
    if (!fl->is_publishing || !fl->pub)
        return;
    uint64_t n = fl->n;
    uint64_t window = fl->o->window * n;
    uint64_t owed = fl->sent * n - fl->delivered;
    if (owed >= window)
        return;
    uint64_t free = (window - owed) / n;
    uint64_t burst = fl->o->is_admin_publisher || fl->o->window < 4 ? 1 : fl->o->window / 4;
    if (free >= burst)
        fl->sent += bt_pub_send(fl->pub, fl->sent, free);
}

/* --- fleet lifecycle ----------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Connects subscribers until upto of them are (at most IN_FLIGHT_CONNECTS handshakes at a
 * time) and waits until each is subscribed. Returns 0, or -1 (printed). */
static int fleet_connect_upto(fleet_t *fl, size_t upto)
{
    double deadline = now_s() + SETUP_S;
    while (fl->ready + fl->failed < upto) {
        while (fl->started < upto && fl->started - fl->ready - fl->failed < IN_FLIGHT_CONNECTS) {
            sub_t *s = &fl->subs[fl->started++];
            if (sub_start(fl, s) < 0)
                fl->failed++;
        }
        nl_loop_run_once(fl->loop, 10);
        if (now_s() > deadline)
            break;
    }
    if (fl->ready != upto) {
        fprintf(stderr, "fleet: %zu of %zu subscribed, %zu failed\n", fl->ready, upto, fl->failed);
        return -1;
    }
    return 0;
}

static int fleet_connect(fleet_t *fl)
{
    return fleet_connect_upto(fl, fl->n);
}

/* Runs the loop for s seconds (what the handshakes left behind goes: released TLS buffers). */
static void fleet_settle(fleet_t *fl, double s)
{
    double until = now_s() + s;
    while (now_s() < until)
        nl_loop_run_once(fl->loop, 50);
}

static int fleet_init(fleet_t *fl, const bt_opts_t *o, size_t n)
{
    memset(fl, 0, sizeof(*fl));
    fl->o = o;
    fl->n = n;
    nl_buf_init(&fl->scratch, 0);
    fl->subs = calloc(n, sizeof(*fl->subs));
    if (!fl->subs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        fl->subs[i].fl = fl;
        fl->subs[i].index = (uint32_t)i;
    }
    return nl_loop_new(&fl->loop, NULL);
}

static void fleet_free(fleet_t *fl)
{
    for (size_t i = 0; i < fl->started; i++)
        if (fl->subs[i].cl)
            nl_client_close(fl->subs[i].cl);
    bt_pub_close(fl->pub);
    /* Let the closes finish (on_close, transport frees) before the loop goes. */
    for (int k = 0; k < 100 && nl_loop_free(fl->loop) == -EBUSY; k++)
        nl_loop_run_once(fl->loop, 10);
    bt_pub_free(fl->pub);
    free(fl->subs);
    nl_buf_deinit(&fl->scratch);
    lg_transport_free(fl->tp);
    lg_transport_free(fl->ptp);
}

/* --- herald --------------------------------------------------------------------------------- */

static const char *tls_dir(void)
{
    static char dir[256];
    if (dir[0])
        return dir;
    snprintf(dir, sizeof(dir), "/tmp/bench_gw_transport.%d", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "bash -c 'source \"%s/tests/integration/test_ca.sh\" && make_test_ca \"%s\"'",
             HERALD_SOURCE_DIR, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not make a test CA with openssl (%s)\n", cmd);
        exit(1);
    }
    return dir;
}

static void tls_dir_remove(void)
{
    const char *dir = tls_dir();
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

/* Starts herald for transport t: TLS certificate for tls and wss, a WebSocket listener always
 * (so every herald is the same configuration but for TLS). is_pinned: its one IO loop on CPU 0
 * (--pin-io-threads), its other threads (the admin API's, the engine's) where the scheduler
 * puts them: pinned whole to CPU 0 with the loop, the admin thread waited up to a second for
 * the busy loop's CPU and the publishes' answers, not the loop, set the rate. */
static test_herald_t *bt_start_herald(bt_transport_t t, size_t conns, bool is_pinned)
{
    char maxc[32];
    char cert[300];
    char key[300];
    snprintf(maxc, sizeof(maxc), "%zu", conns + 100);
    snprintf(cert, sizeof(cert), "%s/server.pem", tls_dir());
    snprintf(key, sizeof(key), "%s/server.key", tls_dir());
    const char *args[40] = {
        "--secret",          SECRET, "--api-key",           API_KEY,      "--io-threads",      "1",
        "--publish-rate",    "0",    "--output-high-water", "16m",        "--max-connections", maxc,
        "--idle-timeout",    "1h",   "--ping-interval",     "30m",        "--max-frame",       "1m",
        "--connect-timeout", "10m",  "--ws-listen",         "127.0.0.1:0"};
    size_t at = 0;
    while (args[at])
        at++;
    if (is_pinned)
        args[at++] = "--pin-io-threads";
    if (t == BT_TLS || t == BT_WSS) {
        args[at++] = "--tls-cert";
        args[at++] = cert;
        args[at++] = "--tls-key";
        args[at++] = key;
    }
    test_herald_opts_t ho = {.args = args, .cpu = -1};
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, &ho);
    if (rc != 0) {
        fprintf(stderr, "herald did not start: %s\n", strerror(-rc));
        return NULL;
    }
    return h;
}

/* The WebSocket port from herald's listening line. */
static uint16_t herald_ws_port(test_herald_t *h)
{
    pthread_mutex_lock(&h->mu);
    const char *p = strstr(h->log, " ws_port=");
    uint16_t port = p ? (uint16_t)strtoul(p + 9, NULL, 10) : 0;
    pthread_mutex_unlock(&h->mu);
    return port;
}

/* Whether herald's log says the kernel took the TLS keys ("on"), could not ("off"), or says
 * nothing about it ("-"). */
static const char *bt_herald_ktls(test_herald_t *h)
{
    pthread_mutex_lock(&h->mu);
    const char *s = strstr(h->log, "ev=ktls_unavailable") ? "off (kernel has no tls module)"
                    : strstr(h->log, "ktls")              ? "see herald's log"
                                                          : "-";
    pthread_mutex_unlock(&h->mu);
    return s;
}

/* Sets up fl's transports for t against h. */
static int fleet_transports(fleet_t *fl, bt_transport_t t, test_herald_t *h)
{
    static const lg_transport_kind_t kinds[] = {LG_TRANSPORT_TCP, LG_TRANSPORT_WS, LG_TRANSPORT_TLS,
                                                LG_TRANSPORT_WSS};
    char ca[300];
    char err[512];
    snprintf(ca, sizeof(ca), "%s/ca.pem", tls_dir());
    bool is_ws = t == BT_WS || t == BT_WSS;
    bool is_tls = t == BT_TLS || t == BT_WSS;
    fl->admin_port = h->admin_port;
    fl->tcp_port = h->port;
    fl->port = is_ws ? herald_ws_port(h) : h->port;
    if (fl->port == 0)
        return -EPROTO;
    lg_transport_opts_t to = {
        .kind = kinds[t],
        .host = "127.0.0.1",
        .port = fl->port,
        .tls_ca_file = ca,
        .handshake_timeout_ms = 60000,
    };
    int rc = 0;
    if (t != BT_TCP && (rc = lg_transport_new(&fl->tp, &to, err, sizeof(err))) < 0)
        fprintf(stderr, "transport: %s\n", err);
    if (rc == 0 && is_tls && !fl->o->is_admin_publisher) {
        to.kind = LG_TRANSPORT_TLS;
        to.port = fl->tcp_port;
        if ((rc = lg_transport_new(&fl->ptp, &to, err, sizeof(err))) < 0)
            fprintf(stderr, "publisher transport: %s\n", err);
    }
    return rc;
}

/* --- one broadcast run ------------------------------------------------------------------------ */

/* The schedstat of every thread of a process: time on a CPU, and runnable but waiting for
 * one, ns. */
#define BT_THREADS_MAX 64
typedef struct bt_sched_s {
    int n;
    int tid[BT_THREADS_MAX];
    uint64_t run[BT_THREADS_MAX];
    uint64_t wait[BT_THREADS_MAX];
} bt_sched_t;

static void sched_read(pid_t pid, bt_sched_t *st)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    st->n = 0;
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e = readdir(d); e && st->n < BT_THREADS_MAX; e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        char sp[384];
        snprintf(sp, sizeof(sp), "%s/%s/schedstat", path, e->d_name);
        FILE *f = fopen(sp, "r");
        unsigned long long run = 0, waited = 0;
        if (f && fscanf(f, "%llu %llu", &run, &waited) == 2) {
            st->tid[st->n] = atoi(e->d_name);
            st->run[st->n] = run;
            st->wait[st->n] = waited;
            st->n++;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
}

static uint64_t sched_run_sum(const bt_sched_t *st)
{
    uint64_t sum = 0;
    for (int i = 0; i < st->n; i++)
        sum += st->run[i];
    return sum;
}

/* The thread that ran most between a and b (herald's IO loop): its run and wait, ns. */
static void sched_busiest(const bt_sched_t *a, const bt_sched_t *b, uint64_t *run, uint64_t *wait)
{
    *run = 0;
    *wait = 0;
    for (int i = 0; i < b->n; i++) {
        for (int j = 0; j < a->n; j++) {
            if (a->tid[j] != b->tid[i] || b->run[i] - a->run[j] <= *run)
                continue;
            *run = b->run[i] - a->run[j];
            *wait = b->wait[i] - a->wait[j];
        }
    }
}

uint64_t bt_proc_cpu_ns(pid_t pid)
{
    bt_sched_t st;
    sched_read(pid, &st);
    return sched_run_sum(&st);
}

static uint64_t self_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int bt_broadcast_run(const bt_opts_t *o, bt_transport_t t, bt_result_t *res)
{
    memset(res, 0, sizeof(*res));
    test_herald_t *h = bt_start_herald(t, o->subs, !o->is_unpinned);
    if (!h)
        return -1;
    char token[1024];
    fleet_t fl;
    int rc = fleet_init(&fl, o, o->subs);
    if (rc == 0 && test_token(token, sizeof(token), "sub", "fan", 3600, 0, SECRET) <= 0)
        rc = -EINVAL;
    fl.token = token;
    if (rc == 0)
        rc = fleet_transports(&fl, t, h);
    if (rc == 0)
        rc = fleet_connect(&fl);
    bt_pub_opts_t po = {
        .loop = fl.loop,
        .is_admin = o->is_admin_publisher,
        .port = o->is_admin_publisher ? fl.admin_port : fl.tcp_port,
        .tp = o->is_admin_publisher ? NULL : fl.ptp,
        .token = token,
        .api_key = API_KEY,
        .payload = o->payload,
        .on_answer = publish_on_answer,
        .arg = &fl,
    };
    if (rc == 0)
        rc = bt_pub_new(&fl.pub, &po);
    double t_pub = now_s() + 10;
    while (rc == 0 && !bt_pub_is_ready(fl.pub) && now_s() < t_pub)
        nl_loop_run_once(fl.loop, 10);
    if (rc == 0 && !bt_pub_is_ready(fl.pub))
        rc = -ETIMEDOUT;
    snprintf(res->ktls, sizeof(res->ktls), "%s", bt_herald_ktls(h));
    if (rc == 0) {
        fl.is_publishing = true;
        publish_top_up(&fl);
        double t0 = now_s();
        double t_warm = t0 + 1;
        double t_end = t0 + o->seconds;
        double tw = 0;
        uint64_t d_warm = 0, cpu_warm = 0, self_warm = 0;
        static bt_sched_t st_warm, st_stop;
        for (;;) {
            double now = now_s();
            if (tw == 0 && now >= t_warm) {
                tw = now;
                d_warm = fl.delivered;
                sched_read(h->pid, &st_warm);
                cpu_warm = sched_run_sum(&st_warm);
                self_warm = self_cpu_ns();
            }
            if (now >= t_end)
                break;
            publish_top_up(&fl);
            nl_loop_run_once(fl.loop, 1);
        }
        double t_stop = now_s();
        uint64_t d_stop = fl.delivered;
        sched_read(h->pid, &st_stop);
        uint64_t cpu_stop = sched_run_sum(&st_stop);
        uint64_t loop_run, loop_wait;
        sched_busiest(&st_warm, &st_stop, &loop_run, &loop_wait);
        uint64_t self_stop = self_cpu_ns();
        fl.is_publishing = false;
        double drain_end = t_stop + DRAIN_S;
        while (fl.delivered < fl.sent * fl.n && now_s() < drain_end)
            nl_loop_run_once(fl.loop, 10);
        double wall = t_stop - tw;
        res->deliveries_per_s = (double)(d_stop - d_warm) / wall;
        res->cpu_ns_per_delivery =
            d_stop > d_warm ? (double)(cpu_stop - cpu_warm) / (double)(d_stop - d_warm) : 0;
        res->herald_cpu_pct = 100.0 * (double)(cpu_stop - cpu_warm) / (wall * 1e9);
        res->fleet_cpu_pct = 100.0 * (double)(self_stop - self_warm) / (wall * 1e9);
        res->loop_run_pct = 100.0 * (double)loop_run / (wall * 1e9);
        res->loop_wait_pct = 100.0 * (double)loop_wait / (wall * 1e9);
        res->published = fl.sent;
        uint64_t pub_errors = 0;
        bt_pub_stats(fl.pub, &res->answer_ms_mean, &res->answer_ms_max, &pub_errors);
        fl.other += pub_errors;
        res->is_complete = fl.delivered == fl.sent * fl.n && fl.lost == 0 && fl.other == 0 &&
                           fl.gone == 0 && fl.failed == 0;
        if (!res->is_complete)
            fprintf(stderr,
                    "  loss check failed: delivered %llu of %llu, out of order %llu, other "
                    "%llu, closed %zu, failed %zu\n",
                    (unsigned long long)fl.delivered, (unsigned long long)(fl.sent * fl.n),
                    (unsigned long long)fl.lost, (unsigned long long)fl.other, fl.gone, fl.failed);
    }
    fleet_free(&fl);
    int st = test_herald_stop(h, 0);
    return rc == 0 && st == 0 && res->is_complete ? 0 : -1;
}

/* --- one idle run ------------------------------------------------------------------------------
 */

int bt_idle_run(const bt_opts_t *o, bt_transport_t t, bt_result_t *res)
{
    memset(res, 0, sizeof(*res));
    test_herald_t *h = bt_start_herald(t, o->idle_conns, false);
    if (!h)
        return -1;
    fleet_t fl;
    int rc = fleet_init(&fl, o, o->idle_conns);
    fl.is_idle = true;
    fl.tokens = calloc(o->idle_conns, sizeof(*fl.tokens));
    for (size_t i = 0; rc == 0 && i < o->idle_conns; i++) {
        char user[32];
        char pats[64];
        char tok[1024];
        snprintf(user, sizeof(user), "u%zu", i);
        snprintf(pats, sizeof(pats), "user:%zu,shared", i);
        if (!fl.tokens || test_token(tok, sizeof(tok), user, pats, 3600, 0, SECRET) <= 0 ||
            !(fl.tokens[i] = strdup(tok)))
            rc = -ENOMEM;
    }
    if (rc == 0)
        rc = fleet_transports(&fl, t, h);
    /* Settled: herald's first second (its loops, pools) is not the connections' cost. */
    fleet_settle(&fl, 1);
    long rss0 = test_proc_rss_kb(h->pid);
    /* Half, then all: the second half's growth is what a connection costs once the memory
     * the handshakes in flight use (up to IN_FLIGHT_CONNECTS at a time, freed but kept by
     * malloc) is there already. */
    size_t half = o->idle_conns / 2;
    if (rc == 0)
        rc = fleet_connect_upto(&fl, half);
    if (rc == 0)
        fleet_settle(&fl, 2);
    long rss_half = test_proc_rss_kb(h->pid);
    if (rc == 0)
        rc = fleet_connect(&fl);
    if (rc == 0)
        fleet_settle(&fl, 2);
    long rss1 = test_proc_rss_kb(h->pid);
    snprintf(res->ktls, sizeof(res->ktls), "%s", bt_herald_ktls(h));
    res->rss_before_kb = rss0;
    res->rss_after_kb = rss1;
    res->bytes_per_conn = rc == 0 ? (double)(rss1 - rss0) * 1024.0 / (double)o->idle_conns : 0;
    res->bytes_per_added_conn =
        rc == 0 ? (double)(rss1 - rss_half) * 1024.0 / (double)(o->idle_conns - half) : 0;
    res->is_complete = rc == 0 && fl.gone == 0;
    fleet_free(&fl);
    for (size_t i = 0; fl.tokens && i < o->idle_conns; i++)
        free(fl.tokens[i]);
    free(fl.tokens);
    int st = test_herald_stop(h, 0);
    return rc == 0 && st == 0 ? 0 : -1;
}

/* --- main ---------------------------------------------------------------------------------- */

static void pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("sched_setaffinity");
}

static void parse_opts(int argc, char **argv, bt_opts_t *o)
{
    static const struct option longs[] = {
        {"mode", required_argument, NULL, 'm'},    {"transports", required_argument, NULL, 'T'},
        {"subs", required_argument, NULL, 'n'},    {"idle-conns", required_argument, NULL, 'i'},
        {"payload", required_argument, NULL, 'b'}, {"seconds", required_argument, NULL, 's'},
        {"window", required_argument, NULL, 'w'},  {"rounds", required_argument, NULL, 'k'},
        {"herald", required_argument, NULL, 'H'},  {"publisher", required_argument, NULL, 'P'},
        {"unpinned", no_argument, NULL, 'U'},      {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'm':
            snprintf(o->mode, sizeof(o->mode), "%s", optarg);
            break;
        case 'T':
            if (bt_parse_transports(optarg, o) < 0) {
                fprintf(stderr, "--transports: a list of tcp, ws, tls, wss\n");
                exit(2);
            }
            break;
        case 'n':
            o->subs = strtoull(optarg, NULL, 10);
            break;
        case 'i':
            o->idle_conns = strtoull(optarg, NULL, 10);
            break;
        case 'b':
            o->payload = strtoull(optarg, NULL, 10);
            break;
        case 's':
            o->seconds = atoi(optarg);
            break;
        case 'w':
            o->window = strtoull(optarg, NULL, 10);
            break;
        case 'k':
            o->rounds = atoi(optarg);
            break;
        case 'H':
            setenv("TEST_HERALD_BIN", optarg, 1);
            break;
        case 'U':
            o->is_unpinned = true;
            break;
        case 'P':
            if (strcmp(optarg, "client") != 0 && strcmp(optarg, "admin") != 0) {
                fprintf(stderr, "--publisher: client or admin\n");
                exit(2);
            }
            o->is_admin_publisher = strcmp(optarg, "admin") == 0;
            break;
        default:
            exit(2);
        }
    }
    bool is_mode = false;
    static const char *const modes[] = {"all", "broadcast", "idle", "tls-memory"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        is_mode = is_mode || strcmp(o->mode, modes[i]) == 0;
    if (!is_mode || o->subs == 0 || o->idle_conns == 0 || o->payload < 8 || o->payload > 65536 ||
        o->seconds < 2 || o->window < 1 || o->window > BT_PUB_HTTP_CONNS || o->rounds < 1 ||
        o->rounds > BT_MAX_ROUNDS) {
        fprintf(stderr, "bad options\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    bt_opts_t o = {.mode = "all",
                   .subs = 10000,
                   .idle_conns = 10000,
                   .payload = 128,
                   .seconds = 8,
                   .window = 64,
                   .rounds = 3};
    bt_parse_transports("tcp,ws,tls,wss", &o);
    parse_opts(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    size_t most = o.subs > o.idle_conns ? o.subs : o.idle_conns;
    if (test_raise_nofile(most + 256) < (long)(most + 64)) {
        fprintf(stderr, "RLIMIT_NOFILE too low for %zu connections\n", most);
        return 1;
    }
    int failed = 0;
    bool is_all = strcmp(o.mode, "all") == 0;
    /* First, while OpenSSL's allocator can still be hooked (nothing allocated yet). */
    if (is_all || strcmp(o.mode, "tls-memory") == 0)
        failed += bt_tls_memory(tls_dir()) != 0;
    if (!o.is_unpinned)
        pin_self(1);
    if (is_all || strcmp(o.mode, "broadcast") == 0)
        failed += bt_series(&o, "broadcast", bt_broadcast_run) != 0;
    if (is_all || strcmp(o.mode, "idle") == 0)
        failed += bt_series(&o, "idle", bt_idle_run) != 0;
    tls_dir_remove();
    return failed ? 1 : 0;
}
