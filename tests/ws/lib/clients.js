// Clients for the tests, each collecting what it receives in an awaitable inbox:
// - wsClient: Node's `ws` package, the independent WebSocket implementation;
// - RawWs: a WebSocket client on a raw socket (node:net or node:tls), for what `ws` will not
//   send (unmasked frames, reserved bits and opcodes, hand-made fragments, odd upgrade
//   requests, pipelined bytes, a reader that stops reading);
// - streamClient: herald's varint-framed TCP protocol over node:net or node:tls.
import net from 'node:net';
import tls from 'node:tls';
import crypto from 'node:crypto';
import WebSocket from 'ws';
import { decode, delimited, delimitedReader, encode, Frame } from './frames.js';

/**
 * What a connection received, in order: push(item) from the socket side; next(pred) awaits
 * and removes the first item pred accepts (items before it stay).
 */
export class Inbox {
    constructor(what) {
        this.what = what;
        this.items = [];
        this.waiters = [];
    }

    push(item) {
        this.items.push(item);
        for (const w of [...this.waiters]) {
            const i = this.items.findIndex(w.pred);
            if (i >= 0) {
                this.waiters.splice(this.waiters.indexOf(w), 1);
                clearTimeout(w.timer);
                w.resolve(this.items.splice(i, 1)[0]);
            }
        }
    }

    next(pred = () => true, timeoutMs = 10000) {
        const i = this.items.findIndex(pred);
        if (i >= 0) return Promise.resolve(this.items.splice(i, 1)[0]);
        return new Promise((resolve, reject) => {
            const w = { pred, resolve };
            w.timer = setTimeout(() => {
                this.waiters.splice(this.waiters.indexOf(w), 1);
                reject(
                    new Error(
                        `${this.what}: nothing matching within ${timeoutMs} ms; got ` +
                            JSON.stringify(this.items.map(brief)),
                    ),
                );
            }, timeoutMs);
            this.waiters.push(w);
        });
    }
}

function brief(item) {
    if (item && item.body) return { id: item.id, body: item.body };
    return item;
}

/** A predicate for a herald Frame with this body (and id, when given). */
export function frameOf(body, id) {
    return (x) => x && x.body === body && (id === undefined || x.id === id);
}

/**
 * A `ws` client on ws(s)://127.0.0.1:port/connection. Resolves once open with
 * {ws, inbox, closed, upgrade, send(id, body, fields), request(...)}; rejects on an
 * unexpected HTTP answer (the error carries statusCode and headers).
 */
