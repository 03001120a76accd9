// The codec against the schema: PROTOCOL.md's annotated bytes, a round trip of every frame
// body, src/schema.js against proto/herald.proto, and Python's stock protobuf runtime reading
// what this client writes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import {
    encodeFrame,
    decodeFrame,
    ErrorCode,
    DisconnectCode,
    errorCodeName,
    disconnectCodeName,
    Frame,
} from '../src/codec.js';
import { delimit } from '../src/framing.js';
import { EPOCH, hex, clientFrames, serverFrames } from './helpers/vectors.js';
import { generateSchema, schemaPath, defaultProtoPath } from '../scripts/gen-schema.js';

const toHex = (b) => Buffer.from(b).toString('hex');
for (const [name, id, body, fields, bytes] of clientFrames) {
    test(`encode ${name} as PROTOCOL.md shows it`, () => {
        assert.equal(toHex(delimit(encodeFrame(id, body, fields))), toHex(hex(bytes)));
    });
}

for (const [name, bytes, want] of serverFrames) {
    test(`decode ${name} as PROTOCOL.md shows it`, () => {
        const b = hex(bytes);
        assert.equal(b[0], b.length - 1, 'one-byte prefix');
        const got = decodeFrame(b.subarray(1));
        const norm = (f) =>
            JSON.parse(JSON.stringify(f, (k, v) => (v && v.type === 'Buffer' ? toHex(v.data) : v)));
        assert.deepEqual(norm(got), norm(want));
        if (got.push) assert.ok(got.push.payload instanceof Uint8Array);
    });
}

// Every body with every field set to something other than its default.
const client = { userId: 'u1', clientId: 'n1-9', connectedAtMs: 1735700000123 };
const everyBody = {
    connect: { token: 'x.y.z', clientName: 'herald-js', clientVersion: '0.1.0' },
    connectOk: {
        clientId: 'c',
        nodeId: 'n',
        pingIntervalMs: 1,
        idleTimeoutMs: 2,
        userId: 'u',
        maxFrameBytes: 3,
    },
    subscribe: {
        channel: 'a:b',
        recover: true,
        offset: 2 ** 40 + 3,
        epoch: EPOCH,
        joinLeave: true,
    },
    subscribeOk: { recovered: true, offset: 2 ** 53 - 1, epoch: EPOCH, recoverable: true },
    unsubscribe: { channel: 'a' },
    unsubscribeOk: {},
    publish: { channel: 'a', payload: new Uint8Array([0, 255, 1]) },
    publishOk: { offset: 7, epoch: EPOCH },
    push: {
        channel: 'a',
        offset: 8,
        epoch: EPOCH,
        payload: new Uint8Array(300).fill(9),
        publishTimeMs: 1735700000000,
    },
    ping: {},
    pong: {},
    presenceRequest: { channel: 'p' },
    presenceResponse: {
        channel: 'p',
        clients: [client, { ...client, userId: 'u2' }],
        numClients: 2,
        numUsers: 2,
        truncated: true,
    },
    error: { code: ErrorCode.RATE_LIMITED, text: 'slow down', retryAfterMs: 250 },
    disconnect: {
        code: DisconnectCode.TOKEN_EXPIRED,
        reason: 'exp',
        reconnect: true,
        reconnectDelayMs: 1000,
    },
    presenceEvent: { channel: 'p', joined: [client], left: [{ ...client, clientId: 'n2-1' }] },
};

test('every Frame body is covered by the round trip', () => {
    assert.deepEqual(Object.keys(everyBody).sort(), [...Frame.oneofs.body.oneof].sort());
});

for (const [body, fields] of Object.entries(everyBody)) {
    test(`round trip ${body}`, () => {
        const got = decodeFrame(encodeFrame(2 ** 33 + 1, body, fields));
        assert.equal(got.id, 2 ** 33 + 1);
        assert.equal(got.body, body);
        for (const [k, v] of Object.entries(fields)) {
            const g = got[body][k];
            if (v instanceof Uint8Array) assert.deepEqual([...g], [...v], k);
            else assert.deepEqual(g, v, k);
        }
    });
}

