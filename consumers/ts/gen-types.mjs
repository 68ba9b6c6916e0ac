// Generate TypeScript types from schema/ with json-schema-to-typescript, resolving every $ref
// locally (a $ref by $id is looked up among the schema files, never fetched), and with closed
// object types (no catch-all index signature: unknown members are dropped by receivers, so a
// consumer never reads them, and a typo such as `f.parms` does not compile).
// Usage: node gen-types.mjs OUT_FILE [SCHEMA_DIR]
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const here = fileURLToPath(new URL(".", import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "build", "types.ts"));
const dir = resolve(process.argv[3] ?? join(here, "..", "..", "schema"));

const byId = new Map();
for (const f of readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort()) {
  const schema = JSON.parse(readFileSync(join(dir, f), "utf8"));
  byId.set(schema.$id, schema);
}

const local = {
  order: 1,
  canRead: /^https?:/i,
  read(file) {
    const url = file.url.split("#")[0];
    const schema = byId.get(url);
    if (!schema) {
      const msg = `$ref to ${url}: not one of the schema files (no network)`;
      console.error(msg); // the ref parser wraps errors and loses the message
      throw new Error(msg);
    }
    return JSON.stringify(schema);
  },
};

const options = {
  bannerComment: "/* Generated from schema/ by consumers/ts/gen-types.mjs. Do not edit. */",
  additionalProperties: false,
  strictIndexSignatures: true,
  unknownAny: true,
  format: true,
  $refOptions: { resolve: { http: local, https: local, external: true } },
};

// One compile of a root that reaches what a broker or a peer reads and writes: the frame
// unions, every line to the broker and every HTTP body. Each schema title becomes one type name.
const base = "https://schemas.nvpair.dev/wm/v1/";
const root = {
  $id: `${base}consumer-root.json`,
  title: "Contract",
  type: "object",
  properties: {
    inbound: { $ref: `${base}inbound-frame.schema.json` },
    peer: { $ref: `${base}peer-frame.schema.json` },
    broker: { $ref: `${base}broker-frame.schema.json` },
    line: { $ref: `${base}broker-line.schema.json` },
    body: { $ref: `${base}http-response.schema.json` },
  },
};
const ts = await compile(root, "Contract", { ...options, cwd: dir });
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, ts);
console.log(`wrote ${out}: ${(ts.match(/^export (type|interface) /gm) ?? []).length} types`);
