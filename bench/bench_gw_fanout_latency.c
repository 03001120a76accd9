/*
 * bench_gw_fanout_latency: the light-load latency modes of bench_gw_fanout (see the usage in
 * bench_gw_fanout.c): --rate stamped broadcasts a second to the fleet for --latency-seconds,
 * first through herald (two IO loops), then through redis-server, measured alike; each
 * delivery records publish-to-arrival (kernel receive stamp) and publish-to-processed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_gw_fanout.h"
#include "herald_client.h"
#include "herald_harness.h"
#include "netlib/nl_hist.h"

/* herald's own view: the upper bound (seconds) of the bucket of
 * herald_publish_to_flush_seconds holding the 99th percentile, or -1. */
static double herald_p99_flush(uint16_t admin_port)
{
    static const char *const hdrs[] = {"X-Api-Key: " API_KEY, NULL};
    static const char fam[] = "herald_publish_to_flush_seconds_bucket{le=\"";
    test_http_resp_t r;
    if (test_http_request(admin_port, "GET", "/metrics", hdrs, NULL, 0, 30000, &r) != 0)
        return -1;
    double les[64];
    double counts[64];
    size_t n = 0;
    for (char *line = strtok(r.body, "\n"); line && n < 64; line = strtok(NULL, "\n")) {
        if (strncmp(line, fam, sizeof(fam) - 1) != 0)
            continue;
        char *le = line + sizeof(fam) - 1;
        les[n] = strncmp(le, "+Inf", 4) == 0 ? 1e9 : strtod(le, NULL);
        counts[n++] = strtod(strrchr(line, ' ') + 1, NULL);
    }
    test_http_resp_free(&r);
    for (size_t i = 0; n > 0 && i < n; i++)
        if (counts[i] >= 0.99 * counts[n - 1])
            return les[i];
    return -1;
}

/* Publishes o->rate stamped messages a second for o->latency_seconds, then gives the last
 * ones up to 10 s to arrive. The same loop drives herald and Redis.
 * Returns: the number of messages sent; -1 when a send failed. */
static int64_t latency_measure(const opts_t *o, test_fleet_t *fl, run_t *r, publisher_t *pub,
                               test_fleet_raw_cb raw)
{
    uint64_t period = 1000000000ull / (uint64_t)o->rate;
    uint64_t msgs = (uint64_t)o->rate * (uint64_t)o->latency_seconds;
    uint64_t next_send = fan_now_ns();
    uint64_t deadline = 0;
    for (;;) {
        uint64_t t = fan_now_ns();
        int wait_ms = 10;
        if (pub->sent < msgs) {
            if (t >= next_send) {
                if (fan_publish(pub, fan_wall_ns()) < 0)
                    return -1;
                next_send += period;
                deadline = t + 10000000000ull;
            }
            wait_ms = next_send > t ? (int)((next_send - t) / 1000000) : 0;
        } else if (r->delivered >= msgs * r->n || t > deadline) {
            break;
        }
        test_fleet_poll_raw(fl, wait_ms, raw, r);
        fan_publisher_drain(pub);
    }
    return (int64_t)pub->sent;
}

int64_t fan_latency_loop(const opts_t *o, test_fleet_t *fl, run_t *r, publisher_t *pub,
                         test_fleet_raw_cb raw)
{
    /* Linux keeps nice per thread: who 0 is this thread only, not the server processes. */
    errno = 0;
    int old_nice = getpriority(PRIO_PROCESS, 0);
    if (o->fleet_nice != 0 && setpriority(PRIO_PROCESS, 0, o->fleet_nice) < 0)
        fprintf(stderr, "bench_gw_fanout: --fleet-nice %d: %s\n", o->fleet_nice, strerror(errno));
    int64_t sent = latency_measure(o, fl, r, pub, raw);
    /* Raising the priority back needs CAP_SYS_NICE; without it the next server started
     * inherits the fleet's nice value, and the warning says so. */
    if (o->fleet_nice != 0 && setpriority(PRIO_PROCESS, 0, old_nice) < 0)
        fprintf(stderr,
                "bench_gw_fanout: cannot restore nice %d (%s): a server started "
                "later runs at nice %d\n",
                old_nice, strerror(errno), o->fleet_nice);
    return sent;
}

static void print_hist_ms(const char *what, const nl_hist_t *h)
{
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    printf("  %-44s p50 %7.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  max %7.2f ms\n", what,
           (double)s.p50 / 1000.0, (double)s.p99 / 1000.0, (double)s.p999 / 1000.0,
           (double)s.max / 1000.0);
}

