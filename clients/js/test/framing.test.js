// Varint length framing (the TCP transport): the varint at each boundary, and frames
// reassembled from a stream cut anywhere.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeVarint, delimit, FrameDecoder, FramingError } from '../src/framing.js';
import { decodeFrame } from '../src/codec.js';
import { hex, serverFrames } from './helpers/vectors.js';

const toHex = (b) => Buffer.from(b).toString('hex');

// value, its varint bytes: one row per boundary.
const varints = [
    [0, '00'],
    [1, '01'],
    [127, '7f'],
    [128, '8001'],
    [300, 'ac02'],
    [16383, 'ff7f'],
    [16384, '808001'],
    [2 ** 21 - 1, 'ffff7f'],
    [2 ** 21, '80808001'],
    [2 ** 28 - 1, 'ffffff7f'],
    [2 ** 28, '8080808001'],
    [2 ** 32 - 1, 'ffffffff0f'],
];

for (const [n, bytes] of varints) {
    test(`varint ${n} encodes as ${bytes} and decodes back`, () => {
        assert.equal(toHex(encodeVarint(n)), bytes);
        const d = new FrameDecoder({ maxFrameBytes: 2 ** 32 - 1 });
        assert.deepEqual(d.push(Buffer.from(bytes, 'hex')), n === 0 ? [new Uint8Array(0)] : []);
        assert.equal(d.need, n === 0 ? -1 : n);
    });
}

test('varint encoding refuses what no length can be', () => {
    for (const bad of [-1, 2 ** 32, 1.5, NaN]) assert.throws(() => encodeVarint(bad), RangeError);
});

// PROTOCOL.md's server frames, prefix included, back to back, plus an empty frame and one
// whose prefix takes two bytes.
const big = delimit(new Uint8Array(200).fill(0x41));
const stream = Buffer.concat([
    ...serverFrames.map(([, bytes]) => hex(bytes)),
    Buffer.from([0]),
    big,
]);
const expected = [
    ...serverFrames.map(([, bytes]) => toHex(hex(bytes).subarray(1))),
    '',
    toHex(big.subarray(2)),
];

test('a stream split at every single byte gives the same frames', () => {
    const d = new FrameDecoder();
    const out = [];
    for (const b of stream) out.push(...d.push(Uint8Array.of(b)));
    assert.deepEqual(out.map(toHex), expected);
    assert.equal(d.buffered, 0);
});

test('a stream split in two at every position gives the same frames', () => {
    for (let cut = 0; cut <= stream.length; cut++) {
        const d = new FrameDecoder();
        const out = [...d.push(stream.subarray(0, cut)), ...d.push(stream.subarray(cut))];
        assert.deepEqual(out.map(toHex), expected, `cut at ${cut}`);
    }
});

test('the whole stream in one chunk gives every frame, and each decodes', () => {
    const d = new FrameDecoder();
    const out = d.push(stream);
    assert.deepEqual(out.map(toHex), expected);
    for (const f of out.slice(0, serverFrames.length)) assert.ok(decodeFrame(f).body);
});

test('frames are copies: they stay intact when the chunk they came in is reused', () => {
    const chunk = Buffer.from(delimit(Uint8Array.of(1, 2, 3)));
    const [frame] = new FrameDecoder().push(chunk);
    chunk.fill(0);
    assert.deepEqual([...frame], [1, 2, 3]);
});

test('a large frame in many chunks', () => {
    const body = new Uint8Array(1 << 20).map((_, i) => i & 0xff);
    const all = delimit(body);
    const d = new FrameDecoder();
    const out = [];
    for (let i = 0; i < all.length; i += 1000) out.push(...d.push(all.subarray(i, i + 1000)));
    assert.equal(out.length, 1);
    assert.deepEqual(out[0], body);
});

// prefix bytes, what the decoder says: refused as soon as the prefix shows it.
const badPrefixes = [
    ['over the frame limit', '8180 04', /over 65536/, 65536],
    ['over 32 bits', 'ffffffff1f', /over 32 bits/],
    ['longer than 5 bytes', '808080808001', /over 5 bytes/],
    ['6 continuation bytes, no end yet', '8080808080 80', /over 5 bytes/],
];

for (const [name, bytes, re, max] of badPrefixes) {
    test(`a length prefix ${name} is refused`, () => {
        const d = new FrameDecoder(max ? { maxFrameBytes: max } : {});
        assert.throws(
            () => d.push(Buffer.from(bytes.replace(/ /g, ''), 'hex')),
            (err) => err instanceof FramingError && re.test(err.message),
        );
    });
}

test('the default limit is 16 MiB, as PROTOCOL.md asks clients to accept', () => {
    const d = new FrameDecoder();
    assert.deepEqual(d.push(encodeVarint(16 * 1024 * 1024)), []);
    assert.throws(() => new FrameDecoder().push(encodeVarint(16 * 1024 * 1024 + 1)), FramingError);
});
