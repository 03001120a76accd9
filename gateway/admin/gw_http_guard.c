/*
 * gw_http_guard: see gw_http_guard.h.
 *
 * Each connection libmicrohttpd announces gets an entry on one list (its socket context),
 * newest first. The checker thread wakes every tick, walks the list under the lock and cuts
 * off what is past its deadline; a tick is a tenth of the shorter timeout, between 50 ms and
 * 1 s, so a connection goes at most a tenth late. Admission walks the same list when a
 * connection starts: at most max_connections + GW_HTTP_GUARD_SLACK entries, so a walk per
 * accept costs nothing next to the accept itself. An entry cut off stays listed (its
 * descriptor is still libmicrohttpd's) until the CLOSED notification removes it; is_cut keeps
 * it from being cut twice and out of every count.
 */
#include "gw_http_guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define DEFAULT_HEADER_TIMEOUT_MS 2000u
#define DEFAULT_REQUEST_TIMEOUT_MS 10000u
#define DEFAULT_MAX_CONNECTIONS 64u
#define DEFAULT_MAX_PER_ADDRESS 32u
#define TICK_MIN_MS 50u
#define TICK_MAX_MS 1000u
/* Connections libmicrohttpd may hold above max_connections: those cut or shed but not yet
 * closed. It closes them in the pass after the shutdown, and accepts at most one connection
 * a pass under poll(2), so a couple would do; 8 leaves room. herald's descriptor reserve for
 * the admin port (GW_LISTENER_FD_RESERVE, 80) covers the 72 plus the listener. */
#define GW_HTTP_GUARD_SLACK 8u

#define JSON_408 "{\"error\":\"request too slow\"}"
#define JSON_503 "{\"error\":\"admin connections full\"}"

static const char timeout_answer[] = "HTTP/1.1 408 Request Timeout\r\n"
                                     "Connection: close\r\n"
                                     "Content-Type: application/json\r\n"
                                     "Content-Length: 28\r\n"
                                     "\r\n" JSON_408;

