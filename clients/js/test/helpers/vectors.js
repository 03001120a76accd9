// PROTOCOL.md section 10's annotated exchange, byte for byte (length prefix included): the
// frames a client sends, with the fields that make them, and the frames a server sends, with
// what they decode to.
import { ErrorCode, DisconnectCode } from '../../src/codec.js';

export const hex = (s) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
export const EPOCH = '5e1f3a9c0b7d2e48';

export const clientFrames = [
    [
        'Connect',
        1,
        'connect',
        { token: 'a.b.c', clientName: 'py', clientVersion: '1.0' },
        '14 08 01 12 10 0a 05 61 2e 62 2e 63 12 02 70 79 1a 03 31 2e 30',
    ],
    ['Subscribe', 2, 'subscribe', { channel: 'news' }, '0a 08 02 22 06 0a 04 6e 65 77 73'],
    [
        'Publish',
        3,
        'publish',
        { channel: 'news', payload: Buffer.from('hi') },
        '0e 08 03 42 0a 0a 04 6e 65 77 73 12 02 68 69',
    ],
    ['Ping', 4, 'ping', {}, '04 08 04 5a 00'],
    [
        'Subscribe with recovery',
        5,
        'subscribe',
        { channel: 'chat:1', recover: true, offset: 40, epoch: EPOCH },
        '22 08 05 22 1e 0a 06 63 68 61 74 3a 31 10 01 18 28 22 10 35 65 31 66 33 61 39 63 30 62 37 64 32 65 34 38',
    ],
    [
        'Subscribe (defaults left off)',
        6,
        'subscribe',
        { channel: 'admin', recover: false, offset: 0, epoch: '', joinLeave: false },
        '0b 08 06 22 07 0a 05 61 64 6d 69 6e',
    ],
];

export const serverFrames = [
    [
        'ConnectOk',
        '1e 08 01 1a 1a 0a 04 6e 31 2d 37 12 02 6e 31 18 a8 c3 01 20 e0 d4 03 2a 02 34 32 30 80 80 04',
        {
            id: 1,
            body: 'connectOk',
            connectOk: {
                clientId: 'n1-7',
                nodeId: 'n1',
                pingIntervalMs: 25000,
                idleTimeoutMs: 60000,
                userId: '42',
                maxFrameBytes: 65536,
            },
        },
    ],
    [
        'SubscribeOk',
        '1a 08 02 2a 16 18 11 22 10 35 65 31 66 33 61 39 63 30 62 37 64 32 65 34 38 28 01',
        {
            id: 2,
            body: 'subscribeOk',
            subscribeOk: {
                recovered: false,
                publications: [],
                offset: 17,
                epoch: EPOCH,
                recoverable: true,
            },
        },
    ],
    [
        'PublishOk',
        '18 08 03 4a 14 08 12 12 10 35 65 31 66 33 61 39 63 30 62 37 64 32 65 34 38',
        { id: 3, body: 'publishOk', publishOk: { offset: 18, epoch: EPOCH, duplicate: false } },
    ],
    [
        'Push',
        '27 52 25 0a 04 6e 65 77 73 10 12 1a 10 35 65 31 66 33 61 39 63 30 62 37 64 32 65 34 38 22 02 68 69 28 80 da a0 fe c1 32',
        {
            id: 0,
            body: 'push',
            push: {
                channel: 'news',
                offset: 18,
                epoch: EPOCH,
                payload: Buffer.from('hi'),
                publishTimeMs: 1735700000000,
            },
        },
    ],
    ['Pong', '04 08 04 62 00', { id: 4, body: 'pong', pong: {} }],
    [
        'SubscribeOk recovered',
        '1c 08 05 2a 18 08 01 18 28 22 10 35 65 31 66 33 61 39 63 30 62 37 64 32 65 34 38 28 01',
        {
            id: 5,
            body: 'subscribeOk',
            subscribeOk: {
                recovered: true,
                publications: [],
                offset: 40,
                epoch: EPOCH,
                recoverable: true,
            },
        },
    ],
    [
        'Error',
        '0a 08 06 7a 06 08 04 12 02 6e 6f',
        { id: 6, body: 'error', error: { code: ErrorCode.FORBIDDEN, text: 'no', retryAfterMs: 0 } },
    ],
    [
        'Disconnect',
        '0a 82 01 07 08 05 18 01 20 d0 0f',
        {
            id: 0,
            body: 'disconnect',
            disconnect: {
                code: DisconnectCode.SHUTDOWN,
                reason: '',
                reconnect: true,
                reconnectDelayMs: 2000,
            },
        },
    ],
];
