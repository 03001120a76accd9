/*
 * pingpong_libevent: the reference pingpong echo server on libevent 2, written the way
 * libevent is fastest: the plain event API, not bufferevent. Each connection has one
 * persistent EV_READ event; a readable socket is read into one 64 KiB buffer shared by all
 * connections and written straight back. A short write keeps the remainder in a per-connection
 * allocation, parks the read event and adds an EV_WRITE event until the remainder is out
 * (the echo server of libevent's sample/ and the test/bench programs, minus bufferevent).
 *
 *   pingpong_libevent --port P [--host H]
 *
 * One thread, TCP_NODELAY on every connection, as the netlib server. Runs until SIGINT or
 * SIGTERM. Driven by pingpong_netlib's client (bench/pingpong.sh).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#define READ_BUF_BYTES 65536

typedef struct {
    int fd;
    struct event *ev_read;
    struct event *ev_write;
    char *pending; /* bytes a short write left over, or NULL */
    size_t pending_off;
    size_t pending_len;
} conn_t;

/* One read buffer for every connection: the server runs on one thread. */
static char read_buf[READ_BUF_BYTES];

static void conn_free(conn_t *c)
{
    event_free(c->ev_read);
    event_free(c->ev_write);
    close(c->fd);
    free(c->pending);
    free(c);
}

/* Keeps what a short write left over and waits for the socket to drain before reading more,
 * so a slow peer costs one pending buffer, never an unbounded queue. */
static int conn_keep_rest(conn_t *c, const char *p, size_t len)
{
    c->pending = malloc(len);
    if (c->pending == NULL)
        return -ENOMEM;
    memcpy(c->pending, p, len);
    c->pending_off = 0;
    c->pending_len = len;
    event_del(c->ev_read);
    event_add(c->ev_write, NULL);
    return 0;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    (void)what;
    ssize_t n = read(fd, read_buf, sizeof read_buf);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_free(c);
        return;
    }
    ssize_t w = write(fd, read_buf, (size_t)n);
    if (w == n)
        return;
    if (w < 0) {
        if (errno != EAGAIN) {
            conn_free(c);
            return;
        }
        w = 0;
    }
    if (conn_keep_rest(c, read_buf + w, (size_t)(n - w)) < 0)
        conn_free(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    (void)what;
    ssize_t w = write(fd, c->pending + c->pending_off, c->pending_len - c->pending_off);
    if (w < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_free(c);
        return;
    }
    c->pending_off += (size_t)w;
    if (c->pending_off < c->pending_len)
        return;
    free(c->pending);
    c->pending = NULL;
    event_del(c->ev_write);
    event_add(c->ev_read, NULL);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct event_base *base = arg;
    (void)what;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or EMFILE: the benchmark never gets there */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, on_read, c);
        c->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, on_write, c);
        if (c->ev_read == NULL || c->ev_write == NULL || event_add(c->ev_read, NULL) < 0) {
            if (c->ev_read)
                event_free(c->ev_read);
            if (c->ev_write)
                event_free(c->ev_write);
            close(fd);
            free(c);
        }
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopbreak(arg);
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, SOMAXCONN) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--host") == 0)
            host = argv[i + 1];
    }
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "usage: pingpong_libevent --port P [--host H]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int lfd = listen_on(host, port);
    if (lfd < 0) {
        perror("pingpong_libevent: listen");
        return 1;
    }
    struct event_base *base = event_base_new();
    if (base == NULL)
        return 1;
    struct event *ev_listen = event_new(base, lfd, EV_READ | EV_PERSIST, on_accept, base);
    struct event *ev_int = evsignal_new(base, SIGINT, on_signal, base);
    struct event *ev_term = evsignal_new(base, SIGTERM, on_signal, base);
    if (ev_listen == NULL || ev_int == NULL || ev_term == NULL)
        return 1;
    event_add(ev_listen, NULL);
    event_add(ev_int, NULL);
    event_add(ev_term, NULL);
    fprintf(stderr, "pingpong_libevent: %s method, port %d\n", event_base_get_method(base), port);
    event_base_dispatch(base);
    /* Connections still open die with the process, as with the netlib server. */
    event_free(ev_listen);
    event_free(ev_int);
    event_free(ev_term);
    close(lfd);
    return 0;
}
