/*
 * bench_gw_fanout: issue 5's broadcast figures.
 *
 *   throughput  herald with --io-threads 1 pinned to CPU 0, this load generator on CPU 1:
 *               --subs subscribers (10,000) on one channel, one publisher sending --payload
 *               byte messages (128) as fast as delivery keeps up (at most --window messages
 *               in flight across the fleet), for --seconds. Printed: deliveries/s over the
 *               run after a one-second warm-up, and the check that every subscriber got every
 *               message in order (zero loss).
 *   redis       the same against redis-server pinned to CPU 0 (SUBSCRIBE over plain RESP,
 *               PUBLISH pipelined from one connection), when redis-server is installed.
 *   latency     herald with --io-threads 2, unpinned, 10 broadcasts/s (--rate) to the
 *               subscribers for --latency-seconds, then the same against redis-server
 *               (single-threaded, unpinned). The payload's first 8 bytes carry the send time
 *               (CLOCK_REALTIME, one machine). Each delivery records two latencies: to its
 *               arrival in the subscriber's socket (the kernel's SO_TIMESTAMPNS receive stamp)
 *               and to its processing by the fleet (this one thread reaching the socket).
 *               Printed per server: p50/p99/p99.9/max of both, and the zero-loss check.
 *   latency-redis  only the Redis half of latency.
 *   history     issue 17's cost of history on broadcast: throughput runs as above, alternating
 *               herald without history and herald keeping 100 messages of the channel
 *               (--history-rules, default "fan=100"), --rounds pairs (4), the order swapped
 *               every round (off-on, on-off, ...) so that a machine slowing down or speeding
 *               up during the series does not favour one side. Printed: every run, then
 *               deliveries/s median [min-max] per side and the on/off ratio per pair (median
 *               [min-max]); /metrics after each run shows what the history held.
 *   history-mixed  the same cost inside one herald and one run: the fleet subscribes to "fan"
 *               (which keeps history) and "nofan" (which does not), and the publisher
 *               broadcasts to each in turn, --slice-ms (1000) at a time, --slices pairs (40),
 *               so both sides see the same process and the same minute of the machine
 *               (bench_gw_fanout_history.c). At most 480 s of slices (2 x --slices x
 *               --slice-ms), so that a run with its drains and setup stays under 10 minutes.
 *   cluster     issue 18's Redis engine against the memory engine: one node (memory engine,
 *               two IO loops) against two nodes sharing the channel through redis-server (one
 *               IO loop each, half the fleet on each), a throughput and a latency run per side
 *               and round, --rounds rounds (bench_gw_fanout_cluster.c). About a minute a round.
 *
 * --history-rules R: herald keeps history as R says in every herald run (default: no
 * history); in history mode R is the "on" side's rule.
 *
 * --fleet-nice N (latency modes): this thread (fleet and publisher) runs at nice N while it
 * measures, the server at 0. Both sides share two CPUs here, and the fleet is busy enough
 * that the scheduler makes herald's two loops share one CPU with each other; at nice 19 the
 * server gets the CPUs whenever it has work, as it would with its clients on other machines.
 * The arrival figure (a kernel stamp taken when the server's write reaches the socket) does
 * not depend on when the fleet gets round to reading. Applied to both servers alike.
 * --pin-io (latency modes): herald runs with --pin-io-threads, its two loops one per CPU.
 * --one-core (latency modes): the server on CPU 0 (herald with --io-threads 1), the fleet and
 * publisher on CPU 1, as the throughput modes and issue 25's harness run. Both latency modes
 * print the server's CPU time per delivery over the measured phase.
 *
 * Every payload carries the publisher's sequence number in bytes 8..15, which the Redis side
 * checks (herald's side checks Push offsets). The subscribers' bytes are parsed in place
 * (varint length, Push offset and payload; RESP by its known shape), not through protobuf-c
 * or hiredis: at millions of frames a second the load generator must not be the bottleneck.
 *
 * Usage: bench_gw_fanout [--mode all|throughput|redis|latency|latency-redis|history|history-mixed|
 *                                cluster]
 *        [--subs N] [--payload B (>= 16)] [--seconds S] [--window W] [--rate R]
 *        [--latency-seconds S] [--fleet-nice N] [--pin-io] [--one-core] [--history-rules R]
 *        [--rounds N]
 *        [--slices N] [--slice-ms MS] [--herald PATH] [--redis-server PATH]
 * This is a benchmark program, never a ctest case (STYLE.md §9).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_gw_fanout.h"
#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_hist.h"
#include "proto_frame.h"

#define SETUP_MS 300000
#define DRAIN_MS 60000
#define MAX_PAYLOAD 65536
#define MIN_PAYLOAD 16 /* send time or sequence number, then sequence number */

