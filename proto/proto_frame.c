/*
 * proto_frame: the length-delimited frame codec (see proto_frame.h).
 *
 * Decoding a frame takes three steps, each of which can refuse the input:
 *
 *   1. The length prefix is read byte by byte. A value over the limit is refused as soon as
 *      the bytes read so far prove it (the bytes still to come can only add high bits), so a
 *      peer cannot make us wait for, or buffer, a body we would refuse anyway.
 *   2. The whole body is walked once at the wire level (frame_walk_message). The walk checks
 *      the structure the way protobuf-c's unpack will read it, checks that every string field
 *      is UTF-8 without NUL (protobuf-c checks neither: it would silently truncate at a NUL,
 *      and a non-UTF-8 channel name relayed to other clients makes their runtimes reject the
 *      frame), and adds up every allocation unpack will make.
 *   3. protobuf-c unpacks into a bump arena of exactly that size: one malloc per frame, no
 *      frees until proto_frame_free releases the lot.
 *
 * Why the walk mirrors protobuf-c's allocations instead of sizing the arena as "k times the
 * frame": the worst case per wire byte (a repeated empty sub-message, 2 bytes on the wire,
 * costs an element pointer, a 72-byte struct and two 32-byte scanned-member slots) is ~72
 * bytes, while a typical Publish needs little more than its own size. Sizing from the content
 * gives both the tight typical case and a hard bound. If a future protobuf-c allocates more
 * than the walk predicts, the arena grows by extra chunks up to the same hard bound, so a
 * library upgrade costs speed, never safety.
 */
#include "proto_frame.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "netlib/nl_common.h"

/* protobuf-c's structures hold pointers, size_t and 64-bit integers, nothing wider. */
#define ARENA_ALIGN 8u
/* protobuf-c's private ScannedMember is at most 32 bytes (BOUND_SIZEOF_SCANNED_MEMBER_LOG2 is
 * 5). unpack keeps a message's first 16 on the stack, then allocates slabs of 32, 64, ... */
#define SCANNED_MEMBER_BYTES 32u
#define FIRST_SLAB_MEMBERS 16u
/* unpack allocates its required-fields bitmap when it needs more than 16 bytes. */
#define BITMAP_STACK_BYTES 16u
/* herald.proto nests three deep (Frame > SubscribeOk > Push); the walk only descends into
 * known message fields, so this is a guard against a recursive schema, not against input. */
#define WALK_MAX_DEPTH 8
/* protobuf's largest field number (2^29 - 1). */
#define FIELD_NUMBER_MAX 536870911u
/* protobuf's own limit on one message. */
#define MESSAGE_MAX_BYTES 0x7fffffffu
/* Marks a live arena so proto_frame_free can refuse a frame it did not allocate. */
#define ARENA_MAGIC 0x68726c64u

enum {
    WIRE_VARINT = 0,
    WIRE_64BIT = 1,
    WIRE_LEN = 2,
    WIRE_32BIT = 5,
};

/* An extra chunk, taken only when unpack allocates more than the walk predicted. */
typedef struct arena_chunk_s {
    struct arena_chunk_s *next;
    size_t bytes; /* malloc'ed, header included */
} arena_chunk_t;

/* Sits at the front of the frame's single allocation; the Frame (unpack's first allocation)
 * starts ARENA_HDR_BYTES after it, which is how proto_frame_free finds it. */
typedef struct frame_arena_s {
    uint32_t magic;
    bool is_oom;      /* an extra chunk could not be allocated */
    bool is_over_cap; /* unpack wanted more than cap_bytes */
    ProtobufCAllocator allocator;
    char *cur;         /* next free byte */
    size_t left;       /* free bytes at cur */
    size_t held_bytes; /* everything malloc'ed for this frame */
    size_t cap_bytes;  /* held_bytes never passes this */
    arena_chunk_t *extra;
} frame_arena_t;

