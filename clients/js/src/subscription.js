// One channel subscription as the application holds it: survives reconnects (the client
// resubscribes it, recovering from its cursor), and tells what happens to it through events.
import { Emitter } from './emitter.js';
import { Cursor } from './cursor.js';

const textDecoder = new TextDecoder();

/** A message delivered on a channel. payload is a Uint8Array; text decodes it as UTF-8. */
export class Push {
    constructor({ channel, offset, epoch, payload, publishTimeMs }) {
        this.channel = channel;
        this.offset = offset;
        this.epoch = epoch;
        this.payload = payload;
        this.publishTimeMs = publishTimeMs;
    }

    get text() {
        return textDecoder.decode(this.payload);
    }
}

function clientInfo(c) {
    return { userId: c.userId, clientId: c.clientId, connectedAtMs: c.connectedAtMs };
}

/**
 * Returned by client.subscribe(channel, options); do not construct it yourself.
 *
 * state: "subscribing" (waiting for SubscribeOk, also while the client reconnects),
 * "subscribed", "unsubscribed" (unsubscribe() was called) or "failed" (the server refused it
 * with a non-retryable error; the client forgot it).
 *
 * Events (each also emitted by the client, with the channel in its argument):
 *   subscribed {channel, recovered, offset, epoch, recoverable, isResubscribe}
 *   push       Push {channel, offset, epoch, payload, publishTimeMs, text}
 *   resync     {channel, reason, from: {offset, epoch}, to: {offset, epoch}}: messages may
 *              have been missed and could not be recovered; resync the state you derive from
 *              this channel by other means. reason "epoch_changed" or "not_recovered".
 *   gap        {channel, from, to, epoch}: the server skipped offsets from..to (it drops
 *              messages for a slow consumer); unsubscribe and subscribe again with
 *              since: the position before the gap to recover them, if they matter.
 *   join, leave {channel, client: {userId, clientId, connectedAtMs}} (with joinLeave)
 *   error      HeraldError: the server refused the subscription; it is over
 *   unsubscribed {channel}
 */
export class Subscription extends Emitter {
    constructor(client, channel, { joinLeave = false, recover = true, since = null } = {}) {
        super();
        this.client = client;
        this.channel = channel;
        this.joinLeave = Boolean(joinLeave);
        this.recover = Boolean(recover);
        this.cursor = new Cursor(since);
        this.recoverable = false;
        this.state = 'subscribing';
        this.hasSubscribed = false;
        /** The connection the current Subscribe went out on (the client's business). */
        this.sentOn = null;
        /**
         * Settles with the first SubscribeOk ({recovered, offset, epoch, recoverable}), or
         * rejects with the HeraldError that refused the subscription (or an Error when it was
         * unsubscribed first). Marked handled: not awaiting it is fine.
         */
        this.ready = new Promise((resolve, reject) => {
            this.settleReady = { resolve, reject };
        });
        this.ready.catch(() => {});
    }

    /** The last offset delivered (or reported by SubscribeOk) and its epoch. */
    get offset() {
        return this.cursor.offset;
    }

    get epoch() {
        return this.cursor.epoch;
    }

    /** {offset, epoch}: keep it to subscribe later with since and recover from here. */
    get position() {
        return this.cursor.position;
    }

    /** Leaves the channel. Resolves once the server confirmed (or at once when offline). */
    unsubscribe() {
        return this.client.unsubscribeSub(this);
    }

    emitBoth(event, arg) {
        this.emit(event, arg);
        this.client.emit(event, arg);
    }

    // The client calls the methods below.

    subscribeFields() {
        return {
            channel: this.channel,
            joinLeave: this.joinLeave,
            ...this.cursor.subscribeFields(this.recover),
        };
    }

    onSubscribeOk(ok, askedRecover) {
        const resync = this.cursor.onSubscribeOk(ok, askedRecover);
        const isResubscribe = this.hasSubscribed;
        this.hasSubscribed = true;
        this.recoverable = ok.recoverable;
        this.state = 'subscribed';
        const info = {
            channel: this.channel,
            recovered: ok.recovered,
            offset: ok.offset,
            epoch: ok.epoch,
            recoverable: ok.recoverable,
            isResubscribe,
        };
        this.settleReady?.resolve(info);
        this.settleReady = null;
        // resync first: the application resets, then sees the subscription continue.
        if (resync) this.emitBoth('resync', { channel: this.channel, ...resync });
        this.emitBoth('subscribed', info);
    }

    onPush(p) {
        const r = this.cursor.onPush(p);
        if (!r.deliver) return;
        if (r.resync) this.emitBoth('resync', { channel: this.channel, ...r.resync });
        if (r.gap) this.emitBoth('gap', { channel: this.channel, ...r.gap });
        this.emitBoth('push', new Push(p));
    }

    onPresenceEvent(ev) {
        for (const c of ev.joined)
            this.emitBoth('join', { channel: this.channel, client: clientInfo(c) });
        for (const c of ev.left)
            this.emitBoth('leave', { channel: this.channel, client: clientInfo(c) });
    }

    onConnectionLost() {
        if (this.state === 'subscribed') this.state = 'subscribing';
        this.sentOn = null;
    }

    onFailed(err) {
        this.state = 'failed';
        err.channel = this.channel;
        this.settleReady?.reject(err);
        this.settleReady = null;
        this.emitBoth('error', err);
    }

    onUnsubscribed() {
        this.state = 'unsubscribed';
        this.settleReady?.reject(new Error(`unsubscribed from ${this.channel} before SubscribeOk`));
        this.settleReady = null;
        this.emitBoth('unsubscribed', { channel: this.channel });
    }
}

export { clientInfo };
