// protobufjs/light.js for a browser without a bundler. protobufjs ships CommonJS and UMD only;
// its UMD light build, loaded as a module, defines globalThis.protobuf, which this module
// re-exports as the default export that `import protobuf from 'protobufjs/light.js'` expects.
// Map 'protobufjs/light.js' to this file and 'protobufjs/' to the protobufjs folder in an
// import map (README.md, "In a browser").
import 'protobufjs/dist/light/protobuf.min.js';

export default globalThis.protobuf;
