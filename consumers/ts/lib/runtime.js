// The hand-written part of the package: the contract's strict JSON reading
// (schema/conformance/README.md, "How JSON text is read") and the small checks the generated
// decoders (../generated/contract.js) are made of. JSON.parse alone is not enough: it takes lone
// surrogate escapes, any depth, and numbers beyond every double (as Infinity).
//
// Errors carry the JSON path of the offending value in the Python validator's format
// (nvpair_wm.codec.InvalidFrame.path, msgspec style: `$.params.workloadInfo.seq`, `$.nodes[0]`),
// with `$` for the root and for text that is not JSON at all.

/** The contract's nesting bound: the frame is level 1. */
export const MAX_DEPTH = 64;
/** The largest integer of the contract (2^53 - 1). */
export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;

/** A value refused on decode (or on encode): where, and why. */
export class DecodeError extends Error {
  /**
   * @param {string} path
   * @param {string} reason
   */
  constructor(path, reason) {
    super(`${reason} - at \`${path}\``);
    this.name = "DecodeError";
    this.path = path;
    this.reason = reason;
  }
}

// -- the strict parser ------------------------------------------------------------------------

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);
/** @type {Record<string, string>} */
const ESCAPES = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

/**
 * Read JSON text under every rule of the contract: RFC 8259's grammar and nothing more, I-JSON
 * strings (no lone surrogate, escaped or not) and numbers (finite doubles), at most MAX_DEPTH
 * levels, the last of duplicate member names wins (in the position of the first, as Python's
 * and JavaScript's parsers keep it). Objects come back with a null prototype, so that a member
 * named `__proto__` is just a member. Throws DecodeError at `$`.
 * @param {string} text
 * @returns {unknown}
 */
export function parse(text) {
  let at = 0;
  /** @param {string} why @returns {never} */
  const fail = (why) => {
    throw new DecodeError("$", `malformed JSON: ${why} (at character ${at})`);
  };
  const space = () => {
    while (at < text.length && WS.has(text.charCodeAt(at))) at += 1;
  };
  const string = () => {
    at += 1; // the opening quote
    let out = "";
    let start = at;
    for (;;) {
      if (at >= text.length) fail("unterminated string");
      const c = text.charCodeAt(at);
      if (c === 0x22) {
        out += text.slice(start, at);
        at += 1;
        break;
      }
      if (c < 0x20) fail("a control character inside a string");
      if (c >= 0xd800 && c <= 0xdfff) {
        // Text read from UTF-8 holds no surrogates but in pairs; a string handed in may.
        const next = text.charCodeAt(at + 1);
        if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          at += 2;
          continue;
        }
        fail("a lone surrogate: strings must be Unicode scalar values (I-JSON, RFC 7493)");
      }
      if (c !== 0x5c) {
        at += 1;
        continue;
      }
      out += text.slice(start, at);
      const e = text[at + 1];
      if (e === "u") {
        const unit = hex4(at + 2);
        at += 6;
        if (unit >= 0xd800 && unit <= 0xdbff) {
          const low = text.startsWith("\\u", at) ? hex4(at + 2) : -1;
          if (low < 0xdc00 || low > 0xdfff) {
            fail(`lone surrogate \\u${unit.toString(16)}: strings must be Unicode scalar values (I-JSON, RFC 7493)`);
          }
          out += String.fromCharCode(unit, low);
          at += 6;
        } else if (unit >= 0xdc00 && unit <= 0xdfff) {
          fail(`lone surrogate \\u${unit.toString(16)}: strings must be Unicode scalar values (I-JSON, RFC 7493)`);
        } else {
          out += String.fromCharCode(unit);
        }
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
        at += 2;
      } else {
        fail("invalid escape character");
      }
      start = at;
    }
    return out;
  };
  /** @param {number} from */
  const hex4 = (from) => {
    const digits = text.slice(from, from + 4);
    if (!/^[0-9A-Fa-f]{4}$/.test(digits)) fail("invalid \\u escape");
    return parseInt(digits, 16);
  };
  /** @param {number} depth @returns {unknown} */
  const value = (depth) => {
    space();
    const c = text[at];
    if (c === "{" || c === "[") {
      if (depth + 1 > MAX_DEPTH) {
        fail(`nested deeper than ${MAX_DEPTH} levels of arrays and objects (the contract's MAX_DEPTH)`);
      }
      return c === "{" ? object(depth + 1) : array(depth + 1);
    }
    if (c === '"') return string();
    if (text.startsWith("true", at)) return (at += 4), true;
    if (text.startsWith("false", at)) return (at += 5), false;
    if (text.startsWith("null", at)) return (at += 4), null;
    NUMBER.lastIndex = at;
    const m = NUMBER.exec(text);
    if (m === null) return fail(at >= text.length ? "unexpected end of text" : "invalid character");
    const n = Number(m[0]);
    if (!Number.isFinite(n)) {
      fail(`number ${m[0].slice(0, 24)} is beyond every finite IEEE 754 double (I-JSON, RFC 7493)`);
    }
    at += m[0].length;
    return n;
  };
  /** @param {number} depth @returns {Record<string, unknown>} */
  const object = (depth) => {
    at += 1;
    const out = Object.create(null);
    space();
    if (text[at] === "}") return (at += 1), out;
    for (;;) {
      space();
      if (text[at] !== '"') fail(text[at] === "}" ? "trailing comma in object" : "object keys must be strings");
      const key = string();
      space();
      if (text[at] !== ":") fail("expected ':'");
      at += 1;
      out[key] = value(depth);
      space();
      if (text[at] === ",") {
        at += 1;
        continue;
      }
      if (text[at] === "}") return (at += 1), out;
      fail("expected ',' or '}'");
    }
  };
  /** @param {number} depth @returns {unknown[]} */
  const array = (depth) => {
    at += 1;
    /** @type {unknown[]} */
    const out = [];
    space();
    if (text[at] === "]") return (at += 1), out;
    for (;;) {
      space();
      if (text[at] === "]") fail("trailing comma in array");
      out.push(value(depth));
      space();
      if (text[at] === ",") {
        at += 1;
        continue;
      }
      if (text[at] === "]") return (at += 1), out;
      fail("expected ',' or ']'");
    }
  };
  if (text.charCodeAt(0) === 0xfeff) fail("a byte order mark (U+FEFF) before the text");
  const result = value(0);
  space();
  if (at < text.length) fail("trailing characters");
  return result;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * JSON text as UTF-8 bytes, or a string: bytes that are not UTF-8 are refused at `$`.
 * @param {string | Uint8Array} input
 * @returns {string}
 */
