// herald.Frame to and from bytes with protobufjs, straight from proto/herald.proto (not the JS
// client's generated schema: these tests check herald against the schema itself). The varint
// framing of the TCP stream is here too, for the TLS tests on the TCP listener.
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { repoRoot } from './herald.js';

const root = protobuf.loadSync(join(repoRoot, 'proto', 'herald.proto'));
export const Frame = root.lookupType('herald.Frame');
export const ErrorCode = root.lookupEnum('herald.Error.Code').values;
export const DisconnectCode = root.lookupEnum('herald.Disconnect.Code').values;

/** One serialized Frame (no prefix): encode(1, 'connect', {token}). */
export function encode(id, body, fields = {}) {
    const msg = { [body]: fields };
    if (id) msg.id = id;
    const err = Frame.verify(msg);
    if (err) throw new Error(`bad ${body} frame: ${err}`);
    return Buffer.from(Frame.encode(Frame.create(msg)).finish());
}

/** Decodes one serialized Frame: {id, body, [body]: fields}, numbers as numbers. */
export function decode(bytes) {
    const f = Frame.toObject(Frame.decode(bytes), {
        longs: Number,
        defaults: true,
        arrays: true,
        oneofs: true,
        enums: Number,
    });
    if (!f.body) throw new Error('a Frame with no body');
    return f;
}

export function varint(n) {
    const out = [];
    while (n > 0x7f) {
        out.push((n & 0x7f) | 0x80);
        n = Math.floor(n / 128);
    }
    out.push(n);
    return Buffer.from(out);
}

/** A Frame with its varint length, as the TCP stream carries it. */
export function delimited(bytes) {
    return Buffer.concat([varint(bytes.length), bytes]);
}

/**
 * Splits a TCP stream into Frames: push(chunk) returns the frames complete so far, keeping a
 * partial one for the next chunk.
 */
export function delimitedReader() {
    let buf = Buffer.alloc(0);
    return {
        push(chunk) {
            buf = Buffer.concat([buf, chunk]);
            const frames = [];
            for (;;) {
                let len = 0;
                let shift = 0;
                let i = 0;
                for (; i < buf.length && i < 10; i++) {
                    len += (buf[i] & 0x7f) * 2 ** shift;
                    shift += 7;
                    if (!(buf[i] & 0x80)) break;
                }
                if (i >= buf.length || buf.length < i + 1 + len) break;
                frames.push(decode(buf.subarray(i + 1, i + 1 + len)));
                buf = buf.subarray(i + 1 + len);
            }
            return frames;
        },
    };
}
