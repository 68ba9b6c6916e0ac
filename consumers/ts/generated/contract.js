// Generated from schema/ by `make gen` (scripts/gen_ts.py). Do not edit by hand.
// Decoders for every schema root and $defs entry of schema/, by title.
import { DecodeError, anyObject, anyValue, array, boolean, firstOf, integer, isObject,
  literal, nullValue, object, parse, required, string, tag, text, typeName } from "../lib/runtime.js";

export { DecodeError, MAX_DEPTH, parse } from "../lib/runtime.js";

function inline1(v, p) {
  return array(v, p, 1, null, decodeBrokerResponse);
}

function inline2(v, p) {
  return array(v, p, 1, null, decodePeerResponse);
}

function inline3(v, p) {
  if (typeof v === "string") return string(v, p, null, 256, null, null);
  if (typeof v === "number") return integer(v, p, -9007199254740991, 9007199254740991);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`int | str | null\`, got \`${typeName(v)}\``);
}

function inline4(v, p) {
  return anyObject(v, p, null);
}

function inline5(v, p) {
  if (typeof v === "string") return literal(v, p, ["h2", "http/1.1"]);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`str | null\`, got \`${typeName(v)}\``);
}

function inline6(v, p) {
  if (typeof v === "string") return string(v, p, null, null, null, null);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`str | null\`, got \`${typeName(v)}\``);
}

function inline7(v, p) {
  if (typeof v === "number") return decodeEpochMillis(v, p);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`int | null\`, got \`${typeName(v)}\``);
}

function inline8(v, p) {
  if (typeof v === "string") return decodeFingerprint(v, p);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`str | null\`, got \`${typeName(v)}\``);
}

function inline9(v, p) {
  if (typeof v === "number") return integer(v, p, 1, 65535);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`int | null\`, got \`${typeName(v)}\``);
}

function inline10(v, p) {
  if (typeof v === "string") return string(v, p, null, 4096, null, null);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`str | null\`, got \`${typeName(v)}\``);
}

function inline11(v, p) {
  if (typeof v === "string") return string(v, p, null, 256, null, null);
  if (v === null) return nullValue(v, p);
  throw new DecodeError(p, `Expected \`str | null\`, got \`${typeName(v)}\``);
}

const BrokerFrameVariants = { "ready": decodeReady, "workloads:upsert": decodeWorkloadsUpsert, "workloads:remove": decodeWorkloadsRemove };
const BrokerFrameTags = Object.keys(BrokerFrameVariants);
function decodeBrokerFrame(v, p) {
  const o = object(v, p);
  return BrokerFrameVariants[tag(o, p, BrokerFrameTags)](o, p);
}

function decodeBrokerLine(v, p) {
  return firstOf(v, p, [decodeBrokerFrame, decodeBrokerResponse, inline1]);
}

function decodeBrokerResponse(v, p) {
  return firstOf(v, p, [decodeEventResponse, decodeStatusResponse, decodeErrorResponse]);
}

function decodeHttpError(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "error":
        f.error = string(o["error"], `${p}.error`, null, null, null, null);
        break;
      case "serverContractVersion":
        f.serverContractVersion = string(o["serverContractVersion"], `${p}.serverContractVersion`, null, null, null, null);
        break;
      case "requestContractVersion":
        f.requestContractVersion = string(o["requestContractVersion"], `${p}.requestContractVersion`, null, null, null, null);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["error"], p);
  return {
    error: f.error,
    ...("serverContractVersion" in f ? { serverContractVersion: f.serverContractVersion } : {}),
    ...("requestContractVersion" in f ? { requestContractVersion: f.requestContractVersion } : {}),
  };
}

function decodeHttpResponseBody(v, p) {
  return firstOf(v, p, [decodeEventsBody, decodeHttpError]);
}

function decodePeerResponse(v, p) {
  return firstOf(v, p, [decodeEventResponse, decodeErrorResponse]);
}

function decodeEventsBody(v, p) {
  return firstOf(v, p, [decodePeerResponse, inline2]);
}

