// The wire codec: herald.Frame to and from bytes with protobufjs's light build and the
// descriptor in schema.js (generated from proto/herald.proto). Framing (the varint length
// prefix of the TCP transport) is framing.js's business; this module sees one Frame's bytes.
//
// Numbers: uint64 fields (ids, offsets, times) are plain JavaScript numbers here, exact up to
// 2^53. protobufjs hands out Long objects in Node (where the `long` package is installed) and
// numbers in a browser; decodeFrame converts, so both look the same to the client.
import protobuf from 'protobufjs/light.js';
import schema from './schema.js';

const root = protobuf.Root.fromJSON(schema);

/** The protobufjs Type of herald.Frame (and its siblings through root). */
export const Frame = root.lookupType('herald.Frame');
export const protoRoot = root;

function enumValues(path) {
    return Object.freeze({ ...root.lookupEnum(path).values });
}

/** herald.Error.Code: name to number, e.g. ErrorCode.FORBIDDEN === 4. */
export const ErrorCode = enumValues('herald.Error.Code');
/** herald.Disconnect.Code: name to number, e.g. DisconnectCode.SHUTDOWN === 5. */
export const DisconnectCode = enumValues('herald.Disconnect.Code');

const errorNames = Object.fromEntries(Object.entries(ErrorCode).map(([k, v]) => [v, k]));
const disconnectNames = Object.fromEntries(Object.entries(DisconnectCode).map(([k, v]) => [v, k]));

/** The name of an Error.Code number; a code from a newer server reads as "UNKNOWN_<n>". */
export function errorCodeName(code) {
    return errorNames[code] ?? `UNKNOWN_${code}`;
}

/** The name of a Disconnect.Code number, "UNKNOWN_<n>" for one this client does not know. */
export function disconnectCodeName(code) {
    return disconnectNames[code] ?? `UNKNOWN_${code}`;
}

// proto3 leaves fields at their default value off the wire; protobufjs writes every field that
// is present in the object, so the encoder drops defaults first. The bytes then match what
// other runtimes (and PROTOCOL.md's annotated exchange) produce.
function isDefault(v) {
    return (
        v === undefined ||
        v === null ||
        v === 0 ||
        v === false ||
        v === '' ||
        (v instanceof Uint8Array && v.length === 0) ||
        (Array.isArray(v) && v.length === 0)
    );
}

function compact(fields) {
    const out = {};
    for (const [k, v] of Object.entries(fields ?? {})) {
        if (!isDefault(v)) out[k] = v;
    }
    return out;
}

/**
 * Encodes one Frame: id (0 for none), body the oneof member's name ("connect", "publish", ...)
 * and fields its message's fields in lowerCamelCase. Returns the serialized Frame, no prefix.
 */
export function encodeFrame(id, body, fields) {
    if (!Frame.oneofs.body.oneof.includes(body)) throw new TypeError(`unknown frame body ${body}`);
    const msg = { [body]: compact(fields) };
    if (id) msg.id = id;
    return Frame.encode(msg).finish();
}

const toObjectOptions = { longs: Number, defaults: true, arrays: true, oneofs: true };

/**
 * Decodes one serialized Frame into a plain object: { id, body, <body>: {fields} }, every
 * field present with its default, numbers as numbers, bytes as Uint8Array. Throws on bytes
 * that are not a valid Frame, and on a Frame with no body.
 */
export function decodeFrame(bytes) {
    const frame = Frame.toObject(Frame.decode(bytes), toObjectOptions);
    if (!frame.body) throw new Error('frame without a body');
    return frame;
}
