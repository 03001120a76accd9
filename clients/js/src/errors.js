// The errors the client's promises reject with and its 'error' events carry.
import { errorCodeName, ErrorCode, disconnectCodeName } from './codec.js';

/**
 * The server refused a request with an Error frame (or, with isLocal, the client refused it
 * before sending, for a reason the server would have given the same code: a frame over
 * max_frame_bytes). code is the Error.Code number, codeName its name ("FORBIDDEN");
 * retryAfterMs is set for BUSY and RATE_LIMITED: wait at least that long before retrying.
 */
export class HeraldError extends Error {
    constructor({ code, text = '', retryAfterMs = 0, requestId = 0, isLocal = false }) {
        super(`${errorCodeName(code)}${text ? `: ${text}` : ''}`);
        this.name = 'HeraldError';
        this.code = code;
        this.codeName = errorCodeName(code);
        this.text = text;
        this.retryAfterMs = retryAfterMs;
        this.requestId = requestId;
        this.isLocal = isLocal;
    }

    /** True for the codes that fail only this request and may succeed when sent again later. */
    get isRetryable() {
        return [ErrorCode.BUSY, ErrorCode.RATE_LIMITED, ErrorCode.INTERNAL].includes(this.code);
    }

    /**
     * True when the server cannot say whether the request was applied (OUTCOME_UNKNOWN: a
     * publish handed to Redis that did not answer). Retry a publish only with the same
     * idempotencyKey, which the server deduplicates; without one a retry may publish twice.
     */
    get isOutcomeUnknown() {
        return this.code === ErrorCode.OUTCOME_UNKNOWN;
    }
}

/**
 * A request was sent (or queued) but the connection ended before its answer: whether the
 * server ran it is unknown. disconnect is the server's Disconnect ({code, codeName, reason,
 * reconnect, delayMs}) when it sent one, else null; reason says what happened.
 */
export class ConnectionLostError extends Error {
    constructor(reason, disconnect = null) {
        super(`connection lost: ${reason}`);
        this.name = 'ConnectionLostError';
        this.reason = reason;
        this.disconnect = disconnect;
    }
}

/** No answer within the client's requestTimeoutMs. */
export class RequestTimeoutError extends Error {
    constructor(kind, timeoutMs) {
        super(`${kind} got no answer within ${timeoutMs} ms`);
        this.name = 'RequestTimeoutError';
        this.timeoutMs = timeoutMs;
    }
}

/** A Disconnect frame as the client reports it. */
export function describeDisconnect(d) {
    return {
        code: d.code,
        codeName: disconnectCodeName(d.code),
        reason: d.reason,
        reconnect: d.reconnect,
        delayMs: d.reconnectDelayMs,
    };
}
