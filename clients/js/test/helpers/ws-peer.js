// A scripted herald peer on a `ws` WebSocketServer, for the WebSocket transport until herald
// itself speaks WebSocket: it records every message (binary or not, its exact bytes) and
// answers Connect, Subscribe, Publish and Ping the way herald does, unless a test's respond()
// handles the frame first.
import { WebSocketServer } from 'ws';
import { Emitter } from '../../src/emitter.js';
import { encodeFrame, decodeFrame } from '../../src/codec.js';

export const PEER_EPOCH = 'abcdefabcdef0123';

export async function startWsPeer({ respond = () => false } = {}) {
    const peer = new Emitter();
    peer.connections = [];
    const wss = new WebSocketServer({
        host: '127.0.0.1',
        port: 0,
        handleProtocols: (protocols) => (protocols.has('herald.v1') ? 'herald.v1' : false),
    });
    wss.on('connection', (socket, req) => {
        const conn = {
            path: req.url,
            protocol: socket.protocol,
            messages: [], // {isBinary, bytes, frame, at}
            socket,
            send(id, body, fields) {
                socket.send(encodeFrame(id, body, fields));
            },
        };
        peer.connections.push(conn);
        socket.on('message', (data, isBinary) => {
            const bytes = new Uint8Array(data);
            let frame = null;
            try {
                frame = decodeFrame(bytes);
            } catch {
                // Recorded as undecodable (frame null); the test decides what that means.
            }
            conn.messages.push({ isBinary, bytes, frame, at: performance.now() });
            peer.emit('message', conn, frame);
            if (!frame || respond(conn, frame)) return;
            const m = frame[frame.body];
            if (frame.body === 'connect') {
                conn.send(frame.id, 'connectOk', {
                    clientId: `ws-${peer.connections.length}`,
                    nodeId: 'peer',
                    pingIntervalMs: 25000,
                    idleTimeoutMs: 60000,
                    userId: 'u',
                    maxFrameBytes: 65536,
                });
            } else if (frame.body === 'subscribe') {
                conn.send(frame.id, 'subscribeOk', {
                    recovered: m.recover,
                    offset: m.recover ? m.offset : 0,
                    epoch: PEER_EPOCH,
                    recoverable: true,
                });
            } else if (frame.body === 'publish') {
                conn.send(frame.id, 'publishOk', { offset: 1, epoch: PEER_EPOCH });
            } else if (frame.body === 'ping') {
                conn.send(frame.id, 'pong', {});
            }
        });
        socket.on('close', () => peer.emit('close', conn));
        peer.emit('connection', conn);
    });
    await new Promise((resolve) => wss.on('listening', resolve));
    peer.port = wss.address().port;
    peer.url = `ws://127.0.0.1:${peer.port}/connection`;
    peer.close = () =>
        new Promise((resolve) => {
            for (const c of wss.clients) c.terminate();
            wss.close(resolve);
        });
    return peer;
}
