/*
 * redis_harness: redis-server processes for tests. See redis_harness.h.
 *
 * Readiness is redis-server's own log line on stdout, read through a pipe until the line or a
 * deadline; the pipe is then closed (redis ignores SIGPIPE, and its later log lines are lost,
 * which no test reads). A free port is found by binding port 0 and releasing it, so another
 * process may take it in between: then redis-server exits at once, and the start tries again
 * with another port.
 */
#include "redis_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#define REDIS_BIN "/usr/bin/redis-server"
#define SENTINEL_BIN "/usr/bin/redis-sentinel"
#define READY_LINE "Ready to accept connections"
#define SENTINEL_READY_LINE "+monitor master"

bool test_redis_available(void)
{
    return access(REDIS_BIN, X_OK) == 0;
}

static void remove_dir(char *dir);

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the child's stdout until the ready line, its exit, or the deadline. */
static int wait_ready(int fd, pid_t pid, const char *ready_line)
{
    char buf[8192];
    size_t len = 0;
    int64_t deadline = now_ms() + TEST_REDIS_START_MS;
    for (;;) {
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, left);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        ssize_t got = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (got <= 0)
            return waitpid(pid, NULL, WNOHANG) == pid ? -ECHILD : -EPIPE;
        len += (size_t)got;
        buf[len] = '\0';
        if (strstr(buf, ready_line))
            return 0;
        if (len > sizeof(buf) / 2) { /* keep the tail, where the line will be */
            memmove(buf, buf + len - 256, 256);
            len = 256;
        }
    }
}

static int start_in_dir(test_redis_t *r, uint16_t port);

static int start_on(test_redis_t *r, uint16_t port)
{
    snprintf(r->dir, sizeof(r->dir), "/tmp/herald-redis-XXXXXX");
    if (!mkdtemp(r->dir)) {
        r->dir[0] = '\0';
        return -errno;
    }
    int rc = start_in_dir(r, port);
    if (rc < 0)
        remove_dir(r->dir);
    return rc;
}

static int start_in_dir(test_redis_t *r, uint16_t port)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        return -errno;
    char p[16];
    snprintf(p, sizeof(p), "%u", port);
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pipefd[1], 1);
        const char *argv[32] = {REDIS_BIN,   "--port",
                                p,           "--bind",
                                "127.0.0.1", "--save",
                                "",          "--appendonly",
                                "no",        "--protected-mode",
                                "no",        "--loglevel",
                                "notice",    "--enable-debug-command",
                                "local",     "--dir",
                                r->dir};
        size_t n = 17;
        for (size_t i = 0; r->extra[i] && n + 1 < sizeof(argv) / sizeof(argv[0]); i++)
            argv[n++] = r->extra[i];
        argv[n] = NULL;
        execv(REDIS_BIN, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    int rc = wait_ready(pipefd[0], pid, READY_LINE);
    close(pipefd[0]);
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return rc;
    }
    r->pid = pid;
    r->port = port;
    return 0;
}

int test_redis_start(test_redis_t *r, uint16_t port)
{
    return test_redis_start_args(r, port, NULL);
}

int test_redis_start_args(test_redis_t *r, uint16_t port, const char *const *extra)
{
    r->pid = 0;
    r->dir[0] = '\0';
    size_t n = 0;
    for (; extra && extra[n]; n++) {
        if (n == TEST_REDIS_EXTRA_MAX)
            return -E2BIG;
        r->extra[n] = extra[n];
    }
    r->extra[n] = NULL;
    if (!test_redis_available())
        return -ENOENT;
    if (port != 0)
        return start_on(r, port);
    int rc = -EADDRINUSE;
    for (int tries = 0; tries < 5 && rc < 0; tries++) {
        uint16_t p = free_port();
        rc = p ? start_on(r, p) : -EADDRNOTAVAIL;
        if (rc == -ETIMEDOUT)
            break;
    }
    return rc;
}

int test_redis_restart(test_redis_t *r)
{
    return start_on(r, r->port);
}

void test_redis_kill(test_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
    remove_dir(r->dir);
}

void test_redis_pause(test_redis_t *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGSTOP);
}

void test_redis_resume(test_redis_t *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
}

