/*
 * lg_fleet: loop threads, ramp, publish schedule, storm and phases (see lg_fleet.h).
 *
 * Client i of the fleet lives on worker i % threads, so every worker gets an even share of
 * active (low indexes) and idle clients and of the connect rate. Workers start their clients
 * in index order, active ones first.
 *
 * The control loop on the main thread owns the phase. It reads counters only (atomics) and
 * tells workers what to do by posting closures; a worker acknowledges the closures whose
 * completion the control loop must know about (publishing stopped, storm fired) through the
 * fleet's atomic ack counters, so that the drain never judges a snapshot taken while a worker
 * was still publishing.
 */
#include "lg_fleet.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "lg_client.h"
#include "lg_http.h"
#include "lg_progress.h"
#include "lg_timeline.h"
#include "lg_transport.h"
#include "netlib/nl_common.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_signal.h"

#define WORKER_TICK_MS 10  /* ramp and heartbeat wheel */
#define PUBLISH_TICK_MS 1  /* publish schedule */
#define CONTROL_TICK_MS 20 /* phase checks; also the storm recovery time resolution */
#define WHEEL_TICK_MS 50
#define WHEEL_SLOTS 4096      /* 204 s of 50 ms ticks: a ping interval fits in one turn */
#define RAMP_BURST_MAX 2000   /* connects started per worker tick without --connect-rate */
#define MEASURE_GRACE_MS 2000 /* longest wait past --duration for the last publishes */
#define DRAIN_QUIET_MS 200    /* no delivery for this long ends a drain with no exact count */
#define BACKLOG_MAX_S 1.0     /* a publish schedule further behind than this skips ahead */

const char *lg_phase_name(int phase)
{
    static const char *const names[] = {"ramp", "measure", "drain", "done"};
    return phase >= 0 && phase <= LG_PHASE_DONE ? names[phase] : "?";
}

typedef struct lg_fleet_s {
    const lg_config_t *cfg;
    lg_result_t *result;
    nl_loop_t *loop; /* the control loop, main thread */
    nl_timer_t *timer;
    nl_signal_t *signal;
    uint32_t worker_count;
    lg_worker_t *workers;
    nl_loop_thread_t *threads[LG_THREADS_MAX];
    lg_stats_t *stats[LG_THREADS_MAX];
    lg_totals_t *snap; /* scratch snapshot, reused every control tick */
    lg_progress_t progress;
    lg_timeline_t *timeline;   /* --report only; owned by the result */
    lg_transport_t *transport; /* every client's (--transport), shared by the threads */

    int phase;
    int signals;
    uint64_t start_ns;
    uint64_t phase_start_ns;
    uint64_t phase_deadline_ns; /* the current phase ends by then (ramp timeout, duration, drain) */
    uint64_t measure_start_ns;
    uint64_t publish_end_ns;
    uint64_t drain_deadline_ns;
    uint64_t drain_last_deliveries;
    uint64_t drain_quiet_since_ns;
    uint64_t next_progress_ns;
    uint64_t deliveries_at_start; /* for the window's rate */
    uint64_t publishes_at_start;
    uint64_t disconnects_at_start;
    uint64_t failures_at_storm;
    uint64_t storm_ns;
    uint64_t none_ready_since_ns; /* measured phase: since when no client is ready (0: some are) */
    bool is_storm_fired;

    _Atomic uint32_t budget_acks; /* workers that made all their scheduled publishes */
    _Atomic uint32_t stop_acks;   /* workers that stopped publishing */
    _Atomic uint32_t storm_acks;  /* workers that dropped their share */

    /* CPU per thread: the last sample (for the progress line) and the measured phase. */
    uint64_t last_cpu_ns[LG_THREADS_MAX];
    uint64_t last_cpu_wall_ns;
    uint64_t measure_cpu_ns[LG_THREADS_MAX];
    bool is_cpu_warned[LG_THREADS_MAX];
} lg_fleet_t;