uint64_t fan_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Latency mode stamps payloads with CLOCK_REALTIME: the kernel's receive timestamps use it. */
uint64_t fan_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fan_proc_cpu_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    uint64_t sum = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        char sp[384];
        snprintf(sp, sizeof(sp), "%s/%s/schedstat", path, e->d_name);
        FILE *f = fopen(sp, "r");
        unsigned long long ns = 0;
        if (f && fscanf(f, "%llu", &ns) == 1)
            sum += ns;
        if (f)
            fclose(f);
    }
    closedir(d);
    return sum;
}

static void pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("sched_setaffinity");
}

/* Latency mode runs everything unpinned: the servers it starts inherit this mask. */
static void unpin_self(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE && c < 64; c++)
        CPU_SET(c, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* Latency mode: payload's first 8 bytes are the send time (CLOCK_REALTIME ns); t is when the
 * fleet got round to the bytes, the fleet's kernel stamp when they reached the socket. For
 * TCP that stamp is the arrival of the last segment the read took, so a message that shares
 * a read with a later one is stamped late, never early. */
static void record_latency(run_t *r, const uint8_t *payload, uint64_t t)
{
    uint64_t sent;
    memcpy(&sent, payload, sizeof(sent));
    nl_hist_record_local(r->lat_us, t > sent ? (t - sent) / 1000 : 0);
    uint64_t rx = test_fleet_rx_time_ns(r->fl);
    if (rx)
        nl_hist_record_local(r->arrive_us, rx > sent ? (rx - sent) / 1000 : 0);
    else
        r->unstamped++;
}

/* --- herald wire parsing, in place ------------------------------------------------------- */

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Finds Push.offset, Push.payload and the length of Push.channel in a Push message. */
static void parse_push(const uint8_t *p, const uint8_t *end, uint64_t *offset,
                       const uint8_t **payload, size_t *payload_len, size_t *channel_len)
{
    while (p < end) {
        uint64_t tag;
        uint64_t v;
        if (!varint(&p, end, &tag))
            return;
        if ((tag & 7) == 0) {
            if (!varint(&p, end, &v))
                return;
            if (tag >> 3 == 2)
                *offset = v;
        } else if ((tag & 7) == 2) {
            if (!varint(&p, end, &v) || v > (uint64_t)(end - p))
                return;
            if (tag >> 3 == 4) {
                *payload = p;
                *payload_len = (size_t)v;
            }
            if (tag >> 3 == 1)
                *channel_len = (size_t)v;
            p += v;
        } else {
            return;
        }
    }
}

/* Handles one serialized Frame: a Push is checked against the expected offset. */
static void herald_frame(run_t *r, size_t i, const uint8_t *p, const uint8_t *end, uint64_t t)
{
    uint64_t tag;
    uint64_t len;
    /* Frame: optional id (field 1), then one body field. */
    while (p < end && varint(&p, end, &tag)) {
        if ((tag & 7) == 0) {
            if (!varint(&p, end, &len))
                break;
            continue;
        }
        if ((tag & 7) != 2 || !varint(&p, end, &len) || len > (uint64_t)(end - p))
            break;
        if (tag >> 3 == 12) /* pong */
            return;
        if (tag >> 3 != 10)
            break;
        uint64_t offset = 0;
        const uint8_t *payload = NULL;
        size_t plen = 0;
        size_t clen = 0;
        parse_push(p, p + len, &offset, &payload, &plen, &clen);
        /* History-mixed mode: the second channel's name is longer than "fan". */
        uint64_t *next = r->next_b && clen != 3 ? r->next_b : r->next;
        if (offset != next[i])
            r->lost++;
        next[i] = offset + 1;
        r->delivered++;
        if (r->lat_us && payload && plen >= 8)
            record_latency(r, payload, t);
        return;
    }
    r->other++;
}

size_t fan_herald_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg)
{
    (void)fl;
    run_t *r = arg;
    if (!data)
        return 0;
    uint64_t t = r->lat_us ? fan_wall_ns() : 0;
    const uint8_t *p = (const uint8_t *)data;
    const uint8_t *end = p + len;
    for (;;) {
        const uint8_t *q = p;
        uint64_t flen;
        if (!varint(&q, end, &flen) || flen > (uint64_t)(end - q))
            break;
        herald_frame(r, i, q, q + flen, t);
        p = q + flen;
    }
    return (size_t)(p - (const uint8_t *)data);
}

