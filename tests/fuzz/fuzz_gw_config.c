/*
 * libFuzzer target for gateway/gw_config*.c: the operator's config file, HERALD_* variables
 * and the value syntax they share (clang -fsanitize=fuzzer,address,undefined).
 *
 * Input layout: byte 0 picks the mode (b % 3), the rest is its text.
 *   - 0, values: the text goes to every value parser. A parsed duration or size formats to
 *     text that parses back to the same value; a number never came from a sign or a blank;
 *     a HOST:PORT's host fits its buffer and "[host]:port" parses back to the same pair.
 *   - 1, file: the text is an INI file, loaded over the defaults (through a memfd, so nothing
 *     touches the disk). gw_config_check_file counts an error exactly when the load refuses;
 *     then gw_config_print(show_secrets) of the result must reload to the same config, as
 *     gw_config.h promises.
 *   - 2, environment: the text is NUL-separated NAME=value entries, applied as HERALD_*
 *     variables; the same print and reload round trip follows.
 * A config whose printed form has a line longer than inih's INI_MAX_LINE is not compared:
 * a secret or a host from the environment may be longer than a file line can hold.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ini.h>

#include "gw_config.h"
#include "netlib/nl_common.h"

#define TEXT_MAX 8192
#define ENV_MAX 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_values(const char *text)
{
    uint64_t v = 0;
    uint64_t again = 0;
    char out[64];
    if (gw_config_parse_uint(text, &v) == 0) {
        NL_ASSERT(text[0] >= '0' && text[0] <= '9');
        snprintf(out, sizeof(out), "%" PRIu64, v);
        NL_ASSERT(gw_config_parse_uint(out, &again) == 0 && again == v);
    }
    if (gw_config_parse_duration_ms(text, &v) == 0) {
        NL_ASSERT(text[0] >= '0' && text[0] <= '9');
        gw_config_format_duration(v, out, sizeof(out));
        NL_ASSERT(gw_config_parse_duration_ms(out, &again) == 0 && again == v);
    }
    if (gw_config_parse_size(text, &v) == 0) {
        NL_ASSERT(text[0] >= '0' && text[0] <= '9');
        gw_config_format_size(v, out, sizeof(out));
        NL_ASSERT(gw_config_parse_size(out, &again) == 0 && again == v);
    }
    bool is_on = false;
    if (gw_config_parse_bool(text, &is_on) == 0)
        NL_ASSERT(strlen(text) <= 5);
    char host[GW_CONFIG_HOST_MAX];
    uint16_t port = 0;
    int rc = gw_config_parse_hostport(text, host, sizeof(host), &port);
    NL_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
    if (rc == 0) {
        size_t hlen = strlen(host);
        NL_ASSERT(hlen >= 1 && hlen < sizeof(host));
        char text2[GW_CONFIG_HOST_MAX + 16];
        snprintf(text2, sizeof(text2), "[%s]:%u", host, port);
        char host2[GW_CONFIG_HOST_MAX];
        uint16_t port2 = 0;
        NL_ASSERT(gw_config_parse_hostport(text2, host2, sizeof(host2), &port2) == 0);
        NL_ASSERT(strcmp(host, host2) == 0 && port == port2);
    }
}

/* A memfd holding bytes, reachable by path like a file. */
typedef struct mem_file_s {
    int fd;
    char path[48];
} mem_file_t;

static void mem_file_write(mem_file_t *m, const void *bytes, size_t len)
{
    m->fd = memfd_create("fuzz_gw_config", 0);
    NL_ASSERT(m->fd >= 0);
    NL_ASSERT(write(m->fd, bytes, len) == (ssize_t)len);
    snprintf(m->path, sizeof(m->path), "/proc/self/fd/%d", m->fd);
}

/* Zeroes what follows the NUL in s[0..cap): a string set twice keeps the tail of the longer
 * value there, which is no difference in the config. */
static void clear_tail(char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    NL_ASSERT(n < cap);
    memset(s + n, 0, cap - n);
}

