/*
 * herald_harness: a real herald process for the integration tests, an admin HTTP client and a
 * token minter. See herald_harness.h.
 */
#include "herald_harness.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gw_auth.h"

extern char **environ;

#define MAX_ARGS 128
#define MAX_ENV 1024

/* --- small helpers ------------------------------------------------------------------------ */

int64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int test_ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - test_now_ms();
    return left > 0 ? (int)left : 0;
}

const char *test_herald_bin(void)
{
    const char *env = getenv("TEST_HERALD_BIN");
    if (env && env[0])
        return env;
#ifdef HERALD_BIN
    return HERALD_BIN;
#else
    return NULL;
#endif
}

long test_raise_nofile(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    if (rl.rlim_cur >= want)
        return (long)rl.rlim_cur;
    rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    return (long)rl.rlim_cur;
}

long test_proc_rss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char line[256];
    long kb = -ENOENT;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

int test_token(char *out, size_t cap, const char *user, const char *channels_csv, int64_t ttl_s,
               int64_t age_s, const char *secret)
{
    char copy[GW_TOKEN_CHANNELS_BYTES];
    const char *pats[GW_TOKEN_MAX_CHANNELS];
    size_t n = 0;
    if (channels_csv && channels_csv[0]) {
        if (strlen(channels_csv) >= sizeof(copy))
            return -EINVAL;
        strcpy(copy, channels_csv);
        char *save = NULL;
        for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            if (n == GW_TOKEN_MAX_CHANNELS)
                return -EINVAL;
            pats[n++] = p;
        }
    }
    int64_t now_s = (int64_t)time(NULL) - age_s;
    ssize_t len = gw_token_sign(user, pats, n, now_s, ttl_s, secret, strlen(secret), out, cap);
    return (int)len;
}

/* --- stderr reader thread ----------------------------------------------------------------- */