/* --- Worker side (runs on each loop thread). ---------------------------------------------- */

static void worker_start_clients(lg_worker_t *w, uint64_t now_ns)
{
    uint32_t target = w->client_count;
    if (w->connect_rate > 0) {
        double due = w->connect_rate * (double)(now_ns - w->ramp_start_ns) / 1e9 + 1;
        if (due < target)
            target = (uint32_t)due;
    }
    if (target > w->started + RAMP_BURST_MAX)
        target = w->started + RAMP_BURST_MAX;
    while (w->started < target)
        lg_client_start(&w->clients[w->started++]);
}

static void worker_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    lg_worker_t *w = arg;
    if (w->is_stopping)
        return;
    worker_start_clients(w, nl_now_ns());
    nl_wheel_advance(&w->wheel, nl_loop_now_ms(w->loop));
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    lg_stats_set(&w->stats.cpu_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
}

static void worker_budget_done(lg_worker_t *w)
{
    nl_timer_stop(w->pub_timer);
    if (!w->is_budget_done) {
        w->is_budget_done = true;
        atomic_fetch_add(&w->fleet->budget_acks, 1);
    }
}

/* --publish-via http: n more publishes are due. They join the backlog, which drains into
 * whichever admin connections are free; a backlog over cap is skipped (counted). */
static void worker_publish_http(lg_worker_t *w, uint64_t n, uint64_t cap)
{
    w->http_backlog += n;
    if (w->http_backlog > cap) {
        lg_stats_add(&w->stats.publish_skipped, w->http_backlog - cap);
        w->http_backlog = cap;
    }
    while (w->http_backlog > 0) {
        lg_client_t *c = lg_worker_next_publisher(w);
        int rc = c ? lg_http_publish(w, c) : -ENOTCONN;
        if (rc == -EBUSY)
            return;
        w->http_backlog--;
        if (rc < 0)
            lg_stats_add(&w->stats.publish_unready, 1);
    }
}

static void worker_on_publish(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    lg_worker_t *w = arg;
    if (!w->is_measuring)
        return;
    /* Open loop: the schedule says how many publishes are due by now, whatever the replies. */
    double elapsed_s = (double)(nl_now_ns() - w->publish_start_ns) / 1e9;
    uint64_t due = (uint64_t)(w->publish_rate * elapsed_s);
    /* The budget makes the count exact: rate x duration publishes, then the worker reports
     * done and the control loop ends the measured phase once every worker has. */
    bool is_last = due >= w->publish_budget;
    if (is_last)
        due = w->publish_budget;
    uint64_t n = due > w->publish_due ? due - w->publish_due : 0;
    uint64_t cap = (uint64_t)(w->publish_rate * BACKLOG_MAX_S) + 1;
    if (n > cap) {
        lg_stats_add(&w->stats.publish_skipped, n - cap);
        w->publish_due += n - cap;
        n = cap;
    }
    w->publish_due += n;
    if (w->cfg->is_publish_http) {
        worker_publish_http(w, n, cap);
    } else {
        for (uint64_t i = 0; i < n; i++) {
            lg_client_t *c = lg_worker_next_publisher(w);
            if (!c || lg_client_publish(c) < 0)
                lg_stats_add(&w->stats.publish_unready, 1);
        }
    }
    if (is_last && w->http_backlog == 0)
        worker_budget_done(w);
}

static void worker_measure_start(void *arg)
{
    lg_worker_t *w = arg;
    w->is_measuring = true;
    w->publish_due = 0;
    w->publish_start_ns = nl_now_ns();
    w->publish_budget = (uint64_t)llround(w->publish_rate * (double)w->cfg->duration_ms / 1e3);
    lg_stats_set(&w->stats.scheduled, w->publish_budget);
    if (w->active_count > 0 && w->publish_budget > 0)
        nl_timer_start(w->pub_timer, PUBLISH_TICK_MS, PUBLISH_TICK_MS);
    else
        worker_budget_done(w);
}

