// A small event emitter that runs the same in browsers and Node (no node:events).

export class Emitter {
    constructor() {
        this.listeners = new Map();
    }

    /** Calls fn(...args) for every later emit of event. Returns a function that removes it. */
    on(event, fn) {
        if (typeof fn !== 'function') throw new TypeError('listener must be a function');
        if (!this.listeners.has(event)) this.listeners.set(event, []);
        this.listeners.get(event).push(fn);
        return () => this.off(event, fn);
    }

    /** Like on(), for the next emit only. */
    once(event, fn) {
        const off = this.on(event, (...args) => {
            off();
            fn(...args);
        });
        return off;
    }

    /** Removes a listener added with on(). */
    off(event, fn) {
        const list = this.listeners.get(event);
        if (!list) return;
        const i = list.indexOf(fn);
        if (i >= 0) list.splice(i, 1);
    }

    /**
     * Calls the listeners of event in the order they were added. A listener that throws does
     * not stop the others nor the client's own bookkeeping: its exception is rethrown from a
     * fresh task, where it reaches the runtime's uncaught-exception handling.
     */
    emit(event, ...args) {
        const list = this.listeners.get(event);
        if (!list || list.length === 0) return false;
        for (const fn of [...list]) {
            try {
                fn(...args);
            } catch (err) {
                this.listenerError(err, event);
            }
        }
        return true;
    }

    /** Rethrows a listener's exception from a fresh task (see emit). */
    listenerError(err) {
        setTimeout(() => {
            throw err;
        }, 0);
    }
}
