/*
 * herald_harness: what the gateway integration tests and benchmarks need around a real
 * `herald` process: start it on free loopback ports, learn those ports from its startup log
 * line, keep its stderr (a temp file plus a memory copy that tests can wait on), stop it by
 * PID, read its RSS; a tiny blocking HTTP/1.1 client for the admin API; and a token minter
 * (gw_token_sign, so tokens are exactly what herald verifies).
 *
 * Starting: the child gets `--listen 127.0.0.1:0 --admin 127.0.0.1:0 --drain 0` (each unless
 * the caller passes its own: a test's SIGTERM should stop herald at once, not drain it), then
 * the caller's flags. Its stderr goes to a pipe drained by a reader
 * thread, so herald never blocks on logging however long it runs. test_herald_start waits
 * (on a condition variable with a deadline, no sleep) for the line
 * `ev=listening port=<client port> admin_port=<admin port>`. The child inherits the caller's
 * environment minus every HERALD_* variable (herald refuses unknown ones, and ctest sets
 * HERALD_BUILD_DIR), gets PR_SET_PDEATHSIG so it dies with the test, and optionally a CPU
 * and a RLIMIT_NOFILE set before exec.
 *
 * Stopping: SIGTERM, then a wait on a pidfd with a deadline, SIGKILL past it. The exit status
 * is returned so a test can assert a clean exit (a crash or a sanitizer report is not 0).
 * When the status is not 0, or a test tears down a herald it did not stop, the tail of
 * herald's stderr is printed and the log file is kept; otherwise the file is removed.
 *
 * Thread: a test_herald_t belongs to the thread that started it; its reader thread touches
 * only the log fields, under the handle's mutex. Everything else here is stateless.
 * Ownership: test_herald_start allocates the handle; test_herald_stop frees it.
 */
#ifndef HERALD_TESTS_HERALD_HARNESS_H
#define HERALD_TESTS_HERALD_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Default deadlines. Sanitizer builds start and stop more slowly, so these are generous. */
#define TEST_HERALD_START_MS 30000
#define TEST_HERALD_STOP_MS 30000

typedef struct test_herald_opts_s {
    const char *const *args; /* herald flags, NULL-terminated (may be NULL) */
    const char *const *env;  /* NAME=value for the child, replacing inherited ones (may be NULL) */
    rlim_t nofile;           /* 0: soft limit raised to the hard one; else both set to this */
    int cpu;                 /* >= 0: pin the child to this CPU; -1: no pinning */
    int start_timeout_ms;    /* 0: TEST_HERALD_START_MS */
    bool is_quiet;           /* do not print the log tail on a failed stop */
} test_herald_opts_t;

typedef struct test_herald_s {
    pid_t pid;
    int pidfd;
    uint16_t port;       /* client port */
    uint16_t admin_port; /* admin HTTP port (0 when the line says so) */
    bool is_quiet;
    char log_path[64]; /* herald's whole stderr */
    /* Reader thread state, guarded by mu. */
    pthread_t reader;
    int pipe_fd;
    int log_fd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *log; /* the first TEST_HERALD_LOG_MEM bytes of stderr, NUL-terminated */
    size_t log_len;
    bool is_log_eof;
} test_herald_t;

/* Bytes of herald's stderr kept in memory for test_herald_wait_log (the file keeps it all). */
#define TEST_HERALD_LOG_MEM (8u * 1024 * 1024)

/* The herald binary: $TEST_HERALD_BIN if set, else the build's HERALD_BIN definition.
 * Returns NULL when neither is known. Thread: any. Ownership: static or environment string. */
const char *test_herald_bin(void);

/* Starts herald with opts and waits for its listening line.
 * Returns: 0 with *out set; -ENOENT (no binary known); -ETIMEDOUT (no line in time; the log
 * tail is printed and the child killed); -ECHILD (herald exited first; its log is printed);
 * other negative errno from pipe/fork/pthread.
 * Thread: the caller's. Ownership: *out is the caller's; free it with test_herald_stop. */
int test_herald_start(test_herald_t **out, const test_herald_opts_t *opts);

/* As test_herald_start with only flags: test_herald_startl(&h, "--insecure", NULL). */
int test_herald_startl(test_herald_t **out, const char *flag, ...) __attribute__((sentinel));

/* Bytes of each of stdout and stderr that test_herald_run keeps (one for the NUL). */
#define TEST_HERALD_RUN_CAP 16384

/* What test_herald_run collected. */
typedef struct test_herald_run_s {
    int status;                    /* exit code, or 128 + signal */
    char out[TEST_HERALD_RUN_CAP]; /* stdout, NUL-terminated; what did not fit is dropped */
    char err[TEST_HERALD_RUN_CAP]; /* stderr, likewise */
} test_herald_run_t;

/* Runs herald with args (NULL-terminated; no --listen or --admin added: for its command line,
 * not a node) as test_herald_start runs it (environment without HERALD_*, dies with the test),
 * and collects stdout and stderr until it exits.
 * Returns: 0 with *out filled; -ENOENT (no binary known); -ETIMEDOUT (not done within
 * timeout_ms: killed and reaped); other negative errno from pipe/fork. Thread: any. */