const InboundFrameVariants = { "workload:submitted": decodeWorkloadSubmitted, "workload:started": decodeWorkloadStarted, "workload:completed": decodeWorkloadCompleted, "workload:errored": decodeWorkloadErrored, "workload:cancelled": decodeWorkloadCancelled, "workloads:remove": decodeWorkloadsRemove, "nodes:update": decodeNodesUpdate, "manager:status": decodeManagerStatus };
const InboundFrameTags = Object.keys(InboundFrameVariants);
function decodeInboundFrame(v, p) {
  const o = object(v, p);
  return InboundFrameVariants[tag(o, p, InboundFrameTags)](o, p);
}

function decodeJsonRpcEnvelope(v, p) {
  return anyValue(v, p);
}

function decodeRequestId(v, p) {
  return inline3(v, p);
}

function decodeErrorCode(v, p) {
  return literal(v, p, [-32700, -32600, -32601, -32602, -32603, -32000, -32001]);
}

function decodeErrorData(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "reason":
        f.reason = string(o["reason"], `${p}.reason`, null, null, null, null);
        break;
      case "path":
        f.path = string(o["path"], `${p}.path`, null, null, null, null);
        break;
      case "index":
        f.index = integer(o["index"], `${p}.index`, 0, 9007199254740991);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["reason"], p);
  return {
    reason: f.reason,
    ...("path" in f ? { path: f.path } : {}),
    ...("index" in f ? { index: f.index } : {}),
  };
}

function decodeErrorObject(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "code":
        f.code = decodeErrorCode(o["code"], `${p}.code`);
        break;
      case "message":
        f.message = string(o["message"], `${p}.message`, null, null, null, null);
        break;
      case "data":
        f.data = decodeErrorData(o["data"], `${p}.data`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["code", "message"], p);
  return {
    code: f.code,
    message: f.message,
    ...("data" in f ? { data: f.data } : {}),
  };
}

function decodeErrorResponse(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "error":
        f.error = decodeErrorObject(o["error"], `${p}.error`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "id", "error"], p);
  return {
    jsonrpc: f.jsonrpc,
    id: f.id,
    error: f.error,
  };
}

function decodeEventOutcome(v, p) {
  return literal(v, p, ["applied", "duplicate", "stale", "removed"]);
}

function decodeEventResult(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "outcome":
        f.outcome = decodeEventOutcome(o["outcome"], `${p}.outcome`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["outcome"], p);
  return {
    outcome: f.outcome,
  };
}

function decodeEventResponse(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "result":
        f.result = decodeEventResult(o["result"], `${p}.result`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "id", "result"], p);
  return {
    jsonrpc: f.jsonrpc,
    id: f.id,
    result: f.result,
  };
}

function decodeRequest(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "method":
        f.method = string(o["method"], `${p}.method`, null, null, null, null);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "params":
        f.params = anyObject(o["params"], `${p}.params`, null);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "method", "id"], p);
  return {
    jsonrpc: f.jsonrpc,
    method: f.method,
    id: f.id,
    ...("params" in f ? { params: f.params } : {}),
  };
}

function decodeNotification(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "method":
        f.method = string(o["method"], `${p}.method`, null, null, null, null);
        break;
      case "params":
        f.params = anyObject(o["params"], `${p}.params`, null);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "method"], p);
  return {
    jsonrpc: f.jsonrpc,
    method: f.method,
    ...("params" in f ? { params: f.params } : {}),
  };
}

function decodeSuccessResponse(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "result":
        f.result = anyValue(o["result"], `${p}.result`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "id", "result"], p);
  return {
    jsonrpc: f.jsonrpc,
    id: f.id,
    result: f.result,
  };
}

function decodeBatch(v, p) {
  return array(v, p, 1, null, inline4);
}

function decodeManagerStatus(v, p) {
  const o = object(v, p);
  tag(o, p, ["manager:status"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "params":
        f.params = anyObject(o["params"], `${p}.params`, 0);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "id"], p);
  return {
    method: "manager:status",
    jsonrpc: f.jsonrpc,
    id: f.id,
    ...("params" in f ? { params: f.params } : {}),
  };
}

