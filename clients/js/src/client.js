// The herald client: one logical session over a pluggable transport, kept alive across
// reconnects. The protocol it speaks is proto/PROTOCOL.md; the section numbers below are its.
//
// Shape: the Client owns at most one connection attempt at a time (`this.conn`, a plain
// record per transport connection). Everything a connection carries (request ids, pending
// replies, heartbeat timers) lives on that record and dies with it; every callback checks
// that its record is still the current one, so a late event from an old socket is ignored.
// What outlives connections lives on the Client: the subscriptions with their cursors, the
// requests queued while offline, the backoff.
import { Emitter } from './emitter.js';
import { Backoff, adviceDelay } from './backoff.js';
import { encodeFrame, decodeFrame, ErrorCode } from './codec.js';
import {
    HeraldError,
    ConnectionLostError,
    RequestTimeoutError,
    describeDisconnect,
} from './errors.js';
import { Subscription, clientInfo } from './subscription.js';
import { WebSocketTransport } from './websocket.js';

export const CLIENT_NAME = 'herald-js';
export const CLIENT_VERSION = '0.1.0';

const textEncoder = new TextEncoder();
const now = () => performance.now();

/**
 * A herald client.
 *
 * Options:
 *   transport        a transport (WebSocketTransport, TcpTransport from 'herald-client/tcp')
 *   url              instead of transport: a ws:// or wss:// URL for a WebSocketTransport
 *   token            the JWT, or a function returning it (or a promise of it), called before
 *                    every connection attempt so that reconnects can use a fresh token
 *   name, version    sent in Connect for the server's logs
 *   backoff          a Backoff, or its options ({minMs, maxMs, factor, jitter})
 *   requestTimeoutMs a publish or presence request not answered within this rejects with
 *                    RequestTimeoutError (default 10000; 0: never); counted from the call,
 *                    so it covers the time spent queued while offline
 *   connectTimeoutMs a connection attempt that has no ConnectOk within this is abandoned
 *                    (default 10000)
 *   random           the source of jitter (default Math.random)
 *
 * state: "disconnected" | "connecting" | "connected". Events:
 *   state (state, previous)
 *   connected {clientId, nodeId, userId, pingIntervalMs, idleTimeoutMs, maxFrameBytes}
 *   disconnected {wasConnected, reason, error, disconnect, reconnect, delayMs}: a connection
 *     (or attempt) ended; disconnect is the server's Disconnect ({code, codeName, reason,
 *     reconnect, delayMs}) when it sent one; reconnect says whether the client will try
 *     again, after delayMs
 *   error HeraldError (a refused Connect, an Error not tied to a request, a refused
 *     subscription with err.channel set)
 *   pong {rttMs}: the answer to a heartbeat Ping, with its round trip
 *   subscribed, push, resync, gap, join, leave, unsubscribed: as on each Subscription
 */
export class Client extends Emitter {
    constructor(opts = {}) {
        super();
        this.transport =
            opts.transport ?? (opts.url ? new WebSocketTransport({ url: opts.url }) : null);
        if (!this.transport) throw new TypeError('Client needs a transport or a url');
        if (opts.token === undefined) throw new TypeError('Client needs a token');
        this.token = opts.token;
        this.name = opts.name ?? CLIENT_NAME;
        this.version = opts.version ?? CLIENT_VERSION;
        this.backoff = opts.backoff instanceof Backoff ? opts.backoff : new Backoff(opts.backoff);
        this.random = opts.random ?? Math.random;
        this.requestTimeoutMs = opts.requestTimeoutMs ?? 10000;
        this.connectTimeoutMs = opts.connectTimeoutMs ?? 10000;

        this.state = 'disconnected';
        /** The current connection's ConnectOk, null while not connected. */
        this.info = null;
        this.subs = new Map(); // channel -> Subscription
        this.queue = []; // requests made while not connected, sent after the next ConnectOk
        this.conn = null; // the current connection attempt
        this.isWanted = false; // connect() called and close() not since
        this.reconnectTimer = null;
        this.stats = {
            connects: 0,
            attempts: 0,
            framesSent: 0,
            framesReceived: 0,
            pingsSent: 0,
            pongsReceived: 0,
        };
    }