static void worker_publish_stop(void *arg)
{
    lg_worker_t *w = arg;
    w->is_measuring = false;
    nl_timer_stop(w->pub_timer);
    lg_stats_add(&w->stats.publish_skipped, w->http_backlog);
    w->http_backlog = 0;
    atomic_fetch_add(&w->fleet->stop_acks, 1);
}

static void worker_storm(void *arg)
{
    lg_worker_t *w = arg;
    double f = w->cfg->drop_fraction;
    /* Exactly floor(n * f) of the worker's clients, spread evenly over them. */
    for (uint32_t j = 0; j < w->client_count; j++) {
        if (floor((j + 1) * f) > floor(j * f))
            lg_client_drop(&w->clients[j]);
    }
    atomic_fetch_add(&w->fleet->storm_acks, 1);
}

static void worker_on_start(nl_loop_t *loop, void *arg)
{
    lg_worker_t *w = arg;
    w->loop = loop;
    w->ramp_start_ns = nl_now_ns();
    /* A failure here leaves the timers NULL; lg_fleet_run sees it after start returns. */
    if (nl_timer_new(&w->tick, loop, worker_on_tick, w) < 0)
        return;
    if (nl_timer_new(&w->pub_timer, loop, worker_on_publish, w) < 0)
        return;
    if (w->cfg->is_publish_http)
        w->start_err = lg_http_start(w);
    nl_timer_start(w->tick, 0, WORKER_TICK_MS);
}

static void worker_on_stop(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    lg_worker_t *w = arg;
    w->is_stopping = true;
    w->is_measuring = false;
    for (uint32_t j = 0; j < w->started; j++)
        lg_client_stop(&w->clients[j]);
    lg_http_stop(w);
    if (w->tick)
        nl_timer_close(w->tick, NULL);
    if (w->pub_timer)
        nl_timer_close(w->pub_timer, NULL);
    w->tick = NULL;
    w->pub_timer = NULL;
}

/* --- Setup and teardown (main thread). ---------------------------------------------------- */

static int worker_init(lg_fleet_t *f, lg_worker_t *w, uint32_t index)
{
    const lg_config_t *cfg = f->cfg;
    uint32_t clients = lg_config_clients(cfg);
    uint32_t n = clients / f->worker_count + (index < clients % f->worker_count ? 1 : 0);
    w->cfg = cfg;
    w->fleet = f;
    w->index = index;
    w->client_count = n;
    w->clients = calloc(n ? n : 1, sizeof(*w->clients));
    w->active = calloc(n ? n : 1, sizeof(*w->active));
    w->payload = calloc(1, cfg->payload_bytes);
    if (!w->clients || !w->active || !w->payload)
        return -ENOMEM;
    for (uint32_t j = 0; j < n; j++) {
        lg_client_init(&w->clients[j], w, index + j * f->worker_count);
        if (w->clients[j].is_active)
            w->active[w->active_count++] = j;
    }
    /* Padding is printable so a captured payload reads as what it is. */
    memset(w->payload, 'x', cfg->payload_bytes);
    if (cfg->active_count > 0)
        w->publish_rate = lg_config_fleet_rate(cfg) * w->active_count / cfg->active_count;
    w->connect_rate = clients ? (double)cfg->connect_rate * n / clients : 0;
    w->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)index << 32) ^ cfg->id_base;
    snprintf(w->shared_name, sizeof(w->shared_name), "%s:all", cfg->channel_prefix);
    nl_buf_init(&w->scratch, 0);
    lg_stats_init(&w->stats);
    lg_client_opts_init(&w->client_opts, cfg);
    w->client_opts.transport = lg_transport_ops(f->transport);
    w->client_opts.transport_arg = f->transport;
    return nl_wheel_init(&w->wheel, WHEEL_TICK_MS, WHEEL_SLOTS, lg_client_wake, w, nl_now_ms());
}

