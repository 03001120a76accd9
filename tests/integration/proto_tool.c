/*
 * proto_tool: herald's codec on the command line, driven by test_proto_interop.py to check
 * that herald and a stock protobuf runtime (Python's) read each other's frames.
 *
 *   proto_tool decode [--chunk N] [--max BYTES]   delimited frames on stdin -> one canonical
 *                                                 line per frame on stdout
 *   proto_tool reencode                           delimited frames on stdin -> the same frames
 *                                                 decoded and encoded again, on stdout
 *   proto_tool encode                             a fixed set of frames (every kind) on stdout
 *
 * The canonical line prints every field in field-number order (proto3 defaults included, in
 * a oneof only the member that is set): integers and enums in decimal, bools as true/false,
 * strings and bytes as "x" + hex, messages as {name=value ...}, repeated as [a,b]. The Python
 * side prints the same from its own parse, so equal lines mean equal frames.
 * decode feeds the input to the decoder N bytes at a time (default: all at once) and exits 2
 * after printing "error <PROTO_ERR_...>", or 3 after "incomplete <bytes>" when input ends
 * inside a frame.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto_frame.h"

static void print_message(const ProtobufCMessage *m);

static void print_hex(const uint8_t *p, size_t n)
{
    putchar('x');
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

static void print_value(const ProtobufCFieldDescriptor *fd, const void *v)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        printf("%" PRId32, *(const int32_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        printf("%" PRIu32, *(const uint32_t *)v);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        printf("%" PRId64, *(const int64_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        printf("%" PRIu64, *(const uint64_t *)v);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        fputs(*(const protobuf_c_boolean *)v ? "true" : "false", stdout);
        break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        print_hex((const uint8_t *)s, s ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = v;
        print_hex(bd->data, bd->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        print_message(*(ProtobufCMessage *const *)v);
        break;
    default:
        /* herald.proto has no floating-point fields. */
        fputs("?", stdout);
    }
}

static void print_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd)
{
    const char *base = (const char *)m;
    printf("%s=", fd->name);
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t n = *(const size_t *)(base + fd->quantifier_offset);
        const char *arr = *(char *const *)(base + fd->offset);
        putchar('[');
        for (size_t i = 0; i < n; i++) {
            if (i > 0)
                putchar(',');
            print_value(fd, arr + i * proto_field_elt_bytes(fd->type));
        }
        putchar(']');
    } else {
        print_value(fd, base + fd->offset);
    }
}

static void print_message(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool is_first = true;
    putchar('{');
    /* Field-number order, whatever order the descriptor keeps them in. */
    uint32_t last = 0;
    for (unsigned k = 0; k < d->n_fields; k++) {
        const ProtobufCFieldDescriptor *next = NULL;
        for (unsigned i = 0; i < d->n_fields; i++) {
            if (d->fields[i].id > last && (next == NULL || d->fields[i].id < next->id))
                next = &d->fields[i];
        }
        last = next->id;
        if ((next->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + next->quantifier_offset) != next->id)
            continue;
        if (!is_first)
            putchar(' ');
        is_first = false;
        print_field(m, next);
    }
    putchar('}');
}

/* Reads all of stdin into *out. Returns its length; exits on a read error. */
static size_t read_all(uint8_t **out)
{
    size_t cap = 1 << 16;
    size_t len = 0;
    uint8_t *p = malloc(cap);
    for (;;) {
        if (p == NULL) {
            fputs("proto_tool: out of memory\n", stderr);
            exit(1);
        }
        ssize_t n = read(0, p + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            perror("proto_tool: read");
            exit(1);
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap) {
            cap *= 2;
            p = realloc(p, cap);
        }
    }
    *out = p;
    return len;
}

