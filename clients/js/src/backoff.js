// Reconnect delays: exponential backoff with jitter for failed connects, and the server's own
// advice (Disconnect.reconnect_delay_ms) when it gives one.

/**
 * Exponential backoff with jitter. Attempt n (from 0) waits a random time in
 * [base_n * (1 - jitter), base_n], base_n = min(maxMs, minMs * factor^n): with the default
 * jitter of 0.5, between half and all of the exponential delay, so that clients cut off
 * together spread out instead of returning in lockstep. reset() after a good connection.
 */
export class Backoff {
    constructor({
        minMs = 500,
        maxMs = 20000,
        factor = 2,
        jitter = 0.5,
        random = Math.random,
    } = {}) {
        if (!(minMs > 0) || !(maxMs >= minMs))
            throw new RangeError('backoff needs 0 < minMs <= maxMs');
        if (!(factor >= 1)) throw new RangeError('backoff factor must be >= 1');
        if (!(jitter >= 0 && jitter <= 1)) throw new RangeError('backoff jitter must be in [0, 1]');
        Object.assign(this, { minMs, maxMs, factor, jitter, random });
        this.attempt = 0;
    }

    /** The exponential delay of attempt n before jitter. */
    base(n) {
        return Math.min(this.maxMs, this.minMs * this.factor ** n);
    }

    /** Returns the delay for the next attempt, in ms, and counts the attempt. */
    next() {
        const base = this.base(this.attempt);
        this.attempt++;
        return Math.round(base * (1 - this.jitter * this.random()));
    }

    /** Starts again from minMs (after a connection got as far as ConnectOk). */
    reset() {
        this.attempt = 0;
    }
}

/**
 * The delay a Disconnect{reconnect: true, reconnect_delay_ms: d} asks for: d plus a random
 * jitter of up to d (PROTOCOL.md section 4, Disconnect), so in [d, 2d].
 */
export function adviceDelay(delayMs, random = Math.random) {
    return Math.round(delayMs + delayMs * random());
}