static void worker_deinit(lg_worker_t *w)
{
    lg_http_free(w);
    nl_wheel_deinit(&w->wheel);
    nl_buf_deinit(&w->scratch);
    free(w->clients);
    free(w->active);
    free(w->payload);
}

/* --- Control loop (main thread). ---------------------------------------------------------- */

static void fleet_post_all(lg_fleet_t *f, nl_loop_post_cb fn)
{
    for (uint32_t i = 0; i < f->worker_count; i++) {
        int rc = nl_loop_post(nl_loop_thread_loop(f->threads[i]), fn, &f->workers[i]);
        if (rc < 0)
            lg_progress_note(&f->progress, "herald-loadgen: post to thread %u failed: %s", i,
                             nl_strerror(rc));
    }
}

/* Starts phase `phase`, which lasts at most max_len_ns, for the progress line and the
 * timeline; the timeline closes its interval there and may ask every worker to cut its latency
 * slice. */
static void fleet_enter_phase(lg_fleet_t *f, int phase, uint64_t now, uint64_t max_len_ns)
{
    f->phase = phase;
    f->phase_start_ns = now;
    f->phase_deadline_ns = now + max_len_ns;
    if (f->timeline && lg_timeline_phase(f->timeline, phase, now, max_len_ns, f->snap))
        fleet_post_all(f, lg_timeline_worker_cut);
}

static void fleet_finish(lg_fleet_t *f)
{
    f->phase = LG_PHASE_DONE;
    nl_loop_stop(f->loop);
}

static void fleet_begin_measure(lg_fleet_t *f, uint64_t now)
{
    lg_result_t *r = f->result;
    const lg_totals_t *s = f->snap;
    fleet_enter_phase(f, LG_PHASE_MEASURE, now, f->cfg->duration_ms * 1000000ull);
    f->measure_start_ns = now;
    r->ready_at_start = s->ready;
    r->ramp_ns = now - f->start_ns;
    r->handshakes_in_ramp = s->handshakes;
    f->deliveries_at_start = s->deliveries;
    f->publishes_at_start = s->publishes;
    f->disconnects_at_start = s->disconnects;
    for (uint32_t i = 0; i < f->worker_count; i++)
        f->measure_cpu_ns[i] = lg_stats_get(&f->stats[i]->cpu_ns);
    double ramp_s = (double)r->ramp_ns / 1e9;
    lg_progress_note(&f->progress, "ramp: %llu of %u clients ready in %.2f s (%.0f connects/s)",
                     (unsigned long long)s->ready, lg_config_clients(f->cfg), ramp_s,
                     ramp_s > 0 ? (double)s->handshakes / ramp_s : 0.0);
    fleet_post_all(f, worker_measure_start);
}

static void fleet_end_measure(lg_fleet_t *f, uint64_t now)
{
    lg_result_t *r = f->result;
    const lg_totals_t *s = f->snap;
    f->publish_end_ns = now;
    r->measure_ns = now - f->measure_start_ns;
    r->deliveries_in_window = s->deliveries - f->deliveries_at_start;
    r->publishes_in_window = s->publishes - f->publishes_at_start;
    r->disconnects_in_window = s->disconnects - f->disconnects_at_start;
    double wall = (double)r->measure_ns;
    for (uint32_t i = 0; i < f->worker_count; i++) {
        uint64_t cpu = lg_stats_get(&f->stats[i]->cpu_ns) - f->measure_cpu_ns[i];
        r->cpu_thread_pct[i] = wall > 0 ? 100.0 * (double)cpu / wall : 0;
        if (r->cpu_thread_pct[i] > r->cpu_thread_max_pct)
            r->cpu_thread_max_pct = r->cpu_thread_pct[i];
    }
    r->is_generator_bound = r->cpu_thread_max_pct > LG_CPU_BOUND_PCT;
    fleet_enter_phase(f, LG_PHASE_DRAIN, now, f->cfg->drain_ms * 1000000ull);
    f->drain_deadline_ns = now + f->cfg->drain_ms * 1000000u;
    f->drain_quiet_since_ns = now;
    f->drain_last_deliveries = s->deliveries;
    fleet_post_all(f, worker_publish_stop);
}