int fan_print_latency(const opts_t *o, const char *name, const run_t *r, uint64_t sent)
{
    uint64_t want = sent * r->n;
    bool is_complete = r->delivered == want && r->lost == 0 && r->other == 0 &&
                       test_fleet_open_count(r->fl) == r->n;
    printf("latency (%s, fleet at nice %d): %d broadcasts/s x %zu subscribers, %zu-byte "
           "payload, %d s, target p99 < 40 ms; loss check: %s (delivered %llu of %llu, out of "
           "sequence %llu, other %llu)\n",
           name, o->fleet_nice, o->rate, r->n, o->payload, o->latency_seconds,
           is_complete ? "zero loss" : "FAILED", (unsigned long long)r->delivered,
           (unsigned long long)want, (unsigned long long)r->lost, (unsigned long long)r->other);
    print_hist_ms("publish to arrival in the client socket", r->arrive_us);
    print_hist_ms("publish to processed by the (1-thread) fleet", r->lat_us);
    if (r->unstamped)
        printf("  %llu deliveries had no kernel receive stamp (not in the arrival figure)\n",
               (unsigned long long)r->unstamped);
    return is_complete ? 0 : -1;
}

void fan_print_latency_cpu(uint64_t cpu_ns, const run_t *r)
{
    printf("  server CPU %.3f s over the run, %.2f us per delivery\n", (double)cpu_ns / 1e9,
           r->delivered ? (double)cpu_ns / 1e3 / (double)r->delivered : 0.0);
}

int fan_run_herald_latency(const opts_t *o)
{
    test_herald_t *h = fan_start_herald(o, o->is_one_core ? "1" : "2", o->is_one_core ? 0 : -1,
                                        o->history_rules);
    if (!h)
        return -1;
    nl_hist_t lat;
    nl_hist_t arrive;
    nl_hist_init(&lat);
    nl_hist_init(&arrive);
    run_t r = {.n = o->subs,
               .payload = o->payload,
               .next = calloc(o->subs, sizeof(uint64_t)),
               .lat_us = &lat,
               .arrive_us = &arrive};
    test_fleet_t *fl = fan_herald_fleet(o, h, &r);
    test_client_t c = {.fd = -1};
    int rc = fl ? test_client_auth(&c, h->port, "pub", 10000) : -1;
    if (rc == 0) {
        publisher_t pub;
        fan_publisher_init(&pub, c.fd, false, o->payload);
        uint64_t cpu0 = fan_proc_cpu_ns(h->pid);
        int64_t sent = fan_latency_loop(o, fl, &r, &pub, fan_herald_raw);
        uint64_t cpu1 = fan_proc_cpu_ns(h->pid);
        const char *name = o->is_one_core ? "herald io_threads=1, CPU 0, fleet on CPU 1"
                           : o->is_pin_io ? "herald io_threads=2, pin_io_threads"
                                          : "herald io_threads=2, unpinned";
        rc = sent < 0 ? -1 : fan_print_latency(o, name, &r, (uint64_t)sent);
        fan_print_latency_cpu(cpu1 - cpu0, &r);
        printf("  herald's own publish-to-flush p99 <= %.1f ms\n",
               herald_p99_flush(h->admin_port) * 1000.0);
        free(pub.buf);
    }
    test_client_close(&c);
    test_fleet_free(fl);
    free(r.next);
    int st = test_herald_stop(h, 0);
    return rc == 0 && st == 0 ? 0 : -1;
}

/* The same measurement against redis-server: same fleet (kernel stamps on), subscribers,
 * rate, payload and duration; PUBLISH from one plain connection. */
int fan_run_redis_latency(const opts_t *o)
{
    uint16_t port = 0;
    pid_t pid = fan_redis_up(o, o->is_one_core ? 0 : -1, &port);
    if (pid <= 0)
        return pid;
    nl_hist_t lat;
    nl_hist_t arrive;
    nl_hist_init(&lat);
    nl_hist_init(&arrive);
    run_t r = {.n = o->subs,
               .payload = o->payload,
               .is_redis = true,
               .next = calloc(o->subs, sizeof(uint64_t)),
               .is_ready = calloc(o->subs, 1),
               .lat_us = &lat,
               .arrive_us = &arrive};
    test_fleet_t *fl = fan_redis_fleet(o, port, &r);
    int fd = fl ? fan_connect_port(port) : -1;
    int rc = -1;
    if (fd >= 0) {
        publisher_t pub;
        fan_publisher_init(&pub, fd, true, o->payload);
        uint64_t cpu0 = fan_proc_cpu_ns(pid);
        int64_t sent = fan_latency_loop(o, fl, &r, &pub, fan_redis_raw);
        uint64_t cpu1 = fan_proc_cpu_ns(pid);
        if (sent >= 0)
            rc = fan_print_latency(o,
                                   o->is_one_core ? "redis-server, CPU 0, fleet on CPU 1"
                                                  : "redis-server single-threaded, unpinned",
                                   &r, (uint64_t)sent);
        fan_print_latency_cpu(cpu1 - cpu0, &r);
        free(pub.buf);
        close(fd);
    }
    test_fleet_free(fl);
    int st = fan_redis_down(pid);
    free(r.next);
    free(r.is_ready);
    return rc == 0 && st == 0 ? 0 : -1;
}