/* --- redis wire --------------------------------------------------------------------------- */

#define REDIS_CHAN "fan"
static const char redis_subscribe[] = "SUBSCRIBE " REDIS_CHAN "\r\n";
static const char redis_sub_ok[] = "*3\r\n$9\r\nsubscribe\r\n$3\r\nfan\r\n:1\r\n";

/* Length of one pushed message: *3 $7 message $3 fan $<payload> <payload>. */
static size_t redis_msg_len(size_t payload, char *head, size_t cap)
{
    int n = snprintf(head, cap, "*3\r\n$7\r\nmessage\r\n$3\r\n%s\r\n$%zu\r\n", REDIS_CHAN, payload);
    return (size_t)n + payload + 2;
}

size_t fan_redis_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg)
{
    (void)fl;
    run_t *r = arg;
    if (!data)
        return 0;
    uint64_t t = r->lat_us ? fan_wall_ns() : 0;
    size_t used = 0;
    if (!r->is_ready[i]) {
        size_t n = sizeof(redis_sub_ok) - 1;
        if (len < n)
            return 0;
        if (memcmp(data, redis_sub_ok, n) != 0)
            r->other++;
        r->is_ready[i] = 1;
        r->ready++;
        used = n;
    }
    char head[64];
    size_t mlen = redis_msg_len(r->payload, head, sizeof(head));
    size_t hlen = mlen - r->payload - 2;
    while (len - used >= mlen) {
        const char *m = data + used;
        uint64_t seq;
        if (memcmp(m, head, hlen) != 0)
            r->other++;
        memcpy(&seq, m + hlen + 8, sizeof(seq));
        if (seq != r->next[i])
            r->lost++;
        r->next[i] = seq + 1;
        r->delivered++;
        if (r->lat_us)
            record_latency(r, (const uint8_t *)m + hlen, t);
        used += mlen;
    }
    return used;
}

/* --- publishers --------------------------------------------------------------------------- */

/* Prepares the request bytes once; fan_publish() patches stamp and sequence number in. */
void fan_publisher_init(publisher_t *p, int fd, bool is_redis, size_t payload)
{
    fan_publisher_init_on(p, fd, is_redis, "fan", payload);
}

void fan_publisher_init_on(publisher_t *p, int fd, bool is_redis, const char *channel,
                           size_t payload)
{
    p->fd = fd;
    p->is_redis = is_redis;
    p->buf = malloc(payload + 256);
    p->sent = 0;
    char *zero = calloc(1, payload);
    if (is_redis) {
        int n = snprintf(p->buf, 256, "*3\r\n$7\r\nPUBLISH\r\n$3\r\n%s\r\n$%zu\r\n", REDIS_CHAN,
                         payload);
        p->payload_at = (size_t)n;
        memcpy(p->buf + n, zero, payload);
        memcpy(p->buf + n + payload, "\r\n", 2);
        p->len = (size_t)n + payload + 2;
    } else {
        Herald__Frame f;
        Herald__Publish body;
        test_frame_publish(&f, &body, channel, zero, payload);
        f.id = 1;
        nl_buf_t b;
        nl_buf_init(&b, 0);
        proto_frame_append(&b, &f);
        p->len = nl_buf_readable(&b);
        memcpy(p->buf, nl_buf_peek(&b), p->len);
        nl_buf_deinit(&b);
        p->payload_at = p->len - payload; /* the payload is Publish's last field */
    }
    free(zero);
}

/* Sends one message whose payload starts with value (a sequence number or a send time),
 * followed by the sequence number (0, 1, ...) that the Redis subscribers check. */
int fan_publish(publisher_t *p, uint64_t value)
{
    memcpy(p->buf + p->payload_at, &value, sizeof(value));
    memcpy(p->buf + p->payload_at + 8, &p->sent, sizeof(p->sent));
    size_t off = 0;
    while (off < p->len) {
        ssize_t w = send(p->fd, p->buf + off, p->len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = p->fd, .events = POLLOUT};
            poll(&pfd, 1, 1000);
            continue;
        }
        return -errno;
    }
    p->sent++;
    return 0;
}

