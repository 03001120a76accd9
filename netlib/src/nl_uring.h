/*
 * nl_uring.h: a minimal io_uring ring that sends on many sockets with one system call.
 * Private to netlib; used by the connection flush (nl_conn_out.c).
 *
 * Why: a fan-out writes one small message to each of thousands of sockets. Each write is a
 * system call, and on a VM a system call's entry and exit alone can cost microseconds (a
 * getppid takes 2.5 us on the machine herald is measured on), a third of a 150-byte loopback
 * send. One io_uring_enter submits a whole batch instead.
 *
 * The ring is used synchronously: sends are prepared, then nl__uring_submit hands them all to
 * the kernel and waits until every one has completed. Every send carries MSG_DONTWAIT, so a
 * full socket completes at once with -EAGAIN instead of parking in the kernel. Nothing is in
 * flight between calls, so the caller's buffers need to live only until submit returns.
 *
 * Built on liburing (issue 22: Debian's liburing-dev, linked statically so the binaries need
 * no runtime package beyond libc's). One owner thread per ring.
 */
#ifndef HERALD_NETLIB_NL_URING_H
#define HERALD_NETLIB_NL_URING_H

#include <stddef.h>
#include <stdint.h>

typedef struct nl__uring_s nl__uring_t;

/* Creates a ring for up to entries sends per submit (a power of two). Returns 0, or a
 * negative errno: -ENOSYS or -EPERM where io_uring is missing or forbidden (old kernel,
 * seccomp, kernel.io_uring_disabled), -EOPNOTSUPP where the kernel lacks IORING_OP_SEND
 * (before 5.6), -ENOMEM, -EMFILE. The caller then writes one call per send. */
int nl__uring_open(nl__uring_t **out, unsigned entries);

void nl__uring_close(nl__uring_t *r);

/* Sends prepared and not yet submitted. */
unsigned nl__uring_pending(const nl__uring_t *r);

/* Prepares send(fd, buf, len, flags | MSG_DONTWAIT); its result goes to res[slot] at submit,
 * where slot is its preparation order since the last submit (0, 1, ...). Returns 0, or
 * -ENOSPC when entries sends are already prepared. */
int nl__uring_prep_send(nl__uring_t *r, int fd, const void *buf, uint32_t len, int flags);

/*
 * Submits every prepared send and waits for all of them. res[i] gets slot i's result: bytes
 * sent, or a negative errno (-EAGAIN for a full socket). Returns 0, or a negative errno when
 * the ring itself failed; then slots that never reached the kernel hold -ECANCELED (not
 * sent), slots submitted but never completed hold -EIO (perhaps partly sent), the others
 * their results, and the ring must be closed (it may hold stale entries).
 */
int nl__uring_submit(nl__uring_t *r, int32_t *res);

#endif
