// Validate every shape vector in schema/conformance/*.json with Ajv (JSON Schema 2020-12) in
// strict mode, and compare with its `valid` flag. A `json` vector is parsed with the contract's
// strict parser: JSON.parse (RFC 8259, the last of duplicate names wins), then I-JSON: no lone
// surrogate in any string or member name, no number beyond a finite double.
// Prints a summary line; exits 1 if any vector disagrees. Usage: node vectors.mjs [SCHEMA_DIR]
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const dir = resolve(process.argv[2] ?? join(here, "..", "..", "schema"));
const vectorDir = join(dir, "conformance");

const ajv = new Ajv2020({ strict: true, allErrors: true });
for (const f of readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort()) {
  ajv.addSchema(JSON.parse(readFileSync(join(dir, f), "utf8")));
}

// I-JSON on a parsed value: every string and member name is well-formed Unicode and every
// number finite (JSON.parse turns 1e400, and an integer literal beyond every double, into
// Infinity).
function iJson(value) {
  if (typeof value === "string") return value.isWellFormed();
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(iJson);
  if (value !== null && typeof value === "object") {
    return Object.entries(value).every(([k, v]) => k.isWellFormed() && iJson(v));
  }
  return true;
}

// The contract's nesting bound (schema/README.md, "Nesting and I-JSON in every member"): a frame
// nests at most 64 levels of arrays and objects, the frame object being level 1.
const MAX_DEPTH = 64;

function depth(value) {
  if (value === null || typeof value !== "object") return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  let deepest = 0;
  for (const child of children) deepest = Math.max(deepest, depth(child));
  return 1 + deepest;
}

function strictParse(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false };
  }
  return iJson(value) && depth(value) <= MAX_DEPTH ? { ok: true, value } : { ok: false };
}

const validators = new Map();
let total = 0;
const wrong = [];
const files = readdirSync(vectorDir).filter((f) => f.endsWith(".json")).sort();
for (const file of files) {
  for (const group of JSON.parse(readFileSync(join(vectorDir, file), "utf8"))) {
    const ref = group.schema.$ref;
    if (!validators.has(ref)) validators.set(ref, ajv.compile({ $ref: ref }));
    const validate = validators.get(ref);
    for (const t of group.tests) {
      total += 1;
      let verdict;
      if ("json" in t) {
        const parsed = strictParse(t.json);
        verdict = parsed.ok && validate(parsed.value);
      } else {
        verdict = validate(t.data);
      }
      if (verdict !== t.valid) {
        const why = verdict ? "accepted" : ajv.errorsText(validate.errors);
        wrong.push(`${file}: ${group.description}: ${t.description}: expected ${t.valid} (${why})`);
      }
    }
  }
}
for (const w of wrong) console.log(`WRONG ${w}`);
console.log(`${total - wrong.length}/${total} vectors agree (${files.length} files, Ajv strict)`);
process.exit(wrong.length || total === 0 ? 1 : 0);
