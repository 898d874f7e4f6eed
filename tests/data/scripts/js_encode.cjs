// Reference GPT-2 encodings from npm packages, for parity tests and benchmarks.
//
//   node js_encode.cjs NODE_MODULES js-tiktoken|gpt-3-encoder IN.txt OUT.bin
//       writes the ids of IN.txt as little-endian int32 to OUT.bin
//   node js_encode.cjs NODE_MODULES js-tiktoken|gpt-3-encoder IN.txt --bench [REPEATS]
//       prints "<encoder> <MB/s> <tokens>": single-thread encode throughput,
//       best of REPEATS (default 3) runs after one warm-up run.
//
// Each package encodes the whole text in one call, its natural use.
'use strict';
const fs = require('fs');
const path = require('path');
// A relative NODE_MODULES is taken from the current directory.
const resolveModules = (m) => path.resolve(m);

const [modules, which, input, out, repeatsArg] = process.argv.slice(2);
if (!modules || !which || !input || !out) {
  console.error('usage: js_encode.cjs NODE_MODULES js-tiktoken|gpt-3-encoder IN.txt OUT.bin|--bench [N]');
  process.exit(2);
}

let encode;
if (which === 'js-tiktoken') {
  const { getEncoding } = require(path.join(resolveModules(modules), 'js-tiktoken'));
  const enc = getEncoding('gpt2');
  encode = (s) => enc.encode(s);
} else if (which === 'gpt-3-encoder') {
  const g = require(path.join(resolveModules(modules), 'gpt-3-encoder'));
  encode = (s) => g.encode(s);
} else {
  console.error(`unknown encoder '${which}'`);
  process.exit(2);
}

const text = fs.readFileSync(input, 'utf8');
const run = () => encode(text);

if (out === '--bench') {
  const bytes = Buffer.byteLength(text, 'utf8');
  const repeats = Number(repeatsArg || 3);
  let ids = run();
  let best = Infinity;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    ids = run();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(`${which} ${(bytes / 1e6 / best).toPrecision(3)} ${ids.length}`);
} else {
  const ids = run();
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((id, i) => buf.writeInt32LE(id, i * 4));
  fs.writeFileSync(out, buf);
}