function decodeCounters(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "framesIn":
        f.framesIn = decodeCount(o["framesIn"], `${p}.framesIn`);
        break;
      case "framesOut":
        f.framesOut = decodeCount(o["framesOut"], `${p}.framesOut`);
        break;
      case "invalid":
        f.invalid = decodeCount(o["invalid"], `${p}.invalid`);
        break;
      case "duplicates":
        f.duplicates = decodeCount(o["duplicates"], `${p}.duplicates`);
        break;
      case "stale":
        f.stale = decodeCount(o["stale"], `${p}.stale`);
        break;
      case "suppressed":
        f.suppressed = decodeCount(o["suppressed"], `${p}.suppressed`);
        break;
      case "evicted":
        f.evicted = decodeCount(o["evicted"], `${p}.evicted`);
        break;
      case "workloads":
        f.workloads = decodeCount(o["workloads"], `${p}.workloads`);
        break;
      case "tombstones":
        f.tombstones = decodeCount(o["tombstones"], `${p}.tombstones`);
        break;
      case "brokerQueue":
        f.brokerQueue = decodeCount(o["brokerQueue"], `${p}.brokerQueue`);
        break;
      case "byChannel":
        f.byChannel = decodeFramesByChannel(o["byChannel"], `${p}.byChannel`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["framesIn", "framesOut", "invalid", "duplicates", "stale", "suppressed", "evicted", "workloads", "tombstones", "brokerQueue"], p);
  return {
    framesIn: f.framesIn,
    framesOut: f.framesOut,
    invalid: f.invalid,
    duplicates: f.duplicates,
    stale: f.stale,
    suppressed: f.suppressed,
    evicted: f.evicted,
    workloads: f.workloads,
    tombstones: f.tombstones,
    brokerQueue: f.brokerQueue,
    ...("byChannel" in f ? { byChannel: f.byChannel } : {}),
  };
}

function decodeFramesByChannel(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "broker":
        f.broker = decodeChannelCounters(o["broker"], `${p}.broker`);
        break;
      case "peer":
        f.peer = decodeChannelCounters(o["peer"], `${p}.peer`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["broker", "peer"], p);
  return {
    broker: f.broker,
    peer: f.peer,
  };
}

function decodeChannelCounters(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "framesIn":
        f.framesIn = decodeCount(o["framesIn"], `${p}.framesIn`);
        break;
      case "framesOut":
        f.framesOut = decodeCount(o["framesOut"], `${p}.framesOut`);
        break;
      case "applied":
        f.applied = decodeCount(o["applied"], `${p}.applied`);
        break;
      case "duplicate":
        f.duplicate = decodeCount(o["duplicate"], `${p}.duplicate`);
        break;
      case "stale":
        f.stale = decodeCount(o["stale"], `${p}.stale`);
        break;
      case "suppressed":
        f.suppressed = decodeCount(o["suppressed"], `${p}.suppressed`);
        break;
      case "invalid":
        f.invalid = decodeCount(o["invalid"], `${p}.invalid`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["framesIn", "framesOut", "applied", "duplicate", "stale", "suppressed", "invalid"], p);
  return {
    framesIn: f.framesIn,
    framesOut: f.framesOut,
    applied: f.applied,
    duplicate: f.duplicate,
    stale: f.stale,
    suppressed: f.suppressed,
    invalid: f.invalid,
  };
}

function decodeCount(v, p) {
  return integer(v, p, 0, 9007199254740991);
}