export function wsClient(
    port,
    { protocols = ['herald.v1'], path = '/connection', tls: t = null, headers = {}, scheme } = {},
) {
    const url = `${scheme || (t ? 'wss' : 'ws')}://127.0.0.1:${port}${path}`;
    const opts = { headers, ...(t || {}) };
    const ws = protocols === null ? new WebSocket(url, opts) : new WebSocket(url, protocols, opts);
    const inbox = new Inbox(`ws client ${port}`);
    let upgrade = null;
    ws.binaryType = 'nodebuffer';
    ws.on('upgrade', (res) => (upgrade = { statusCode: res.statusCode, headers: res.headers }));
    ws.on('message', (data, isBinary) =>
        inbox.push(isBinary ? decode(data) : { text: data.toString() }),
    );
    ws.on('ping', (data) => inbox.push({ ping: Buffer.from(data) }));
    ws.on('pong', (data) => inbox.push({ pong: Buffer.from(data) }));
    const closed = new Promise((resolve) =>
        ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
    return new Promise((resolve, reject) => {
        ws.once('unexpected-response', (req, res) => {
            const err = new Error(`HTTP ${res.statusCode}`);
            err.statusCode = res.statusCode;
            err.headers = res.headers;
            req.destroy();
            reject(err);
        });
        ws.once('error', reject);
        ws.once('open', () => {
            ws.off('error', reject);
            ws.on('error', () => {}); // a close code the test provoked; `closed` reports it
            const c = {
                ws,
                inbox,
                closed,
                upgrade,
                send(id, body, fields) {
                    ws.send(encode(id, body, fields));
                },
                request(id, body, fields, reply) {
                    c.send(id, body, fields);
                    return inbox.next(
                        (x) => x.id === id && (!reply || x.body === reply || x.body === 'error'),
                    );
                },
            };
            resolve(c);
        });
    });
}

/**
 * One client WebSocket frame. mask: true (a random key), false (none: a protocol error from a
 * client), or a 4-byte Buffer.
 */
export function wsFrame({
    fin = true,
    rsv = 0,
    opcode = 2,
    mask = true,
    payload = Buffer.alloc(0),
    length,
}) {
    const len = length ?? payload.length;
    const head = [(fin ? 0x80 : 0) | (rsv << 4) | opcode];
    const m = mask ? 0x80 : 0;
    if (len < 126) {
        head.push(m | len);
    } else if (len <= 0xffff) {
        head.push(m | 126, len >> 8, len & 0xff);
    } else {
        head.push(m | 127);
        for (let i = 7; i >= 0; i--) head.push(Number((BigInt(len) >> BigInt(8 * i)) & 0xffn));
    }
    if (!mask) return Buffer.concat([Buffer.from(head), payload]);
    const key = Buffer.isBuffer(mask) ? mask : crypto.randomBytes(4);
    const body = Buffer.from(payload);
    for (let i = 0; i < body.length; i++) body[i] ^= key[i & 3];
    return Buffer.concat([Buffer.from(head), key, body]);
}

/** A close frame's payload: the code, then the reason. */
export function closePayload(code, reason = '') {
    const b = Buffer.alloc(2 + Buffer.byteLength(reason));
    b.writeUInt16BE(code, 0);
    b.write(reason, 2);
    return b;
}

/** An upgrade request for /connection (headers: overrides; a null value drops a header). */
export function upgradeRequest({ path = '/connection', headers = {} } = {}) {
    const h = {
        Host: '127.0.0.1',
        Upgrade: 'websocket',
        Connection: 'Upgrade',
        'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Protocol': 'herald.v1',
        ...headers,
    };
    let s = `GET ${path} HTTP/1.1\r\n`;
    for (const [k, v] of Object.entries(h)) if (v !== null) s += `${k}: ${v}\r\n`;
    return { text: s + '\r\n', key: h['Sec-WebSocket-Key'] };
}

/** The Sec-WebSocket-Accept RFC 6455 asks for the key. */
export function acceptFor(key) {
    return crypto
        .createHash('sha1')
        .update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11')
        .digest('base64');
}

/**
 * A WebSocket client on a raw socket. connect() writes the upgrade request (plus extra bytes in
 * the same write) and resolves with the HTTP answer {status, headers}; the frames herald sends
 * then land in inbox: a binary message as its decoded Frame, control frames as {close: {code,
 * reason}}, {pong: Buffer}, {ping: Buffer}, anything else as {frame: {...}}. ended resolves
 * when herald closes the socket.
 */
export class RawWs {
    constructor(port, { tls: t = null } = {}) {
        this.port = port;
        this.tlsOpts = t;
        this.inbox = new Inbox(`raw ws ${port}`);
        this.buf = Buffer.alloc(0);
        this.head = null;
        this.bytesIn = 0;
    }

    connect({ request = upgradeRequest(), extra = Buffer.alloc(0), expectHead = true } = {}) {
        const sock = this.tlsOpts
            ? tls.connect({ host: '127.0.0.1', port: this.port, ...this.tlsOpts })
            : net.connect({ host: '127.0.0.1', port: this.port });
        this.sock = sock;
        this.ended = new Promise((resolve) => sock.on('close', () => resolve()));
        sock.on('error', () => {}); // a reset is what some tests provoke; ended reports the end
        this.key = request.key;
        return new Promise((resolve, reject) => {
            sock.once(this.tlsOpts ? 'secureConnect' : 'connect', () => {
                sock.write(Buffer.concat([Buffer.from(request.text), extra]));
                if (!expectHead) resolve(null);
            });
            sock.on('data', (chunk) => {
                this.bytesIn += chunk.length;
                this.buf = Buffer.concat([this.buf, chunk]);
                if (!this.head) {
                    const end = this.buf.indexOf('\r\n\r\n');
                    if (end < 0) return;
                    this.head = parseHead(this.buf.subarray(0, end).toString('latin1'));
                    this.buf = this.buf.subarray(end + 4);
                    resolve(this.head);
                }
                this.parse();
            });
            sock.on('close', () => {
                if (!this.head) reject(new Error('closed before an HTTP answer'));
            });
        });
    }

    parse() {
        for (;;) {
            const b = this.buf;
            if (b.length < 2) return;
            let len = b[1] & 0x7f;
            let off = 2;
            if (len === 126) {
                if (b.length < 4) return;
                len = b.readUInt16BE(2);
                off = 4;
            } else if (len === 127) {
                if (b.length < 10) return;
                len = Number(b.readBigUInt64BE(2));
                off = 10;
            }
            const masked = (b[1] & 0x80) !== 0;
            if (masked) off += 4;
            if (b.length < off + len) return;
            const frame = {
                fin: (b[0] & 0x80) !== 0,
                rsv: (b[0] >> 4) & 7,
                opcode: b[0] & 0x0f,
                masked,
                payload: Buffer.from(b.subarray(off, off + len)),
            };
            this.buf = b.subarray(off + len);
            this.inbox.push(this.interpret(frame));
        }
    }

    interpret(f) {
        if (f.masked || f.rsv || !f.fin) return { frame: f }; // a server must send none of these
        if (f.opcode === 2) {
            // exact: re-encoding the Frame gives the message's length (no prefix, nothing after).
            const frame = decode(f.payload);
            frame.exact =
                Frame.encode(Frame.decode(f.payload)).finish().length === f.payload.length;
            frame.firstByte = f.payload[0];
            frame.length = f.payload.length;
            return frame;
        }
        if (f.opcode === 8)
            return {
                close: {
                    code: f.payload.length >= 2 ? f.payload.readUInt16BE(0) : null,
                    reason: f.payload.subarray(2).toString(),
                },
            };
        if (f.opcode === 9) return { ping: f.payload };
        if (f.opcode === 10) return { pong: f.payload };
        return { frame: f };
    }

    write(bytes) {
        return new Promise((resolve) => this.sock.write(bytes, () => resolve()));
    }

    /** Sends one herald Frame as a binary message (masked, one WebSocket frame). */
    send(id, body, fields) {
        return this.write(wsFrame({ payload: encode(id, body, fields) }));
    }

    close() {
        this.sock.destroy();
    }
}

function parseHead(text) {
    const [statusLine, ...lines] = text.split('\r\n');
    const headers = {};
    for (const l of lines) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    return { status: Number(statusLine.split(' ')[1]), statusLine, headers };
}

/**
 * herald's varint-framed protocol on the TCP listener, over node:net or (tls: options)
 * node:tls. Resolves once connected with {sock, inbox, ended, send, request, close}.
 */
export function streamClient(port, { tls: t = null } = {}) {
    const sock = t
        ? tls.connect({ host: '127.0.0.1', port, ...t })
        : net.connect({ host: '127.0.0.1', port });
    const inbox = new Inbox(`stream ${port}`);
    const reader = delimitedReader();
    sock.on('data', (chunk) => reader.push(chunk).forEach((f) => inbox.push(f)));
    const ended = new Promise((resolve) => sock.on('close', () => resolve()));
    return new Promise((resolve, reject) => {
        sock.once('error', reject);
        sock.once(t ? 'secureConnect' : 'connect', () => {
            sock.off('error', reject);
            sock.on('error', () => {});
            const c = {
                sock,
                inbox,
                ended,
                send(id, body, fields) {
                    sock.write(delimited(encode(id, body, fields)));
                },
                request(id, body, fields) {
                    c.send(id, body, fields);
                    return inbox.next((x) => x.id === id);
                },
                close() {
                    sock.destroy();
                },
            };
            resolve(c);
        });
    });
}
