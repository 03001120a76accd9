/*
 * gw_redis_schema: key names, the envelope and the function library. See gw_redis_schema.h.
 *
 * The functions run inside Redis, so a publish's offset, its place in the stream and its
 * PUBLISH happen in one atomic step on the channel's server: two nodes publishing at once get
 * consecutive offsets and every subscriber sees the messages in offset order (one server, one
 * connection per subscriber). TIME is allowed in Redis 7 functions (effects are replicated).
 */
#include "gw_redis_schema.h"

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

/* GW_REDIS_META_TTL_MS as a string literal, for the Lua below. */
#define META_TTL_MS STR(GW_REDIS_META_TTL_MS)

const char gw_redis_functions[] =
    "#!lua name=herald\n"
    "local function new_epoch(candidate, old)\n"
    "  if candidate and #candidate == 16 and candidate ~= old then return candidate end\n"
    "  local t = redis.call('TIME')\n"
    "  local e = string.format('%08x%08x', tonumber(t[1]) % 4294967296,\n"
    "                          (tonumber(t[2]) * 4099) % 4294967296)\n"
    "  if e == old then e = string.format('%016x', (tonumber(t[2]) + 7) * 65537) end\n"
    "  return e\n"
    "end\n"
    /* A channel without an epoch starts one; a stream left from before (it may outlive the
     * hash) belongs to no epoch any more and goes, or its higher ids would refuse XADD. */
    "local function epoch_of(meta, hist, candidate)\n"
    "  local e = redis.call('HGET', meta, 'e')\n"
    "  if e then return e end\n"
    "  e = new_epoch(candidate, nil)\n"
    "  redis.call('HSET', meta, 'e', e)\n"
    "  if hist then redis.call('DEL', hist) end\n"
    "  return e\n"
    "end\n"
    /* With a third key (an idempotency record), a publish whose record exists is answered
     * from it and not published again; a publish applied leaves its record for args[6] ms. */
    "redis.register_function('herald_publish', function(keys, args)\n"
    "  local meta, hist, idem = keys[1], keys[2], keys[3]\n"
    "  local chan, payload = args[1], args[2]\n"
    "  local keep = tonumber(args[3] or '0') or 0\n"
    "  local age_ms = tonumber(args[4] or '0') or 0\n"
    "  local window = tonumber(args[6] or '0') or 0\n"
    "  if idem then\n"
    "    local seen = redis.call('GET', idem)\n"
    "    if seen then\n"
    "      local o, se, st = string.match(seen, '^(%d+) (%x+) (%d+)$')\n"
    "      if o then return {tonumber(o), se, tonumber(st), 1} end\n"
    "    end\n"
    "  end\n"
    "  local e = epoch_of(meta, hist, args[5])\n"
    "  local off = redis.call('HINCRBY', meta, 'o', 1)\n"
    "  local t = redis.call('TIME')\n"
    "  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "  if keep > 0 then\n"
    "    redis.call('XADD', hist, 'MAXLEN', '~', keep, off .. '-0', 'p', payload, 't', ms)\n"
    "    if age_ms > 0 then redis.call('PEXPIRE', hist, age_ms)\n"
    "    else redis.call('PEXPIRE', hist, " META_TTL_MS ") end\n"
    "  end\n"
    "  redis.call('PEXPIRE', meta, " META_TTL_MS ")\n"
    "  redis.call('PUBLISH', '" GW_REDIS_PREFIX "' .. chan,\n"
    "             '\\0H1 ' .. off .. ' ' .. e .. ' ' .. ms .. '\\n' .. payload)\n"
    "  if idem and window > 0 then\n"
    "    redis.call('SET', idem, off .. ' ' .. e .. ' ' .. ms, 'PX', window)\n"
    "  end\n"
    "  return {off, e, ms, 0}\n"
    "end)\n"
    "redis.register_function('herald_join', function(keys, args)\n"
    "  local meta = keys[1]\n"
    "  local e = epoch_of(meta, keys[2], args[1])\n"
    "  redis.call('PEXPIRE', meta, " META_TTL_MS ")\n"
    "  return {tonumber(redis.call('HGET', meta, 'o') or '0'), e}\n"
    "end)\n"
    "redis.register_function('herald_refresh', function(keys, args)\n"
    "  local nf = tonumber(args[1])\n"
    "  local ttl = args[nf + 2]\n"
    "  local at = nf + 2\n"
    "  for _, key in ipairs(keys) do\n"
    "    local hset = {key}\n"
    "    for f = 1, nf do\n"
    "      hset[2 * f] = args[1 + f]\n"
    "      hset[2 * f + 1] = args[at + f]\n"
    "    end\n"
    "    redis.call('HSET', unpack(hset))\n"
    "    redis.call('PEXPIRE', key, ttl)\n"
    "    at = at + nf\n"
    "  end\n"
    "  return #keys\n"
    "end)\n"
    /* After a failover or a restart from disk, Redis may hold less of a channel than a node
     * delivered (replication is asynchronous). The channel then starts a new epoch at offset
     * 0 with an empty stream, so that no offset of the old epoch is given out twice. */
    "redis.register_function('herald_fence', function(keys, args)\n"
    "  local out = {}\n"
    "  for i = 1, #keys / 2 do\n"
    "    local meta, hist = keys[2 * i - 1], keys[2 * i]\n"
    "    local seen_e, seen_o = args[3 * i - 1], tonumber(args[3 * i]) or 0\n"
    "    local e = redis.call('HGET', meta, 'e')\n"
    "    local o = tonumber(redis.call('HGET', meta, 'o') or '0')\n"
    "    out[i] = 0\n"
    "    if e and e == seen_e and o < seen_o then\n"
    "      redis.call('HSET', meta, 'e', new_epoch(args[3 * i - 2], e), 'o', 0)\n"
    "      redis.call('DEL', hist)\n"
    "      redis.call('PEXPIRE', meta, " META_TTL_MS ")\n"
    "      out[i] = 1\n"
    "    end\n"
    "  end\n"
    "  return out\n"
    "end)\n";