/* Reads and discards the publisher's answers (PublishOk / Redis integer replies). */
void fan_publisher_drain(publisher_t *p)
{
    char scratch[65536];
    while (recv(p->fd, scratch, sizeof(scratch), MSG_DONTWAIT) > 0)
        ;
}

int fan_connect_port(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
    return fd;
}

/* --- one throughput run ------------------------------------------------------------------- */

/* The CPU time of all of servers[0..n), in ns. */
static uint64_t servers_cpu_ns(const pid_t *servers, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += fan_proc_cpu_ns(servers[i]);
    return sum;
}

int fan_throughput_loop(const opts_t *o, const char *name, test_fleet_t *fl, run_t *r,
                        publisher_t *pub, test_fleet_raw_cb raw, const pid_t *servers,
                        size_t n_servers, double *rate_out, double *cpu_out)
{
    uint64_t n = r->n;
    uint64_t t_start = fan_now_ns();
    uint64_t t_warm = t_start + 1000000000ull;
    uint64_t t_end = t_start + (uint64_t)o->seconds * 1000000000ull;
    uint64_t d_warm = 0;
    uint64_t t_warm_real = 0;
    uint64_t cpu_warm = 0;
    for (;;) {
        uint64_t t = fan_now_ns();
        if (!t_warm_real && t >= t_warm) {
            t_warm_real = t;
            d_warm = r->delivered;
            cpu_warm = servers_cpu_ns(servers, n_servers);
        }
        if (t >= t_end)
            break;
        while (pub->sent * n - r->delivered < o->window * n)
            if (fan_publish(pub, pub->sent) < 0)
                return -1;
        test_fleet_poll_raw(fl, 10, raw, r);
        fan_publisher_drain(pub);
    }
    uint64_t t_stop = fan_now_ns();
    uint64_t d_stop = r->delivered;
    uint64_t cpu_stop = servers_cpu_ns(servers, n_servers);
    uint64_t drain_until = t_stop + (uint64_t)DRAIN_MS * 1000000ull;
    while (r->delivered < pub->sent * n && fan_now_ns() < drain_until) {
        test_fleet_poll_raw(fl, 10, raw, r);
        fan_publisher_drain(pub);
    }
    double rate = (double)(d_stop - d_warm) * 1e9 / (double)(t_stop - t_warm_real);
    double cpu = d_stop > d_warm ? (double)(cpu_stop - cpu_warm) / (double)(d_stop - d_warm) : 0;
    bool is_complete = r->delivered == pub->sent * n && r->lost == 0 && r->other == 0 &&
                       test_fleet_open_count(fl) == n;
    printf("%s: %zu subscribers, %zu-byte payload, window %llu: %llu messages published, "
           "%.0f deliveries/s (%.0f messages/s); loss check: %s (delivered %llu of %llu, "
           "out of sequence %llu, other %llu)\n",
           name, r->n, o->payload, (unsigned long long)o->window, (unsigned long long)pub->sent,
           rate, rate / (double)n, is_complete ? "zero loss" : "FAILED",
           (unsigned long long)r->delivered, (unsigned long long)(pub->sent * n),
           (unsigned long long)r->lost, (unsigned long long)r->other);
    printf("  server CPU (all threads of %zu process%s, warm-up left out): %.1f ns per "
           "delivery\n",
           n_servers, n_servers == 1 ? "" : "es", cpu);
    if (rate_out)
        *rate_out = rate;
    if (cpu_out)
        *cpu_out = cpu;
    return is_complete ? 0 : -1;
}