function decodePeerStatus(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "nodeId":
        f.nodeId = string(o["nodeId"], `${p}.nodeId`, null, null, null, null);
        break;
      case "address":
        f.address = string(o["address"], `${p}.address`, null, null, null, null);
        break;
      case "port":
        f.port = integer(o["port"], `${p}.port`, 1, 65535);
        break;
      case "connected":
        f.connected = boolean(o["connected"], `${p}.connected`);
        break;
      case "protocol":
        f.protocol = inline5(o["protocol"], `${p}.protocol`);
        break;
      case "queueDepth":
        f.queueDepth = decodeCount(o["queueDepth"], `${p}.queueDepth`);
        break;
      case "sent":
        f.sent = decodeCount(o["sent"], `${p}.sent`);
        break;
      case "retried":
        f.retried = decodeCount(o["retried"], `${p}.retried`);
        break;
      case "coalesced":
        f.coalesced = decodeCount(o["coalesced"], `${p}.coalesced`);
        break;
      case "dropped":
        f.dropped = decodeCount(o["dropped"], `${p}.dropped`);
        break;
      case "lastError":
        f.lastError = inline6(o["lastError"], `${p}.lastError`);
        break;
      case "lastErrorAt":
        f.lastErrorAt = inline7(o["lastErrorAt"], `${p}.lastErrorAt`);
        break;
      case "contractVersion":
        f.contractVersion = inline6(o["contractVersion"], `${p}.contractVersion`);
        break;
      case "softwareVersion":
        f.softwareVersion = inline6(o["softwareVersion"], `${p}.softwareVersion`);
        break;
      case "state":
        f.state = literal(o["state"], `${p}.state`, ["connected", "connecting", "retrying", "given-up", "refused"]);
        break;
      case "lastSuccessAt":
        f.lastSuccessAt = inline7(o["lastSuccessAt"], `${p}.lastSuccessAt`);
        break;
      case "givenUp":
        f.givenUp = decodeCount(o["givenUp"], `${p}.givenUp`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["nodeId", "address", "port", "connected", "protocol", "queueDepth", "sent", "retried", "coalesced", "dropped", "lastError", "lastErrorAt"], p);
  return {
    nodeId: f.nodeId,
    address: f.address,
    port: f.port,
    connected: f.connected,
    protocol: f.protocol,
    queueDepth: f.queueDepth,
    sent: f.sent,
    retried: f.retried,
    coalesced: f.coalesced,
    dropped: f.dropped,
    lastError: f.lastError,
    lastErrorAt: f.lastErrorAt,
    ...("contractVersion" in f ? { contractVersion: f.contractVersion } : {}),
    ...("softwareVersion" in f ? { softwareVersion: f.softwareVersion } : {}),
    ...("state" in f ? { state: f.state } : {}),
    ...("lastSuccessAt" in f ? { lastSuccessAt: f.lastSuccessAt } : {}),
    ...("givenUp" in f ? { givenUp: f.givenUp } : {}),
  };
}

function decodeFastPaths(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "opensslDirect":
        f.opensslDirect = boolean(o["opensslDirect"], `${p}.opensslDirect`);
        break;
      case "loopRunQueue":
        f.loopRunQueue = boolean(o["loopRunQueue"], `${p}.loopRunQueue`);
        break;
      case "transportReadSize":
        f.transportReadSize = boolean(o["transportReadSize"], `${p}.transportReadSize`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["opensslDirect", "loopRunQueue", "transportReadSize"], p);
  return {
    opensslDirect: f.opensslDirect,
    loopRunQueue: f.loopRunQueue,
    transportReadSize: f.transportReadSize,
  };
}

function decodeJournalStatus(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "state":
        f.state = literal(o["state"], `${p}.state`, ["off", "healthy", "failing"]);
        break;
      case "failingSince":
        f.failingSince = inline7(o["failingSince"], `${p}.failingSince`);
        break;
      case "lastError":
        f.lastError = inline6(o["lastError"], `${p}.lastError`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["state", "failingSince", "lastError"], p);
  return {
    state: f.state,
    failingSince: f.failingSince,
    lastError: f.lastError,
  };
}

function decodeConfigStatus(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "generation":
        f.generation = integer(o["generation"], `${p}.generation`, 1, 9007199254740991);
        break;
      case "loadedAt":
        f.loadedAt = decodeEpochMillis(o["loadedAt"], `${p}.loadedAt`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["generation", "loadedAt"], p);
  return {
    generation: f.generation,
    loadedAt: f.loadedAt,
  };
}

