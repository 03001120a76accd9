// The WebSocket transport: RFC 6455 to herald's /connection endpoint with the subprotocol
// herald.v1, each binary message exactly one herald.Frame, no length prefix. Runs on the
// browser's WebSocket, on Node's global WebSocket where there is one (Node 22), and otherwise
// on the `ws` package (install it next to herald-client: npm install ws).

/** The WebSocket subprotocol herald speaks. */
export const WEBSOCKET_PROTOCOL = 'herald.v1';

/**
 * new WebSocketTransport({url, WebSocket, protocols}): url is ws(s)://host:port/connection;
 * WebSocket a constructor to use instead of the global one (or ws's).
 */
export class WebSocketTransport {
    constructor({ url, WebSocket = null, protocols = [WEBSOCKET_PROTOCOL] } = {}) {
        if (!url) throw new TypeError('WebSocketTransport needs a url');
        this.url = url;
        this.WebSocket = WebSocket;
        this.protocols = protocols;
    }

    /**
     * Opens one connection. handlers: onOpen(), onFrame(Uint8Array) per binary message,
     * onClose({reason, error}) once, however it ends (never synchronously from open). Returns
     * {send(Uint8Array), close()}.
     */
    open({ onOpen, onFrame, onClose }) {
        let ws = null;
        let isClosed = false;
        let error = null;
        const finish = (reason, err = error) => {
            if (isClosed) return;
            isClosed = true;
            try {
                ws?.close();
            } catch {
                // Closing a socket that failed to open may throw; it is gone either way.
            }
            onClose({ reason, error: err });
        };
        const start = (Ctor) => {
            if (isClosed) return;
            try {
                ws = new Ctor(this.url, this.protocols);
            } catch (err) {
                finish('cannot open a WebSocket', err);
                return;
            }
            ws.binaryType = 'arraybuffer';
            ws.onopen = () => {
                if (!isClosed) onOpen();
            };
            ws.onmessage = (ev) => {
                if (isClosed) return;
                if (!(ev.data instanceof ArrayBuffer)) {
                    finish('a text message on a herald WebSocket', new Error('text message'));
                    return;
                }
                onFrame(new Uint8Array(ev.data));
            };
            ws.onerror = (ev) => {
                error = ev?.error ?? new Error(ev?.message ?? 'WebSocket error');
            };
            ws.onclose = (ev) => {
                finish(`WebSocket closed (${ev.code}${ev.reason ? ` ${ev.reason}` : ''})`);
            };
        };
        const Ctor = this.WebSocket ?? globalThis.WebSocket;
        if (Ctor) {
            // Deferred, so that onClose never runs inside open().
            queueMicrotask(() => start(Ctor));
        } else {
            import('ws').then(
                (m) => start(m.WebSocket ?? m.default),
                (err) => finish('no WebSocket here: install the ws package', err),
            );
        }
        return {
            send(bytes) {
                if (!isClosed && ws && ws.readyState === 1) ws.send(bytes);
            },
            close() {
                finish('closed by the client', null);
            },
        };
    }
}