#define ARENA_HDR_BYTES ((sizeof(frame_arena_t) + 15u) & ~(size_t)15u)
#define CHUNK_HDR_BYTES ((sizeof(arena_chunk_t) + 15u) & ~(size_t)15u)

/* One field as it sits on the wire. */
typedef struct wire_field_s {
    uint32_t tag;
    unsigned wire_type;
    const uint8_t *payload; /* the value; for WIRE_LEN, after the length prefix */
    size_t payload_len;
    size_t value_len; /* bytes after the tag, length prefix included */
    size_t total_len; /* bytes of the whole field, tag included */
} wire_field_t;

static size_t align_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

size_t proto_varint_put(uint8_t out[PROTO_VARINT_MAX_BYTES], uint64_t v)
{
    return varint_put(out, v);
}

/* Reads a varint of at most max_bytes bytes. Returns the bytes used, 0 when it does not end
 * within max_bytes or the available input. */
static size_t varint_get(const uint8_t *p, size_t avail, size_t max_bytes, uint64_t *v)
{
    size_t limit = avail < max_bytes ? avail : max_bytes;
    uint64_t x = 0;
    for (size_t i = 0; i < limit; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* ---- arena ---------------------------------------------------------------------------- */

static void *arena_grow(frame_arena_t *a, size_t n)
{
    /* Grow geometrically so a badly mispredicted frame takes few chunks, but never past the
     * cap: when the geometric size does not fit, try the exact size. */
    size_t want = n > a->held_bytes / 2 ? n : a->held_bytes / 2;
    if (a->held_bytes + CHUNK_HDR_BYTES + want > a->cap_bytes)
        want = n;
    if (a->held_bytes + CHUNK_HDR_BYTES + want > a->cap_bytes) {
        a->is_over_cap = true;
        return NULL;
    }
    arena_chunk_t *c = malloc(CHUNK_HDR_BYTES + want);
    if (c == NULL) {
        a->is_oom = true;
        return NULL;
    }
    c->bytes = CHUNK_HDR_BYTES + want;
    c->next = a->extra;
    a->extra = c;
    a->held_bytes += c->bytes;
    char *p = (char *)c + CHUNK_HDR_BYTES;
    a->cur = p + n;
    a->left = want - n;
    return p;
}

static void *arena_alloc(void *data, size_t size)
{
    frame_arena_t *a = data;
    size_t n = size == 0 ? ARENA_ALIGN : align_up(size);
    if (n > a->left)
        return arena_grow(a, n);
    void *p = a->cur;
    a->cur += n;
    a->left -= n;
    return p;
}

/* Everything is released at once by arena_destroy; unpack's frees of its scratch slabs and
 * of a replaced oneof member were counted by the walk and simply stay in the arena. */
static void arena_free(void *data, void *p)
{
    NL_UNUSED(data);
    NL_UNUSED(p);
}

static frame_arena_t *arena_new(size_t need, size_t cap_bytes)
{
    frame_arena_t *a = malloc(ARENA_HDR_BYTES + need);
    if (a == NULL)
        return NULL;
    a->magic = ARENA_MAGIC;
    a->is_oom = false;
    a->is_over_cap = false;
    a->allocator.alloc = arena_alloc;
    a->allocator.free = arena_free;
    a->allocator.allocator_data = a;
    a->cur = (char *)a + ARENA_HDR_BYTES;
    a->left = need;
    a->held_bytes = ARENA_HDR_BYTES + need;
    a->cap_bytes = cap_bytes > a->held_bytes ? cap_bytes : a->held_bytes;
    a->extra = NULL;
    return a;
}

static void arena_destroy(frame_arena_t *a)
{
    arena_chunk_t *c = a->extra;
    while (c != NULL) {
        arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    a->magic = 0;
    free(a);
}

static frame_arena_t *arena_of(const Herald__Frame *f)
{
    frame_arena_t *a = (frame_arena_t *)((char *)(uintptr_t)f - ARENA_HDR_BYTES);
    NL_ASSERT(a->magic == ARENA_MAGIC);
    return a;
}

/* ---- wire walk ------------------------------------------------------------------------ */

/* Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF), and no NUL, which
 * protobuf-c's NUL-terminated strings could not represent. */
static bool utf8_valid_no_nul(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c == 0)
                return false;
            i++;
            continue;
        }
        size_t more;
        uint32_t cp;
        uint32_t min;
        if ((c & 0xe0) == 0xc0) {
            more = 1;
            cp = c & 0x1fu;
            min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            more = 2;
            cp = c & 0x0fu;
            min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            more = 3;
            cp = c & 0x07u;
            min = 0x10000;
        } else {
            return false;
        }
        if (n - i - 1 < more)
            return false;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += more + 1;
    }
    return true;
}