function decodeStatusResult(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "version":
        f.version = string(o["version"], `${p}.version`, null, null, null, null);
        break;
      case "hasIdentity":
        f.hasIdentity = boolean(o["hasIdentity"], `${p}.hasIdentity`);
        break;
      case "fingerprint":
        f.fingerprint = inline8(o["fingerprint"], `${p}.fingerprint`);
        break;
      case "port":
        f.port = inline9(o["port"], `${p}.port`);
        break;
      case "peers":
        f.peers = array(o["peers"], `${p}.peers`, null, null, decodePeerStatus);
        break;
      case "counters":
        f.counters = decodeCounters(o["counters"], `${p}.counters`);
        break;
      case "journal":
        f.journal = decodeJournalStatus(o["journal"], `${p}.journal`);
        break;
      case "config":
        f.config = decodeConfigStatus(o["config"], `${p}.config`);
        break;
      case "fastPaths":
        f.fastPaths = decodeFastPaths(o["fastPaths"], `${p}.fastPaths`);
        break;
      case "capacity":
        f.capacity = array(o["capacity"], `${p}.capacity`, null, null, decodeCapacityShortfall);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["version", "hasIdentity", "fingerprint", "port", "peers", "counters"], p);
  return {
    version: f.version,
    hasIdentity: f.hasIdentity,
    fingerprint: f.fingerprint,
    port: f.port,
    peers: f.peers,
    counters: f.counters,
    ...("journal" in f ? { journal: f.journal } : {}),
    ...("config" in f ? { config: f.config } : {}),
    ...("fastPaths" in f ? { fastPaths: f.fastPaths } : {}),
    ...("capacity" in f ? { capacity: f.capacity } : {}),
  };
}

function decodeStatusResponse(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      case "result":
        f.result = decodeStatusResult(o["result"], `${p}.result`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "id", "result"], p);
  return {
    jsonrpc: f.jsonrpc,
    id: f.id,
    result: f.result,
  };
}

function decodeCapacityShortfall(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "key":
        f.key = string(o["key"], `${p}.key`, null, null, null, null);
        break;
      case "limit":
        f.limit = decodeCount(o["limit"], `${p}.limit`);
        break;
      case "needed":
        f.needed = decodeCount(o["needed"], `${p}.needed`);
        break;
      case "members":
        f.members = decodeCount(o["members"], `${p}.members`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["key", "limit", "needed", "members"], p);
  return {
    key: f.key,
    limit: f.limit,
    needed: f.needed,
    members: f.members,
  };
}

function decodeNodeRecord(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "nodeId":
        f.nodeId = string(o["nodeId"], `${p}.nodeId`, 1, 256, null, null);
        break;
      case "address":
        f.address = string(o["address"], `${p}.address`, 1, 253, null, null);
        break;
      case "fingerprint":
        f.fingerprint = decodeFingerprint(o["fingerprint"], `${p}.fingerprint`);
        break;
      case "port":
        f.port = integer(o["port"], `${p}.port`, 1, 65535);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["nodeId", "address", "fingerprint"], p);
  return {
    nodeId: f.nodeId,
    address: f.address,
    fingerprint: f.fingerprint,
    port: "port" in f ? f.port : 14320,
  };
}

function decodeFingerprint(v, p) {
  return string(v, p, 64, 64, /^[0-9a-f]{64}$/u, "^[0-9a-f]{64}$");
}

