// Types of runtime.js: the contract's strict JSON reading and the checks the generated decoders
// use. Most consumers need only `decode`, `encode` and the types from the package's root.

/** The contract's nesting bound: the frame is level 1. */
export declare const MAX_DEPTH: 64;
/** The largest integer of the contract (2^53 - 1). */
export declare const MAX_SAFE_INTEGER: number;

/** A value refused on decode (or on encode): the JSON path of the offending value, and why. */
export declare class DecodeError extends Error {
  constructor(path: string, reason: string);
  /** `$` for the root and for text that is not JSON; else like `$.params.workloadInfo.seq`. */
  readonly path: string;
  readonly reason: string;
}

/** Read JSON text under the contract's rules (schema/conformance/README.md); throws DecodeError. */
export declare function parse(text: string): unknown;
/** UTF-8 bytes (or a string) as a string; invalid UTF-8 throws DecodeError. */
export declare function text(input: string | Uint8Array): string;