    /** Starts connecting (and keeps reconnecting) until close(). Does nothing if already on. */
    connect() {
        if (this.isWanted) return;
        this.isWanted = true;
        this.open();
    }

    /**
     * Closes the connection and stops reconnecting. Queued and pending requests reject with
     * ConnectionLostError. Subscriptions are kept, with their positions: connect() again
     * resubscribes them, recovering what was missed meanwhile.
     */
    close() {
        this.isWanted = false;
        clearTimeout(this.reconnectTimer);
        this.reconnectTimer = null;
        if (this.conn) {
            this.lose(this.conn, { reason: 'closed by the client' });
        } else {
            this.setState('disconnected');
            this.rejectQueue(new ConnectionLostError('closed by the client'));
        }
    }

    /** The Subscription of channel, or undefined. */
    getSubscription(channel) {
        return this.subs.get(channel);
    }

    /**
     * Subscribes to channel and returns its Subscription at once (attach listeners to it or to
     * the client before the next event-loop turn; await sub.ready for the first SubscribeOk).
     * Options: joinLeave (receive join/leave events), recover (default true: resubscribe with
     * recovery after a reconnect), since {offset, epoch} (recover from there on the first
     * Subscribe too, e.g. a position saved by an earlier page). Throws if already subscribed.
     */
    subscribe(channel, options = {}) {
        if (this.subs.has(channel)) throw new Error(`already subscribed to ${channel}`);
        const sub = new Subscription(this, channel, options);
        this.subs.set(channel, sub);
        if (this.conn?.isConnected) this.sendSubscribe(this.conn, sub);
        return sub;
    }

    /** Same as client.getSubscription(channel)?.unsubscribe(). */
    unsubscribe(channel) {
        const sub = this.subs.get(channel);
        return sub ? sub.unsubscribe() : Promise.resolve();
    }

    /**
     * Publishes data (a string, sent as UTF-8, or a Uint8Array) to channel. Resolves with
     * {offset, epoch, duplicate}; rejects with HeraldError (FORBIDDEN, RATE_LIMITED with
     * retryAfterMs, FRAME_TOO_LARGE before sending when the frame would exceed max_frame_bytes,
     * OUTCOME_UNKNOWN, ...), ConnectionLostError (the connection ended first: the publish may
     * or may not have been done) or RequestTimeoutError. While offline the publish waits for
     * the next connection.
     *
     * options.idempotencyKey (a string of at most 64 bytes) makes a retry safe: sent again with
     * the same key within the server's idempotency window (60 s by default), the publish is
     * answered with the first one's offset and epoch and duplicate = true, and not published
     * twice. Retry with the same key after OUTCOME_UNKNOWN, ConnectionLostError or
     * RequestTimeoutError; without a key such a retry may publish the message twice.
     */
    publish(channel, data, options = {}) {
        let payload = data;
        if (typeof data === 'string') payload = textEncoder.encode(data);
        else if (data instanceof ArrayBuffer) payload = new Uint8Array(data);
        if (!(payload instanceof Uint8Array))
            throw new TypeError('publish data must be a string or bytes');
        const idempotencyKey = options.idempotencyKey ?? '';
        if (typeof idempotencyKey !== 'string' || textEncoder.encode(idempotencyKey).length > 64)
            throw new TypeError('idempotencyKey must be a string of at most 64 bytes');
        return this.request('publish', { channel, payload, idempotencyKey }, (ok) => ({
            offset: ok.offset,
            epoch: ok.epoch,
            duplicate: ok.duplicate === true,
        }));
    }

    /**
     * Asks who is subscribed to channel. Resolves with {channel, clients: [{userId, clientId,
     * connectedAtMs}], numClients, numUsers, truncated}; rejects like publish.
     */
    presence(channel) {
        return this.request('presenceRequest', { channel }, (r) => ({
            channel: r.channel,
            clients: r.clients.map(clientInfo),
            numClients: r.numClients,
            numUsers: r.numUsers,
            truncated: r.truncated,
        }));
    }