/* Parses one field's tag and value extent, with protobuf-c's limits: a tag of at most 5
 * bytes, a length prefix of at most 5 bytes and 2 GiB, no groups. */
static int wire_field_parse(const uint8_t *p, size_t avail, wire_field_t *fl)
{
    uint64_t key;
    size_t used = varint_get(p, avail, 5, &key);
    if (used == 0 || (key >> 3) == 0 || (key >> 3) > FIELD_NUMBER_MAX)
        return PROTO_ERR_UNDECODABLE;
    fl->tag = (uint32_t)(key >> 3);
    fl->wire_type = (unsigned)(key & 7);
    const uint8_t *v = p + used;
    size_t rem = avail - used;
    uint64_t x;
    size_t n;
    switch (fl->wire_type) {
    case WIRE_VARINT:
        n = varint_get(v, rem, PROTO_VARINT_MAX_BYTES, &x);
        if (n == 0)
            return PROTO_ERR_UNDECODABLE;
        fl->payload = v;
        fl->payload_len = n;
        fl->value_len = n;
        break;
    case WIRE_64BIT:
    case WIRE_32BIT:
        n = fl->wire_type == WIRE_64BIT ? 8 : 4;
        if (rem < n)
            return PROTO_ERR_UNDECODABLE;
        fl->payload = v;
        fl->payload_len = n;
        fl->value_len = n;
        break;
    case WIRE_LEN:
        n = varint_get(v, rem, 5, &x);
        if (n == 0 || x > MESSAGE_MAX_BYTES || x > rem - n)
            return PROTO_ERR_UNDECODABLE;
        fl->payload = v + n;
        fl->payload_len = (size_t)x;
        fl->value_len = n + (size_t)x;
        break;
    default:
        return PROTO_ERR_UNDECODABLE;
    }
    fl->total_len = used + fl->value_len;
    return 0;
}

/* The wire type a field's values must carry (a repeated scalar may also come packed). */
static unsigned wire_type_of(ProtobufCType type)
{
    switch (type) {
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return WIRE_64BIT;
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return WIRE_32BIT;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return WIRE_LEN;
    default:
        return WIRE_VARINT;
    }
}

size_t proto_field_elt_bytes(ProtobufCType type)
{
    switch (type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    default:
        return 4;
    }
}

/* Bytes of scanned-member slabs unpack allocates for a message of `members` fields. */
static size_t slab_bytes(size_t members)
{
    size_t total = 0;
    size_t slab = FIRST_SLAB_MEMBERS;
    size_t have = FIRST_SLAB_MEMBERS;
    while (members > have) {
        slab *= 2;
        total += slab * SCANNED_MEMBER_BYTES;
        have += slab;
    }
    return total;
}

static int frame_walk_message(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                              int depth, size_t *need);

