// A broker-side consumer written against the package's generated types (generated/contract.d.ts,
// made by `make gen`). It must compile under `tsc --strict --exactOptionalPropertyTypes`:
// the switches over `method` are exhaustive (a new frame type in schema/ stops the build at
// `assertNever` until it is handled), and closed types refuse a typo such as `f.parms`.
import type {
  BrokerFrame,
  BrokerLine,
  BrokerResponse,
  HttpResponseBody,
  InboundFrame,
  PeerResponse,
  RequestId,
  WorkloadInfo,
} from "./generated/contract.js";

function assertNever(frame: never): never {
  throw new Error(`unhandled frame ${JSON.stringify(frame)}`);
}

/** A request has an id (even null) and gets one response; a notification has none. */
export function requestId(frame: InboundFrame): RequestId | undefined {
  return "id" in frame ? frame.id : undefined;
}

function where(info: WorkloadInfo): string {
  // scheduledOn may be absent, never null; requesterId may be absent or null.
  const on = info.scheduledOn ?? "unscheduled";
  const by = info.requesterId === undefined ? "" : ` for ${info.requesterId ?? "nobody"}`;
  return `${info.id}@${info.runId} seq ${info.seq} on ${on}${by}`;
}

export function describeInbound(frame: InboundFrame): string {
  switch (frame.method) {
    case "workload:submitted":
    case "workload:started":
    case "workload:completed":
    case "workload:errored":
    case "workload:cancelled":
      return `${frame.method} ${where(frame.params.workloadInfo)}`;
    case "workloads:remove":
      return `remove ${frame.params.workloadId} from ${frame.params.originatedFrom}`;
    case "nodes:update":
      return `nodes ${frame.params.nodes.map((n) => n.nodeId).join(",")}`;
    case "manager:status":
      return `status request ${String(frame.id)}`;
    default:
      return assertNever(frame);
  }
}

export function describeBroker(frame: BrokerFrame): string {
  switch (frame.method) {
    case "ready":
      return `ready ${frame.params.version}`;
    case "workloads:upsert":
      return `upsert ${where(frame.params.workloadInfo)}`;
    case "workloads:remove":
      return `remove ${frame.params.workloadId}${frame.params.runId === undefined ? "" : `@${frame.params.runId}`}`;
    default:
      return assertNever(frame);
  }
}

function describeResponse(r: BrokerResponse | PeerResponse): string {
  if ("error" in r) return `error ${r.error.code} ${r.error.message} for ${String(r.id)}`;
  return "outcome" in r.result
    ? `${r.result.outcome} for ${String(r.id)}`
    : `status: ${r.result.version}, ${r.result.peers.length} peers`;
}

/** Any line the manager writes to its broker: a frame, one response, or a batch's responses. */
export function describeLine(line: BrokerLine): string {
  if (Array.isArray(line)) return line.map(describeResponse).join("; ");
  return "method" in line ? describeBroker(line) : describeResponse(line);
}

/** Any body of POST /v1/workloads/events: responses (200, 400) or {"error": ...}. */
export function describeBody(body: HttpResponseBody): string {
  if (Array.isArray(body)) return body.map(describeResponse).join("; ");
  return "jsonrpc" in body ? describeResponse(body) : `refused: ${body.error}`;
}
