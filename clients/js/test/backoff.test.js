// Reconnect delays: exponential backoff bounds, jitter, cap and reset; Disconnect's advice.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Backoff, adviceDelay } from '../src/backoff.js';

test('with no randomness drawn (random 0) each attempt waits the full exponential delay', () => {
    const b = new Backoff({ minMs: 100, maxMs: 5000, factor: 2, jitter: 0.5, random: () => 0 });
    assert.deepEqual(
        Array.from({ length: 9 }, () => b.next()),
        [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000],
    );
});

test('at the top of the random range each attempt waits base * (1 - jitter)', () => {
    const b = new Backoff({ minMs: 100, maxMs: 5000, jitter: 0.5, random: () => 1 });
    assert.deepEqual(
        Array.from({ length: 8 }, () => b.next()),
        [50, 100, 200, 400, 800, 1600, 2500, 2500],
    );
});

test('every delay stays within [base * (1 - jitter), base], and the cap holds', () => {
    for (const jitter of [0, 0.25, 0.5, 1]) {
        const b = new Backoff({ minMs: 250, maxMs: 20000, jitter });
        for (let n = 0; n < 40; n++) {
            const base = Math.min(20000, 250 * 2 ** n);
            const d = b.next();
            assert.ok(
                d >= Math.floor(base * (1 - jitter)) && d <= base,
                `jitter ${jitter} attempt ${n}: ${d} vs ${base}`,
            );
        }
    }
});

test('jitter spreads clients that fail together', () => {
    const firsts = new Set(Array.from({ length: 200 }, () => new Backoff({ minMs: 1000 }).next()));
    assert.ok(firsts.size > 100, `only ${firsts.size} distinct first delays among 200 clients`);
    const zero = new Set(
        Array.from({ length: 50 }, () => new Backoff({ minMs: 1000, jitter: 0 }).next()),
    );
    assert.deepEqual([...zero], [1000]);
});

test('reset starts again from the minimum', () => {
    const b = new Backoff({ minMs: 100, random: () => 0 });
    b.next();
    b.next();
    b.next();
    assert.equal(b.next(), 800);
    b.reset();
    assert.equal(b.next(), 100);
});

test('options are checked', () => {
    assert.throws(() => new Backoff({ minMs: 0 }), RangeError);
    assert.throws(() => new Backoff({ minMs: 10, maxMs: 5 }), RangeError);
    assert.throws(() => new Backoff({ factor: 0.5 }), RangeError);
    assert.throws(() => new Backoff({ jitter: 2 }), RangeError);
});

test("Disconnect's advice: reconnect_delay_ms plus up to as much jitter", () => {
    assert.equal(
        adviceDelay(1000, () => 0),
        1000,
    );
    assert.equal(
        adviceDelay(1000, () => 0.5),
        1500,
    );
    assert.equal(
        adviceDelay(1000, () => 0.999999),
        2000,
    );
    for (let i = 0; i < 100; i++) {
        const d = adviceDelay(2000);
        assert.ok(d >= 2000 && d <= 4000);
    }
});