/* Checks one known field's value and adds what unpack allocates for it. */
static int frame_walk_known(const ProtobufCFieldDescriptor *fd, const wire_field_t *fl, int depth,
                            size_t *need)
{
    bool is_repeated = fd->label == PROTOBUF_C_LABEL_REPEATED;
    unsigned want = wire_type_of(fd->type);
    if (is_repeated && want != WIRE_LEN && fl->wire_type == WIRE_LEN) {
        /* A packed run: at most one element per byte, each at most 8 bytes. */
        *need += 8 * fl->payload_len;
        return 0;
    }
    if (fl->wire_type != want)
        return PROTO_ERR_UNDECODABLE;
    if (is_repeated)
        *need += proto_field_elt_bytes(fd->type);
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING:
        if (!utf8_valid_no_nul(fl->payload, fl->payload_len))
            return PROTO_ERR_UNDECODABLE;
        *need += align_up(fl->payload_len + 1);
        return 0;
    case PROTOBUF_C_TYPE_BYTES:
        *need += align_up(fl->payload_len);
        return 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return frame_walk_message(fd->descriptor, fl->payload, fl->payload_len, depth + 1, need);
    default:
        return 0;
    }
}

/* Walks one message's fields, adding to *need every allocation protobuf-c's unpack makes for
 * it: the struct, each string/bytes copy, each repeated array, each unknown field (an entry
 * and a copy of its bytes), each occurrence of a sub-message (a repeated oneof member is
 * allocated again each time), scanned-member slabs and the required-fields bitmap. */
static int frame_walk_message(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                              int depth, size_t *need)
{
    if (depth > WALK_MAX_DEPTH)
        return PROTO_ERR_UNDECODABLE;
    size_t bytes = align_up(desc->sizeof_message);
    size_t members = 0;
    size_t n_unknown = 0;
    size_t pos = 0;
    while (pos < len) {
        wire_field_t fl;
        int rc = wire_field_parse(p + pos, len - pos, &fl);
        if (rc < 0)
            return rc;
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, fl.tag);
        if (fd == NULL) {
            n_unknown++;
            bytes += align_up(fl.value_len);
        } else {
            rc = frame_walk_known(fd, &fl, depth, &bytes);
            if (rc < 0)
                return rc;
        }
        members++;
        pos += fl.total_len;
    }
    bytes += slab_bytes(members);
    bytes += align_up(n_unknown * sizeof(ProtobufCMessageUnknownField));
    /* Repeated arrays are one allocation each, rounded up once. */
    for (unsigned i = 0; i < desc->n_fields; i++) {
        if (desc->fields[i].label == PROTOBUF_C_LABEL_REPEATED)
            bytes += ARENA_ALIGN;
    }
    if ((desc->n_fields + 7) / 8 > BITMAP_STACK_BYTES)
        bytes += align_up((desc->n_fields + 7) / 8);
    *need += bytes;
    return 0;
}

/* ---- decode ---------------------------------------------------------------------------- */

static bool frame_is_body_member(const wire_field_t *fl)
{
    return fl->tag >= 2 && fl->tag <= HERALD__FRAME__BODY_PRESENCE_EVENT && fl->wire_type == WIRE_LEN;
}

/*
 * protobuf merges a non-repeated message field that appears more than once on the wire (the
 * sub-messages are merged, field by field, later ones winning), and stock runtimes do:
 * Subscribe{channel} followed by Subscribe{join_leave} is one Subscribe with both. protobuf-c
 * keeps only the last occurrence of a oneof member. Merging two encoded messages is parsing
 * their concatenation, so a Frame whose body member repeats is rewritten with one occurrence
 * whose payload is the payloads of the repeats back to back. A different member in between clears the
 * earlier ones (protobuf's oneof rule: the last member seen wins), so only the last run of one
 * member is merged. The rewrite is never longer than the original (one tag and one length
 * prefix instead of several). Returns 1 with *merged (malloc'd) and *merged_len when it
 * rewrote, 0 when nothing repeats (or the walk will refuse the frame), -ENOMEM.
 */
