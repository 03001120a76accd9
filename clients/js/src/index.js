// herald-client: a JavaScript client for the herald push gateway, for browsers and Node.
// Node's TCP transport is a separate entry point, 'herald-client/tcp'.
export { Client, CLIENT_NAME, CLIENT_VERSION } from './client.js';
export { Subscription, Push } from './subscription.js';
export { WebSocketTransport, WEBSOCKET_PROTOCOL } from './websocket.js';
export { HeraldError, ConnectionLostError, RequestTimeoutError } from './errors.js';
export {
    ErrorCode,
    DisconnectCode,
    errorCodeName,
    disconnectCodeName,
    encodeFrame,
    decodeFrame,
} from './codec.js';
export { Backoff, adviceDelay } from './backoff.js';
export { Cursor } from './cursor.js';
export { FrameDecoder, FramingError, encodeVarint, delimit } from './framing.js';
