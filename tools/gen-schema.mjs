#!/usr/bin/env node
// Writes web/lib/schema.js from the engine's own schema (src/headscope/schema.cc, through the
// WebAssembly module's schema()): the configs' fields (PyTorch and JS names, types, ranges,
// defaults, docs), their divisibility rules and the error codes, for the code that cannot load
// the engine to ask (the case parser, the views, the option reading before a module exists).
// tests/js/schema.test.js fails when the file and the engine disagree: after changing the schema,
//
//   npm run build && node tools/gen-schema.mjs
//
// The module is loaded directly (not through index.js, which imports schema.js itself).
import { readFileSync, writeFileSync } from 'node:fs';
import createHeadscopeCore from '../web/lib/headscope_core.js';
import { schemaModuleText } from '../web/lib/schema-text.js';

const wasmBinary = readFileSync(new URL('../web/lib/headscope_core.wasm', import.meta.url));
const core = await createHeadscopeCore({ wasmBinary });
const text = schemaModuleText(core.schema());
const target = new URL('../web/lib/schema.js', import.meta.url);
writeFileSync(target, text);
console.log(`gen-schema: wrote ${target.pathname} (${text.length} bytes)`);