static int frame_merge_body(const uint8_t *data, size_t len, uint8_t **merged, size_t *merged_len)
{
    uint32_t member = 0;  /* the oneof member of the current run (0: none) */
    uint32_t in_run = 0;  /* its occurrences in that run */
    size_t run_from = 0;  /* where the run's first occurrence starts */
    size_t run_bytes = 0; /* its occurrences' payload bytes */
    for (size_t off = 0; off < len;) {
        wire_field_t fl;
        if (wire_field_parse(data + off, len - off, &fl) < 0)
            return 0; /* the walk reports it */
        if (frame_is_body_member(&fl) && fl.tag == member) {
            in_run++;
            run_bytes += fl.payload_len;
        } else if (frame_is_body_member(&fl)) {
            member = fl.tag;
            in_run = 1;
            run_from = off;
            run_bytes = fl.payload_len;
        }
        off += fl.total_len;
    }
    if (in_run < 2)
        return 0;
    uint8_t *out = malloc(len);
    if (!out)
        return -ENOMEM;
    /* Every field but the members, as they are; then the last run as one occurrence. */
    size_t w = 0;
    for (size_t off = 0; off < len;) {
        wire_field_t fl;
        (void)wire_field_parse(data + off, len - off, &fl);
        if (!frame_is_body_member(&fl)) {
            memcpy(out + w, data + off, fl.total_len);
            w += fl.total_len;
        }
        off += fl.total_len;
    }
    w += varint_put(out + w, (uint64_t)member << 3 | WIRE_LEN);
    w += varint_put(out + w, run_bytes);
    for (size_t off = run_from; off < len;) {
        wire_field_t fl;
        (void)wire_field_parse(data + off, len - off, &fl);
        if (frame_is_body_member(&fl)) {
            memcpy(out + w, fl.payload, fl.payload_len);
            w += fl.payload_len;
        }
        off += fl.total_len;
    }
    *merged = out;
    *merged_len = w;
    return 1;
}

int proto_frame_unpack(const uint8_t *data, size_t len, Herald__Frame **out)
{
    if (len > MESSAGE_MAX_BYTES)
        return PROTO_ERR_UNDECODABLE;
    uint8_t *merged = NULL;
    size_t merged_len = 0;
    int mrc = frame_merge_body(data, len, &merged, &merged_len);
    if (mrc < 0)
        return mrc;
    if (mrc == 1) {
        int rc = proto_frame_unpack(merged, merged_len, out);
        free(merged);
        return rc;
    }
    size_t need = 0;
    int rc = frame_walk_message(&herald__frame__descriptor, data, len, 0, &need);
    if (rc < 0)
        return rc;
    /* The walk's total is at most ~72 bytes per wire byte for anything herald.proto can
     * express (see the file comment); the cap turns that analysis into a guarantee. */
    size_t cap_bytes = (size_t)PROTO_DECODE_MEM_FACTOR * len + PROTO_DECODE_MEM_SLACK;
    if (ARENA_HDR_BYTES + need > cap_bytes)
        return PROTO_ERR_UNDECODABLE;
    frame_arena_t *a = arena_new(need, cap_bytes);
    if (a == NULL)
        return -ENOMEM;
    Herald__Frame *f = herald__frame__unpack(&a->allocator, len, data);
    if (f == NULL) {
        rc = a->is_oom ? -ENOMEM : PROTO_ERR_UNDECODABLE;
        arena_destroy(a);
        return rc;
    }
    /* protobuf-c allocates the top message first; proto_frame_free relies on it. */
    NL_ASSERT((char *)f == (char *)a + ARENA_HDR_BYTES);
    *out = f;
    return 0;
}

/* Reads the length prefix. Returns 1 with *len and *prefix_len set, 0 when more bytes are
 * needed, or PROTO_ERR_TOO_LARGE / PROTO_ERR_BAD_VARINT as soon as the bytes prove it. */
