// Recovery bookkeeping (PROTOCOL.md section 9): what a subscription asks for, and what each
// SubscribeOk and Push does to its position.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cursor } from '../src/cursor.js';

const E1 = '1111111111111111';
const E2 = '2222222222222222';
const ok = (offset, epoch, recovered = false) => ({ offset, epoch, recovered, recoverable: true });
const push = (offset, epoch = E1) => ({ channel: 'c', offset, epoch, payload: new Uint8Array(0) });

test('a new cursor asks for no recovery, then takes SubscribeOk position without a resync', () => {
    const c = new Cursor();
    assert.equal(c.isKnown, false);
    assert.deepEqual(c.subscribeFields(true), { recover: false });
    assert.equal(c.onSubscribeOk(ok(17, E1), false), null);
    assert.deepEqual(c.position, { offset: 17, epoch: E1 });
    assert.deepEqual(c.subscribeFields(true), { recover: true, offset: 17, epoch: E1 });
    assert.deepEqual(c.subscribeFields(false), { recover: false });
});

test('since: the first Subscribe recovers from the given position', () => {
    const c = new Cursor({ offset: 40, epoch: E1 });
    assert.deepEqual(c.subscribeFields(true), { recover: true, offset: 40, epoch: E1 });
});

test('pushes advance the cursor; offset 0 is delivered and moves nothing', () => {
    const c = new Cursor();
    c.onSubscribeOk(ok(0, E1), false);
    for (const o of [1, 2, 3])
        assert.deepEqual(c.onPush(push(o)), { deliver: true, gap: null, resync: null });
    assert.deepEqual(c.onPush(push(0)), { deliver: true, gap: null, resync: null });
    assert.deepEqual(c.position, { offset: 3, epoch: E1 });
});

test('a duplicate (offset at or below the last) is dropped', () => {
    const c = new Cursor();
    c.onSubscribeOk(ok(5, E1), false);
    assert.equal(c.onPush(push(5)).deliver, false);
    assert.equal(c.onPush(push(3)).deliver, false);
    assert.equal(c.onPush(push(6)).deliver, true);
    assert.equal(c.onPush(push(6)).deliver, false);
    assert.equal(c.offset, 6);
});

test('a jump in offsets is reported as a gap and delivered', () => {
    const c = new Cursor();
    c.onSubscribeOk(ok(41, E1), false);
    const r = c.onPush(push(44));
    assert.deepEqual(r, { deliver: true, gap: { from: 42, to: 43, epoch: E1 }, resync: null });
    assert.equal(c.offset, 44);
});

test('recovered: true in the same epoch continues without a resync', () => {
    const c = new Cursor({ offset: 40, epoch: E1 });
    assert.equal(c.onSubscribeOk(ok(40, E1, true), true), null);
    assert.deepEqual(c.onPush(push(41)), { deliver: true, gap: null, resync: null });
});

test('recovered: false with a new epoch: resync epoch_changed, cursor moves to the new epoch', () => {
    const c = new Cursor({ offset: 40, epoch: E1 });
    const r = c.onSubscribeOk(ok(0, E2), true);
    assert.deepEqual(r, {
        reason: 'epoch_changed',
        from: { offset: 40, epoch: E1 },
        to: { offset: 0, epoch: E2 },
    });
    assert.deepEqual(c.onPush(push(1, E2)), { deliver: true, gap: null, resync: null });
});

test('recovered: false in the same epoch (history too short): resync not_recovered', () => {
    const c = new Cursor({ offset: 40, epoch: E1 });
    const r = c.onSubscribeOk(ok(90, E1), true);
    assert.deepEqual(r, {
        reason: 'not_recovered',
        from: { offset: 40, epoch: E1 },
        to: { offset: 90, epoch: E1 },
    });
    assert.equal(c.onPush(push(91)).deliver, true);
});

test('recovered: false but nothing was published meanwhile: no resync', () => {
    const c = new Cursor({ offset: 40, epoch: E1 });
    assert.equal(c.onSubscribeOk(ok(40, E1), true), null);
});

test('without recovery a resubscribe still tells whether anything was missed', () => {
    const c = new Cursor();
    c.onSubscribeOk(ok(3, E1), false);
    assert.equal(c.onSubscribeOk(ok(3, E1), false), null);
    assert.equal(c.onSubscribeOk(ok(9, E1), false).reason, 'not_recovered');
});

test('an epoch change under a live subscription is a resync, and the push is delivered', () => {
    const c = new Cursor();
    c.onSubscribeOk(ok(7, E1), false);
    const r = c.onPush(push(1, E2));
    assert.equal(r.deliver, true);
    assert.deepEqual(r.resync, {
        reason: 'epoch_changed',
        from: { offset: 7, epoch: E1 },
        to: { offset: 1, epoch: E2 },
    });
    assert.deepEqual(c.position, { offset: 1, epoch: E2 });
});