int test_herald_run(const char *const *args, int timeout_ms, test_herald_run_t *out);

/* Sends SIGTERM, waits up to timeout_ms (0: TEST_HERALD_STOP_MS) for the exit, SIGKILLs and
 * reaps past it, joins the reader and frees h. NULL returns 0.
 * Returns: the exit code (0..255), 128 + signal when killed by a signal, -ETIMEDOUT when it
 * had to be SIGKILLed. When the result is not 0 the log tail is printed and the file kept.
 * Thread: the starter's. Ownership: h is freed. */
int test_herald_stop(test_herald_t *h, int timeout_ms);

/* As test_herald_stop without the SIGTERM: waits up to timeout_ms (0: TEST_HERALD_STOP_MS)
 * for herald to exit by itself (after a signal the test sent), SIGKILLs and reaps past it,
 * joins the reader and frees h. NULL returns 0.
 * Returns: as test_herald_stop. Thread: the starter's. Ownership: h is freed. */
int test_herald_wait(test_herald_t *h, int timeout_ms);

/* Kills h at once (SIGKILL), prints its log tail (a test failed with it running), frees it.
 * For teardown functions. NULL is a no-op. Thread: the starter's. */
void test_herald_abort(test_herald_t *h);

/* Tells whether the process has exited (it is not reaped). Thread: the starter's. */
bool test_herald_has_exited(const test_herald_t *h);

/* Waits until herald's stderr holds needle at or after *pos (a byte offset into the log;
 * start with 0), then sets *pos just past the match.
 * Returns: 0; -ETIMEDOUT; -EPIPE when stderr closed without it. Thread: the starter's. */
int test_herald_wait_log(test_herald_t *h, const char *needle, size_t *pos, int timeout_ms);

/* Prints the last max_bytes of herald's stderr to the test's stderr, with a header.
 * Thread: the starter's. */
void test_herald_dump_log(test_herald_t *h, size_t max_bytes);

/* herald's resident set (VmRSS of /proc/<pid>/status) in KiB, or a negative errno.
 * Thread: any. */
long test_proc_rss_kb(pid_t pid);

/* Raises this process's RLIMIT_NOFILE soft limit to at least want (at most the hard limit).
 * Returns: the new soft limit, or a negative errno. Thread: any. */
long test_raise_nofile(rlim_t want);

/* Milliseconds on the monotonic clock. Thread: any. */
int64_t test_now_ms(void);

/* Milliseconds left until deadline_ms on that clock (never negative). Thread: any. */
int test_ms_left(int64_t deadline_ms);

/* Mints an HS256 token for user, valid from now - age_s for ttl_s seconds (so age_s > ttl_s
 * gives an expired token), granting the comma-separated channel patterns in channels_csv
 * ("" or NULL: none), signed with secret.
 * Returns: the token length; -EINVAL; -ENOBUFS (cap too small). Thread: any.
 * Ownership: out is the caller's. */
int test_token(char *out, size_t cap, const char *user, const char *channels_csv, int64_t ttl_s,
               int64_t age_s, const char *secret);

/* --- the admin HTTP client (herald_http.c) --- */

/* One HTTP response. */
typedef struct test_http_resp_s {
    int status;
    char *headers; /* the header block, NUL-terminated, "Name: value\r\n" lines */
    char *body;    /* NUL-terminated for convenience; body_len excludes the NUL */
    size_t body_len;
} test_http_resp_t;

/* Sends one request to 127.0.0.1:port with Connection: close and reads the answer to EOF
 * (Content-Length or chunked bodies). headers is a NULL-terminated list of "Name: value"
 * strings (may be NULL); body may be NULL.
 * Returns: 0 with *out filled (free with test_http_resp_free); -ETIMEDOUT; -EPROTO (not an
 * HTTP response); other negative errno. Thread: any. Ownership: *out's strings are the
 * caller's. */
int test_http_request(uint16_t port, const char *method, const char *path,
                      const char *const *headers, const char *body, size_t body_len, int timeout_ms,
                      test_http_resp_t *out);

/* Sums the samples of one /metrics family (every label set, or only the lines whose labels
 * contain label, e.g. "result=\"recovered\"", when not NULL) into *out, asking with the
 * X-Api-Key api_key (NULL: none).
 * Returns: 0; -EPROTO (not 200); as test_http_request. Thread: any. */
int test_metric_sum(uint16_t admin_port, const char *api_key, const char *family, const char *label,
                    double *out);

/* Frees the strings of r and zeroes it. Thread: any. */
void test_http_resp_free(test_http_resp_t *r);

/* A response header's value (case-insensitive name) copied into out, or NULL when absent.
 * Thread: any. */
const char *test_http_resp_header(const test_http_resp_t *r, const char *name, char *out,
                                  size_t cap);

#endif