int test_redis_stop(test_redis_t *r)
{
    if (r->pid <= 0)
        return -1;
    kill(r->pid, SIGCONT); /* a paused server cannot act on SIGTERM */
    kill(r->pid, SIGTERM);
    int st = 0;
    waitpid(r->pid, &st, 0);
    r->pid = 0;
    remove_dir(r->dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* --- sentinels ------------------------------------------------------------------------------ */

bool test_sentinel_available(void)
{
    return access(SENTINEL_BIN, X_OK) == 0;
}

static void sentinel_rmdir(test_sentinel_t *s)
{
    remove_dir(s->dir);
}

static void remove_dir(char *dir)
{
    if (!dir[0])
        return;
    /* The config file, and whatever a rewrite cut short left beside it. */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[64 + 1 + sizeof(e->d_name)];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    dir[0] = '\0';
}

/* Writes the config (sentinel rewrites it as it learns, so it lives in a directory of its
 * own) and starts the process on port. */
static int sentinel_start_on(test_sentinel_t *s, const test_sentinel_opts_t *o, uint16_t port)
{
    char conf[128];
    snprintf(conf, sizeof(conf), "%s/sentinel.conf", s->dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -errno;
    fprintf(f,
            "port %u\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
            "sentinel resolve-hostnames no\n"
            "sentinel monitor %s 127.0.0.1 %u %d\n"
            "sentinel down-after-milliseconds %s %d\n"
            "sentinel failover-timeout %s %d\n"
            "sentinel parallel-syncs %s 1\n",
            port, s->dir, o->master_name, o->master_port, o->quorum, o->master_name,
            o->down_after_ms, o->master_name, o->failover_timeout_ms, o->master_name);
    if (o->password)
        fprintf(f, "requirepass %s\nsentinel sentinel-pass %s\n", o->password, o->password);
    if (fclose(f) != 0)
        return -EIO;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pipefd[1], 1);
        execl(SENTINEL_BIN, SENTINEL_BIN, conf, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    int rc = wait_ready(pipefd[0], pid, SENTINEL_READY_LINE);
    close(pipefd[0]);
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return rc;
    }
    s->pid = pid;
    s->port = port;
    return 0;
}

int test_sentinel_start(test_sentinel_t *s, const test_sentinel_opts_t *o)
{
    s->pid = 0;
    s->dir[0] = '\0';
    if (!test_sentinel_available())
        return -ENOENT;
    snprintf(s->dir, sizeof(s->dir), "/tmp/herald-sentinel-XXXXXX");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = '\0';
        return -errno;
    }
    int rc = -EADDRINUSE;
    for (int tries = 0; tries < 5 && rc < 0; tries++) {
        uint16_t p = free_port();
        rc = p ? sentinel_start_on(s, o, p) : -EADDRNOTAVAIL;
        if (rc == -ETIMEDOUT)
            break;
    }
    if (rc < 0)
        sentinel_rmdir(s);
    return rc;
}

void test_sentinel_kill(test_sentinel_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    sentinel_rmdir(s);
}

/* --- waiting for replication and for sentinels ------------------------------------------------ */

/* A blocking connection (AUTH with password), tried for up to a second: a process that has
 * just said it is ready may be slow to answer on a loaded machine. Says why on stderr when it
 * cannot. */
static redisContext *connect_to(uint16_t port, const char *password)
{
    int64_t deadline = now_ms() + 1000;
    for (;;) {
        struct timeval tv = {5, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            if (!password)
                return c;
            redisReply *r = redisCommand(c, "AUTH %s", password);
            bool is_ok = r && r->type != REDIS_REPLY_ERROR;
            if (r)
                freeReplyObject(r);
            if (is_ok)
                return c;
        }
        if (now_ms() >= deadline) {
            fprintf(stderr, "redis_harness: cannot connect to 127.0.0.1:%u: %s\n", port,
                    c ? (c->err ? c->errstr : "AUTH refused") : "out of memory");
            if (c)
                redisFree(c);
            return NULL;
        }
        if (c)
            redisFree(c);
        poll(NULL, 0, 50);
    }
}

int test_redis_await_replicas(uint16_t master_port, int n, int timeout_ms)
{
    int rc = -ETIMEDOUT;
    int64_t deadline = now_ms() + timeout_ms;
    redisContext *c = NULL;
    while (rc == -ETIMEDOUT && now_ms() < deadline) {
        /* A command that outlasts the context's 5 s timeout (a loaded machine) or a connection
         * the server closed breaks it: a new one, until the deadline. */
        if (!c && (c = connect_to(master_port, NULL)) == NULL) {
            rc = -EIO;
            break;
        }
        redisReply *r = redisCommand(c, "SET herald-test:replicated 1");
        bool is_set = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!r) {
            redisFree(c);
            c = NULL;
            continue;
        }
        if (!is_set) {
            /* Refused for now (a server Sentinel is still reconfiguring): again shortly. */
            poll(NULL, 0, 100);
            continue;
        }
        /* WAIT blocks until n replicas have the write, or 1 s passed. */
        r = redisCommand(c, "WAIT %d 1000", n);
        if (!r) {
            redisFree(c);
            c = NULL;
            continue;
        }
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= n)
            rc = 0;
        freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return rc;
}