static int frame_read_prefix(const uint8_t *p, size_t avail, size_t max_frame_bytes, size_t *len,
                             size_t *prefix_len)
{
    uint64_t v = 0;
    for (size_t i = 0; i < PROTO_VARINT_MAX_BYTES; i++) {
        if (i == avail)
            return 0;
        uint64_t bits = p[i] & 0x7fu;
        /* Bits from 2^32 up come from the fifth byte's top three bits and later bytes. */
        if ((i == 4 && (bits >> 4) != 0) || (i > 4 && bits != 0))
            return PROTO_ERR_BAD_VARINT;
        v |= bits << (7 * i);
        /* Later bytes only add higher bits: the value so far is a lower bound. */
        if (v > max_frame_bytes)
            return PROTO_ERR_TOO_LARGE;
        if ((p[i] & 0x80) == 0) {
            *len = (size_t)v;
            *prefix_len = i + 1;
            return 1;
        }
    }
    return PROTO_ERR_BAD_VARINT;
}

int proto_frame_peek(const nl_buf_t *in, size_t max_frame_bytes, Herald__Frame **out,
                     size_t *frame_bytes)
{
    size_t avail = nl_buf_readable(in);
    if (avail == 0)
        return 0;
    const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
    size_t len;
    size_t prefix_len;
    int rc = frame_read_prefix(p, avail, max_frame_bytes, &len, &prefix_len);
    if (rc <= 0)
        return rc;
    if (avail - prefix_len < len)
        return 0;
    Herald__Frame *f;
    rc = proto_frame_unpack(p + prefix_len, len, &f);
    if (rc < 0)
        return rc;
    *out = f;
    *frame_bytes = prefix_len + len;
    return 1;
}

int proto_frame_decode(nl_buf_t *in, size_t max_frame_bytes, Herald__Frame **out)
{
    size_t n = 0;
    int rc = proto_frame_peek(in, max_frame_bytes, out, &n);
    if (rc == 1)
        nl_buf_retrieve(in, n);
    return rc;
}

uint64_t proto_frame_peek_id(const nl_buf_t *in, size_t max_frame_bytes)
{
    size_t avail = nl_buf_readable(in);
    const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
    size_t len;
    size_t prefix_len;
    if (avail == 0 || frame_read_prefix(p, avail, max_frame_bytes, &len, &prefix_len) != 1 ||
        avail - prefix_len < len)
        return 0;
    /* Runtimes write fields in number order, so Frame.id (field 1, varint: key 0x08) comes
     * first when it is set at all. */
    const uint8_t *body = p + prefix_len;
    uint64_t id = 0;
    if (len < 2 || body[0] != 0x08 ||
        varint_get(body + 1, len - 1, PROTO_VARINT_MAX_BYTES, &id) == 0)
        return 0;
    return id;
}

void proto_frame_free(Herald__Frame *f)
{
    if (f != NULL)
        arena_destroy(arena_of(f));
}

size_t proto_frame_mem_bytes(const Herald__Frame *f)
{
    return arena_of(f)->held_bytes;
}

/* ---- encode ---------------------------------------------------------------------------- */

size_t proto_frame_encoded_size(const Herald__Frame *f)
{
    size_t body = protobuf_c_message_get_packed_size(&f->base);
    return varint_size(body) + body;
}

/* Writes the prefix and the message at dst, which has room for the encoded size. */
static void frame_pack(const Herald__Frame *f, size_t body, uint8_t *dst)
{
    size_t prefix_len = varint_put(dst, body);
    size_t packed = protobuf_c_message_pack(&f->base, dst + prefix_len);
    NL_ASSERT(packed == body);
}

int proto_frame_append(nl_buf_t *out, const Herald__Frame *f)
{
    size_t body = protobuf_c_message_get_packed_size(&f->base);
    if (body > UINT32_MAX)
        return -EMSGSIZE;
    size_t total = varint_size(body) + body;
    int rc = nl_buf_ensure_writable(out, total);
    if (rc < 0)
        return rc;
    frame_pack(f, body, (uint8_t *)nl_buf_begin_write(out));
    nl_buf_has_written(out, total);
    return 0;
}