function decodeNodeStatus(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "version":
        f.version = string(o["version"], `${p}.version`, null, null, null, null);
        break;
      case "contractVersion":
        f.contractVersion = string(o["contractVersion"], `${p}.contractVersion`, null, null, /^1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/u, "^1\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$");
        break;
      case "hasIdentity":
        f.hasIdentity = boolean(o["hasIdentity"], `${p}.hasIdentity`);
        break;
      case "fingerprint":
        f.fingerprint = inline8(o["fingerprint"], `${p}.fingerprint`);
        break;
      case "port":
        f.port = inline9(o["port"], `${p}.port`);
        break;
      case "peers":
        f.peers = array(o["peers"], `${p}.peers`, null, null, decodePeerStatus);
        break;
      case "counters":
        f.counters = decodeCounters(o["counters"], `${p}.counters`);
        break;
      case "journal":
        f.journal = decodeJournalStatus(o["journal"], `${p}.journal`);
        break;
      case "config":
        f.config = decodeConfigStatus(o["config"], `${p}.config`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["version", "contractVersion", "hasIdentity", "fingerprint", "port", "peers", "counters", "journal", "config"], p);
  return {
    version: f.version,
    contractVersion: f.contractVersion,
    hasIdentity: f.hasIdentity,
    fingerprint: f.fingerprint,
    port: f.port,
    peers: f.peers,
    counters: f.counters,
    journal: f.journal,
    config: f.config,
  };
}

