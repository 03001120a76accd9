/*
 * herald_http: the harness's tiny blocking HTTP/1.1 client for herald's admin API (declared in
 * herald_harness.h): one request per connection, Connection: close, read to EOF, with a
 * deadline on every step.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "herald_harness.h"

#define HTTP_MAX_RESPONSE (64u * 1024 * 1024)

/* --- admin HTTP client -------------------------------------------------------------------- */

/* Connects a blocking-with-deadline TCP socket to 127.0.0.1:port. */
static int http_connect(uint16_t port, int64_t deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        int err = -errno;
        close(fd);
        return err;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    if (poll(&pfd, 1, test_ms_left(deadline)) != 1) {
        close(fd);
        return -ETIMEDOUT;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
        close(fd);
        return -soerr;
    }
    return fd;
}

static int http_send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, test_ms_left(deadline)) != 1)
                return -ETIMEDOUT;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until EOF into a malloc'd, NUL-terminated buffer. */
static int http_read_all(int fd, int64_t deadline, char **out, size_t *out_len)
{
    size_t cap = 4096;
    size_t len = 0;
    char *buf = malloc(cap + 1);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap >= HTTP_MAX_RESPONSE)
                goto fail_proto;
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb)
                goto fail_nomem;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n > 0) {
            len += (size_t)n;
            continue;
        }
        if (n == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            break; /* a reset after the answer still leaves what was read */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, test_ms_left(deadline)) != 1) {
            free(buf);
            return -ETIMEDOUT;
        }
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
fail_proto:
    free(buf);
    return -EPROTO;
fail_nomem:
    free(buf);
    return -ENOMEM;
}

/* Decodes a chunked body in place. Returns the decoded length or -EPROTO. */
static ssize_t http_dechunk(char *body, size_t len)
{
    size_t rd = 0;
    size_t wr = 0;
    for (;;) {
        char *end;
        if (rd >= len)
            return -EPROTO;
        unsigned long n = strtoul(body + rd, &end, 16);
        char *crlf = strstr(end, "\r\n");
        if (!crlf || end == body + rd)
            return -EPROTO;
        rd = (size_t)(crlf - body) + 2;
        if (n == 0)
            break;
        if (rd + n > len)
            return -EPROTO;
        memmove(body + wr, body + rd, n);
        wr += n;
        rd += n + 2;
    }
    body[wr] = '\0';
    return (ssize_t)wr;
}

/* Splits a raw response into status, headers and body. Takes ownership of raw. */
static int http_parse(char *raw, size_t len, test_http_resp_t *out)
{
    int status = 0;
    char *hdr_end = strstr(raw, "\r\n\r\n");
    if (!hdr_end || sscanf(raw, "HTTP/1.%*d %d", &status) != 1)
        goto fail;
    size_t hdr_len = (size_t)(hdr_end - raw) + 2;
    char *body_start = hdr_end + 4;
    size_t body_len = len - (size_t)(body_start - raw);
    out->headers = strndup(raw, hdr_len);
    out->body = malloc(body_len + 1);
    if (!out->headers || !out->body)
        goto fail;
    memcpy(out->body, body_start, body_len);
    out->body[body_len] = '\0';
    out->body_len = body_len;
    out->status = status;
    char te[64];
    if (test_http_resp_header(out, "Transfer-Encoding", te, sizeof(te)) &&
        strcasecmp(te, "chunked") == 0) {
        ssize_t n = http_dechunk(out->body, out->body_len);
        if (n < 0)
            goto fail;
        out->body_len = (size_t)n;
    }
    free(raw);
    return 0;
fail:
    free(raw);
    test_http_resp_free(out);
    return -EPROTO;
}

int test_http_request(uint16_t port, const char *method, const char *path,
                      const char *const *headers, const char *body, size_t body_len, int timeout_ms,
                      test_http_resp_t *out)
{
    memset(out, 0, sizeof(*out));
    int64_t deadline = test_now_ms() + timeout_ms;
    int fd = http_connect(port, deadline);
    if (fd < 0)
        return fd;
    char head[8192];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n",
                     method, path, (unsigned)port, body ? body_len : 0);
    for (size_t i = 0; headers && headers[i] && n < (int)sizeof(head); i++)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s\r\n", headers[i]);
    if (n + 3 > (int)sizeof(head)) {
        close(fd);
        return -E2BIG;
    }
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    int rc = http_send_all(fd, head, (size_t)n, deadline);
    if (rc == 0 && body && body_len)
        rc = http_send_all(fd, body, body_len, deadline);
    char *raw = NULL;
    size_t raw_len = 0;
    if (rc == 0)
        rc = http_read_all(fd, deadline, &raw, &raw_len);
    close(fd);
    if (rc < 0)
        return rc;
    return http_parse(raw, raw_len, out);
}

void test_http_resp_free(test_http_resp_t *r)
{
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

const char *test_http_resp_header(const test_http_resp_t *r, const char *name, char *out,
                                  size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = r->headers ? strstr(r->headers, "\r\n") : NULL;
    while (p) {
        p += 2;
        if (strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            const char *v = p + nlen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t vlen = e ? (size_t)(e - v) : strlen(v);
            if (vlen >= cap)
                vlen = cap - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return out;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

int test_metric_sum(uint16_t admin_port, const char *api_key, const char *family, const char *label,
                    double *out)
{
    char key_hdr[256];
    snprintf(key_hdr, sizeof(key_hdr), "X-Api-Key: %s", api_key ? api_key : "");
    const char *const hdrs[] = {key_hdr, NULL};
    test_http_resp_t r;
    int rc =
        test_http_request(admin_port, "GET", "/metrics", api_key ? hdrs : NULL, NULL, 0, 30000, &r);
    if (rc != 0)
        return rc;
    if (r.status != 200) {
        test_http_resp_free(&r);
        return -EPROTO;
    }
    double sum = 0;
    size_t flen = strlen(family);
    for (const char *line = r.body; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *sp = memchr(line, ' ', len);
        /* A sample line of the family: "name value" or "name{labels} value". */
        if (sp && len > flen && strncmp(line, family, flen) == 0 &&
            (line[flen] == ' ' || line[flen] == '{')) {
            bool is_match = !label;
            if (label) {
                /* The label must lie inside this line's name part. */
                const char *hit = memmem(line, (size_t)(sp - line), label, strlen(label));
                is_match = hit != NULL;
            }
            if (is_match)
                sum += strtod(sp + 1, NULL);
        }
        line += len + (eol != NULL);
    }
    test_http_resp_free(&r);
    *out = sum;
    return 0;
}
