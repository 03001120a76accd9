// The TCP transport (Node only): herald's plain TCP listener, each frame a varint length and
// one herald.Frame (PROTOCOL.md section 1). Import it from 'herald-client/tcp'; the main entry
// point stays free of node: modules so that browsers can load it.
import net from 'node:net';
import { FrameDecoder, delimit, DEFAULT_MAX_INCOMING_FRAME_BYTES } from './framing.js';

export class TcpTransport {
    /**
     * new TcpTransport({host, port, maxFrameBytes}): maxFrameBytes bounds the frames accepted
     * from the server (16 MiB by default, as PROTOCOL.md asks); a longer one closes the
     * connection as soon as its length prefix arrives.
     */
    constructor({
        host = '127.0.0.1',
        port,
        maxFrameBytes = DEFAULT_MAX_INCOMING_FRAME_BYTES,
    } = {}) {
        if (!port) throw new TypeError('TcpTransport needs a port');
        this.host = host;
        this.port = port;
        this.maxFrameBytes = maxFrameBytes;
    }

    /**
     * Opens one connection. handlers: onOpen(), onFrame(Uint8Array) per frame, onClose({reason,
     * error}) once, however it ends (never synchronously from open). Returns {send(Uint8Array),
     * close(), socket}.
     */
    open({ onOpen, onFrame, onClose }) {
        const socket = net.connect({ host: this.host, port: this.port });
        const decoder = new FrameDecoder({ maxFrameBytes: this.maxFrameBytes });
        let isClosed = false;
        let error = null;
        const finish = (reason, err = error) => {
            if (isClosed) return;
            isClosed = true;
            socket.destroy();
            onClose({ reason, error: err });
        };
        socket.setNoDelay(true);
        socket.on('connect', () => {
            if (!isClosed) onOpen();
        });
        socket.on('data', (chunk) => {
            let frames;
            try {
                frames = decoder.push(chunk);
            } catch (err) {
                finish('bad framing from the server', err);
                return;
            }
            for (const f of frames) {
                if (isClosed) return;
                onFrame(f);
            }
        });
        socket.on('error', (err) => {
            error = err;
        });
        socket.on('close', () => finish(error ? error.message : 'connection closed by the peer'));
        return {
            socket,
            send(bytes) {
                // Prefix and body in one write: one segment for a small frame.
                if (!isClosed) socket.write(delimit(bytes));
            },
            close() {
                finish('closed by the client', null);
            },
        };
    }
}