/* The measured phase lasts --duration and, past it, until every worker made its last
 * scheduled publish (a worker starts when the post reaches it, a little after the control
 * loop), or at most MEASURE_GRACE_MS more. */
static bool fleet_is_measure_over(const lg_fleet_t *f, uint64_t now)
{
    uint64_t end = f->measure_start_ns + f->cfg->duration_ms * 1000000u;
    if (now < end)
        return false;
    return atomic_load(&f->budget_acks) == f->worker_count ||
           now >= end + MEASURE_GRACE_MS * 1000000ull;
}

/* Fails the run when herald went away during the measured phase: no client ready for
 * --ramp-timeout (what a client gets to become ready, so a reconnect storm's gap passes), or
 * none ready when the phase ends. The figures then describe an outage, not the load asked
 * for, so the run ends at once with exit status 3 instead of reporting them as a result. */
static bool fleet_check_lost(lg_fleet_t *f, uint64_t now, bool is_end)
{
    if (f->snap->ready > 0) {
        f->none_ready_since_ns = 0;
        return false;
    }
    if (!f->none_ready_since_ns)
        f->none_ready_since_ns = now;
    uint64_t none_ns = now - f->none_ready_since_ns;
    if (!is_end && none_ns < f->cfg->ramp_timeout_ms * 1000000ull)
        return false;
    lg_progress_note(&f->progress,
                     "herald-loadgen: every client lost: none ready for %.1f s of the measured "
                     "phase (herald at %s:%u; disconnects by reason are in the summary)",
                     (double)none_ns / 1e9, f->cfg->host, f->cfg->port);
    f->result->is_failed = true;
    fleet_end_measure(f, now);
    fleet_finish(f);
    return true;
}

static void fleet_check_ramp(lg_fleet_t *f, uint64_t now)
{
    uint32_t clients = lg_config_clients(f->cfg);
    if (f->snap->ready >= clients) {
        fleet_begin_measure(f, now);
        return;
    }
    if (now < f->start_ns + f->cfg->ramp_timeout_ms * 1000000u)
        return;
    if (f->snap->ready == 0) {
        lg_progress_note(&f->progress,
                         "herald-loadgen: no client became ready within --ramp-timeout "
                         "(herald at %s:%u; connect failures by reason are in the summary)",
                         f->cfg->host, f->cfg->port);
        f->result->is_failed = true;
        fleet_finish(f);
        return;
    }
    lg_progress_note(&f->progress, "ramp timed out: measuring with %llu of %u clients ready",
                     (unsigned long long)f->snap->ready, clients);
    fleet_begin_measure(f, now);
}

static void fleet_check_storm(lg_fleet_t *f, uint64_t now)
{
    const lg_config_t *cfg = f->cfg;
    lg_result_t *r = f->result;
    if (!f->is_storm_fired && now >= f->measure_start_ns + cfg->drop_at_ms * 1000000u) {
        f->is_storm_fired = true;
        f->storm_ns = now;
        f->failures_at_storm = f->snap->connect_failures;
        r->has_storm = true;
        lg_progress_note(&f->progress, "storm: dropping %.0f%% of the clients",
                         cfg->drop_fraction * 100);
        fleet_post_all(f, worker_storm);
        return;
    }
    if (f->is_storm_fired && r->storm_recover_ns < 0 &&
        atomic_load(&f->storm_acks) == f->worker_count &&
        f->snap->ready >= lg_config_clients(cfg)) {
        r->storm_recover_ns = (int64_t)(now - f->storm_ns);
        lg_progress_note(&f->progress, "storm: %llu dropped clients all back in %.0f ms",
                         (unsigned long long)f->snap->drops, (double)r->storm_recover_ns / 1e6);
    }
}