export function text(input) {
  if (typeof input === "string") return input;
  try {
    return utf8.decode(input);
  } catch {
    throw new DecodeError("$", "malformed JSON: invalid UTF-8 (JSON text is UTF-8, RFC 8259 section 8.1)");
  }
}

// -- the checks the generated decoders are made of ---------------------------------------------

/**
 * A JSON value's type in the Python validator's words.
 * @param {unknown} v
 */
export function typeName(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  switch (typeof v) {
    case "string":
      return "str";
    case "boolean":
      return "bool";
    case "number":
      return Number.isInteger(v) ? "int" : "float";
    case "object":
      return "object";
    default:
      return typeof v;
  }
}

/** @param {unknown} v */
export function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** @param {unknown} v */
export function isInteger(v) {
  return typeof v === "number" && Number.isInteger(v);
}

/**
 * @param {string} what
 * @param {unknown} v
 * @param {string} path
 */
function expected(what, v, path) {
  return new DecodeError(path, `Expected \`${what}\`, got \`${typeName(v)}\``);
}

/**
 * The number of Unicode code points in a string (what the schema's lengths count).
 * @param {string} s
 */
function codePoints(s) {
  let n = s.length;
  for (let i = 0; i < s.length; i += 1) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        n -= 1;
        i += 1;
      }
    }
  }
  return n;
}

/**
 * An object: returned as it is (its members are read by the caller).
 * @param {unknown} v
 * @param {string} path
 * @returns {Record<string, unknown>}
 */
export function object(v, path) {
  if (!isObject(v)) throw expected("object", v, path);
  return /** @type {Record<string, unknown>} */ (v);
}

/**
 * @param {unknown} v
 * @param {string} path
 * @param {number | null} min
 * @param {number | null} max
 * @param {RegExp | null} pattern
 * @param {string | null} source the pattern as the schema spells it, for the message
 */
export function string(v, path, min, max, pattern, source) {
  if (typeof v !== "string") throw expected("str", v, path);
  if (!v.isWellFormed()) throw new DecodeError(path, "a lone surrogate: strings must be Unicode scalar values");
  if (min !== null || max !== null) {
    const n = codePoints(v);
    if (min !== null && n < min) throw new DecodeError(path, `Expected \`str\` of length >= ${min}`);
    if (max !== null && n > max) throw new DecodeError(path, `Expected \`str\` of length <= ${max}`);
  }
  if (pattern !== null && !pattern.test(v)) {
    throw new DecodeError(path, `Expected \`str\` matching regex '${source}'`);
  }
  return v;
}

/**
 * An integer as JSON Schema counts them: any number with no fraction (1.0 and 1e0 included).
 * @param {unknown} v
 * @param {string} path
 * @param {number | null} min
 * @param {number | null} max
 * @returns {number}
 */
export function integer(v, path, min, max) {
  if (!isInteger(v)) throw expected("int", v, path);
  const n = /** @type {number} */ (v);
  if (min !== null && n < min) throw new DecodeError(path, `Expected \`int\` >= ${min}`);
  if (max !== null && n > max) throw new DecodeError(path, `Expected \`int\` <= ${max}`);
  return n === 0 ? 0 : n; // -0 is 0
}

