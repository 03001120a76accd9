/*
 * lg_timeline: per-interval samples and the workers' latency slices (see lg_timeline.h).
 *
 * Slice bookkeeping. Cut number c (0, 1, 2, ...) ends slice c % LG_TIMELINE_SLICES on every
 * worker: before its c-th cut a worker records into slice c % SLICES, so a worker that has made
 * `done` cuts records into slice done % SLICES. The sample closed by cut c carries cut_seq c and
 * is read from slice c % SLICES of every worker once each has done > c. Cut c is posted only
 * while fewer than SLICES - 1 cuts are unread, so no worker can come round to slice c % SLICES
 * again (that takes cut c + SLICES) before the control loop has read and emptied it; the post
 * queue's mutex orders the emptying before the worker's next write there.
 */
#include "lg_timeline.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lg_client.h"
#include "lg_fleet.h"

#define NS_PER_S 1000000000ull

/* The cumulative counters at the last boundary. */
typedef struct counts_s {
    LG_SAMPLE_COUNTERS(LG_SAMPLE_FIELD)
} counts_t;

struct lg_timeline_s {
    lg_sample_t *samples;
    size_t len;
    uint64_t run_start_ns; /* monotonic (nl_now_ns) */
    int64_t started_unix_ms;

    /* The open interval. */
    uint64_t open_start_ns; /* since run_start_ns */
    int phase;
    uint64_t width_ns;
    uint64_t next_cut_ns; /* absolute; UINT64_MAX: no more periodic boundaries this phase */
    uint64_t phase_end_ns;
    counts_t last;

    lg_worker_t *workers;
    uint32_t worker_count;
    uint64_t cuts_posted; /* cuts handed to the workers so far */
    size_t next_unread;   /* first sample whose latency has not been read */
    nl_hist_t *scratch;   /* the merged slices of one interval */
};

static uint64_t width_for(uint64_t max_len_ns)
{
    uint64_t per_point = (max_len_ns + LG_TIMELINE_PHASE_POINTS - 1) / LG_TIMELINE_PHASE_POINTS;
    uint64_t seconds = (per_point + NS_PER_S - 1) / NS_PER_S;
    return (seconds > 1 ? seconds : 1) * NS_PER_S;
}

/* Starts the open interval's periodic boundaries for a phase from now lasting max_len_ns. */
static void open_phase(lg_timeline_t *tl, int phase, uint64_t now_ns, uint64_t max_len_ns)
{
    tl->phase = phase;
    tl->width_ns = width_for(max_len_ns);
    tl->phase_end_ns = now_ns + max_len_ns;
    tl->next_cut_ns = now_ns + tl->width_ns;
    tl->open_start_ns = now_ns - tl->run_start_ns;
}

