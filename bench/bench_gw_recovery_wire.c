/*
 * bench_gw_recovery_wire: the parts of bench_gw_recovery (see its header comment) that touch
 * the wire: the live publisher thread, and the fleet's raw callback, which reads Push frames
 * in place with loadgen's lg_wire (other frames, a few per client, through protobuf-c) and checks
 * each client's recovery and order as its bytes arrive.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gw_recovery.h"
#include "herald_client.h"
#include "herald_harness.h"
#include "lg_wire.h"
#include "netlib/nl_hist.h"
#include "proto_frame.h"

#define PAUSE_WAIT_MS 60000

const char *const rec_fail_names[F_COUNT] = {"none",
                                             "recovered=false",
                                             "wrong SubscribeOk offset",
                                             "gap or duplicate",
                                             "not the missed messages",
                                             "Error/Disconnect",
                                             "connection closed",
                                             "not live in time"};

uint64_t rec_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- the live publisher thread -------------------------------------------------------------- */

void rec_payload_mark(uint8_t *p, uint64_t send_ns, uint64_t seq, uint8_t kind)
{
    memcpy(p, &send_ns, 8);
    memcpy(p + 8, &seq, 8);
    p[16] = kind;
}

/* Reads the publisher's answers for up to timeout_ms (0: what has arrived): each PublishOk
 * gives the offset of the next answered message. Returns 0 or a negative errno. */
static int pub_read_answers(pubthr_t *p, test_client_t *c, int timeout_ms)
{
    for (;;) {
        Herald__Frame *f = NULL;
        int rc = test_client_recv(c, &f, timeout_ms);
        if (rc == -ETIMEDOUT)
            return 0;
        if (rc != 1)
            return rc == 0 ? -ECONNRESET : rc;
        bool is_ok = f->body_case == HERALD__FRAME__BODY_PUBLISH_OK;
        if (is_ok) {
            atomic_store(&p->last_offset, f->publish_ok->offset);
            p->answered++;
        } else {
            char fs[256];
            snprintf(p->what, sizeof(p->what), "publisher got %s",
                     test_frame_str(f, fs, sizeof(fs)));
        }
        proto_frame_free(f);
        if (!is_ok)
            return -EPROTO;
        timeout_ms = 0;
    }
}

/* Publishes --rate stamped messages a second while is_on, until is_quit or the deadline,
 * without waiting for each PublishOk (a publish that waited for its answer could not keep
 * 100/s while a broadcast to 11,000 takes tens of ms). A pause is acknowledged once every
 * publish is answered, so last_offset is then the offset of the last one. A publish late
 * for its slot does not make the next come sooner. */