test_herald_t *fan_start_herald(const opts_t *o, const char *io_threads, int cpu,
                                const char *history_rules)
{
    char maxc[32];
    snprintf(maxc, sizeof(maxc), "%zu", o->subs + 100);
    const char *args[] = {"--api-key",  API_KEY,
                          "--insecure", "--io-threads",
                          io_threads,   "--publish-rate",
                          "0",          "--output-high-water",
                          "16m",        "--max-connections",
                          maxc,         "--idle-timeout",
                          "1h",         "--ping-interval",
                          "30m",        "--max-frame",
                          "1m",         "--connect-timeout",
                          "10m",        NULL,
                          NULL,         NULL,
                          NULL,         NULL,
                          NULL,         NULL,
                          NULL};
    size_t at = 0; /* the first free slot; the last one stays NULL */
    while (args[at])
        at++;
    if (o->is_pin_io)
        args[at++] = "--pin-io-threads";
    if (history_rules && history_rules[0]) {
        args[at++] = "--history-rules";
        args[at++] = history_rules;
    }
    if (o->redis_engine) {
        args[at++] = "--engine";
        args[at++] = "redis";
        args[at++] = "--redis";
        args[at++] = o->redis_engine;
    }
    test_herald_opts_t ho = {.args = args, .cpu = cpu};
    test_herald_t *h = NULL;
    int rc = test_herald_start(&h, &ho);
    if (rc != 0) {
        fprintf(stderr, "herald did not start: %s\n", strerror(-rc));
        return NULL;
    }
    return h;
}

test_fleet_t *fan_herald_fleet(const opts_t *o, const test_herald_t *h, run_t *r)
{
    return fan_herald_fleet_on(o, &h->port, 1, r);
}

test_fleet_t *fan_herald_fleet_on(const opts_t *o, const uint16_t *ports, size_t n_ports, run_t *r)
{
    test_fleet_t *fl = NULL;
    if (test_fleet_new(&fl, o->subs) != 0)
        return NULL;
    test_fleet_set_rx_timestamps(fl, r->lat_us != NULL);
    int rc = test_fleet_open_hello(fl, ports, n_ports, 256, "sub", NULL, NULL, SETUP_MS);
    if (rc == 0)
        rc = test_fleet_subscribe_all(fl, "fan", r->next, NULL, NULL, SETUP_MS);
    if (rc != 0) {
        fprintf(stderr, "fleet setup: %s (%s)\n", strerror(-rc), test_fleet_what(fl));
        test_fleet_free(fl);
        return NULL;
    }
    for (size_t i = 0; i < r->n; i++)
        r->next[i]++;
    r->fl = fl;
    return fl;
}

void fan_print_history_metrics(const test_herald_t *h)
{
    static const char *const fams[] = {"herald_history_channels", "herald_history_messages",
                                       "herald_history_bytes", "herald_history_evicted_total"};
    printf("  /metrics:");
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        double v = -1;
        if (test_metric_sum(h->admin_port, API_KEY, fams[i], NULL, &v) != 0)
            v = -1;
        printf(" %s %.0f", fams[i] + sizeof("herald_") - 1, v);
    }
    printf("\n");
}

int fan_run_herald_throughput(const opts_t *o, const char *history_rules, double *rate,
                              double *cpu_ns)
{
    test_herald_t *h = fan_start_herald(o, "1", 0, history_rules);
    if (!h)
        return -1;
    run_t r = {.n = o->subs, .payload = o->payload, .next = calloc(o->subs, sizeof(uint64_t))};
    test_fleet_t *fl = fan_herald_fleet(o, h, &r);
    test_client_t c = {.fd = -1};
    int rc = fl ? test_client_auth(&c, h->port, "pub", 10000) : -1;
    int fd = c.fd;
    if (rc == 0) {
        publisher_t pub;
        fan_publisher_init(&pub, fd, false, o->payload);
        char name[320];
        snprintf(name, sizeof(name), "herald (io_threads=1, CPU 0, history %s)",
                 history_rules && history_rules[0] ? history_rules : "off");
        rc = fan_throughput_loop(o, name, fl, &r, &pub, fan_herald_raw, &h->pid, 1, rate, cpu_ns);
        free(pub.buf);
        fan_print_history_metrics(h);
    }
    test_client_close(&c);
    test_fleet_free(fl);
    free(r.next);
    int st = test_herald_stop(h, 0);
    return rc == 0 && st == 0 ? 0 : -1;
}

/* --- redis -------------------------------------------------------------------------------- */

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    return ntohs(sa.sin_port);
}

/* Starts redis-server on port as it comes (single-threaded: io-threads defaults to 1), pinned
 * to cpu, or with this process's mask when cpu < 0. Returns its pid once it answers PING. */