int lg_timeline_new(lg_timeline_t **out, const lg_config_t *cfg, lg_worker_t *workers, uint32_t n,
                    uint64_t start_ns)
{
    lg_timeline_t *tl = calloc(1, sizeof(*tl));
    if (!tl)
        return -ENOMEM;
    tl->samples = calloc(LG_TIMELINE_MAX, sizeof(*tl->samples));
    tl->scratch = calloc(1, sizeof(*tl->scratch));
    if (!tl->samples || !tl->scratch) {
        lg_timeline_free(tl);
        return -ENOMEM;
    }
    tl->workers = workers;
    tl->worker_count = n;
    for (uint32_t i = 0; i < n; i++) {
        workers[i].slices = calloc(LG_TIMELINE_SLICES, sizeof(nl_hist_t));
        if (!workers[i].slices) {
            lg_timeline_free(tl);
            return -ENOMEM;
        }
        workers[i].slice_cur = 0;
        atomic_store(&workers[i].slice_cuts, 0);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    tl->started_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    tl->run_start_ns = start_ns;
    open_phase(tl, LG_PHASE_RAMP, start_ns, cfg->ramp_timeout_ms * 1000000ull);
    *out = tl;
    return 0;
}

void lg_timeline_detach(lg_timeline_t *tl)
{
    for (uint32_t i = 0; i < tl->worker_count; i++) {
        free(tl->workers[i].slices);
        tl->workers[i].slices = NULL;
    }
    tl->workers = NULL;
    tl->worker_count = 0;
}

void lg_timeline_free(lg_timeline_t *tl)
{
    if (!tl)
        return;
    lg_timeline_detach(tl);
    free(tl->samples);
    free(tl->scratch);
    free(tl);
}

bool lg_timeline_is_due(const lg_timeline_t *tl, uint64_t now_ns)
{
    /* The last interval of a phase runs to the phase's end, however late that comes. */
    return now_ns >= tl->next_cut_ns && tl->next_cut_ns + tl->width_ns <= tl->phase_end_ns;
}

/* Closes the open interval into a new sample. Returns it, or NULL when the interval is empty
 * (a phase that ended where it began) or the store is full (then the interval stays open and
 * the last sample simply grows: never reached with the per-phase bound, kept as a guard). */
static lg_sample_t *close_interval(lg_timeline_t *tl, uint64_t now_ns, const lg_totals_t *t)
{
    uint64_t end = now_ns - tl->run_start_ns;
    if (end <= tl->open_start_ns || tl->len == LG_TIMELINE_MAX)
        return NULL;
    lg_sample_t *s = &tl->samples[tl->len++];
    memset(s, 0, sizeof(*s));
    s->start_ns = tl->open_start_ns;
    s->end_ns = end;
    s->phase = tl->phase;
    s->cut_seq = -1;
#define LG_SAMPLE_DIFF(name)                                                                       \
    s->name = t->name - tl->last.name;                                                             \
    tl->last.name = t->name;
    LG_SAMPLE_COUNTERS(LG_SAMPLE_DIFF)
#undef LG_SAMPLE_DIFF
    s->ready = t->ready;
    tl->open_start_ns = end;
    return s;
}

/* Gives sample s the next cut if the ring has room. Returns: whether it did. */
static bool assign_cut(lg_timeline_t *tl, lg_sample_t *s)
{
    uint64_t unread = 0;
    for (size_t i = tl->next_unread; i < tl->len; i++)
        unread += tl->samples[i].cut_seq >= 0;
    /* s itself has no cut yet, so `unread` counts the cuts outstanding before this one. */
    if (unread >= LG_TIMELINE_SLICES - 1)
        return false;
    s->cut_seq = (int64_t)tl->cuts_posted++;
    return true;
}

bool lg_timeline_cut(lg_timeline_t *tl, uint64_t now_ns, const lg_totals_t *t)
{
    /* Boundaries stay on the phase's grid even when a tick comes late. */
    while (tl->next_cut_ns <= now_ns)
        tl->next_cut_ns += tl->width_ns;
    lg_sample_t *s = close_interval(tl, now_ns, t);
    return s && assign_cut(tl, s);
}

bool lg_timeline_phase(lg_timeline_t *tl, int phase, uint64_t now_ns, uint64_t max_len_ns,
                       const lg_totals_t *t)
{
    lg_sample_t *s = close_interval(tl, now_ns, t);
    bool is_cut = s && assign_cut(tl, s);
    open_phase(tl, phase, now_ns, max_len_ns);
    return is_cut;
}

void lg_timeline_worker_cut(void *arg)
{
    lg_worker_t *w = arg;
    w->slice_cur = (w->slice_cur + 1) % LG_TIMELINE_SLICES;
    /* Release: the control loop that sees the new count sees every record of the old slice. */
    atomic_fetch_add_explicit(&w->slice_cuts, 1, memory_order_release);
}

/* Summarizes the scratch histogram into s and empties it. */
static void read_scratch(lg_timeline_t *tl, lg_sample_t *s)
{
    nl_hist_summary_t sum;
    nl_hist_summarize(tl->scratch, &sum);
    s->latency_count = sum.count;
    s->p50_ns = sum.p50;
    s->p90_ns = sum.p90;
    s->p99_ns = sum.p99;
    s->max_ns = sum.max;
    nl_hist_init(tl->scratch);
}

/* Merges slice cut_seq of every worker that has passed it (or, when is_final, reached it: its
 * current slice) into the scratch histogram and empties it. Returns false, merging nothing,
 * when a worker has not made the cut yet and this is not the end. */
static bool merge_slices(lg_timeline_t *tl, int64_t cut_seq, bool is_final)
{
    uint64_t c = (uint64_t)cut_seq;
    for (uint32_t i = 0; i < tl->worker_count && !is_final; i++) {
        if (atomic_load_explicit(&tl->workers[i].slice_cuts, memory_order_acquire) <= c)
            return false;
    }
    for (uint32_t i = 0; i < tl->worker_count; i++) {
        lg_worker_t *w = &tl->workers[i];
        if (atomic_load_explicit(&w->slice_cuts, memory_order_acquire) < c)
            continue; /* at the end: a cut that never reached this worker */
        nl_hist_t *slice = &w->slices[c % LG_TIMELINE_SLICES];
        nl_hist_merge(tl->scratch, slice);
        nl_hist_init(slice);
    }
    return true;
}

static void collect(lg_timeline_t *tl, bool is_final)
{
    while (tl->next_unread < tl->len) {
        lg_sample_t *s = &tl->samples[tl->next_unread];
        if (s->cut_seq >= 0) {
            if (!merge_slices(tl, s->cut_seq, is_final))
                return;
            read_scratch(tl, s);
        }
        tl->next_unread++;
    }
}

void lg_timeline_collect(lg_timeline_t *tl)
{
    collect(tl, false);
}

void lg_timeline_finish(lg_timeline_t *tl, uint64_t now_ns, const lg_totals_t *t, uint64_t ready)
{
    /* The last interval's cut is virtual: the threads have stopped, so its latencies are in the
     * slice each worker was recording into. It always gets one, ring or no ring. */
    lg_sample_t *s = close_interval(tl, now_ns, t);
    if (s) {
        s->cut_seq = (int64_t)tl->cuts_posted;
        s->ready = ready;
    }
    tl->next_cut_ns = UINT64_MAX;
    collect(tl, true);
}

size_t lg_timeline_len(const lg_timeline_t *tl)
{
    return tl->len;
}

const lg_sample_t *lg_timeline_sample(const lg_timeline_t *tl, size_t i)
{
    return &tl->samples[i];
}

int64_t lg_timeline_started_unix_ms(const lg_timeline_t *tl)
{
    return tl->started_unix_ms;
}