/* True while the expected count is exact so far: every client ready from the start, none
 * gone since (fleet_fill_result decides the final word the same way). */
static bool fleet_is_exact(const lg_fleet_t *f)
{
    return f->result->ready_at_start == lg_config_clients(f->cfg) && !f->is_storm_fired &&
           f->snap->disconnects == f->disconnects_at_start;
}

static void fleet_check_drain(lg_fleet_t *f, uint64_t now)
{
    const lg_totals_t *s = f->snap;
    bool is_acked = atomic_load(&f->stop_acks) == f->worker_count &&
                    s->publish_oks + s->publish_errors + s->publish_unacked >= s->publishes;
    /* With an exact expected count the drain waits for it; otherwise (clients came and went,
     * so some deliveries are owed to nobody) for deliveries to stop arriving. */
    if (s->deliveries != f->drain_last_deliveries) {
        f->drain_last_deliveries = s->deliveries;
        f->drain_quiet_since_ns = now;
    }
    bool is_done;
    if (fleet_is_exact(f))
        is_done = is_acked && s->deliveries - s->duplicates >= s->expected;
    else
        is_done = is_acked && now - f->drain_quiet_since_ns >= DRAIN_QUIET_MS * 1000000ull;
    if (is_done)
        f->result->is_drained = true;
    if (is_done || now >= f->drain_deadline_ns)
        fleet_finish(f);
}

/* Each thread's share of one core since the last sample; warns once per thread when the
 * generator, not herald, is the bottleneck. Returns the busiest thread's share. */
static double fleet_cpu_sample(lg_fleet_t *f, uint64_t now)
{
    double wall = (double)(now - f->last_cpu_wall_ns);
    double max = 0;
    for (uint32_t i = 0; i < f->worker_count; i++) {
        uint64_t cpu = lg_stats_get(&f->stats[i]->cpu_ns);
        double pct = wall > 0 ? 100.0 * (double)(cpu - f->last_cpu_ns[i]) / wall : 0;
        f->last_cpu_ns[i] = cpu;
        if (pct > max)
            max = pct;
        if (pct > LG_CPU_BOUND_PCT && f->phase == LG_PHASE_MEASURE && !f->is_cpu_warned[i]) {
            f->is_cpu_warned[i] = true;
            lg_progress_note(&f->progress,
                             "warning: loadgen thread %u used %.0f%% of a core: the generator "
                             "may be the bottleneck (add --threads or loadgen processes)",
                             i, pct);
        }
    }
    f->last_cpu_wall_ns = now;
    return max;
}

static void fleet_on_tick(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    lg_fleet_t *f = arg;
    uint64_t now = nl_now_ns();
    lg_stats_sum(f->snap, f->stats, f->worker_count);
    switch (f->phase) {
    case LG_PHASE_RAMP:
        fleet_check_ramp(f, now);
        break;
    case LG_PHASE_MEASURE:
        if (f->cfg->drop_at_ms > 0)
            fleet_check_storm(f, now);
        bool is_over = fleet_is_measure_over(f, now);
        if (!fleet_check_lost(f, now, is_over) && is_over)
            fleet_end_measure(f, now);
        break;
    case LG_PHASE_DRAIN:
        fleet_check_drain(f, now);
        break;
    default:
        break;
    }
    if (f->timeline) {
        if (f->phase != LG_PHASE_DONE && lg_timeline_is_due(f->timeline, now) &&
            lg_timeline_cut(f->timeline, now, f->snap))
            fleet_post_all(f, lg_timeline_worker_cut);
        lg_timeline_collect(f->timeline);
    }
    if (now >= f->next_progress_ns) {
        f->next_progress_ns += 1000000000u;
        double cpu = fleet_cpu_sample(f, now);
        lg_progress_line(&f->progress, lg_phase_name(f->phase), now, f->start_ns, f->snap, cpu);
    }
    lg_progress_view_t view = {
        .phase = f->phase,
        .now_ns = now,
        .start_ns = f->start_ns,
        .phase_start_ns = f->phase_start_ns,
        .deadline_ns = f->phase_deadline_ns,
        .t = f->snap,
    };
    lg_progress_live(&f->progress, &view);
}

