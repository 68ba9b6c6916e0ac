#!/usr/bin/env node
// A codec program built from quicktype's TypeScript output, speaking the kit's codec line
// protocol like consumers/ts/codec.mjs: what a team that takes quicktype's converters as they
// come gets. Usage: node codec_ts.mjs DIR, DIR holding contract.js (quicktype's contract.ts
// compiled by tsc; tests/test_ts_package.py makes it). A type with no quicktype converter
// (quicktype writes them for the top-level schemas only) is answered `error`, as that team could
// not decode it.
import { createInterface } from "node:readline";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const dir = resolve(process.argv[2] ?? ".");
const { Convert } = await import(pathToFileURL(join(dir, "contract.js")).href);

// quicktype's converter names: `toHTTPError` for HttpError, `toJSONRPCEnvelope`, ...
const converters = new Map();
for (const name of Object.getOwnPropertyNames(Convert)) {
  if (name.startsWith("to")) converters.set(name.slice(2).toLowerCase(), name);
}
const oneLine = (s) => String(s).replace(/[\t\r\n]/g, " ");

function answer(line) {
  const tab = line.indexOf("\t");
  const type = line.slice(0, tab);
  const to = converters.get(type.toLowerCase());
  if (tab < 0 || to === undefined) return `error\t$\tno quicktype converter for ${oneLine(type)}`;
  const back = `${to.slice(2, 3).toLowerCase()}${to.slice(3)}ToJson`;
  try {
    const value = Convert[to](line.slice(tab + 1));
    return `ok\t${JSON.stringify(JSON.parse(Convert[back](value)))}`;
  } catch (e) {
    return `error\t$\t${oneLine(e.message)}`; // quicktype's errors name no JSON path
  }
}

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  process.stdout.write(`${answer(line)}\n`);
}