static void write_all_fd(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Copies herald's stderr into the log file and the memory copy until EOF (herald exited). */
static void *reader_main(void *arg)
{
    test_herald_t *h = arg;
    char buf[65536];
    for (;;) {
        ssize_t n = read(h->pipe_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        write_all_fd(h->log_fd, buf, (size_t)n);
        pthread_mutex_lock(&h->mu);
        size_t room = TEST_HERALD_LOG_MEM - h->log_len;
        size_t take = (size_t)n < room ? (size_t)n : room;
        memcpy(h->log + h->log_len, buf, take);
        h->log_len += take;
        h->log[h->log_len] = '\0';
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_lock(&h->mu);
    h->is_log_eof = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Waits on h->cv until deadline_ms. Caller holds h->mu. Returns false once past it. */
static bool wait_cv(test_herald_t *h, int64_t deadline_ms)
{
    if (test_now_ms() >= deadline_ms)
        return false;
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ms / 1000);
    ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    return true;
}

int test_herald_wait_log(test_herald_t *h, const char *needle, size_t *pos, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;
    int rc = -ETIMEDOUT;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        const char *hit = *pos <= h->log_len ? strstr(h->log + *pos, needle) : NULL;
        if (hit) {
            *pos = (size_t)(hit - h->log) + strlen(needle);
            rc = 0;
            break;
        }
        if (h->is_log_eof) {
            rc = -EPIPE;
            break;
        }
        if (!wait_cv(h, deadline))
            break;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* Parses the listening line starting at line (complete, up to a newline). */
static int parse_listening(test_herald_t *h, const char *line)
{
    const char *p = strstr(line, " port=");
    const char *a = strstr(line, " admin_port=");
    const char *nl = strchr(line, '\n');
    if (!p || (nl && p > nl))
        return -EPROTO;
    h->port = (uint16_t)strtoul(p + 6, NULL, 10);
    h->admin_port = (a && (!nl || a < nl)) ? (uint16_t)strtoul(a + 12, NULL, 10) : 0;
    return h->port ? 0 : -EPROTO;
}

/* Waits for the complete `ev=listening` line and reads the ports from it. */
static int wait_listening(test_herald_t *h, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;
    int rc = -ETIMEDOUT;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        const char *hit = strstr(h->log, "ev=listening ");
        if (hit && strchr(hit, '\n')) {
            rc = parse_listening(h, hit);
            break;
        }
        if (h->is_log_eof) {
            rc = -ECHILD;
            break;
        }
        if (!wait_cv(h, deadline))
            break;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void test_herald_dump_log(test_herald_t *h, size_t max_bytes)
{
    pthread_mutex_lock(&h->mu);
    size_t from = h->log_len > max_bytes ? h->log_len - max_bytes : 0;
    fprintf(stderr, "---- herald pid %d stderr (%s), last %zu bytes ----\n%s\n---- end ----\n",
            (int)h->pid, h->log_path, h->log_len - from, h->log + from);
    pthread_mutex_unlock(&h->mu);
}

/* --- process start and stop --------------------------------------------------------------- */

static bool has_flag(const char *const *args, const char *flag)
{
    size_t n = strlen(flag);
    for (size_t i = 0; args && args[i]; i++)
        if (strncmp(args[i], flag, n) == 0 && (args[i][n] == '\0' || args[i][n] == '='))
            return true;
    return false;
}

/* Tells whether extras (NAME=value list) sets the variable of entry ("NAME=..."). */
static bool env_overridden(const char *const *extras, const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (size_t i = 0; extras && extras[i]; i++)
        if (strncmp(extras[i], entry, n) == 0 && extras[i][n] == '=')
            return true;
    return false;
}

/* Builds argv (listen flags first, then the caller's) and envp (the environment without
 * HERALD_*, then the caller's extras) before fork, so the child only calls exec. */
static int build_exec(const test_herald_opts_t *opts, bool is_node, const char *bin,
                      const char **argv, const char **envp)
{
    size_t n = 0;
    argv[n++] = bin;
    if (is_node && !has_flag(opts->args, "--listen")) {
        argv[n++] = "--listen";
        argv[n++] = "127.0.0.1:0";
    }
    if (is_node && !has_flag(opts->args, "--admin")) {
        argv[n++] = "--admin";
        argv[n++] = "127.0.0.1:0";
    }
    /* A test stops herald with SIGTERM and expects it gone at once, as drain = 0 does; the
     * drain tests ask for their window. */
    if (is_node && !has_flag(opts->args, "--drain")) {
        argv[n++] = "--drain";
        argv[n++] = "0";
    }
    for (size_t i = 0; opts->args && opts->args[i]; i++) {
        if (n + 1 >= MAX_ARGS)
            return -E2BIG;
        argv[n++] = opts->args[i];
    }
    argv[n] = NULL;
    size_t e = 0;
    for (char **p = environ; p && *p; p++) {
        if (strncmp(*p, "HERALD_", 7) == 0 || env_overridden(opts->env, *p))
            continue;
        if (e + 1 >= MAX_ENV)
            return -E2BIG;
        envp[e++] = *p;
    }
    for (size_t i = 0; opts->env && opts->env[i]; i++) {
        if (e + 1 >= MAX_ENV)
            return -E2BIG;
        envp[e++] = opts->env[i];
    }
    envp[e] = NULL;
    return 0;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static _Noreturn void child_exec(const test_herald_opts_t *opts, pid_t parent, int out_fd,
                                 int err_fd, const char **argv, const char **envp)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(126);
    /* The test may hold thousands of sockets; herald must not inherit them. */
    syscall(SYS_close_range, 3u, ~0u, 0u);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (opts->nofile)
            rl.rlim_cur = rl.rlim_max = opts->nofile;
        else
            rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (opts->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(opts->cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], (char *const *)argv, (char *const *)envp);
    _exit(127);
}

static void herald_free(test_herald_t *h, bool keep_log)
{
    if (h->pidfd >= 0)
        close(h->pidfd);
    if (h->log_fd >= 0)
        close(h->log_fd);
    if (h->pipe_fd >= 0)
        close(h->pipe_fd);
    if (!keep_log)
        unlink(h->log_path);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h->log);
    free(h);
}

/* Allocates the handle, its log file and its condition variable (monotonic clock). */
static int herald_alloc(test_herald_t **out, const test_herald_opts_t *opts)
{
    test_herald_t *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->pidfd = h->pipe_fd = h->log_fd = -1;
    h->is_quiet = opts->is_quiet;
    h->log = malloc(TEST_HERALD_LOG_MEM + 1);
    snprintf(h->log_path, sizeof(h->log_path), "/tmp/herald-test-XXXXXX");
    h->log_fd = mkostemp(h->log_path, O_CLOEXEC);
    if (!h->log || h->log_fd < 0) {
        free(h->log);
        if (h->log_fd >= 0)
            close(h->log_fd);
        free(h);
        return -ENOMEM;
    }
    h->log[0] = '\0';
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return 0;
}

/* Forks and execs herald with its output on a pipe read by a new reader thread. */
static int herald_spawn(test_herald_t *h, const test_herald_opts_t *opts, const char **argv,
                        const char **envp)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(p[0]);
        close(p[1]);
        return err;
    }
    if (pid == 0)
        child_exec(opts, parent, p[1], p[1], argv, envp);
    close(p[1]);
    h->pid = pid;
    h->pipe_fd = p[0];
    h->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int rc = pthread_create(&h->reader, NULL, reader_main, h);
    if (rc != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -rc;
    }
    return 0;
}

int test_herald_start(test_herald_t **out, const test_herald_opts_t *opts)
{
    const char *bin = test_herald_bin();
    if (!bin)
        return -ENOENT;
    const char *argv[MAX_ARGS];
    const char *envp[MAX_ENV];
    int rc = build_exec(opts, true, bin, argv, envp);
    if (rc < 0)
        return rc;
    /* Sockets the tests write to may close under them; errors come back as EPIPE. */
    signal(SIGPIPE, SIG_IGN);
    test_herald_t *h;
    rc = herald_alloc(&h, opts);
    if (rc < 0)
        return rc;
    rc = herald_spawn(h, opts, argv, envp);
    if (rc < 0) {
        herald_free(h, false);
        return rc;
    }
    rc = wait_listening(h, opts->start_timeout_ms ? opts->start_timeout_ms : TEST_HERALD_START_MS);
    if (rc < 0) {
        fprintf(stderr, "herald did not report its ports: %s\n", strerror(-rc));
        test_herald_abort(h);
        return rc;
    }
    *out = h;
    return 0;
}

/* Reads what fd offers into buf (len bytes held, cap in all, one kept for the NUL), dropping
 * what does not fit. Returns the read's result. */
static ssize_t run_read(int fd, char *buf, size_t *len, size_t cap)
{
    char drop[4096];
    bool is_full = *len + 1 >= cap;
    ssize_t k = is_full ? read(fd, drop, sizeof(drop)) : read(fd, buf + *len, cap - 1 - *len);
    if (k > 0 && !is_full)
        *len += (size_t)k;
    return k;
}

int test_herald_run(const char *const *args, int timeout_ms, test_herald_run_t *out)
{
    const char *bin = test_herald_bin();
    if (!bin)
        return -ENOENT;
    test_herald_opts_t opts = {.args = args, .cpu = -1};
    const char *argv[MAX_ARGS];
    const char *envp[MAX_ENV];
    int rc = build_exec(&opts, false, bin, argv, envp);
    if (rc < 0)
        return rc;
    int p[2][2] = {{-1, -1}, {-1, -1}};
    if (pipe2(p[0], O_CLOEXEC) != 0 || pipe2(p[1], O_CLOEXEC) != 0) {
        rc = -errno;
        for (int i = 0; i < 2; i++) {
            if (p[i][0] >= 0) {
                close(p[i][0]);
                close(p[i][1]);
            }
        }
        return rc;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(&opts, parent, p[0][1], p[1][1], argv, envp);
    close(p[0][1]);
    close(p[1][1]);
    if (pid < 0) {
        rc = -errno;
        close(p[0][0]);
        close(p[1][0]);
        return rc;
    }
    int64_t deadline = test_now_ms() + timeout_ms;
    char *buf[2] = {out->out, out->err};
    size_t len[2] = {0, 0};
    struct pollfd pf[2] = {{.fd = p[0][0], .events = POLLIN}, {.fd = p[1][0], .events = POLLIN}};
    while (pf[0].fd >= 0 || pf[1].fd >= 0) {
        int n = poll(pf, 2, test_ms_left(deadline));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            ssize_t k = run_read(pf[i].fd, buf[i], &len[i], TEST_HERALD_RUN_CAP);
            if (k == 0 || (k < 0 && errno != EINTR)) {
                close(pf[i].fd);
                pf[i].fd = -1; /* poll skips it */
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        buf[i][len[i]] = '\0';
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    }
    /* The exit itself, on a pidfd, within what is left of the deadline. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd w = {.fd = pidfd, .events = POLLIN};
    bool is_exited = pidfd >= 0 && poll(&w, 1, test_ms_left(deadline)) == 1;
    if (pidfd >= 0)
        close(pidfd);
    if (!is_exited)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!is_exited)
        return -ETIMEDOUT;
    out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

int test_herald_startl(test_herald_t **out, const char *flag, ...)
{
    const char *args[MAX_ARGS];
    size_t n = 0;
    va_list ap;
    va_start(ap, flag);
    for (const char *a = flag; a && n + 1 < MAX_ARGS; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    test_herald_opts_t opts = {.args = args, .cpu = -1};
    return test_herald_start(out, &opts);
}

bool test_herald_has_exited(const test_herald_t *h)
{
    struct pollfd pfd = {.fd = h->pidfd, .events = POLLIN};
    if (h->pidfd < 0)
        return kill(h->pid, 0) != 0;
    return poll(&pfd, 1, 0) == 1;
}

/* Waits for the child to exit within timeout_ms, reaps it and returns its status code. */
static int reap(test_herald_t *h, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;
    bool is_timeout = false;
    if (h->pidfd >= 0) {
        struct pollfd pfd = {.fd = h->pidfd, .events = POLLIN};
        int n;
        do {
            n = poll(&pfd, 1, test_ms_left(deadline));
        } while (n < 0 && errno == EINTR);
        is_timeout = n == 0;
    }
    if (is_timeout)
        kill(h->pid, SIGKILL);
    int st = 0;
    while (waitpid(h->pid, &st, 0) < 0 && errno == EINTR)
        ;
    pthread_join(h->reader, NULL);
    if (is_timeout)
        return -ETIMEDOUT;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

int test_herald_wait(test_herald_t *h, int timeout_ms)
{
    if (!h)
        return 0;
    int rc = reap(h, timeout_ms ? timeout_ms : TEST_HERALD_STOP_MS);
    if (rc != 0 && !h->is_quiet) {
        fprintf(stderr, "herald pid %d wait: %s %d\n", (int)h->pid,
                rc < 0 ? "timed out, killed" : "exit status", rc);
        test_herald_dump_log(h, 16384);
    }
    herald_free(h, rc != 0);
    return rc;
}

int test_herald_stop(test_herald_t *h, int timeout_ms)
{
    if (!h)
        return 0;
    kill(h->pid, SIGTERM);
    int rc = reap(h, timeout_ms ? timeout_ms : TEST_HERALD_STOP_MS);
    if (rc != 0 && !h->is_quiet) {
        fprintf(stderr, "herald pid %d stop: %s %d\n", (int)h->pid,
                rc < 0 ? "timed out, killed" : "exit status", rc);
        test_herald_dump_log(h, 16384);
    }
    herald_free(h, rc != 0);
    return rc;
}

void test_herald_abort(test_herald_t *h)
{
    if (!h)
        return;
    kill(h->pid, SIGKILL);
    reap(h, TEST_HERALD_STOP_MS);
    if (!h->is_quiet)
        test_herald_dump_log(h, 16384);
    herald_free(h, true);
}
