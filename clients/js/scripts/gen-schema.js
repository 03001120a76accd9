#!/usr/bin/env node
// Generates src/schema.js, the protobufjs JSON descriptor of proto/herald.proto as an ES module,
// so that the client loads its schema with protobufjs's light build (no .proto parser) and a
// browser needs no build step. test/schema.test.js fails when src/schema.js no longer matches
// the .proto: run `npm run gen-schema` (this script) after changing proto/herald.proto.
//
// Usage: node scripts/gen-schema.js [--check] [path/to/herald.proto]
//   --check  exit 1 (and say so) if src/schema.js differs from what would be generated
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const here = dirname(fileURLToPath(import.meta.url));
export const defaultProtoPath = join(here, '..', '..', '..', 'proto', 'herald.proto');
export const schemaPath = join(here, '..', 'src', 'schema.js');

/** Returns the text of src/schema.js generated from the .proto file at protoPath. */
export function generateSchema(protoPath = defaultProtoPath) {
    // Field names become lowerCamelCase (protobufjs's default), as the client uses them.
    const root = protobuf.parse(readFileSync(protoPath, 'utf8'), { keepCase: false }).root;
    const json = JSON.stringify(root.toJSON(), null, 2);
    return (
        '// Generated from proto/herald.proto by scripts/gen-schema.js: do not edit.\n' +
        '// test/schema.test.js checks that it matches the .proto.\n' +
        `export default ${json};\n`
    );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
    const args = process.argv.slice(2);
    const check = args.includes('--check');
    const proto = args.find((a) => !a.startsWith('--')) ?? defaultProtoPath;
    const text = generateSchema(proto);
    if (check) {
        if (readFileSync(schemaPath, 'utf8') !== text) {
            console.error('gen-schema: src/schema.js is stale: run npm run gen-schema');
            process.exit(1);
        }
    } else {
        writeFileSync(schemaPath, text);
    }
}