/* The config with every string's tail cleared, so that memcmp compares values. */
static void normalize(gw_config_t *c)
{
    clear_tail(c->listen_host, sizeof(c->listen_host));
    clear_tail(c->node_id, sizeof(c->node_id));
    clear_tail(c->admin_host, sizeof(c->admin_host));
    clear_tail(c->admin_api_key, sizeof(c->admin_api_key));
    clear_tail(c->token_secret, sizeof(c->token_secret));
    clear_tail(c->token_previous_secrets, sizeof(c->token_previous_secrets));
    clear_tail(c->redis, sizeof(c->redis));
    clear_tail(c->history_rules, sizeof(c->history_rules));
    memset(c->config_path, 0, sizeof(c->config_path));
}

/* Prints cfg with its secrets, loads the text over the defaults, and checks nothing moved.
 * On a difference the printed text goes to stderr before the abort, to show what was lost. */
static void check_print_reload(gw_config_t *cfg)
{
    normalize(cfg);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    NL_ASSERT(fp != NULL);
    gw_config_print(cfg, fp, true);
    NL_ASSERT(fclose(fp) == 0);
    /* inih reads lines of at most INI_MAX_LINE - 1 bytes, newline included, so a secret or a
     * host set from the environment can be longer than the file can hold. Known and left;
     * such a config is not compared. */
    for (const char *line = text; *line != '\0';) {
        size_t n = strcspn(line, "\n");
        if (n > INI_MAX_LINE - 1) {
            free(text);
            return;
        }
        line += n + (line[n] == '\n');
    }
    mem_file_t m;
    mem_file_write(&m, text, len);
    gw_config_t *again = malloc(sizeof(*again));
    NL_ASSERT(again != NULL);
    gw_config_init(again);
    int rc = gw_config_load_file(again, m.path, stderr);
    close(m.fd);
    normalize(again);
    bool is_same = rc == 0 && memcmp(again, cfg, sizeof(*cfg)) == 0;
    if (!is_same)
        fprintf(stderr, "printed config that does not reload the same:\n%s", text);
    NL_ASSERT(is_same);
    free(text);
    free(again);
}

static void check_file(const uint8_t *data, size_t size)
{
    mem_file_t m;
    mem_file_write(&m, data, size);
    gw_config_t *cfg = malloc(sizeof(*cfg));
    NL_ASSERT(cfg != NULL);
    gw_config_init(cfg);
    int rc = gw_config_load_file(cfg, m.path, NULL);
    NL_ASSERT(rc == 0 || rc == -EINVAL);
    /* check_file adds the checks across settings; a refused line is an error either way. */
    int n = gw_config_check_file(m.path, NULL);
    NL_ASSERT(n >= (rc != 0) && (rc != 0 || n == gw_config_validate(cfg, NULL)));
    close(m.fd);
    check_print_reload(cfg);
    free(cfg);
}

static void check_env(const uint8_t *data, size_t size)
{
    /* The text with a NUL after it, cut into strings at each NUL. */
    static char text[TEXT_MAX + 1];
    size_t len = size < TEXT_MAX ? size : TEXT_MAX;
    memcpy(text, data, len);
    text[len] = '\0';
    char *envp[ENV_MAX + 1];
    size_t n = 0;
    for (size_t pos = 0; pos <= len && n < ENV_MAX; pos += strlen(text + pos) + 1)
        envp[n++] = text + pos;
    envp[n] = NULL;
    gw_config_t *cfg = malloc(sizeof(*cfg));
    NL_ASSERT(cfg != NULL);
    gw_config_init(cfg);
    int rc = gw_config_load_env(cfg, envp, NULL);
    NL_ASSERT(rc == 0 || rc == -EINVAL);
    check_print_reload(cfg);
    free(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > TEXT_MAX)
        return 0;
    unsigned mode = data[0] % 3;
    data++;
    size--;
    if (mode == 0) {
        char text[TEXT_MAX + 1];
        memcpy(text, data, size);
        text[size] = '\0';
        check_values(text);
    } else if (mode == 1) {
        check_file(data, size);
    } else {
        check_env(data, size);
    }
    return 0;
}