/**
 * @param {unknown} v
 * @param {string} path
 * @returns {boolean}
 */
export function boolean(v, path) {
  if (typeof v !== "boolean") throw expected("bool", v, path);
  return v;
}

/**
 * @param {unknown} v
 * @param {string} path
 * @returns {null}
 */
export function nullValue(v, path) {
  if (v !== null) throw expected("null", v, path);
  return null;
}

/**
 * One of the listed strings or integers (a schema `enum` or `const`).
 * @template T
 * @param {unknown} v
 * @param {string} path
 * @param {readonly T[]} values all strings or all integers
 * @returns {T}
 */
export function literal(v, path, values) {
  const strings = typeof values[0] === "string";
  if (strings ? typeof v !== "string" : !isInteger(v)) throw expected(strings ? "str" : "int", v, path);
  const n = v === 0 ? 0 : v;
  if (!values.includes(/** @type {T} */ (n))) {
    throw new DecodeError(path, `Invalid enum value ${strings ? `'${v}'` : v}`);
  }
  return /** @type {T} */ (n);
}

/**
 * An array, each element decoded by `item` at its own path.
 * @template T
 * @param {unknown} v
 * @param {string} path
 * @param {number | null} min
 * @param {number | null} max
 * @param {(x: unknown, path: string) => T} item
 * @returns {T[]}
 */
export function array(v, path, min, max, item) {
  if (!Array.isArray(v)) throw expected("array", v, path);
  if (min !== null && v.length < min) throw new DecodeError(path, `Expected \`array\` of length >= ${min}`);
  if (max !== null && v.length > max) throw new DecodeError(path, `Expected \`array\` of length <= ${max}`);
  return v.map((x, i) => item(x, `${path}[${i}]`));
}

/**
 * The tag (`method`) of a tagged frame: checked before any other member, as the Python
 * validator does; the last `method` member counts.
 * @param {Record<string, unknown>} o
 * @param {string} path
 * @param {readonly string[]} tags the tags this position accepts
 * @returns {string}
 */
export function tag(o, path, tags) {
  if (!Object.hasOwn(o, "method")) throw missing("method", path);
  const m = o.method;
  if (typeof m !== "string") throw expected("str", m, `${path}.method`);
  if (!tags.includes(m)) throw new DecodeError(`${path}.method`, `Invalid value '${m}'`);
  return m;
}

/**
 * @param {string} name
 * @param {string} path
 */
export function missing(name, path) {
  return new DecodeError(path, `Object missing required field \`${name}\``);
}

/**
 * The first of `names` that `found` lacks, refused; in declaration order, after every member
 * that is there was checked.
 * @param {Record<string, unknown>} found
 * @param {readonly string[]} names
 * @param {string} path
 */
export function required(found, names, path) {
  for (const name of names) if (!Object.hasOwn(found, name)) throw missing(name, path);
}

/**
 * The first alternative that accepts `v`; when none does, the first one's refusal (a union
 * told apart by shape, not by a tag).
 * @param {unknown} v
 * @param {string} path
 * @param {readonly ((x: unknown, path: string) => unknown)[]} alternatives
 */
export function firstOf(v, path, alternatives) {
  let first = null;
  for (const decode of alternatives) {
    try {
      return decode(v, path);
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      first ??= e;
    }
  }
  throw first;
}

/**
 * Any JSON value (a member the schema leaves open), copied into plain objects and arrays. Also
 * checks a value built in code rather than parsed: finite numbers, well-formed strings, the
 * depth bound.
 * @param {unknown} v
 * @param {string} path
 * @param {number} [depth]
 * @returns {unknown}
 */
export function anyValue(v, path, depth = 0) {
  if (v === null || typeof v === "boolean") return v;
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new DecodeError(path, "a number beyond every finite double");
    return v === 0 ? 0 : v;
  }
  if (typeof v === "string") return string(v, path, null, null, null, null);
  if (depth + 1 > MAX_DEPTH) throw new DecodeError(path, `nested deeper than ${MAX_DEPTH} levels`);
  if (Array.isArray(v)) return v.map((x, i) => anyValue(x, `${path}[${i}]`, depth + 1));
  if (isObject(v)) return anyObject(v, path, null, depth);
  throw expected("a JSON value", v, path);
}

/**
 * An object the schema leaves open (`{"type": "object"}`), with at most `max` members.
 * @param {unknown} v
 * @param {string} path
 * @param {number | null} max
 * @param {number} [depth]
 * @returns {Record<string, unknown>}
 */
export function anyObject(v, path, max, depth = 0) {
  const o = object(v, path);
  const keys = Object.keys(o);
  if (max !== null && keys.length > max) throw new DecodeError(path, `Expected \`object\` of length <= ${max}`);
  return Object.fromEntries(keys.map((k) => [string(k, path, null, null, null, null), anyValue(o[k], `${path}.${k}`, depth + 1)]));
}