static const char full_answer[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                  "Connection: close\r\n"
                                  "Retry-After: 1\r\n"
                                  "Content-Type: application/json\r\n"
                                  "Content-Length: 34\r\n"
                                  "\r\n" JSON_503;

/* The lengths above are these bodies' (the 408 said 29 for 28 bytes before this was checked). */
_Static_assert(sizeof(JSON_408) - 1 == 28, "the 408's Content-Length");
_Static_assert(sizeof(JSON_503) - 1 == 34, "the 503's Content-Length");

typedef struct track_s {
    struct track_s *prev;
    struct track_s *next;
    int fd;
    int family;              /* AF_INET or AF_INET6 (0: unknown, never grouped) */
    unsigned char addr[16];  /* the source address (an IPv4-mapped one as IPv4) */
    int64_t since_ms;        /* accepted or last answered: the age that picks whom to shed */
    int64_t header_until_ms; /* monotonic; 0: no header deadline */
    int64_t request_until_ms;
    bool has_headers;  /* the current request's headers arrived */
    bool was_answered; /* kept alive after an answer: no 408 or 503 racing a request */
    bool is_trusted;   /* the current request carries a valid key: never shed */
    bool is_cut;
} track_t;

struct gw_http_guard_s {
    uint64_t header_timeout_ms;  /* lock */
    uint64_t request_timeout_ms; /* lock */
    uint64_t tick_ms;            /* lock */
    unsigned max_connections;
    unsigned max_per_address;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* signalled to stop the thread */
    track_t *head;       /* lock */
    bool is_stopping;    /* lock */
    /* Relaxed atomics. */
    uint64_t n_timed_out;
    uint64_t n_shed;
    uint64_t n_refused;
    uint64_t n_busy;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

/* Ends t: the answer first, when one is due and fits the send buffer (best effort: a full
 * buffer drops it), then shutdown(2), which libmicrohttpd sees as the peer's close. Lock
 * held. */
static void track_cut(track_t *t, const char *answer, size_t len)
{
    if (answer != NULL && !t->has_headers && !t->was_answered)
        (void)send(t->fd, answer, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)shutdown(t->fd, SHUT_RDWR);
    t->is_cut = true;
}

/* Starts t's clocks for a request from now; lock held. */
static void track_clock(const gw_http_guard_t *g, track_t *t, int64_t now)
{
    uint64_t header_ms =
        g->header_timeout_ms < g->request_timeout_ms ? g->header_timeout_ms : g->request_timeout_ms;
    t->since_ms = now;
    t->header_until_ms = now + (int64_t)header_ms;
    t->request_until_ms = now + (int64_t)g->request_timeout_ms;
}

static bool track_is_late(const track_t *t, int64_t now)
{
    if (t->is_cut)
        return false;
    if (!t->has_headers && t->header_until_ms != 0 && now >= t->header_until_ms)
        return true;
    return t->request_until_ms != 0 && now >= t->request_until_ms;
}

static void *guard_main(void *arg)
{
    gw_http_guard_t *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->is_stopping) {
        int64_t now = mono_ms();
        for (track_t *t = g->head; t != NULL; t = t->next) {
            if (!track_is_late(t, now))
                continue;
            /* A kept-alive connection with no new request is closed as idle, the normal end
             * of keep-alive (Prometheus keeps one between scrapes): not counted as cut off. */
            if (t->has_headers || !t->was_answered)
                count(&g->n_timed_out);
            track_cut(t, timeout_answer, sizeof(timeout_answer) - 1);
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(g->tick_ms % 1000) * 1000000L;
        until.tv_sec += (time_t)(g->tick_ms / 1000) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        (void)pthread_cond_timedwait(&g->wake, &g->lock, &until);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* Sets the timeouts (0: keep) and the tick that checks them; lock held, or before the thread
 * starts. */
static void guard_set(gw_http_guard_t *g, uint64_t header_timeout_ms, uint64_t request_timeout_ms)
{
    if (header_timeout_ms != 0)
        g->header_timeout_ms = header_timeout_ms;
    if (request_timeout_ms != 0)
        g->request_timeout_ms = request_timeout_ms;
    uint64_t shorter =
        g->header_timeout_ms < g->request_timeout_ms ? g->header_timeout_ms : g->request_timeout_ms;
    g->tick_ms = shorter / 10;
    g->tick_ms = g->tick_ms < TICK_MIN_MS ? TICK_MIN_MS : g->tick_ms;
    g->tick_ms = g->tick_ms > TICK_MAX_MS ? TICK_MAX_MS : g->tick_ms;
}

void gw_http_guard_set_timeouts(gw_http_guard_t *g, uint64_t header_timeout_ms,
                                uint64_t request_timeout_ms)
{
    pthread_mutex_lock(&g->lock);
    guard_set(g, header_timeout_ms, request_timeout_ms);
    pthread_mutex_unlock(&g->lock);
}

int gw_http_guard_new(gw_http_guard_t **out, const gw_http_guard_opts_t *opts)
{
    unsigned max = opts->max_connections != 0 ? opts->max_connections : DEFAULT_MAX_CONNECTIONS;
    unsigned per = opts->max_per_address;
    if (per == 0)
        per = max < DEFAULT_MAX_PER_ADDRESS ? max : DEFAULT_MAX_PER_ADDRESS;
    if (per > max || max <= GW_HTTP_GUARD_PROBE_RESERVE)
        return -EINVAL;
    gw_http_guard_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    g->max_connections = max;
    g->max_per_address = per;
    g->header_timeout_ms = DEFAULT_HEADER_TIMEOUT_MS;
    g->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
    guard_set(g, opts->header_timeout_ms, opts->request_timeout_ms);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&g->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) {
        free(g);
        return -rc;
    }
    pthread_mutex_init(&g->lock, NULL);
    rc = pthread_create(&g->thread, NULL, guard_main, g);
    if (rc != 0) {
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return -rc;
    }
    *out = g;
    return 0;
}

void gw_http_guard_free(gw_http_guard_t *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    g->is_stopping = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    /* libmicrohttpd has stopped: every CLOSED notification came, the list is empty. */
    while (g->head != NULL) {
        track_t *t = g->head;
        g->head = t->next;
        free(t);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

unsigned gw_http_guard_mhd_limit(const gw_http_guard_t *g)
{
    return g->max_connections + GW_HTTP_GUARD_SLACK;
}

/* ---- admission ---- */

/* Records the connection's source address in t; an IPv4-mapped IPv6 address counts as the
 * IPv4 address it maps, so one client is one address whichever way the socket was bound. */
static void track_address(track_t *t, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = info != NULL ? info->client_addr : NULL;
    if (sa != NULL && sa->sa_family == AF_INET) {
        t->family = AF_INET;
        memcpy(t->addr, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            t->family = AF_INET;
            memcpy(t->addr, a6->s6_addr + 12, 4);
        } else {
            t->family = AF_INET6;
            memcpy(t->addr, a6->s6_addr, 16);
        }
    }
}

static bool same_address(const track_t *a, const track_t *b)
{
    return a->family != 0 && a->family == b->family &&
           memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

/* Live connections from u's address (u included); lock held. */
static unsigned address_count(const gw_http_guard_t *g, const track_t *u)
{
    unsigned n = 0;
    for (const track_t *v = g->head; v != NULL; v = v->next)
        n += v == u || (!v->is_cut && same_address(v, u));
    return n;
}

/*
 * The connection to shed for t, or NULL: a sheddable one other than t, from t's own address
 * when is_same, else from the address that holds the most connections; of those the one
 * accepted or answered longest ago. Lock held.
 *
 * Why the biggest holder first: age alone lets a flood that reconnects as fast as it is shed
 * (thousands a second on loopback) push out a probe that was a few milliseconds late with its
 * request, once that many newer connections had come in. A probe is one connection from its
 * address, so whoever holds more gives way first; only a flood from the probe's own address
 * competes with it on age (and TCP_DEFER_ACCEPT keeps a flood that sends nothing slow, see
 * gw_http.c). At most 72 entries: the quadratic walk costs a few microseconds per accept.
 */
static track_t *pick_victim(const gw_http_guard_t *g, const track_t *t, bool is_same)
{
    track_t *victim = NULL;
    unsigned victim_n = 0;
    for (track_t *u = g->head; u != NULL; u = u->next) {
        if (u == t || u->is_cut || u->is_trusted || (is_same && !same_address(u, t)))
            continue;
        unsigned n = is_same ? 0 : address_count(g, u);
        /* The list runs newest first, so on a tie in milliseconds the older one wins. */
        if (victim == NULL || n > victim_n || (n == victim_n && u->since_ms <= victim->since_ms)) {
            victim = u;
            victim_n = n;
        }
    }
    return victim;
}

/*
 * t has just been listed: keeps both caps by shedding one other connection, or refuses t;
 * lock held. Before t came, the total was not over max_connections (every earlier arrival
 * went through here), so t puts it at most one over, and any departure mends it; one from
 * t's own address mends its address too.
 *
 * The per-address cap sheds only what can be shed. An address whose connections all serve
 * authenticated requests (a busy publisher on the same host as the probes: with the admin
 * port on loopback, everybody is 127.0.0.1) may go past it, and the newcomer is then judged
 * by the total alone: a probe from that address still gets in. The key holders' share stays
 * bounded by the reserve (gw_http_guard_trust).
 */
static void guard_admit(gw_http_guard_t *g, track_t *t)
{
    unsigned total = 0;
    unsigned same = 0;
    for (const track_t *u = g->head; u != NULL; u = u->next) {
        if (u->is_cut)
            continue;
        total++;
        same += same_address(u, t);
    }
    track_t *victim = NULL;
    if (same > g->max_per_address)
        victim = pick_victim(g, t, true);
    if (victim == NULL && total <= g->max_connections)
        return;
    if (victim == NULL)
        victim = pick_victim(g, t, false);
    /* Counted before the answer goes out: a client that has read its 503 finds it counted. */
    if (victim != NULL) {
        count(&g->n_shed);
        track_cut(victim, full_answer, sizeof(full_answer) - 1);
    } else {
        count(&g->n_refused);
        track_cut(t, full_answer, sizeof(full_answer) - 1);
    }
}

static void guard_list(gw_http_guard_t *g, track_t *t)
{
    t->next = g->head;
    if (g->head != NULL)
        g->head->prev = t;
    g->head = t;
}

static void guard_unlist(gw_http_guard_t *g, track_t *t)
{
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        g->head = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
}

void gw_http_guard_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                 enum MHD_ConnectionNotificationCode toe)
{
    gw_http_guard_t *g = cls;
    track_t *t = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t = info != NULL ? calloc(1, sizeof(*t)) : NULL;
        if (t == NULL)
            return; /* untracked: libmicrohttpd's limit and inactivity timeout still apply */
        t->fd = info->connect_fd;
        track_address(t, conn);
        pthread_mutex_lock(&g->lock);
        track_clock(g, t, mono_ms());
        guard_list(g, t);
        guard_admit(g, t);
        pthread_mutex_unlock(&g->lock);
        *socket_context = t;
        return;
    }
    if (t == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    guard_unlist(g, t);
    pthread_mutex_unlock(&g->lock);
    *socket_context = NULL;
    free(t);
}

/* ---- request hooks ---- */

static track_t *track_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != NULL ? info->socket_context : NULL;
}

void gw_http_guard_headers(gw_http_guard_t *g, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    t->has_headers = true;
    pthread_mutex_unlock(&g->lock);
}

bool gw_http_guard_trust(gw_http_guard_t *g, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return true; /* untracked: never shed anyway */
    pthread_mutex_lock(&g->lock);
    unsigned trusted = 0;
    for (const track_t *u = g->head; u != NULL; u = u->next)
        trusted += !u->is_cut && u->is_trusted;
    bool is_ok = trusted < g->max_connections - GW_HTTP_GUARD_PROBE_RESERVE;
    if (is_ok)
        t->is_trusted = true;
    pthread_mutex_unlock(&g->lock);
    if (!is_ok)
        count(&g->n_busy);
    return is_ok;
}

void gw_http_guard_stop(gw_http_guard_t *g, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    t->header_until_ms = 0;
    t->request_until_ms = 0;
    pthread_mutex_unlock(&g->lock);
}

void gw_http_guard_restart(gw_http_guard_t *g, struct MHD_Connection *conn)
{
    track_t *t = track_of(conn);
    if (t == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    t->has_headers = false;
    t->was_answered = true;
    t->is_trusted = false;
    track_clock(g, t, mono_ms());
    pthread_mutex_unlock(&g->lock);
}

void gw_http_guard_stats(const gw_http_guard_t *g, gw_http_guard_stats_t *out)
{
    out->timed_out = __atomic_load_n(&g->n_timed_out, __ATOMIC_RELAXED);
    out->shed = __atomic_load_n(&g->n_shed, __ATOMIC_RELAXED);
    out->refused = __atomic_load_n(&g->n_refused, __ATOMIC_RELAXED);
    out->busy = __atomic_load_n(&g->n_busy, __ATOMIC_RELAXED);
}