static void fleet_on_signal(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(s);
    lg_fleet_t *f = arg;
    uint64_t now = nl_now_ns();
    f->result->is_interrupted = true;
    lg_progress_note(&f->progress, "herald-loadgen: %s: ending the run",
                     signum == SIGINT ? "SIGINT" : "SIGTERM");
    if (++f->signals >= 2 || f->phase == LG_PHASE_DRAIN) {
        fleet_finish(f);
        return;
    }
    lg_stats_sum(f->snap, f->stats, f->worker_count);
    if (f->phase == LG_PHASE_RAMP)
        fleet_begin_measure(f, now);
    if (f->phase == LG_PHASE_MEASURE)
        fleet_end_measure(f, now);
}

/* --- Run. ----------------------------------------------------------------------------------- */

static int fleet_setup(lg_fleet_t *f)
{
    static const int signums[] = {SIGINT, SIGTERM};
    f->snap = calloc(1, sizeof(*f->snap));
    f->workers = calloc(f->worker_count, sizeof(*f->workers));
    if (!f->snap || !f->workers)
        return -ENOMEM;
    const lg_config_t *cfg = f->cfg;
    lg_transport_opts_t topts = {
        .kind = cfg->transport,
        .host = cfg->host,
        .port = cfg->port,
        .tls_ca_file = cfg->tls_ca,
        .tls_server_name = cfg->tls_server_name,
        .is_tls_insecure = cfg->is_tls_insecure,
        .handshake_timeout_ms = cfg->connect_timeout_ms,
        .on_fail = lg_client_transport_failed,
    };
    char err[512];
    int rc = lg_transport_new(&f->transport, &topts, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EINVAL)
            fprintf(stderr, "herald-loadgen: --transport %s: %s\n",
                    lg_transport_name(cfg->transport), err);
        return rc;
    }
    for (uint32_t i = 0; i < f->worker_count; i++) {
        rc = worker_init(f, &f->workers[i], i);
        if (rc < 0)
            return rc;
        f->stats[i] = &f->workers[i].stats;
    }
    /* Signals go to the control loop's signalfd; threads started later inherit the mask. */
    rc = nl_signal_block(signums, 2);
    if (rc == 0)
        rc = nl_loop_new(&f->loop, NULL);
    if (rc == 0)
        rc = nl_signal_new(&f->signal, f->loop, signums, 2, fleet_on_signal, f);
    if (rc == 0)
        rc = nl_timer_new(&f->timer, f->loop, fleet_on_tick, f);
    return rc;
}

static int fleet_start_threads(lg_fleet_t *f)
{
    for (uint32_t i = 0; i < f->worker_count; i++) {
        char name[16];
        snprintf(name, sizeof(name), "lg-io%u", i);
        nl_loop_thread_opts_t opts = {
            .loop = {.id = (int)i + 1},
            .name = name,
            .cpu = -1,
            .on_start = worker_on_start,
            .on_stop = worker_on_stop,
            .arg = &f->workers[i],
        };
        int rc = nl_loop_thread_start(&f->threads[i], &opts);
        if (rc < 0)
            return rc;
        /* on_start ran before start returned (the start handshake orders it). */
        if (!f->workers[i].tick || !f->workers[i].pub_timer)
            return -ENOMEM;
        if (f->workers[i].start_err < 0)
            return f->workers[i].start_err;
    }
    return 0;
}

