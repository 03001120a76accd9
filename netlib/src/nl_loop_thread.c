/*
 * nl_loop_thread: a thread that creates, runs and frees its own loop (see nl_loop_thread.h).
 *
 * Start-up handshake: the thread creates its loop, runs on_start, and posts itself a closure
 * that signals the starter from inside the running loop, so nl_loop_thread_start returns only
 * once the loop really runs. Stop posts a closure that runs on_stop and stops the loop: handles
 * on_stop closes are finished by the loop's own deferred phase in that last iteration.
 */
#include "netlib/nl_loop_thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_log.h"

struct nl_loop_thread_s {
    pthread_t thread;
    nl_loop_thread_opts_t opts;
    char name[16]; /* pthread_setname_np's limit, NUL included */
    /* lock guards loop, is_started and start_err during start-up; no callback runs under it. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    nl_loop_t *loop;
    bool is_started;
    int start_err;
    bool is_on_stop_done; /* loop thread only */
    int free_err;         /* written by the thread, read after join */
};

static void thread_signal_started(nl_loop_thread_t *t, nl_loop_t *loop, int err)
{
    pthread_mutex_lock(&t->lock);
    t->loop = loop;
    t->start_err = err;
    t->is_started = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static void thread_on_running(void *arg)
{
    nl_loop_thread_t *t = arg;
    thread_signal_started(t, nl_loop_current(), 0);
}

static void thread_on_stop(void *arg)
{
    nl_loop_thread_t *t = arg;
    nl_loop_t *loop = nl_loop_current();
    if (t->opts.on_stop && !t->is_on_stop_done)
        t->opts.on_stop(loop, t->opts.arg);
    t->is_on_stop_done = true;
    nl_loop_stop(loop);
}

static void thread_setup(nl_loop_thread_t *t)
{
    if (t->name[0])
        pthread_setname_np(pthread_self(), t->name);
    if (t->opts.is_pinned && t->opts.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(t->opts.cpu, &set);
        int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        if (err != 0)
            NL_LOG(NL_WARN, "loop_thread_pin_failed", "cpu=%d err=%s", t->opts.cpu,
                   nl_strerror(-err));
    }
}

static void *thread_main(void *arg)
{
    nl_loop_thread_t *t = arg;
    thread_setup(t);
    nl_loop_t *loop;
    int err = nl_loop_new(&loop, &t->opts.loop);
    if (err < 0) {
        thread_signal_started(t, NULL, err);
        return NULL;
    }
    err = nl_loop_post(loop, thread_on_running, t);
    if (err < 0) {
        (void)nl_loop_free(loop); /* nothing ran on it yet, so nothing can hold it */
        thread_signal_started(t, NULL, err);
        return NULL;
    }
    if (t->opts.on_start)
        t->opts.on_start(loop, t->opts.arg);
    err = nl_loop_run(loop);
    if (err < 0)
        NL_LOG(NL_ERROR, "loop_thread_run_failed", "err=%s", nl_strerror(err));
    /* The stop closure normally ran on_stop inside the loop; if posting it failed, do it here. */
    if (t->opts.on_stop && !t->is_on_stop_done)
        t->opts.on_stop(loop, t->opts.arg);
    t->free_err = nl_loop_free(loop);
    if (t->free_err < 0)
        NL_LOG(NL_ERROR, "loop_thread_leak", "err=%s", nl_strerror(t->free_err));
    return NULL;
}

int nl_loop_thread_start(nl_loop_thread_t **out, const nl_loop_thread_opts_t *opts)
{
    nl_loop_thread_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->opts = *opts;
    if (opts->name)
        strncpy(t->name, opts->name, sizeof(t->name) - 1);
    t->opts.name = t->name;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    int err = -pthread_create(&t->thread, NULL, thread_main, t);
    if (err < 0)
        goto fail;
    pthread_mutex_lock(&t->lock);
    while (!t->is_started)
        pthread_cond_wait(&t->cond, &t->lock);
    err = t->start_err;
    pthread_mutex_unlock(&t->lock);
    if (err < 0) {
        pthread_join(t->thread, NULL);
        goto fail;
    }
    *out = t;
    return 0;
fail:
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t);
    return err;
}

nl_loop_t *nl_loop_thread_loop(nl_loop_thread_t *t)
{
    return t->loop;
}

int nl_loop_thread_stop(nl_loop_thread_t *t)
{
    if (!t)
        return 0;
    if (nl_loop_post(t->loop, thread_on_stop, t) < 0)
        nl_loop_stop(t->loop);
    pthread_join(t->thread, NULL);
    int err = t->free_err;
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t);
    return err;
}