    // ---- connection lifecycle ---------------------------------------------------------

    setState(state) {
        if (state === this.state) return;
        const previous = this.state;
        this.state = state;
        this.emit('state', state, previous);
    }

    async open() {
        this.reconnectTimer = null;
        const conn = {
            link: null,
            isConnected: false,
            nextId: 1,
            connectId: 0,
            pending: new Map(), // request id -> entry
            disconnect: null, // the server's Disconnect, once received
            lastError: null, // the last Error frame not tied to a request
            timers: new Set(),
            lastSendAt: 0,
            pingId: 0,
            pingSentAt: 0,
        };
        this.conn = conn;
        this.stats.attempts++;
        this.setState('connecting');
        this.later(conn, this.connectTimeoutMs, () =>
            this.lose(conn, { reason: 'no ConnectOk in time' }),
        );
        let token;
        try {
            token = typeof this.token === 'function' ? await this.token() : this.token;
        } catch (error) {
            this.lose(conn, { reason: 'the token function failed', error });
            return;
        }
        if (this.conn !== conn) return;
        conn.token = String(token);
        conn.link = this.transport.open({
            onOpen: () => this.conn === conn && this.sendConnect(conn),
            onFrame: (bytes) => this.conn === conn && this.onFrame(conn, bytes),
            onClose: (info = {}) =>
                this.lose(conn, { reason: info.reason ?? 'connection closed', error: info.error }),
        });
    }

    // setTimeout bound to a connection: cleared when it ends, skipped if it is no longer current.
    later(conn, ms, fn) {
        const t = setTimeout(() => {
            conn.timers.delete(t);
            if (this.conn === conn) fn();
        }, ms);
        conn.timers.add(t);
        return t;
    }

    sendConnect(conn) {
        conn.connectId = conn.nextId++;
        this.send(conn, conn.connectId, 'connect', {
            token: conn.token,
            clientName: this.name,
            clientVersion: this.version,
        });
    }

    send(conn, id, body, fields) {
        const bytes = encodeFrame(id, body, fields);
        conn.link.send(bytes);
        conn.lastSendAt = now();
        this.stats.framesSent++;
        return bytes.length;
    }

    /**
     * Ends conn (idempotent; a no-op for a connection that is no longer current) and decides
     * what comes next: a reconnect after the server's advice or the backoff, or a stop.
     */
    lose(conn, { reason, error = null }) {
        if (this.conn !== conn) return;
        this.conn = null;
        for (const t of conn.timers) clearTimeout(t);
        conn.timers.clear();
        conn.link?.close();
        const wasConnected = conn.isConnected;
        this.info = null;
        const disconnect = conn.disconnect;
        const lost = new ConnectionLostError(
            disconnect ? `${disconnect.codeName}: ${disconnect.reason}` : reason,
            disconnect,
        );
        for (const entry of conn.pending.values()) entry.onLost?.(lost);
        conn.pending.clear();
        for (const sub of this.subs.values()) sub.onConnectionLost();

        // A close without Disconnect counts as reconnect = true (section 5); so does a refused
        // Connect the server hung up on without a Disconnect.
        const reconnect = this.isWanted && (disconnect ? disconnect.reconnect : true);
        let delayMs = 0;
        if (reconnect) {
            delayMs =
                disconnect && disconnect.delayMs > 0
                    ? adviceDelay(disconnect.delayMs, this.random)
                    : this.backoff.next();
        }
        this.emit('disconnected', {
            wasConnected,
            reason,
            error: error ?? conn.lastError,
            disconnect,
            reconnect,
            delayMs,
        });
        if (reconnect && this.isWanted) {
            this.setState('connecting');
            clearTimeout(this.reconnectTimer);
            this.reconnectTimer = setTimeout(() => this.open(), delayMs);
        } else {
            this.isWanted = false;
            this.setState('disconnected');
            this.rejectQueue(lost);
        }
    }