function decodeNodesUpdate(v, p) {
  const o = object(v, p);
  tag(o, p, ["nodes:update"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeNodesUpdateParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "nodes:update",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeNodesUpdateParams(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "nodes":
        f.nodes = array(o["nodes"], `${p}.nodes`, null, 1024, decodeNodeRecord);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["nodes"], p);
  return {
    nodes: f.nodes,
  };
}

const PeerFrameVariants = { "workload:submitted": decodeWorkloadSubmitted, "workload:started": decodeWorkloadStarted, "workload:completed": decodeWorkloadCompleted, "workload:errored": decodeWorkloadErrored, "workload:cancelled": decodeWorkloadCancelled, "workloads:remove": decodeWorkloadsRemove };
const PeerFrameTags = Object.keys(PeerFrameVariants);
function decodePeerFrame(v, p) {
  const o = object(v, p);
  return PeerFrameVariants[tag(o, p, PeerFrameTags)](o, p);
}

function decodeReady(v, p) {
  const o = object(v, p);
  tag(o, p, ["ready"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeReadyParams(o["params"], `${p}.params`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "ready",
    jsonrpc: f.jsonrpc,
    params: f.params,
  };
}

function decodeReadyParams(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "version":
        f.version = string(o["version"], `${p}.version`, 1, 64, null, null);
        break;
      case "contractVersion":
        f.contractVersion = string(o["contractVersion"], `${p}.contractVersion`, null, 32, /^1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/u, "^1\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$");
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["version", "contractVersion"], p);
  return {
    version: f.version,
    contractVersion: f.contractVersion,
  };
}

function decodeWorkloadEvents(v, p) {
  return anyValue(v, p);
}

function decodeLifecycleParams(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "workloadInfo":
        f.workloadInfo = decodeWorkloadInfo(o["workloadInfo"], `${p}.workloadInfo`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["workloadInfo"], p);
  return {
    workloadInfo: f.workloadInfo,
  };
}

function decodeWorkloadSubmitted(v, p) {
  const o = object(v, p);
  tag(o, p, ["workload:submitted"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeLifecycleParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workload:submitted",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeWorkloadStarted(v, p) {
  const o = object(v, p);
  tag(o, p, ["workload:started"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeLifecycleParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workload:started",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeWorkloadCompleted(v, p) {
  const o = object(v, p);
  tag(o, p, ["workload:completed"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeLifecycleParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workload:completed",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeWorkloadErrored(v, p) {
  const o = object(v, p);
  tag(o, p, ["workload:errored"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeLifecycleParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workload:errored",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeWorkloadCancelled(v, p) {
  const o = object(v, p);
  tag(o, p, ["workload:cancelled"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeLifecycleParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workload:cancelled",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeWorkloadInfo(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "id":
        f.id = string(o["id"], `${p}.id`, 1, 256, null, null);
        break;
      case "model":
        f.model = string(o["model"], `${p}.model`, 1, 512, null, null);
        break;
      case "engine":
        f.engine = string(o["engine"], `${p}.engine`, 1, 128, null, null);
        break;
      case "runId":
        f.runId = string(o["runId"], `${p}.runId`, 1, 128, null, null);
        break;
      case "state":
        f.state = decodeWorkloadState(o["state"], `${p}.state`);
        break;
      case "originatedFrom":
        f.originatedFrom = string(o["originatedFrom"], `${p}.originatedFrom`, 1, 256, null, null);
        break;
      case "createdAt":
        f.createdAt = decodeEpochMillis(o["createdAt"], `${p}.createdAt`);
        break;
      case "startedAt":
        f.startedAt = inline7(o["startedAt"], `${p}.startedAt`);
        break;
      case "completedAt":
        f.completedAt = inline7(o["completedAt"], `${p}.completedAt`);
        break;
      case "error":
        f.error = inline10(o["error"], `${p}.error`);
        break;
      case "seq":
        f.seq = decodeSeq(o["seq"], `${p}.seq`);
        break;
      case "scheduledOn":
        f.scheduledOn = string(o["scheduledOn"], `${p}.scheduledOn`, 1, 256, null, null);
        break;
      case "requesterId":
        f.requesterId = inline11(o["requesterId"], `${p}.requesterId`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["id", "model", "engine", "runId", "state", "originatedFrom", "createdAt", "startedAt", "completedAt", "error", "seq"], p);
  return {
    id: f.id,
    model: f.model,
    engine: f.engine,
    runId: f.runId,
    state: f.state,
    originatedFrom: f.originatedFrom,
    createdAt: f.createdAt,
    startedAt: f.startedAt,
    completedAt: f.completedAt,
    error: f.error,
    seq: f.seq,
    ...("scheduledOn" in f ? { scheduledOn: f.scheduledOn } : {}),
    ...("requesterId" in f ? { requesterId: f.requesterId } : {}),
  };
}

function decodeWorkloadState(v, p) {
  return literal(v, p, ["queued", "running", "completed", "failed", "cancelled"]);
}

function decodeEpochMillis(v, p) {
  return integer(v, p, 0, 9007199254740991);
}

function decodeSeq(v, p) {
  return integer(v, p, 1, 9007199254740991);
}

function decodeWorkloadsRemove(v, p) {
  const o = object(v, p);
  tag(o, p, ["workloads:remove"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeRemoveParams(o["params"], `${p}.params`);
        break;
      case "id":
        f.id = decodeRequestId(o["id"], `${p}.id`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workloads:remove",
    jsonrpc: f.jsonrpc,
    params: f.params,
    ...("id" in f ? { id: f.id } : {}),
  };
}

function decodeRemoveParams(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "workloadId":
        f.workloadId = string(o["workloadId"], `${p}.workloadId`, 1, 256, null, null);
        break;
      case "originatedFrom":
        f.originatedFrom = string(o["originatedFrom"], `${p}.originatedFrom`, 1, 256, null, null);
        break;
      case "runId":
        f.runId = string(o["runId"], `${p}.runId`, 1, 128, null, null);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["workloadId", "originatedFrom"], p);
  return {
    workloadId: f.workloadId,
    originatedFrom: f.originatedFrom,
    ...("runId" in f ? { runId: f.runId } : {}),
  };
}

function decodeWorkloadsUpsert(v, p) {
  const o = object(v, p);
  tag(o, p, ["workloads:upsert"]);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "jsonrpc":
        f.jsonrpc = literal(o["jsonrpc"], `${p}.jsonrpc`, ["2.0"]);
        break;
      case "params":
        f.params = decodeUpsertParams(o["params"], `${p}.params`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["jsonrpc", "params"], p);
  return {
    method: "workloads:upsert",
    jsonrpc: f.jsonrpc,
    params: f.params,
  };
}

function decodeUpsertParams(v, p) {
  const o = object(v, p);
  const f = {};
  for (const k of Object.keys(o)) {
    switch (k) {
      case "workloadInfo":
        f.workloadInfo = decodeWorkloadInfo(o["workloadInfo"], `${p}.workloadInfo`);
        break;
      default:
        break; // not in the schema: dropped
    }
  }
  required(f, ["workloadInfo"], p);
  return {
    workloadInfo: f.workloadInfo,
  };
}

const DECODERS = {
  BrokerFrame: decodeBrokerFrame,
  BrokerLine: decodeBrokerLine,
  BrokerResponse: decodeBrokerResponse,
  HttpError: decodeHttpError,
  HttpResponseBody: decodeHttpResponseBody,
  PeerResponse: decodePeerResponse,
  EventsBody: decodeEventsBody,
  InboundFrame: decodeInboundFrame,
  JsonRpcEnvelope: decodeJsonRpcEnvelope,
  RequestId: decodeRequestId,
  ErrorCode: decodeErrorCode,
  ErrorData: decodeErrorData,
  ErrorObject: decodeErrorObject,
  ErrorResponse: decodeErrorResponse,
  EventOutcome: decodeEventOutcome,
  EventResult: decodeEventResult,
  EventResponse: decodeEventResponse,
  Request: decodeRequest,
  Notification: decodeNotification,
  SuccessResponse: decodeSuccessResponse,
  Batch: decodeBatch,
  ManagerStatus: decodeManagerStatus,
  Counters: decodeCounters,
  FramesByChannel: decodeFramesByChannel,
  ChannelCounters: decodeChannelCounters,
  Count: decodeCount,
  PeerStatus: decodePeerStatus,
  FastPaths: decodeFastPaths,
  JournalStatus: decodeJournalStatus,
  ConfigStatus: decodeConfigStatus,
  StatusResult: decodeStatusResult,
  StatusResponse: decodeStatusResponse,
  CapacityShortfall: decodeCapacityShortfall,
  NodeRecord: decodeNodeRecord,
  Fingerprint: decodeFingerprint,
  NodeStatus: decodeNodeStatus,
  NodesUpdate: decodeNodesUpdate,
  NodesUpdateParams: decodeNodesUpdateParams,
  PeerFrame: decodePeerFrame,
  Ready: decodeReady,
  ReadyParams: decodeReadyParams,
  WorkloadEvents: decodeWorkloadEvents,
  LifecycleParams: decodeLifecycleParams,
  WorkloadSubmitted: decodeWorkloadSubmitted,
  WorkloadStarted: decodeWorkloadStarted,
  WorkloadCompleted: decodeWorkloadCompleted,
  WorkloadErrored: decodeWorkloadErrored,
  WorkloadCancelled: decodeWorkloadCancelled,
  WorkloadInfo: decodeWorkloadInfo,
  WorkloadState: decodeWorkloadState,
  EpochMillis: decodeEpochMillis,
  Seq: decodeSeq,
  WorkloadsRemove: decodeWorkloadsRemove,
  RemoveParams: decodeRemoveParams,
  WorkloadsUpsert: decodeWorkloadsUpsert,
  UpsertParams: decodeUpsertParams,
};

/** The type names decode and encode take: schema and $defs titles. */
export const TYPES = Object.freeze(Object.keys(DECODERS));

/**
 * Decode JSON text (a string, or UTF-8 bytes) as the named type, under the contract's strict
 * reading. Returns the value, with only the members the schema declares, in declaration order;
 * or the JSON path of the first violation (`$` for the root and for text that is not JSON) and
 * why.
 */
export function decode(type, input) {
  const decodeType = DECODERS[type];
  if (decodeType === undefined) throw new TypeError(`no type ${type} in the contract`);
  try {
    return { ok: true, value: decodeType(parse(text(input)), "$") };
  } catch (e) {
    if (e instanceof DecodeError) return { ok: false, path: e.path, reason: e.reason };
    throw e;
  }
}

/**
 * The compact JSON text of a value of the named type: checked as a decoded value is, unknown
 * members dropped, members in declaration order (the Python encoder's bytes). Throws
 * DecodeError for a value the type does not admit.
 */
export function encode(type, value) {
  const decodeType = DECODERS[type];
  if (decodeType === undefined) throw new TypeError(`no type ${type} in the contract`);
  return JSON.stringify(decodeType(value, "$"));
}