/* An integer field of SENTINEL MASTER's flat [key, value, ...] reply, or -1. */
static long long sentinel_field(const redisReply *r, const char *key)
{
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, key) == 0)
            return strtoll(r->element[i + 1]->str, NULL, 10);
    return -1;
}

int test_sentinel_await(const test_sentinel_t *s, const char *name, const char *password,
                        int others, int replicas, int timeout_ms)
{
    redisContext *c = connect_to(s->port, password);
    redisContext *sub = connect_to(s->port, password);
    int rc = c && sub ? -ETIMEDOUT : -EIO;
    if (rc == -ETIMEDOUT) {
        redisReply *r = redisCommand(sub, "SUBSCRIBE +sentinel +slave");
        if (r)
            freeReplyObject(r);
        /* Two confirmations; the second is read by the loop below like an event. */
    }
    int64_t deadline = now_ms() + timeout_ms;
    while (rc == -ETIMEDOUT) {
        redisReply *r = redisCommand(c, "SENTINEL MASTER %s", name);
        bool is_ready = sentinel_field(r, "num-other-sentinels") >= others &&
                        sentinel_field(r, "num-slaves") >= replicas;
        if (r)
            freeReplyObject(r);
        if (is_ready) {
            rc = 0;
            break;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        struct timeval tv = {left / 1000, (left % 1000) * 1000};
        redisSetTimeout(sub, tv);
        void *ev = NULL;
        if (redisGetReply(sub, &ev) != REDIS_OK) {
            rc = -ETIMEDOUT; /* the read timed out: the deadline passed */
            break;
        }
        freeReplyObject(ev);
    }
    if (c)
        redisFree(c);
    if (sub)
        redisFree(sub);
    return rc;
}

redisContext *test_sentinel_subscribe(const test_sentinel_t *s, const char *password)
{
    redisContext *sub = connect_to(s->port, password);
    if (!sub)
        return NULL;
    redisReply *r = redisCommand(sub, "SUBSCRIBE +switch-master");
    bool is_ok = r && r->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    if (!is_ok) {
        redisFree(sub);
        return NULL;
    }
    return sub;
}

int test_sentinel_await_switch(redisContext *sub, const char *name, uint16_t *new_port,
                               int timeout_ms)
{
    /* Reads with poll() on the socket, never with a hiredis timeout, which would leave the
     * context unusable: a caller may wait in short slices. */
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(sub, &reply) != REDIS_OK)
            return -EIO;
        if (reply) {
            /* ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"] */
            redisReply *r = reply;
            char got[128];
            unsigned old_port = 0;
            unsigned port = 0;
            bool is_ours =
                r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[2]->type == REDIS_REPLY_STRING &&
                sscanf(r->element[2]->str, "%127s %*s %u %*s %u", got, &old_port, &port) == 3 &&
                strcmp(got, name) == 0;
            freeReplyObject(r);
            if (is_ours) {
                *new_port = (uint16_t)port;
                return 0;
            }
            continue;
        }
        int64_t left = deadline - now_ms();
        struct pollfd p = {.fd = sub->fd, .events = POLLIN};
        int n = poll(&p, 1, left > 0 ? (int)left : 0);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n == 0)
            return -ETIMEDOUT;
        if (n > 0 && redisBufferRead(sub) != REDIS_OK)
            return -EIO;
    }
}