    onConnectOk(conn, ok) {
        conn.isConnected = true;
        for (const t of conn.timers) clearTimeout(t); // the connect timeout
        conn.timers.clear();
        this.info = {
            clientId: ok.clientId,
            nodeId: ok.nodeId,
            userId: ok.userId,
            pingIntervalMs: ok.pingIntervalMs,
            idleTimeoutMs: ok.idleTimeoutMs,
            maxFrameBytes: ok.maxFrameBytes,
        };
        this.backoff.reset();
        this.stats.connects++;
        this.setState('connected');
        this.emit('connected', { ...this.info });
        if (this.conn !== conn) return; // a listener closed the client
        this.armHeartbeat(conn);
        for (const sub of this.subs.values()) this.sendSubscribe(conn, sub);
        for (const entry of this.queue.splice(0)) this.sendRequest(conn, entry);
    }

    onConnectError(conn, err) {
        if (err.code === ErrorCode.BUSY) {
            // The server's verification queue is full: the same Connect again, on the same
            // connection, after retry_after_ms (section 3).
            this.later(conn, err.retryAfterMs || 1000, () => this.sendConnect(conn));
            return;
        }
        // Fatal: a Disconnect follows (and says whether to reconnect).
        conn.lastError = err;
        this.emit('error', err);
    }

    // ---- heartbeats (section 6) -------------------------------------------------------

    // One timer per connection, due when the next thing must happen: a Ping once
    // ping_interval_ms passed without sending anything, or giving up when its Pong is
    // ping_interval_ms late. Sending something else moves the deadline; the timer then finds
    // nothing to do and re-arms itself for the new one.
    armHeartbeat(conn) {
        const interval = this.info.pingIntervalMs;
        if (!interval) return;
        const due = conn.pingId ? conn.pingSentAt + interval : conn.lastSendAt + interval;
        this.later(conn, Math.max(0, due - now()), () => this.onHeartbeat(conn));
    }

    onHeartbeat(conn) {
        const interval = this.info.pingIntervalMs;
        const t = now();
        if (conn.pingId && t - conn.pingSentAt >= interval) {
            this.lose(conn, { reason: `no Pong within ${interval} ms` });
            return;
        }
        if (!conn.pingId && t - conn.lastSendAt >= interval) {
            conn.pingId = conn.nextId++;
            this.send(conn, conn.pingId, 'ping', {});
            conn.pingSentAt = conn.lastSendAt;
            this.stats.pingsSent++;
        }
        this.armHeartbeat(conn);
    }

    // ---- requests ---------------------------------------------------------------------

    request(body, fields, toResult) {
        return new Promise((resolve, reject) => {
            if (!this.isWanted) {
                reject(new ConnectionLostError('not connected: call connect() first'));
                return;
            }
            const entry = {
                body,
                fields,
                onReply: (msg) => settle(() => resolve(toResult(msg))),
                onError: (err) => settle(() => reject(err)),
                onLost: (err) => settle(() => reject(err)),
            };
            let timer = null;
            const settle = (fn) => {
                clearTimeout(timer);
                fn();
            };
            if (this.requestTimeoutMs > 0) {
                timer = setTimeout(() => {
                    const i = this.queue.indexOf(entry);
                    if (i >= 0) this.queue.splice(i, 1);
                    if (entry.conn) entry.conn.pending.delete(entry.id);
                    reject(new RequestTimeoutError(body, this.requestTimeoutMs));
                }, this.requestTimeoutMs);
            }
            if (this.conn?.isConnected) this.sendRequest(this.conn, entry);
            else this.queue.push(entry);
        });
    }

    sendRequest(conn, entry) {
        const id = conn.nextId++;
        const bytes = encodeFrame(id, entry.body, entry.fields);
        if (this.info.maxFrameBytes && bytes.length > this.info.maxFrameBytes) {
            // The server would answer FRAME_TOO_LARGE and close the connection: refuse here.
            entry.onError(
                new HeraldError({
                    code: ErrorCode.FRAME_TOO_LARGE,
                    text: `frame of ${bytes.length} bytes over max_frame_bytes ${this.info.maxFrameBytes}`,
                    isLocal: true,
                }),
            );
            return;
        }
        entry.id = id;
        entry.conn = conn;
        conn.pending.set(id, entry);
        conn.link.send(bytes);
        conn.lastSendAt = now();
        this.stats.framesSent++;
    }

