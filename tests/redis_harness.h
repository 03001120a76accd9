/*
 * redis_harness: real redis-server and redis-sentinel processes for the tests that need them
 * (Debian's redis-server and redis-sentinel, installed by scripts/install-deps.sh): start on a
 * loopback port, wait until it says it is ready (its "Ready to accept connections" log line,
 * or a sentinel's "+monitor master", read from a pipe with a deadline: no sleeping), and stop,
 * kill, pause or restart it by PID. Each server runs without persistence (--save ""
 * --appendonly no), so a restart starts empty, as after a crash with no disk, with DEBUG
 * allowed from loopback (DEBUG SLEEP makes a slow Redis), and with PR_SET_PDEATHSIG so it
 * dies with the test. A server may be started as a replica (extra arguments: --replicaof);
 * a sentinel gets a config file of its own in a fresh directory, removed when it stops.
 *
 * Thread: a test_redis_t belongs to the thread that started it.
 * Ownership: test_redis_start fills the caller's value; test_redis_stop reaps the process.
 */
#ifndef HERALD_TESTS_REDIS_HARNESS_H
#define HERALD_TESTS_REDIS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TEST_REDIS_START_MS 10000

#define TEST_REDIS_EXTRA_MAX 8

typedef struct test_redis_s {
    pid_t pid;     /* 0 when not running */
    uint16_t port; /* kept across restarts */
    /* Extra redis-server arguments, kept for restarts (the strings are the caller's). */
    const char *extra[TEST_REDIS_EXTRA_MAX + 1];
    char dir[64]; /* its working directory while it runs ("" when none) */
} test_redis_t;

/* Whether redis-server can be run here. */
bool test_redis_available(void);

/* Starts redis-server on 127.0.0.1:port (0: a free port, chosen here) and waits until it is
 * ready. Returns: 0; -ENOENT (no redis-server); -ETIMEDOUT; -ECHILD (it exited first, e.g. the
 * port was taken). Thread: the caller's. */
int test_redis_start(test_redis_t *r, uint16_t port);

/* The same with extra redis-server arguments (NULL-terminated, at most TEST_REDIS_EXTRA_MAX,
 * kept by the caller while r is in use), e.g. {"--replicaof", "127.0.0.1", "6379", NULL} or
 * {"--requirepass", "secret", NULL}. Returns: as test_redis_start; -E2BIG (too many). */
int test_redis_start_args(test_redis_t *r, uint16_t port, const char *const *extra);

/* Starts it again on the same port (after a kill or stop): empty. Returns: as start. */
int test_redis_restart(test_redis_t *r);

/* SIGKILL and reap: a crash. No-op when not running. */
void test_redis_kill(test_redis_t *r);

/* SIGSTOP / SIGCONT: a Redis that hangs, and then comes back. */
void test_redis_pause(test_redis_t *r);
void test_redis_resume(test_redis_t *r);

/* SIGTERM and reap. Returns: its exit status (0 when clean), or -1 when not running. */
int test_redis_stop(test_redis_t *r);

/* A redis-sentinel watching one master. */
typedef struct test_sentinel_s {
    pid_t pid; /* 0 when not running */
    uint16_t port;
    char dir[64]; /* its config file's directory ("" when none) */
} test_sentinel_t;

typedef struct test_sentinel_opts_s {
    const char *master_name; /* e.g. "herald" */
    uint16_t master_port;    /* on 127.0.0.1 */
    int quorum;              /* sentinels that must agree the master is down */
    int down_after_ms;       /* sentinel down-after-milliseconds */
    int failover_timeout_ms; /* sentinel failover-timeout */
    const char *password;    /* the sentinels' own requirepass (and sentinel-pass); NULL: none */
} test_sentinel_opts_t;

bool test_sentinel_available(void);

/* Starts redis-sentinel on a free loopback port watching o's master, and waits until it says
 * it monitors it. Returns: 0; -ENOENT (no redis-sentinel); -ETIMEDOUT; -ECHILD; -errno (its
 * directory or config file). Thread: the caller's. */
int test_sentinel_start(test_sentinel_t *s, const test_sentinel_opts_t *o);

/* SIGKILL, reap, and remove its directory. No-op when not running. */
void test_sentinel_kill(test_sentinel_t *s);

/* Waits until the master on master_port has n replicas that acknowledged a write (a SET, then
 * WAIT n: Redis answers when they have it, no polling), connecting again when a command breaks
 * the connection (a 5 s stall on a loaded machine). Returns: 0; -ETIMEDOUT; -EIO (no
 * connection could be made). */
int test_redis_await_replicas(uint16_t master_port, int n, int timeout_ms);

/* Waits until sentinel s knows `others` other sentinels and `replicas` replicas of master
 * name: it checks SENTINEL MASTER, then waits for the sentinel's next +sentinel or +slave
 * event (its own pub/sub) before checking again. Returns: 0; -ETIMEDOUT; -EIO. */
int test_sentinel_await(const test_sentinel_t *s, const char *name, const char *password,
                        int others, int replicas, int timeout_ms);

/* Waits for the next +switch-master event of master name on sentinel s, subscribed before
 * this is called (sub from test_sentinel_subscribe). Writes the new master's port. Returns:
 * 0; -ETIMEDOUT (sub stays usable: a caller may wait in slices); -EIO. */
struct redisContext;
struct redisContext *test_sentinel_subscribe(const test_sentinel_t *s, const char *password);
int test_sentinel_await_switch(struct redisContext *sub, const char *name, uint16_t *new_port,
                               int timeout_ms);

#endif