static pid_t start_redis(const opts_t *o, uint16_t port, int cpu)
{
    char p[16];
    char maxc[32];
    snprintf(p, sizeof(p), "%u", port);
    snprintf(maxc, sizeof(maxc), "%zu", o->subs + 100);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (cpu >= 0)
            pin_self(cpu);
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1);
        execl(o->redis, o->redis, "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly",
              "no", "--maxclients", maxc, "--client-output-buffer-limit", "pubsub 0 0 0",
              "--protected-mode", "no", (char *)NULL);
        _exit(127);
    }
    /* Wait until it answers PING (a benchmark may retry on a clock). */
    for (int tries = 0; tries < 200; tries++) {
        int fd = fan_connect_port(port);
        if (fd >= 0) {
            char buf[16];
            if (send(fd, "PING\r\n", 6, 0) == 6 && recv(fd, buf, sizeof(buf), 0) > 0) {
                close(fd);
                return pid;
            }
            close(fd);
        }
        poll(NULL, 0, 50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Starts redis-server on a free port (see start_redis).
 * Returns: its pid; 0 when it is not installed (the caller skips); -1 when it did not start. */
pid_t fan_redis_up(const opts_t *o, int cpu, uint16_t *port)
{
    if (access(o->redis, X_OK) != 0) {
        printf("redis: %s not found, skipped\n", o->redis);
        return 0;
    }
    *port = free_port();
    pid_t pid = start_redis(o, *port, cpu);
    if (pid < 0)
        fprintf(stderr, "redis-server did not start\n");
    return pid;
}

int fan_redis_down(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Connects the fleet to redis-server and subscribes every connection to "fan", with kernel
 * receive stamps in latency mode as for herald; waits for every confirmation. */
test_fleet_t *fan_redis_fleet(const opts_t *o, uint16_t port, run_t *r)
{
    test_fleet_t *fl = NULL;
    if (test_fleet_new(&fl, o->subs) != 0)
        return NULL;
    test_fleet_set_rx_timestamps(fl, r->lat_us != NULL);
    r->fl = fl;
    int rc = test_fleet_open(fl, port, 256, SETUP_MS);
    for (size_t i = 0; rc == 0 && i < o->subs; i++)
        rc = test_fleet_send_raw(fl, i, redis_subscribe, sizeof(redis_subscribe) - 1);
    uint64_t until = fan_now_ns() + (uint64_t)SETUP_MS * 1000000ull;
    while (rc == 0 && r->ready < o->subs && fan_now_ns() < until)
        test_fleet_poll_raw(fl, 100, fan_redis_raw, r);
    if (rc != 0 || r->ready != o->subs) {
        fprintf(stderr, "redis subscribers: %zu of %zu ready (%s)\n", r->ready, o->subs,
                rc ? strerror(-rc) : "timed out");
        test_fleet_free(fl);
        r->fl = NULL;
        return NULL;
    }
    return fl;
}

static int run_redis_throughput(const opts_t *o)
{
    uint16_t port = 0;
    pid_t pid = fan_redis_up(o, 0, &port);
    if (pid <= 0)
        return pid;
    run_t r = {.n = o->subs,
               .payload = o->payload,
               .is_redis = true,
               .next = calloc(o->subs, sizeof(uint64_t)),
               .is_ready = calloc(o->subs, 1)};
    test_fleet_t *fl = fan_redis_fleet(o, port, &r);
    int fd = fl ? fan_connect_port(port) : -1;
    int rc = -1;
    if (fd >= 0) {
        publisher_t pub;
        fan_publisher_init(&pub, fd, true, o->payload);
        rc = fan_throughput_loop(o, "redis-server (CPU 0)", fl, &r, &pub, fan_redis_raw, &pid, 1,
                                 NULL, NULL);
        free(pub.buf);
        close(fd);
    }
    test_fleet_free(fl);
    fan_redis_down(pid);
    free(r.next);
    free(r.is_ready);
    return rc;
}

static void parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option longs[] = {{"mode", required_argument, NULL, 'm'},
                                          {"subs", required_argument, NULL, 'n'},
                                          {"payload", required_argument, NULL, 'b'},
                                          {"seconds", required_argument, NULL, 's'},
                                          {"window", required_argument, NULL, 'w'},
                                          {"rate", required_argument, NULL, 'r'},
                                          {"latency-seconds", required_argument, NULL, 'l'},
                                          {"fleet-nice", required_argument, NULL, 'N'},
                                          {"pin-io", no_argument, NULL, 'P'},
                                          {"one-core", no_argument, NULL, 'O'},
                                          {"history-rules", required_argument, NULL, 'Y'},
                                          {"rounds", required_argument, NULL, 'k'},
                                          {"slices", required_argument, NULL, 'x'},
                                          {"slice-ms", required_argument, NULL, 'X'},
                                          {"herald", required_argument, NULL, 'H'},
                                          {"redis-server", required_argument, NULL, 'R'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'm':
            snprintf(o->mode, sizeof(o->mode), "%s", optarg);
            break;
        case 'n':
            o->subs = strtoull(optarg, NULL, 10);
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
        case 'r':
            o->rate = atoi(optarg);
            break;
        case 'l':
            o->latency_seconds = atoi(optarg);
            break;
        case 'N':
            o->fleet_nice = atoi(optarg);
            break;
        case 'P':
            o->is_pin_io = true;
            break;
        case 'O':
            o->is_one_core = true;
            break;
        case 'Y':
            snprintf(o->history_rules, sizeof(o->history_rules), "%s", optarg);
            break;
        case 'k':
            o->rounds = atoi(optarg);
            break;
        case 'x':
            o->slices = atoi(optarg);
            break;
        case 'X':
            o->slice_ms = atoi(optarg);
            break;
        case 'H':
            setenv("TEST_HERALD_BIN", optarg, 1);
            break;
        case 'R':
            snprintf(o->redis, sizeof(o->redis), "%s", optarg);
            break;
        default:
            exit(2);
        }
    }
    static const char *const modes[] = {"all",           "throughput", "redis",         "latency",
                                        "latency-redis", "history",    "history-mixed", "cluster"};
    bool is_mode = false;
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        is_mode = is_mode || strcmp(o->mode, modes[i]) == 0;
    if (!is_mode || o->payload < MIN_PAYLOAD || o->payload > MAX_PAYLOAD || o->subs == 0 ||
        o->seconds < 2 || o->rate < 1 || o->latency_seconds < 1 || o->window < 1 ||
        o->fleet_nice < 0 || o->fleet_nice > 19 || o->rounds < 1 || o->rounds > MAX_ROUNDS ||
        o->slices < 1 || o->slices > MAX_SLICES || o->slice_ms < 100 || o->slice_ms > 10000 ||
        2L * o->slices * o->slice_ms > 480000) {
        fprintf(stderr, "bad options\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    opts_t o = {.mode = "all",
                .subs = 10000,
                .payload = 128,
                .seconds = 10,
                .window = 64,
                .rate = 10,
                .latency_seconds = 10,
                .rounds = 4,
                .slices = 40,
                .slice_ms = 1000,
                .redis = "/usr/bin/redis-server"};
    parse_opts(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (test_raise_nofile(o.subs + 256) < (long)(o.subs + 64)) {
        fprintf(stderr, "RLIMIT_NOFILE too low for %zu subscribers\n", o.subs);
        return 1;
    }
    bool is_all = strcmp(o.mode, "all") == 0;
    int failed = 0;
    if (is_all || strcmp(o.mode, "throughput") == 0 || strcmp(o.mode, "redis") == 0) {
        pin_self(1);
        if (is_all || strcmp(o.mode, "throughput") == 0)
            failed += fan_run_herald_throughput(&o, o.history_rules, NULL, NULL) != 0;
        if (is_all || strcmp(o.mode, "redis") == 0)
            failed += run_redis_throughput(&o) != 0;
    }
    if (strcmp(o.mode, "history") == 0) {
        pin_self(1);
        failed += fan_run_history(&o) != 0;
    }
    if (strcmp(o.mode, "history-mixed") == 0) {
        pin_self(1);
        failed += fan_run_history_mixed(&o) != 0;
    }
    if (strcmp(o.mode, "cluster") == 0) {
        unpin_self();
        failed += fan_run_cluster(&o) != 0;
    }
    bool is_latency = is_all || strcmp(o.mode, "latency") == 0;
    if (is_latency || strcmp(o.mode, "latency-redis") == 0) {
        if (o.is_one_core)
            pin_self(1);
        else
            unpin_self();
        if (is_latency)
            failed += fan_run_herald_latency(&o) != 0;
        failed += fan_run_redis_latency(&o) != 0;
    }
    return failed ? 1 : 0;
}
