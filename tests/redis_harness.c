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

#define REDIS_BIN "/usr/bin/redis-server"
#define SENTINEL_BIN "/usr/bin/redis-sentinel"
#define READY_LINE "Ready to accept connections"
#define SENTINEL_READY_LINE "+monitor master"

bool test_redis_available(void)
{
    return access(REDIS_BIN, X_OK) == 0;
}

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

static int start_on(test_redis_t *r, uint16_t port)
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
                                "local"};
        size_t n = 15;
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
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
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
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* --- sentinels ------------------------------------------------------------------------------ */

bool test_sentinel_available(void)
{
    return access(SENTINEL_BIN, X_OK) == 0;
}

static void sentinel_rmdir(test_sentinel_t *s)
{
    if (!s->dir[0])
        return;
    /* The config file, and whatever a rewrite cut short left beside it. */
    DIR *d = opendir(s->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[sizeof(s->dir) + 1 + sizeof(e->d_name)];
        snprintf(path, sizeof(path), "%s/%s", s->dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(s->dir);
    s->dir[0] = '\0';
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
