/*
 * gw_redis_adapter: hiredis's event hooks on an nl_io. See gw_redis_adapter.h.
 *
 * hiredis may free the context inside redisAsyncHandleRead or redisAsyncHandleWrite (the
 * server closed, a write or the connect failed), and with it call cleanup. While the event
 * callback runs, cleanup only marks the state freed (hiredis 1.x's libevent adapter does the
 * same with its ENTERED/DELETED bits): the callback then neither touches the dead context nor
 * calls the other half, and frees the state itself on the way out.
 */
#include "gw_redis_adapter.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "netlib/nl_common.h"

typedef struct adapter_s {
    redisAsyncContext *ac;
    nl_io_t *io;
    unsigned interest; /* NL_READ | NL_WRITE */
    bool is_in_event;  /* adapter_on_event is running */
    bool is_freed;     /* cleanup ran meanwhile: the context is gone */
} adapter_t;

static void adapter_set(adapter_t *a, unsigned interest)
{
    if (interest == a->interest)
        return;
    a->interest = interest;
    /* Only a bug or a closed fd makes epoll_ctl fail here; hiredis then finds the error on
     * its own next read or write, and disconnects. */
    (void)nl_io_set(a->io, interest);
}

static void adapter_add_read(void *privdata)
{
    adapter_t *a = privdata;
    adapter_set(a, a->interest | NL_READ);
}

static void adapter_del_read(void *privdata)
{
    adapter_t *a = privdata;
    adapter_set(a, a->interest & ~NL_READ);
}

static void adapter_add_write(void *privdata)
{
    adapter_t *a = privdata;
    adapter_set(a, a->interest | NL_WRITE);
}

static void adapter_del_write(void *privdata)
{
    adapter_t *a = privdata;
    adapter_set(a, a->interest & ~NL_WRITE);
}

static void adapter_cleanup(void *privdata)
{
    adapter_t *a = privdata;
    nl_io_close(a->io, NULL);
    a->ac->ev.data = NULL;
    a->ac = NULL;
    if (a->is_in_event)
        a->is_freed = true; /* adapter_on_event frees it */
    else
        free(a);
}

static void adapter_on_event(nl_io_t *io, unsigned events, void *arg)
{
    NL_UNUSED(io);
    adapter_t *a = arg;
    redisAsyncContext *ac = a->ac;
    /* An error or hang-up goes to whichever half is wanted: a read sees EOF or the error and
     * disconnects; a write (the connect in progress) finds the failed connect. */
    bool is_readable = events & (NL_READ | NL_HUP | NL_ERR);
    bool is_writable = events & (NL_WRITE | NL_HUP | NL_ERR);
    bool wants_read = a->interest & NL_READ;
    bool wants_write = a->interest & NL_WRITE;
    a->is_in_event = true;
    if (is_writable && wants_write)
        redisAsyncHandleWrite(ac);
    if (!a->is_freed && is_readable && wants_read)
        redisAsyncHandleRead(ac);
    if (a->is_freed) {
        free(a);
        return;
    }
    a->is_in_event = false;
}

int gw_redis_adapter_attach(nl_loop_t *loop, redisAsyncContext *ac)
{
    if (ac->ev.data != NULL)
        return -EEXIST;
    adapter_t *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->ac = ac;
    int err = nl_io_new(&a->io, loop, ac->c.fd, adapter_on_event, a);
    if (err < 0) {
        free(a);
        return err;
    }
    ac->ev.addRead = adapter_add_read;
    ac->ev.delRead = adapter_del_read;
    ac->ev.addWrite = adapter_add_write;
    ac->ev.delWrite = adapter_del_write;
    ac->ev.cleanup = adapter_cleanup;
    ac->ev.data = a;
    return 0;
}