/* Reads a decimal number ending at stop; advances *p past stop. */
static bool read_uint(const char **p, const char *end, char stop, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;
    if (s == end || *s < '0' || *s > '9')
        return false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (s == end || *s != stop)
        return false;
    *p = s + 1;
    *out = v;
    return true;
}

static bool read_epoch(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (end - s < 17 || s[16] != ' ')
        return false;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *p = s + 17;
    *out = v;
    return true;
}

void gw_redis_msg_parse(const char *data, size_t len, gw_redis_msg_t *out)
{
    memset(out, 0, sizeof(*out));
    out->payload = data;
    out->len = len;
    static const char magic[] = {'\0', 'H', '1', ' '};
    if (len < sizeof(magic) || memcmp(data, magic, sizeof(magic)) != 0)
        return;
    const char *p = data + sizeof(magic);
    const char *end = data + len;
    gw_redis_msg_t m = {.is_sequenced = true};
    if (!read_uint(&p, end, ' ', &m.offset) || m.offset == 0 || !read_epoch(&p, end, &m.epoch) ||
        !read_uint(&p, end, '\n', &m.time_ms))
        return;
    m.payload = p;
    m.len = (size_t)(end - p);
    *out = m;
}

int gw_redis_key(char *out, size_t cap, const char *prefix, const char *name, size_t len)
{
    size_t plen = strlen(prefix);
    if (plen + len + 1 > cap)
        return -1;
    memcpy(out, prefix, plen);
    memcpy(out + plen, name, len);
    out[plen + len] = '\0';
    return (int)(plen + len);
}

const char *gw_redis_channel_of(const char *pubsub, size_t len, size_t *chan_len)
{
    size_t plen = sizeof(GW_REDIS_PREFIX) - 1;
    if (len <= plen || memcmp(pubsub, GW_REDIS_PREFIX, plen) != 0)
        return NULL;
    *chan_len = len - plen;
    return pubsub + plen;
}