void *rec_pub_main(void *arg)
{
    pubthr_t *p = arg;
    test_client_t c = {.fd = -1};
    uint8_t *buf = calloc(1, p->payload);
    p->err = buf ? test_client_auth(&c, p->port, p->token, TEST_CLIENT_WAIT_MS) : -ENOMEM;
    if (p->err != 0)
        snprintf(p->what, sizeof(p->what), "publisher: %s", test_client_what(&c));
    uint64_t period_ns = 1000000000ull / (uint64_t)p->rate;
    uint64_t next = 0;
    while (p->err == 0 && !atomic_load(&p->is_quit) && test_now_ms() < p->deadline_ms) {
        uint64_t sent = atomic_load(&p->sent);
        if (!atomic_load(&p->is_on)) {
            if (p->answered == sent)
                atomic_store(&p->pause_ack, atomic_load(&p->pause_req));
            next = 0;
            p->err = pub_read_answers(p, &c, 1);
            continue;
        }
        if ((p->err = pub_read_answers(p, &c, 0)) != 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        if (next == 0)
            next = now;
        if (now < next) {
            /* Wait for answers (or the slot) in slices of at most 5 ms, so that a pause takes
             * effect quickly. */
            uint64_t wait_ms = (next - now) / 1000000u;
            p->err = pub_read_answers(p, &c, wait_ms > 5 ? 5 : (int)wait_ms);
            if (wait_ms == 0) {
                uint64_t until = next;
                ts.tv_sec = (time_t)(until / 1000000000u);
                ts.tv_nsec = (long)(until % 1000000000u);
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            }
            continue;
        }
        Herald__Frame f;
        Herald__Publish body;
        rec_payload_mark(buf, rec_wall_ns(), sent, KIND_LIVE);
        test_frame_publish(&f, &body, CHANNEL, buf, p->payload);
        f.id = sent + 1;
        p->err = test_client_send(&c, &f, TEST_CLIENT_WAIT_MS);
        if (p->err != 0) {
            snprintf(p->what, sizeof(p->what), "publisher: send: %s", strerror(-p->err));
            break;
        }
        atomic_store(&p->sent, sent + 1);
        next = next + period_ns > now ? next + period_ns : now;
    }
    atomic_store(&p->pause_ack, UINT64_MAX); /* never leave main waiting */
    test_client_close(&c);
    free(buf);
    return NULL;
}

/* Pauses the publisher and waits until no publish is in flight. Returns 0 or -ETIMEDOUT. */
int rec_pub_pause(pubthr_t *p)
{
    uint64_t req = atomic_fetch_add(&p->pause_req, 1) + 1;
    atomic_store(&p->is_on, 0);
    int64_t until = test_now_ms() + PAUSE_WAIT_MS;
    while (atomic_load(&p->pause_ack) < req && test_now_ms() < until)
        poll(NULL, 0, 1);
    return atomic_load(&p->pause_ack) >= req ? 0 : -ETIMEDOUT;
}

/* --- the fleet's bytes, parsed in place ------------------------------------------------------ */

void rec_client_fail(run_t *r, size_t i, int why)
{
    client_t *c = &r->c[i];
    if (r->is_stayers) {
        if (c->state != CS_FAILED)
            atomic_fetch_add(&r->gaps, 1);
        c->state = CS_FAILED;
        return;
    }
    if (c->state == CS_FAILED)
        return;
    if (c->state == CS_LIVE)
        r->live--;
    if (c->state == CS_CONNECTING)
        r->connect_failed++;
    c->state = CS_FAILED;
    c->fail = (uint8_t)why;
    r->failed++;
    r->fails[why]++;
}

/* A live push's latency, when client i is live for it (see the header). */
static void record_live(run_t *r, size_t i, const uint8_t *payload, uint64_t t_wall)
{
    uint64_t sent;
    memcpy(&sent, payload, 8);
    if (!r->is_stayers && r->c[i].state == CS_LIVE && sent < r->c[i].live_wall)
        return; /* published before it went live: it came with the recovery */
    uint64_t storm = atomic_load(&r->phase->storm_wall);
    uint64_t after = atomic_load(&r->phase->after_wall);
    int ph = !storm || sent < storm ? PH_REF : !after || sent < after ? PH_STORM : PH_AFTER;
    int k = atomic_load(&r->phase->storm);
    nl_hist_record_local(&r->processed_us[k][ph], t_wall > sent ? (t_wall - sent) / 1000 : 0);
    uint64_t rx = test_fleet_rx_time_ns(r->fl);
    if (rx)
        nl_hist_record_local(&r->arrive_us[k][ph], rx > sent ? (rx - sent) / 1000 : 0);
    else
        r->unstamped++;
    /* All but the last live push of a read carry a later push's stamp. */
    if (r->pushes_in_read++ > 0)
        r->late[k][ph]++;
}

/* Storm client c has everything it missed (or, --plain, its SubscribeOk): it is live. */
static void go_live(run_t *r, client_t *c, uint64_t t_wall)
{
    c->state = CS_LIVE;
    c->live_wall = t_wall;
    r->live++;
    r->last_live_ms = test_now_ms();
    nl_hist_record_local(&r->to_live_ms, (uint64_t)(r->last_live_ms - c->start_ms));
}

static void on_push(run_t *r, size_t i, const lg_push_t *push, uint64_t t_wall)
{
    client_t *c = &r->c[i];
    uint64_t offset = push->offset;
    const uint8_t *payload = push->payload;
    size_t plen = push->payload_len;
    if (c->state == CS_FAILED)
        return;
    if (offset != c->next || !payload || plen < MIN_PAYLOAD ||
        (c->state != CS_SUBSCRIBED && c->state != CS_RECOVERING && c->state != CS_LIVE)) {
        rec_client_fail(r, i, F_GAP);
        return;
    }
    c->next = offset + 1;
    uint8_t kind = payload[16];
    if (c->state == CS_RECOVERING) {
        uint64_t seq;
        memcpy(&seq, payload + 8, 8);
        if (kind != KIND_MISSED || seq != c->missed_got) {
            rec_client_fail(r, i, F_NOT_MISSED);
            return;
        }
        r->recovered_pushes++;
        if (++c->missed_got == r->o->missed)
            go_live(r, c, t_wall);
        return;
    }
    if (kind == KIND_LIVE)
        record_live(r, i, payload, t_wall);
}

/* Any frame other than a Push: decoded with protobuf-c (a few per client). */
static void on_other(run_t *r, size_t i, const uint8_t *p, size_t len)
{
    client_t *c = &r->c[i];
    Herald__Frame *f = herald__frame__unpack(NULL, len, p);
    if (!f) {
        rec_client_fail(r, i, F_ERROR);
        return;
    }
    if (f->body_case == HERALD__FRAME__BODY_ERROR ||
        f->body_case == HERALD__FRAME__BODY_DISCONNECT) {
        rec_client_fail(r, i, F_ERROR);
    } else if (f->body_case == HERALD__FRAME__BODY_CONNECT_OK && c->state == CS_CONNECTING) {
        c->state = CS_AUTHED;
        r->authed++;
    } else if (f->body_case == HERALD__FRAME__BODY_SUBSCRIBE_OK && c->state == CS_AUTHED) {
        const Herald__SubscribeOk *ok = f->subscribe_ok;
        if (r->o->is_plain) {
            /* No recovery asked: Pushes continue after the live offset. */
            c->next = ok->offset + 1;
            go_live(r, c, rec_wall_ns());
        } else if (!ok->recovered) {
            rec_client_fail(r, i, F_NOT_RECOVERED);
        } else if (ok->offset != r->x) {
            rec_client_fail(r, i, F_BAD_OFFSET);
        } else {
            c->next = r->x + 1;
            c->state = CS_RECOVERING;
            if (r->o->missed == 0)
                go_live(r, c, rec_wall_ns());
        }
    } else {
        r->other++;
    }
    herald__frame__free_unpacked(f, NULL);
}

size_t rec_on_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg)
{
    (void)fl;
    run_t *r = arg;
    if (!data) {
        if (r->c[i].state != CS_AWAY)
            rec_client_fail(r, i, F_CLOSED);
        return 0;
    }
    uint64_t t_wall = rec_wall_ns();
    r->pushes_in_read = 0;
    const uint8_t *p = (const uint8_t *)data;
    const uint8_t *end = p + len;
    size_t hdr;
    size_t blen;
    while (lg_wire_split(p, (size_t)(end - p), TEST_CLIENT_MAX_FRAME, &hdr, &blen) == 1) {
        lg_push_t push = {0};
        int rc = lg_wire_push(p + hdr, blen, &push);
        if (rc == 1)
            on_push(r, i, &push, t_wall);
        else if (rc == 0)
            on_other(r, i, p + hdr, blen);
        else
            rec_client_fail(r, i, F_GAP); /* a malformed Push */
        p += hdr + blen;
    }
    return (size_t)(p - (const uint8_t *)data);
}
