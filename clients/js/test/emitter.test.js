// The browser-safe event emitter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Emitter } from '../src/emitter.js';

test('on, once, off, and the function on() returns', () => {
    const e = new Emitter();
    const seen = [];
    const off = e.on('x', (v) => seen.push(`a${v}`));
    e.once('x', (v) => seen.push(`b${v}`));
    assert.equal(e.emit('x', 1), true);
    e.emit('x', 2);
    off();
    assert.equal(e.emit('x', 3), false);
    assert.deepEqual(seen, ['a1', 'b1', 'a2']);
});

test('a listener that throws does not stop the others; its error goes to listenerError', () => {
    const e = new Emitter();
    const seen = [];
    e.listenerError = (err, event) => seen.push(`${event}: ${err.message}`);
    e.on('x', () => {
        throw new Error('boom');
    });
    e.on('x', () => seen.push('second'));
    e.emit('x');
    assert.deepEqual(seen, ['x: boom', 'second']);
});
