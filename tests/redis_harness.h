/*
 * redis_harness: real redis-server processes for the tests that need one (Debian's
 * redis-server, installed by scripts/install-deps.sh): start on a loopback port, wait until it
 * says it is ready (its "Ready to accept connections" log line, read from a pipe with a
 * deadline: no sleeping), and stop, kill, pause or restart it by PID. Each server runs without
 * persistence (--save "" --appendonly no), so a restart starts empty, as after a crash with no
 * disk, and with PR_SET_PDEATHSIG so it dies with the test.
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

typedef struct test_redis_s {
    pid_t pid;     /* 0 when not running */
    uint16_t port; /* kept across restarts */
} test_redis_t;

/* Whether redis-server can be run here. */
bool test_redis_available(void);

/* Starts redis-server on 127.0.0.1:port (0: a free port, chosen here) and waits until it is
 * ready. Returns: 0; -ENOENT (no redis-server); -ETIMEDOUT; -ECHILD (it exited first, e.g. the
 * port was taken). Thread: the caller's. */
int test_redis_start(test_redis_t *r, uint16_t port);

/* Starts it again on the same port (after a kill or stop): empty. Returns: as start. */
int test_redis_restart(test_redis_t *r);

/* SIGKILL and reap: a crash. No-op when not running. */
void test_redis_kill(test_redis_t *r);

/* SIGSTOP / SIGCONT: a Redis that hangs, and then comes back. */
void test_redis_pause(test_redis_t *r);
void test_redis_resume(test_redis_t *r);

/* SIGTERM and reap. Returns: its exit status (0 when clean), or -1 when not running. */
int test_redis_stop(test_redis_t *r);

#endif