test('src/schema.js is what scripts/gen-schema.js makes of proto/herald.proto', () => {
    assert.equal(
        readFileSync(schemaPath, 'utf8'),
        generateSchema(defaultProtoPath),
        'run npm run gen-schema',
    );
});

test('the generated schema encodes exactly as the .proto parsed directly does', () => {
    const direct = protobuf.loadSync(defaultProtoPath).lookupType('herald.Frame');
    for (const [body, fields] of Object.entries(everyBody)) {
        const ours = encodeFrame(5, body, fields);
        const theirs = direct.encode(direct.fromObject({ id: 5, [body]: fields })).finish();
        assert.equal(toHex(ours), toHex(theirs), body);
    }
});

test('a frame with no body, or undecodable bytes, is refused', () => {
    assert.throws(() => decodeFrame(hex('0801')), /without a body/);
    assert.throws(() => decodeFrame(hex('12 10 0a')), RangeError); // truncated field
    assert.throws(() => encodeFrame(1, 'nonsense', {}), TypeError);
});

test('code names, and names for codes from a newer server', () => {
    assert.equal(errorCodeName(ErrorCode.BUSY), 'BUSY');
    assert.equal(errorCodeName(99), 'UNKNOWN_99');
    assert.equal(disconnectCodeName(DisconnectCode.SHUTDOWN), 'SHUTDOWN');
    assert.equal(disconnectCodeName(42), 'UNKNOWN_42');
    const f = decodeFrame(encodeFrame(0, 'disconnect', { code: 42, reconnect: true }));
    assert.equal(f.disconnect.code, 42);
});

// Python's stock protobuf runtime (Debian's python3-protobuf, code from Debian's protoc)
// parses each frame this client writes and serializes it again: same bytes, same fields.
test('interop: Python protobuf reads every frame this client writes', () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-js-pb2-'));
    try {
        execFileSync('protoc', [
            `--python_out=${dir}`,
            `--proto_path=${join(defaultProtoPath, '..')}`,
            defaultProtoPath,
        ]);
        const script = [
            'import sys',
            `sys.path.insert(0, ${JSON.stringify(dir)})`,
            'import herald_pb2',
            'from google.protobuf import json_format',
            'for line in sys.stdin:',
            '    f = herald_pb2.Frame.FromString(bytes.fromhex(line.strip()))',
            '    print(f.SerializeToString().hex(), f.WhichOneof("body"),',
            '          json_format.MessageToJson(f, indent=None, preserving_proto_field_name=False))',
        ].join('\n');
        const frames = Object.entries(everyBody).map(([body, fields]) => [
            body,
            encodeFrame(77, body, fields),
        ]);
        const r = spawnSync('/usr/bin/python3', ['-c', script], {
            input: frames.map(([, b]) => toHex(b)).join('\n') + '\n',
            encoding: 'utf8',
        });
        assert.equal(r.status, 0, r.stderr);
        const lines = r.stdout.trim().split('\n');
        assert.equal(lines.length, frames.length);
        lines.forEach((line, i) => {
            const [bytes, body, ...json] = line.split(' ');
            const [name, ours] = frames[i];
            assert.equal(
                body.replace(/_(.)/g, (_, c) => c.toUpperCase()),
                name,
            );
            assert.equal(bytes, toHex(ours), `${name}: Python re-serializes the same bytes`);
            const parsed = JSON.parse(json.join(' '));
            assert.equal(Number(parsed.id), 77);
            const fields = everyBody[name];
            for (const [k, v] of Object.entries(fields)) {
                const pv = parsed[name]?.[k];
                if (typeof v === 'string') assert.equal(pv, v, `${name}.${k}`);
                else if (typeof v === 'number' && !['code'].includes(k))
                    assert.equal(Number(pv), v, `${name}.${k}`);
                else if (typeof v === 'boolean') assert.equal(pv, v, `${name}.${k}`);
            }
        });
    } finally {
        rmSync(dir, { recursive: true, force: true });
    }
});