static int write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(1, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Decodes stdin, chunk bytes at a time; prints (or, reencoding, re-encodes) each frame. */
static int cmd_decode(size_t chunk, size_t max_frame_bytes, bool is_reencode)
{
    uint8_t *all;
    size_t len = read_all(&all);
    if (chunk == 0)
        chunk = len ? len : 1;
    nl_buf_t in;
    nl_buf_t out;
    nl_buf_init(&in, 0);
    nl_buf_init(&out, 0);
    int rc = 0;
    for (size_t pos = 0; pos < len && rc >= 0;) {
        size_t n = len - pos < chunk ? len - pos : chunk;
        if (nl_buf_append(&in, all + pos, n) < 0)
            return 1;
        pos += n;
        Herald__Frame *f;
        while ((rc = proto_frame_decode(&in, max_frame_bytes, &f)) == 1) {
            if (is_reencode) {
                if (proto_frame_append(&out, f) < 0)
                    return 1;
            } else {
                print_message(&f->base);
                putchar('\n');
            }
            proto_frame_free(f);
        }
    }
    free(all);
    int status = 0;
    if (rc < 0) {
        printf("error %s\n", proto_err_str(rc));
        status = 2;
    } else if (nl_buf_readable(&in) > 0) {
        printf("incomplete %zu\n", nl_buf_readable(&in));
        status = 3;
    }
    fflush(stdout);
    if (is_reencode && write_all(nl_buf_peek(&out), nl_buf_readable(&out)) < 0)
        status = 1;
    nl_buf_deinit(&in);
    nl_buf_deinit(&out);
    return status;
}

static void push_init(Herald__Push *p, const char *chan, uint64_t offset, uint8_t *data, size_t len)
{
    herald__push__init(p);
    p->channel = (char *)(uintptr_t)chan;
    p->offset = offset;
    p->epoch = (char *)"ep-1";
    p->payload.data = data;
    p->payload.len = len;
    p->publish_time_ms = 1735700000000ull + offset;
}

/* Appends one frame with the given id and body to out. */
static void emit(nl_buf_t *out, uint64_t id, Herald__Frame__BodyCase body, void *msg)
{
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = body;
    f.connect = msg; /* every member of the union is a message pointer */
    if (proto_frame_append(out, &f) < 0)
        exit(1);
}

static void encode_requests(nl_buf_t *out, uint8_t *blob)
{
    Herald__Connect c = HERALD__CONNECT__INIT;
    c.token = (char *)"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1In0.sig";
    c.client_name = (char *)"proto_tool";
    c.client_version = (char *)"0.1";
    emit(out, 1, HERALD__FRAME__BODY_CONNECT, &c);
    Herald__Subscribe s = HERALD__SUBSCRIBE__INIT;
    s.channel = (char *)"chat:caf\xc3\xa9";
    s.recover = 1;
    s.offset = UINT64_MAX;
    s.epoch = (char *)"ep-1";
    emit(out, 2, HERALD__FRAME__BODY_SUBSCRIBE, &s);
    Herald__Unsubscribe u = HERALD__UNSUBSCRIBE__INIT;
    u.channel = (char *)"news";
    emit(out, 3, HERALD__FRAME__BODY_UNSUBSCRIBE, &u);
    Herald__Publish p = HERALD__PUBLISH__INIT;
    p.channel = (char *)"news";
    p.payload.data = blob;
    p.payload.len = 20000;
    emit(out, 4, HERALD__FRAME__BODY_PUBLISH, &p);
    Herald__Ping ping = HERALD__PING__INIT;
    emit(out, UINT64_MAX, HERALD__FRAME__BODY_PING, &ping);
    Herald__PresenceRequest pr = HERALD__PRESENCE_REQUEST__INIT;
    pr.channel = (char *)"chat:lobby";
    emit(out, 6, HERALD__FRAME__BODY_PRESENCE_REQUEST, &pr);
}

static void encode_replies(nl_buf_t *out, uint8_t *blob)
{
    Herald__ConnectOk ok = HERALD__CONNECT_OK__INIT;
    ok.client_id = (char *)"n1-1";
    ok.node_id = (char *)"n1";
    ok.ping_interval_ms = 25000;
    ok.idle_timeout_ms = 60000;
    ok.user_id = (char *)"u-\xe2\x82\xac";
    ok.max_frame_bytes = 65536;
    emit(out, 1, HERALD__FRAME__BODY_CONNECT_OK, &ok);
    Herald__Push pushes[2];
    Herald__Push *pp[2] = {&pushes[0], &pushes[1]};
    push_init(&pushes[0], "chat:lobby", 41, blob, 3);
    push_init(&pushes[1], "chat:lobby", 42, blob, 0);
    Herald__SubscribeOk so = HERALD__SUBSCRIBE_OK__INIT;
    so.recovered = 1;
    so.n_publications = 2;
    so.publications = pp;
    so.offset = 42;
    so.epoch = (char *)"ep-1";
    so.recoverable = 1;
    emit(out, 2, HERALD__FRAME__BODY_SUBSCRIBE_OK, &so);
    Herald__UnsubscribeOk uo = HERALD__UNSUBSCRIBE_OK__INIT;
    emit(out, 3, HERALD__FRAME__BODY_UNSUBSCRIBE_OK, &uo);
    Herald__PublishOk po = HERALD__PUBLISH_OK__INIT;
    po.offset = 1ull << 53;
    po.epoch = (char *)"ep-1";
    emit(out, 4, HERALD__FRAME__BODY_PUBLISH_OK, &po);
    Herald__Pong pong = HERALD__PONG__INIT;
    emit(out, UINT64_MAX, HERALD__FRAME__BODY_PONG, &pong);
    Herald__ClientInfo ci = HERALD__CLIENT_INFO__INIT;
    Herald__ClientInfo *cip = &ci;
    ci.user_id = (char *)"u";
    ci.client_id = (char *)"n1-1";
    Herald__PresenceResponse prs = HERALD__PRESENCE_RESPONSE__INIT;
    prs.channel = (char *)"chat:lobby";
    prs.n_clients = 1;
    prs.clients = &cip;
    prs.num_clients = 3;
    prs.num_users = 2;
    prs.truncated = 1;
    emit(out, 6, HERALD__FRAME__BODY_PRESENCE_RESPONSE, &prs);
}

static void encode_server_frames(nl_buf_t *out)
{
    Herald__Error e = HERALD__ERROR__INIT;
    e.code = HERALD__ERROR__CODE__FORBIDDEN;
    e.text = (char *)"channel not allowed";
    emit(out, 7, HERALD__FRAME__BODY_ERROR, &e);
    Herald__Error e2 = HERALD__ERROR__INIT;
    e2.code = (Herald__Error__Code)99; /* a code newer than the peer's schema */
    e2.retry_after_ms = 250;
    emit(out, 0, HERALD__FRAME__BODY_ERROR, &e2);
    Herald__Disconnect d = HERALD__DISCONNECT__INIT;
    d.code = HERALD__DISCONNECT__CODE__SHUTDOWN;
    d.reason = (char *)"draining";
    d.reconnect = 1;
    d.reconnect_delay_ms = 1500;
    emit(out, 0, HERALD__FRAME__BODY_DISCONNECT, &d);
}

/* Writes every frame kind, plus a Push encoded through proto_push_block. */
static int cmd_encode(void)
{
    static uint8_t blob[20000];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)(i * 31 + 7);
    nl_buf_t out;
    nl_buf_init(&out, 0);
    encode_requests(&out, blob);
    encode_replies(&out, blob);
    encode_server_frames(&out);
    int rc = write_all(nl_buf_peek(&out), nl_buf_readable(&out));
    nl_buf_deinit(&out);
    Herald__Push push;
    push_init(&push, "news", 7, blob, 100);
    nl_block_t *blk = proto_push_block(&push);
    if (blk == NULL)
        return 1;
    if (rc == 0)
        rc = write_all(nl_block_data(blk), nl_block_len(blk));
    nl_block_unref(blk);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "encode") == 0)
        return cmd_encode();
    if (argc >= 2 && strcmp(argv[1], "reencode") == 0)
        return cmd_decode(0, PROTO_DEFAULT_MAX_FRAME_BYTES, true);
    if (argc >= 2 && strcmp(argv[1], "decode") == 0) {
        size_t chunk = 0;
        size_t max = PROTO_DEFAULT_MAX_FRAME_BYTES;
        for (int i = 2; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--chunk") == 0)
                chunk = strtoul(argv[i + 1], NULL, 10);
            else if (strcmp(argv[i], "--max") == 0)
                max = strtoul(argv[i + 1], NULL, 10);
        }
        return cmd_decode(chunk, max, false);
    }
    fputs("usage: proto_tool decode [--chunk N] [--max BYTES] | reencode | encode\n", stderr);
    return 64;
}