static void fleet_stop_threads(lg_fleet_t *f)
{
    for (uint32_t i = 0; i < f->worker_count; i++) {
        if (!f->threads[i])
            continue;
        int rc = nl_loop_thread_stop(f->threads[i]);
        if (rc < 0)
            fprintf(stderr, "herald-loadgen: thread %u left handles open: %s\n", i,
                    nl_strerror(rc));
        f->threads[i] = NULL;
    }
}

static void fleet_fill_result(lg_fleet_t *f)
{
    lg_result_t *r = f->result;
    uint64_t now = nl_now_ns();
    lg_stats_sum(&r->totals, f->stats, f->worker_count);
    r->total_ns = now - f->start_ns;
    if (f->timeline)
        lg_timeline_finish(f->timeline, now, &r->totals, f->snap->ready);
    if (f->publish_end_ns)
        r->drain_ns = now - f->publish_end_ns;
    if (r->has_storm) {
        r->storm_dropped = r->totals.drops;
        r->storm_connect_failures = r->totals.connect_failures - f->failures_at_storm;
    }
    /* Expected deliveries assume every subscriber was there for every publish. */
    r->is_expected_exact = !r->is_failed && r->ready_at_start == lg_config_clients(f->cfg) &&
                           r->totals.disconnects == f->disconnects_at_start && !r->has_storm;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && r->total_ns > 0) {
        double cpu_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                        (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
        r->cpu_process_pct = 100.0 * cpu_us * 1e3 / (double)r->total_ns;
    }
}

static void fleet_teardown(lg_fleet_t *f)
{
    if (f->loop) {
        if (f->timer)
            nl_timer_close(f->timer, NULL);
        if (f->signal)
            nl_signal_close(f->signal);
        /* One more iteration finishes the closes; then the loop has no handle left. */
        nl_loop_run_once(f->loop, 0);
        int rc = nl_loop_free(f->loop);
        if (rc < 0)
            fprintf(stderr, "herald-loadgen: control loop: %s\n", nl_strerror(rc));
    }
    /* The timeline outlives the run (it is the result's); the workers' slices do not. */
    if (f->timeline)
        lg_timeline_detach(f->timeline);
    if (f->workers) {
        for (uint32_t i = 0; i < f->worker_count; i++)
            worker_deinit(&f->workers[i]);
    }
    free(f->workers);
    free(f->snap);
    lg_transport_free(f->transport);
    free(f);
}

int lg_fleet_run(const lg_config_t *cfg, lg_result_t *out)
{
    memset(out, 0, sizeof(*out));
    out->storm_recover_ns = -1;
    lg_fleet_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->cfg = cfg;
    f->result = out;
    f->worker_count = cfg->threads;
    f->start_ns = nl_now_ns();
    f->last_cpu_wall_ns = f->start_ns;
    f->next_progress_ns = f->start_ns + 1000000000u;
    f->phase_start_ns = f->start_ns;
    f->phase_deadline_ns = f->start_ns + cfg->ramp_timeout_ms * 1000000ull;
    lg_progress_init(&f->progress, cfg, f->start_ns);
    int rc = fleet_setup(f);
    if (rc == 0 && cfg->report_path[0]) {
        rc = lg_timeline_new(&out->timeline, cfg, f->workers, f->worker_count, f->start_ns);
        f->timeline = out->timeline;
    }
    if (rc == 0)
        rc = fleet_start_threads(f);
    if (rc == 0)
        rc = nl_timer_start(f->timer, CONTROL_TICK_MS, CONTROL_TICK_MS);
    if (rc == 0)
        rc = nl_loop_run(f->loop);
    fleet_stop_threads(f);
    lg_progress_end(&f->progress);
    if (rc == 0)
        fleet_fill_result(f);
    fleet_teardown(f);
    return rc;
}
