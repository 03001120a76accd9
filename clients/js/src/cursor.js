// Recovery bookkeeping for one channel: the (epoch, offset) of the last message delivered, what
// to ask for when subscribing again, and what a SubscribeOk or a Push means for it
// (PROTOCOL.md section 9). Pure: no I/O, no timers, so tests drive it directly.

/** A position in a channel: the last offset received in epoch. */
function position(offset, epoch) {
    return { offset, epoch };
}

export class Cursor {
    /** since: {offset, epoch} to start from (recover from there on the first Subscribe). */
    constructor(since = null) {
        this.offset = since ? since.offset : 0;
        this.epoch = since ? since.epoch : '';
    }

    /** True once the cursor holds a position the server can recover from. */
    get isKnown() {
        return this.epoch !== '';
    }

    get position() {
        return position(this.offset, this.epoch);
    }

    /** The recovery fields of a Subscribe: recover from the position when there is one. */
    subscribeFields(wantRecover) {
        if (!wantRecover || !this.isKnown) return { recover: false };
        return { recover: true, offset: this.offset, epoch: this.epoch };
    }

    /**
     * Applies a SubscribeOk to a Subscribe sent with askedRecover. Returns null when the
     * subscription continues where the client was (a recovery that worked, or a first
     * subscribe), or a resync { reason, from, to } when messages may have been missed and the
     * application must resync what it derives from the channel: reason is "epoch_changed" (the
     * channel's numbering restarted, e.g. the server lost its history) or "not_recovered"
     * (the history no longer reaches back, or the channel keeps none).
     */
    onSubscribeOk(ok, askedRecover) {
        const from = this.position;
        const wasKnown = this.isKnown;
        this.offset = ok.offset;
        this.epoch = ok.epoch;
        if (!wasKnown) return null;
        if (askedRecover && ok.recovered && ok.epoch === from.epoch) return null;
        // Not recovered, but nothing was published meanwhile: nothing to resync.
        if (ok.epoch === from.epoch && ok.offset === from.offset) return null;
        const reason = ok.epoch !== from.epoch ? 'epoch_changed' : 'not_recovered';
        return { reason, from, to: this.position };
    }

    /**
     * Applies a Push. Returns { deliver, gap, resync }: deliver false for a duplicate (an
     * offset at or below the last one in the same epoch), gap { from, to } for the offsets the
     * server skipped (it drops messages for a slow consumer), resync when the epoch changed
     * under a live subscription. Offset 0 is outside the channel's sequence: delivered, and
     * the cursor stays.
     */
    onPush(push) {
        const result = { deliver: true, gap: null, resync: null };
        if (push.offset === 0) return result;
        if (this.isKnown && push.epoch !== this.epoch) {
            result.resync = {
                reason: 'epoch_changed',
                from: this.position,
                to: position(push.offset, push.epoch),
            };
        } else if (this.isKnown && push.offset <= this.offset) {
            result.deliver = false;
            return result;
        } else if (this.isKnown && push.offset > this.offset + 1) {
            result.gap = { from: this.offset + 1, to: push.offset - 1, epoch: this.epoch };
        }
        this.offset = push.offset;
        this.epoch = push.epoch;
        return result;
    }
}
