/*
 * gw_http_deadline: see gw_http_deadline.h.
 *
 * Each connection libmicrohttpd announces gets an entry on one list (its socket context); the
 * checker thread wakes every tick, walks the list under the lock and cuts off what is past its
 * deadline. The tick is a tenth of the timeout, between 50 ms and 1 s, so a connection goes at
 * most a tenth late. An entry cut off stays listed (its descriptor is still libmicrohttpd's)
 * until the CLOSED notification removes it; is_cut keeps it from being cut twice.
 */
#include "gw_http_deadline.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define DEFAULT_TIMEOUT_MS 10000u
#define TICK_MIN_MS 50u
#define TICK_MAX_MS 1000u

static const char timeout_answer[] = "HTTP/1.1 408 Request Timeout\r\n"
                                     "Connection: close\r\n"
                                     "Content-Type: application/json\r\n"
                                     "Content-Length: 29\r\n"
                                     "\r\n"
                                     "{\"error\":\"request too slow\"}";

typedef struct track_s {
    struct track_s *prev;
    struct track_s *next;
    int fd;
    int64_t deadline_ms; /* monotonic; 0: the clock is stopped */
    bool has_headers;    /* the current request's headers arrived */
    bool was_answered;   /* kept alive after an answer: no 408 racing a request */
    bool is_cut;
} track_t;

struct gw_http_deadline_s {
    uint64_t timeout_ms; /* lock (gw_http_deadline_set_timeout changes it) */
    uint64_t tick_ms;    /* lock */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* signalled to stop the thread */
    track_t *head;       /* lock */
    bool is_stopping;    /* lock */
    uint64_t timed_out;  /* relaxed atomic */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Cuts t off; lock held. The 408 is best effort: a full send buffer just drops it. */
static void track_cut(gw_http_deadline_t *d, track_t *t)
{
    if (!t->has_headers && !t->was_answered)
        (void)send(t->fd, timeout_answer, sizeof(timeout_answer) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)shutdown(t->fd, SHUT_RDWR);
    t->is_cut = true;
    __atomic_add_fetch(&d->timed_out, 1, __ATOMIC_RELAXED);
}

static void *deadline_main(void *arg)
{
    gw_http_deadline_t *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->is_stopping) {
        int64_t now = mono_ms();
        for (track_t *t = d->head; t != NULL; t = t->next) {
            if (!t->is_cut && t->deadline_ms != 0 && now >= t->deadline_ms)
                track_cut(d, t);
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(d->tick_ms % 1000) * 1000000L;
        until.tv_sec += (time_t)(d->tick_ms / 1000) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        (void)pthread_cond_timedwait(&d->wake, &d->lock, &until);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* Sets the timeout and the tick that checks it; d->lock held, or before the thread starts. */
static void deadline_set(gw_http_deadline_t *d, uint64_t timeout_ms)
{
    d->timeout_ms = timeout_ms != 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    d->tick_ms = d->timeout_ms / 10;
    d->tick_ms = d->tick_ms < TICK_MIN_MS ? TICK_MIN_MS : d->tick_ms;
    d->tick_ms = d->tick_ms > TICK_MAX_MS ? TICK_MAX_MS : d->tick_ms;
}

void gw_http_deadline_set_timeout(gw_http_deadline_t *d, uint64_t timeout_ms)
{
    pthread_mutex_lock(&d->lock);
    deadline_set(d, timeout_ms);
    pthread_mutex_unlock(&d->lock);
}

int gw_http_deadline_new(gw_http_deadline_t **out, uint64_t timeout_ms)
{
    gw_http_deadline_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    deadline_set(d, timeout_ms);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&d->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) {
        free(d);
        return -rc;
    }
    pthread_mutex_init(&d->lock, NULL);
    rc = pthread_create(&d->thread, NULL, deadline_main, d);
    if (rc != 0) {
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return -rc;
    }
    *out = d;
    return 0;
}

void gw_http_deadline_free(gw_http_deadline_t *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    d->is_stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    /* libmicrohttpd has stopped: every CLOSED notification came, the list is empty. */
    while (d->head != NULL) {
        track_t *t = d->head;
        d->head = t->next;
        free(t);
    }
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void gw_http_deadline_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                    enum MHD_ConnectionNotificationCode toe)
{
    gw_http_deadline_t *d = cls;
    track_t *t = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t = info != NULL ? calloc(1, sizeof(*t)) : NULL;
        if (t == NULL)
            return; /* untracked: libmicrohttpd's inactivity timeout still applies */
        t->fd = info->connect_fd;
        pthread_mutex_lock(&d->lock);
        t->deadline_ms = mono_ms() + (int64_t)d->timeout_ms;
        t->next = d->head;
        if (d->head != NULL)
            d->head->prev = t;
        d->head = t;
        pthread_mutex_unlock(&d->lock);
        *socket_context = t;
        return;
    }
    if (t == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        d->head = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&d->lock);
    *socket_context = NULL;
    free(t);
}

static track_t *track_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != NULL ? info->socket_context : NULL;
}

void gw_http_deadline_headers(gw_http_deadline_t *d, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    t->has_headers = true;
    pthread_mutex_unlock(&d->lock);
}

void gw_http_deadline_stop(gw_http_deadline_t *d, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    t->deadline_ms = 0;
    pthread_mutex_unlock(&d->lock);
}

void gw_http_deadline_restart(gw_http_deadline_t *d, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    t->has_headers = false;
    t->was_answered = true;
    t->deadline_ms = mono_ms() + (int64_t)d->timeout_ms;
    pthread_mutex_unlock(&d->lock);
}

uint64_t gw_http_deadline_timed_out(const gw_http_deadline_t *d)
{
    return __atomic_load_n(&d->timed_out, __ATOMIC_RELAXED);
}
