// Varint length framing, as herald's TCP transport carries frames: a base-128 varint of the
// Frame's size, then the Frame (PROTOCOL.md section 1). The WebSocket transport needs none of
// this: there each binary message is exactly one Frame.

/** Frames from the server may be larger than max_frame_bytes; PROTOCOL.md says accept 16 MiB. */
export const DEFAULT_MAX_INCOMING_FRAME_BYTES = 16 * 1024 * 1024;

/** A length prefix has at most 5 bytes: the length must fit in 32 bits. */
const MAX_PREFIX_BYTES = 5;

/** Returns the varint encoding of n (0 <= n < 2^32) as a Uint8Array. */
export function encodeVarint(n) {
    if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new RangeError(`bad varint ${n}`);
    const out = [];
    while (n >= 0x80) {
        out.push((n % 0x80) | 0x80);
        n = Math.floor(n / 0x80);
    }
    out.push(n);
    return Uint8Array.from(out);
}

/** Returns prefix + frame in one buffer, so that a frame leaves in a single write. */
export function delimit(frame) {
    const prefix = encodeVarint(frame.length);
    const out = new Uint8Array(prefix.length + frame.length);
    out.set(prefix, 0);
    out.set(frame, prefix.length);
    return out;
}

/** A framing error: the stream cannot be read on, the connection must close. */
export class FramingError extends Error {
    constructor(message) {
        super(message);
        this.name = 'FramingError';
    }
}

/**
 * Reassembles frames from a byte stream that arrives in arbitrary chunks: push() each chunk,
 * get back the complete frames it finished (each a Uint8Array view of one Frame, no prefix).
 * A prefix over 5 bytes, over 32 bits or over maxFrameBytes throws a FramingError as soon as
 * the prefix shows it, before any body byte is buffered.
 */
export class FrameDecoder {
    constructor({ maxFrameBytes = DEFAULT_MAX_INCOMING_FRAME_BYTES } = {}) {
        this.maxFrameBytes = maxFrameBytes;
        // Unread bytes as the chunks they came in: a large frame in many chunks is copied once,
        // when it is complete, rather than once per chunk.
        this.chunks = [];
        this.size = 0;
        this.need = -1; // body length of the frame being read, -1 while reading its prefix
    }

    /** Number of bytes buffered but not yet handed out as frames. */
    get buffered() {
        return this.size;
    }

    push(chunk) {
        if (chunk.length > 0) {
            this.chunks.push(chunk);
            this.size += chunk.length;
        }
        const frames = [];
        for (;;) {
            if (this.need < 0) {
                const r = this.readPrefix();
                if (r === null) break;
                this.take(r.prefixBytes);
                this.need = r.length;
            }
            if (this.size < this.need) break;
            frames.push(this.take(this.need));
            this.need = -1;
        }
        return frames;
    }

    // Removes and returns the first n buffered bytes as a fresh Uint8Array. A copy, not a view:
    // the caller may keep a frame (a Push payload) for long, and a view would pin its chunk.
    take(n) {
        const out = new Uint8Array(n);
        let filled = 0;
        while (filled < n) {
            const c = this.chunks[0];
            const k = Math.min(c.length, n - filled);
            out.set(k === c.length ? c : c.subarray(0, k), filled);
            filled += k;
            if (k === c.length) this.chunks.shift();
            else this.chunks[0] = c.subarray(k);
        }
        this.size -= n;
        return out;
    }

    // Returns { length, prefixBytes } when a whole prefix is buffered, null when more bytes are
    // needed; throws a FramingError for a prefix no valid frame has.
    readPrefix() {
        let value = 0;
        let i = 0;
        for (const c of this.chunks) {
            for (let j = 0; j < c.length; j++, i++) {
                if (i === MAX_PREFIX_BYTES)
                    throw new FramingError('frame length prefix over 5 bytes');
                const b = c[j];
                value += (b & 0x7f) * 2 ** (7 * i);
                if ((b & 0x80) === 0) {
                    if (value > 0xffffffff) throw new FramingError('frame length over 32 bits');
                    if (value > this.maxFrameBytes) {
                        throw new FramingError(
                            `frame of ${value} bytes over ${this.maxFrameBytes}`,
                        );
                    }
                    return { length: value, prefixBytes: i + 1 };
                }
            }
        }
        if (i >= MAX_PREFIX_BYTES) throw new FramingError('frame length prefix over 5 bytes');
        return null;
    }
}