    rejectQueue(err) {
        for (const entry of this.queue.splice(0)) entry.onLost(err);
    }

    // ---- subscriptions ----------------------------------------------------------------

    sendSubscribe(conn, sub) {
        const fields = sub.subscribeFields();
        const id = conn.nextId++;
        sub.sentOn = conn;
        conn.pending.set(id, {
            onReply: (ok) => {
                if (this.subs.get(sub.channel) === sub) sub.onSubscribeOk(ok, fields.recover);
            },
            onError: (err) => {
                if (this.subs.get(sub.channel) !== sub) return; // unsubscribed meanwhile (CANCELLED)
                if (err.isRetryable) {
                    this.later(conn, err.retryAfterMs || 1000, () => {
                        if (this.subs.get(sub.channel) === sub) this.sendSubscribe(conn, sub);
                    });
                    return;
                }
                this.subs.delete(sub.channel);
                sub.onFailed(err);
            },
        });
        this.send(conn, id, 'subscribe', fields);
    }

    unsubscribeSub(sub) {
        if (this.subs.get(sub.channel) !== sub) return Promise.resolve();
        this.subs.delete(sub.channel);
        const wasSent = this.conn?.isConnected && sub.sentOn === this.conn;
        sub.onUnsubscribed();
        if (!wasSent) return Promise.resolve(); // the server holds nothing for it
        return this.request('unsubscribe', { channel: sub.channel }, () => undefined).catch(
            (err) => {
                // Gone either way: NOT_SUBSCRIBED, or the connection (and its subscriptions) ended.
                if (err instanceof ConnectionLostError) return;
                if (err instanceof HeraldError && err.code === ErrorCode.NOT_SUBSCRIBED) return;
                throw err;
            },
        );
    }

    // ---- incoming frames --------------------------------------------------------------

    onFrame(conn, bytes) {
        let frame;
        try {
            frame = decodeFrame(bytes);
        } catch (error) {
            this.lose(conn, { reason: 'undecodable frame from the server', error });
            return;
        }
        this.stats.framesReceived++;
        const msg = frame[frame.body];
        switch (frame.body) {
            case 'connectOk':
                if (frame.id === conn.connectId && !conn.isConnected) this.onConnectOk(conn, msg);
                return;
            case 'push': {
                const sub = this.subs.get(msg.channel);
                if (sub && sub.state === 'subscribed') sub.onPush(msg);
                return;
            }
            case 'presenceEvent': {
                const sub = this.subs.get(msg.channel);
                if (sub && sub.state === 'subscribed') sub.onPresenceEvent(msg);
                return;
            }
            case 'disconnect':
                // The server's last frame; it closes after it. So do we, at once (section 3).
                conn.disconnect = describeDisconnect(msg);
                this.lose(conn, { reason: 'disconnected by the server' });
                return;
            case 'pong':
                if (frame.id && frame.id === conn.pingId) {
                    conn.pingId = 0;
                    this.stats.pongsReceived++;
                    this.emit('pong', { rttMs: now() - conn.pingSentAt });
                    return;
                }
                break;
            case 'error': {
                const err = new HeraldError({
                    code: msg.code,
                    text: msg.text,
                    retryAfterMs: msg.retryAfterMs,
                    requestId: frame.id,
                });
                if (frame.id && frame.id === conn.connectId && !conn.isConnected) {
                    this.onConnectError(conn, err);
                    return;
                }
                const entry = frame.id ? conn.pending.get(frame.id) : undefined;
                if (entry) {
                    conn.pending.delete(frame.id);
                    entry.onError(err);
                } else {
                    conn.lastError = err;
                    this.emit('error', err);
                }
                return;
            }
            default:
                break;
        }
        const entry = frame.id ? conn.pending.get(frame.id) : undefined;
        if (entry) {
            conn.pending.delete(frame.id);
            entry.onReply(msg);
        }
    }
}
