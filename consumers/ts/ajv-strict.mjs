// Compile every schema in schema/ with Ajv (JSON Schema 2020-12) in strict mode: no unknown
// keywords, no ambiguous types, no `required` member left undefined. Prints one line per schema
// and exits non-zero if any schema fails. Usage: node ajv-strict.mjs [SCHEMA_DIR]
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const dir = resolve(process.argv[2] ?? join(here, "..", "..", "schema"));
const files = readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort();
if (files.length === 0) {
  console.error(`no *.schema.json in ${dir}`);
  process.exit(2);
}

// strict: true turns every strict-mode check into an error (strictSchema, strictNumbers,
// strictTypes, strictTuples, strictRequired); allErrors so a refusal explains itself fully.
const ajv = new Ajv2020({ strict: true, allErrors: true });
const schemas = files.map((f) => [f, JSON.parse(readFileSync(join(dir, f), "utf8"))]);
let failed = 0;
try {
  for (const [, s] of schemas) ajv.addSchema(s);
} catch (e) {
  console.error(`addSchema: ${e.message}`);
  process.exit(1);
}
for (const [f, s] of schemas) {
  let bad = 0;
  const refs = [s.$id, ...Object.keys(s.$defs ?? {}).map((d) => `${s.$id}#/$defs/${d}`)];
  for (const ref of refs) {
    try {
      ajv.getSchema(ref) ?? ajv.compile({ $ref: ref });
    } catch (e) {
      bad += 1;
      console.log(`FAIL ${ref}: ${e.message}`);
    }
  }
  // A schema's own examples must be valid under it: a cheap check that compiling was not vacuous.
  const validate = ajv.getSchema(s.$id);
  for (const [i, ex] of (s.examples ?? []).entries()) {
    if (validate && !validate(ex)) {
      bad += 1;
      console.log(`FAIL ${s.$id} examples[${i}]: ${ajv.errorsText(validate.errors)}`);
    }
  }
  failed += bad;
  if (!bad) console.log(`ok ${f} (${refs.length} schemas, ${(s.examples ?? []).length} examples)`);
}
process.exit(failed ? 1 : 0);
