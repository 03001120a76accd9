/*
 * gw_listener: a node's client listeners. See gw_transport.h.
 */
#include "gw_transport.h"

#include <limits.h>
#include <sys/resource.h>

#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* The lowest descriptor number a client connection may not have (nl_server's max_fd), or 0
 * when RLIMIT_NOFILE is unknown or unlimited. At most a quarter of a small limit is reserved,
 * so that a node under a tiny RLIMIT_NOFILE still takes clients. */
static int listener_fd_line(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)INT_MAX)
        return 0;
    int limit = (int)rl.rlim_cur;
    int reserve = GW_LISTENER_FD_RESERVE < limit / 4 ? GW_LISTENER_FD_RESERVE : limit / 4;
    NL_LOG(NL_INFO, "fd_reserve", "nofile=%d reserved=%d", limit, reserve);
    return limit - reserve;
}

int gw_listener_new(nl_server_t **out, const gw_listener_opts_t *o)
{
    nl_server_opts_t opts = {
        .host = o->host,
        .port = o->port,
        .accept_loop = o->accept_loop,
        .io_loops = o->io_loops,
        .io_loop_count = o->n_io_loops,
        .reuseport = o->reuseport,
        .cbs = o->cbs,
        .arg = o->arg,
        .high_water_bytes = o->high_water_bytes,
        .max_input_bytes = o->max_input_bytes,
        .max_fd = listener_fd_line(),
        .refusal = o->refusal,
        .refusal_len = o->refusal_len,
    };
    nl_server_t *server = NULL;
    int err = nl_server_new(&server, &opts);
    if (err == 0)
        err = nl_server_start(server);
    if (err < 0) {
        NL_LOG(NL_ERROR, "listen_failed", "listener=%s host=%s port=%u err=%s", o->name,
               o->host ? o->host : "0.0.0.0", o->port, nl_strerror(err));
        if (server)
            nl_server_close(server);
        return err;
    }
    *out = server;
    return 0;
}
