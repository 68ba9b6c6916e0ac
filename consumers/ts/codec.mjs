#!/usr/bin/env node
// The example codec program of the kit's codec role (`nvpair-wm-conformance --codec -- node
// consumers/ts/codec.mjs`; the line protocol is in schema/conformance/README.md). Each input
// line is `TYPE<TAB>JSON`: TYPE a schema's or definition's title, JSON one frame's text. Each
// gets one answer line, in order: `ok<TAB>ENCODED`, the compact re-encoding, or
// `error<TAB>PATH<TAB>MESSAGE`, PATH the JSON path of the first violation (`$` for the root).
import { TYPES, decode, encode } from "./generated/contract.js";

const known = new Set(TYPES);
// The message goes on one line of the answer: no tab, no line break.
const oneLine = (s) => s.replace(/[\t\r\n]/g, " ");

/** @param {Buffer} line one input line, without its line feed */
function answer(line) {
  const tab = line.indexOf(0x09);
  if (tab < 0) return "error\t$\tno TAB: a line is TYPE<TAB>JSON";
  const type = line.subarray(0, tab).toString("utf8");
  if (!known.has(type)) return `error\t$\t${oneLine(`no type ${type} in the contract`)}`;
  try {
    // The frame's bytes as they came: decode refuses invalid UTF-8, as the contract does.
    const result = decode(type, line.subarray(tab + 1));
    if (!result.ok) return `error\t${result.path}\t${oneLine(result.reason)}`;
    return `ok\t${encode(type, result.value)}`;
  } catch (e) {
    // A bug, not a verdict: still one answer for this line, and the program goes on.
    return `error\t$\t${oneLine(`internal error: ${e}`)}`;
  }
}

// Lines are split as bytes (a line feed ends one; a CR before it is dropped), so that a frame
// that is not UTF-8 reaches decode as it was written. Each answer is written as soon as its line
// is complete: the kit may wait for it before it writes the next.
let held = Buffer.alloc(0);
for await (const chunk of process.stdin) {
  let data = held.length ? Buffer.concat([held, chunk]) : chunk;
  let out = "";
  for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a)) {
    const end = nl > 0 && data[nl - 1] === 0x0d ? nl - 1 : nl;
    out += `${answer(data.subarray(0, end))}\n`;
    data = data.subarray(nl + 1);
  }
  held = Buffer.from(data);
  if (out) process.stdout.write(out);
}
if (held.length) process.stdout.write(`${answer(held)}\n`);