int proto_frame_append_prefixed(nl_buf_t *out, const Herald__Frame *f, proto_prefix_cb prefix)
{
    if (!prefix)
        return proto_frame_append(out, f);
    size_t body = protobuf_c_message_get_packed_size(&f->base);
    if (body > UINT32_MAX)
        return -EMSGSIZE;
    uint8_t head[PROTO_PREFIX_MAX];
    size_t head_len = prefix(head, body);
    int rc = nl_buf_ensure_writable(out, head_len + body);
    if (rc < 0)
        return rc;
    uint8_t *dst = (uint8_t *)nl_buf_begin_write(out);
    memcpy(dst, head, head_len);
    size_t packed = protobuf_c_message_pack(&f->base, dst + head_len);
    NL_ASSERT(packed == body);
    nl_buf_has_written(out, head_len + body);
    return 0;
}

nl_block_t *proto_frame_block(const Herald__Frame *f)
{
    size_t body = protobuf_c_message_get_packed_size(&f->base);
    if (body > UINT32_MAX)
        return NULL;
    nl_block_t *b = nl_block_new(varint_size(body) + body);
    if (b == NULL)
        return NULL;
    frame_pack(f, body, nl_block_data(b));
    return b;
}

nl_block_t *proto_push_block(const Herald__Push *push)
{
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_PUSH;
    /* The union member is not const-qualified; packing only reads through it. */
    f.push = (Herald__Push *)(uintptr_t)push;
    return proto_frame_block(&f);
}

/* ---- epochs ---------------------------------------------------------------------------- */

/* Called twice per publish (the Push and the PublishOk); snprintf's format parsing was 1% of
 * a seed run's loop (perf), so the digits are written directly. */
void proto_epoch_str(uint64_t epoch, char out[17])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, epoch >>= 4)
        out[i] = digits[epoch & 0xf];
    out[16] = '\0';
}

int proto_epoch_parse(const char *text, uint64_t *epoch)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = text[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return -EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    if (text[16] != '\0')
        return -EINVAL;
    *epoch = v;
    return 0;
}

/* ---- names ----------------------------------------------------------------------------- */

const char *proto_err_str(int err)
{
    switch (err) {
    case PROTO_ERR_TOO_LARGE:
        return "PROTO_ERR_TOO_LARGE";
    case PROTO_ERR_BAD_VARINT:
        return "PROTO_ERR_BAD_VARINT";
    case PROTO_ERR_UNDECODABLE:
        return "PROTO_ERR_UNDECODABLE";
    default:
        return nl_strerror(err);
    }
}

const char *proto_body_name(Herald__Frame__BodyCase body)
{
    switch (body) {
    case HERALD__FRAME__BODY__NOT_SET:
        return "none";
    case HERALD__FRAME__BODY_CONNECT:
        return "connect";
    case HERALD__FRAME__BODY_CONNECT_OK:
        return "connect_ok";
    case HERALD__FRAME__BODY_SUBSCRIBE:
        return "subscribe";
    case HERALD__FRAME__BODY_SUBSCRIBE_OK:
        return "subscribe_ok";
    case HERALD__FRAME__BODY_UNSUBSCRIBE:
        return "unsubscribe";
    case HERALD__FRAME__BODY_UNSUBSCRIBE_OK:
        return "unsubscribe_ok";
    case HERALD__FRAME__BODY_PUBLISH:
        return "publish";
    case HERALD__FRAME__BODY_PUBLISH_OK:
        return "publish_ok";
    case HERALD__FRAME__BODY_PUSH:
        return "push";
    case HERALD__FRAME__BODY_PING:
        return "ping";
    case HERALD__FRAME__BODY_PONG:
        return "pong";
    case HERALD__FRAME__BODY_PRESENCE_REQUEST:
        return "presence_request";
    case HERALD__FRAME__BODY_PRESENCE_RESPONSE:
        return "presence_response";
    case HERALD__FRAME__BODY_ERROR:
        return "error";
    case HERALD__FRAME__BODY_DISCONNECT:
        return "disconnect";
    case HERALD__FRAME__BODY_PRESENCE_EVENT:
        return "presence_event";
    default:
        return "unknown";
    }
}
