// Generated from schema/ by `make gen` (scripts/gen_ts.py). Do not edit by hand.
// Types of every schema root and $defs entry of schema/, by title. An optional
// member (`name?:`) may be absent; one typed `| null` may be null: compile with
// exactOptionalPropertyTypes to keep the two apart.

export { DecodeError, MAX_DEPTH, parse } from "../lib/runtime.js";

/**
 * Every notification a manager writes to its broker, as one union tagged on 'method'. Besides
 * these, the broker receives responses (EventResponse, StatusResponse, ErrorResponse) to the
 * requests it sent.
 */
export type BrokerFrame = Ready | WorkloadsUpsert | WorkloadsRemove;

/**
 * Every line a manager writes to its broker (stdout, or the --ipc socket), one JSON text per line:
 * a BrokerFrame notification, the answer to one request of the broker (an EventResponse, a
 * StatusResponse or an ErrorResponse), or a non-empty array of such answers (the answer to a
 * batch). Nothing else is ever written there; logs go to stderr.
 */
export type BrokerLine = BrokerFrame | BrokerResponse | [BrokerResponse, ...BrokerResponse[]];

/**
 * The answer to one request of the broker: EventResponse (a lifecycle event, workloads:remove or
 * nodes:update sent with an id), StatusResponse (manager:status) or ErrorResponse.
 */
export type BrokerResponse = EventResponse | StatusResponse | ErrorResponse;

/**
 * The body of every HTTP error of the inter-node endpoint that is not a JSON-RPC answer: 403, 404,
 * 405, 408, 409, 413, 415, 431, 500, 501 and 503, and 400 for malformed HTTP (not for invalid
 * frames, which get a JSON-RPC 400 body: EventsBody). Content-Type application/json. The text is
 * for people; a client decides by the status code alone.
 */
export interface HttpError {
  /** What was wrong, in words. */
  error: string;
  /** 409 only: the contract version the answering node speaks (added in 1.2.0). */
  serverContractVersion?: string;
  /**
   * 409 only: the contract version the request said it speaks, of another major (added in 1.2.0).
   */
  requestContractVersion?: string;
}

/**
 * Every body the inter-node endpoint (POST /v1/workloads/events) answers with: the JSON-RPC answers
 * of a 200 or 400 (EventsBody), or an HttpError for every other status that has a body. A 202 has
 * no body.
 */
export type HttpResponseBody = EventsBody | HttpError;

/**
 * The answer to one frame of a request body: an EventResponse for a valid request (a frame with an
 * id), or an ErrorResponse for an invalid frame. Over HTTP every invalid frame is answered,
 * notifications included, so that the sender learns what was refused; in a batch, error.data.index
 * names the frame.
 */
export type PeerResponse = EventResponse | ErrorResponse;

/**
 * The body of a 200 (every frame valid, some of them requests) or a 400 (at least one frame
 * invalid; the valid frames were applied): one PeerResponse when the request body held one frame,
 * or a non-empty array of them, in frame order, when it held a batch. Content-Type
 * application/json.
 */
export type EventsBody = PeerResponse | [PeerResponse, ...PeerResponse[]];

/**
 * Every frame a manager accepts, as one union tagged on 'method': decode once, and the frame is
 * validated and typed. The local channel (broker) accepts all of them; the inter-node channel
 * (peers) accepts the lifecycle notifications and workloads:remove, and answers the others with
 * -32601.
 */
export type InboundFrame = WorkloadSubmitted | WorkloadStarted | WorkloadCompleted | WorkloadErrored | WorkloadCancelled | WorkloadsRemove | NodesUpdate | ManagerStatus;

/**
 * JSON-RPC 2.0 envelopes and the pieces shared by every frame, on the local channel
 * (newline-delimited) and on the inter-node channel (HTTP body). A frame with an 'id' member (even
 * null) is a request and gets exactly one response; a frame without one is a notification and gets
 * none, not even an error. A batch is a non-empty JSON array of frames; an empty array is one
 * Invalid Request error. Only by-name params (an object) are accepted. Frames are I-JSON (RFC
 * 7493). Strings are sequences of Unicode scalar values: a lone surrogate escape such as "\ud800"
 * makes the whole frame unparseable (-32700), even inside a member that nothing reads. Numbers are
 * IEEE 754 doubles: every integer in this contract lies within -(2^53-1)..2^53-1, where a double
 * holds it exactly; an integer may also be written 1.0 or 1e3 (JSON Schema's data model), though
 * senders should write plain integers; a number no finite double holds (1e400) makes the frame
 * unparseable. Member names are unique: producers MUST NOT send duplicate names, because some
 * languages' derived deserializers (serde's, for one) reject them. A receiver that meets duplicates
 * anyway keeps the LAST value of each name, 'method' included: the last 'method' member decides the
 * frame's type.
 */
export type JsonRpcEnvelope = unknown;

/**
 * Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so
 * that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response
 * carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid
 * Request (-32600), answered with id null.
 */
export type RequestId = string | number | null;

/**
 * The error codes nvpair-wm sends. Each branch fixes one code; its title is the error's message
 * (ErrorObject.message), its description says when it is sent. A receiver treats a code it does not
 * know as a failure of that request, with no further meaning.
 */
export type ErrorCode = -32700 | -32600 | -32601 | -32602 | -32603 | -32000 | -32001;

/** Machine-readable detail of an error. */
export interface ErrorData {
  /** Why the frame was refused, in the validator's words. */
  reason: string;
  /**
   * JSON path of the offending value, rooted at the frame, for example $.params.workloadInfo.seq.
   */
  path?: string;
  /** Position of the frame in the batch (HTTP bodies and local batches), from 0. */
  index?: number;
}

/**
 * The error member of an ErrorResponse: one of our codes, its standard message (see ErrorCode), and
 * usually data saying where and why.
 */
export interface ErrorObject {
  code: ErrorCode;
  message: string;
  data?: ErrorData;
}

/** Answer to a request that failed. id is null when the request's id could not be read. */
export interface ErrorResponse {
  jsonrpc: "2.0";
  id: RequestId;
  error: ErrorObject;
}

/**
 * What the manager did with a lifecycle event or removal. applied: new, recorded and forwarded.
 * duplicate: already seen with this (runId, id, seq), or the removal was already applied. stale:
 * older than the newest seen for (runId, id), not forwarded. removed: the workload was removed
 * (tombstoned), the event is not forwarded.
 */
export type EventOutcome = "applied" | "duplicate" | "stale" | "removed";

/** Result of a lifecycle event or removal sent as a request (with an id). */
export interface EventResult {
  outcome: EventOutcome;
}

/**
 * Answer to a lifecycle event, workloads:remove or nodes:update sent as a request (with an id): the
 * SuccessResponse whose result is an EventResult.
 */
export interface EventResponse {
  jsonrpc: "2.0";
  id: RequestId;
  result: EventResult;
}

/**
 * The generic shape of a JSON-RPC 2.0 request: a call that gets exactly one response, a
 * SuccessResponse or an ErrorResponse with the same id. The presence of an 'id' member, even null,
 * is what makes a frame a request. The concrete types are the frames of InboundFrame, which pin
 * 'method' and 'params': any of them sent with an id, and manager:status, which must have one.
 */
export interface Request {
  jsonrpc: "2.0";
  /**
   * The method; it selects the frame type (see InboundFrame). An unknown one is answered with
   * -32601.
   */
  method: string;
  id: RequestId;
  /** By-name parameters. Positional (array) params are refused with -32602. */
  params?: { [member: string]: unknown };
}

/**
 * The generic shape of a JSON-RPC 2.0 notification: a frame without an 'id' member. It gets no
 * response, not even an error; an invalid one is logged and counted (Counters.invalid). A receiver
 * tells a notification from a Request by the presence of 'id' alone, before it validates anything
 * else, so this definition lists the members a notification has and does not repeat that test: an
 * object that also has an 'id' matches it, and is a Request. The concrete types are the frames of
 * InboundFrame and BrokerFrame sent without an id.
 */
export interface Notification {
  jsonrpc: "2.0";
  /** The method; it selects the frame type (see InboundFrame and BrokerFrame). */
  method: string;
  /** By-name parameters (an object). */
  params?: { [member: string]: unknown };
}

/**
 * The generic shape of the answer to a request that succeeded, with the request's id. The concrete
 * types are EventResponse (result EventResult) and manager-status.schema.json's StatusResponse
 * (result StatusResult). A response has either 'result' or 'error' (ErrorResponse), never both.
 */
export interface SuccessResponse {
  jsonrpc: "2.0";
  id: RequestId;
  /**
   * The method's result: any JSON value (null included) in the generic shape; the concrete response
   * types fix it.
   */
  result: unknown;
}

/**
 * Several frames in one JSON array: one line of the local channel, or one HTTP body. A batch is a
 * non-empty array of Requests and Notifications, in any mix. Each element is decoded, validated and
 * answered on its own, as if it had come alone: an invalid element gets its own error response and
 * does not disturb the others (on the local channel only when it is a request, or not even an
 * object; over HTTP every invalid element is answered). The answer is one array holding the
 * responses to the element requests, each error naming its element in data.index; there is no
 * answer when every element was a notification. An empty array is not a batch: it gets a single
 * Invalid Request error (-32600). A valid batch holds only objects; each of them is checked against
 * its frame type, not by this definition.
 */
export type Batch = [{ [member: string]: unknown }, ...{ [member: string]: unknown }[]];

/**
 * Broker to manager request 'manager:status' (it must carry an id: without one it is an invalid
 * notification, which gets no answer) and its result: what an operator needs to see whether this
 * node relays: identity, the bound port, each peer's link and queue, and counters since start.
 */
export interface ManagerStatus {
  method: "manager:status";
  jsonrpc: "2.0";
  id: RequestId;
  /** No parameters; an empty object may be sent. */
  params?: Record<string, never>;
}

/**
 * Monotonic counters since the process started, except the gauges workloads, tombstones and
 * brokerQueue, which say how many there are now.
 */
export interface Counters {
  /** Frames received on either channel (each batch element counts); byChannel splits it. */
  framesIn: Count;
  /** Frames written to the broker. */
  framesOut: Count;
  /** Frames refused with a JSON-RPC error or dropped as invalid notifications. */
  invalid: Count;
  /** Events collapsed as duplicates. */
  duplicates: Count;
  /** Events older than the newest seen for their workload. */
  stale: Count;
  /** Events for removed (tombstoned) workloads. */
  suppressed: Count;
  /** Entries evicted by the hard cap before their TTL. */
  evicted: Count;
  /** Workloads tracked now. */
  workloads: Count;
  /** Tombstones held now. */
  tombstones: Count;
  /** Frames waiting to be written to the broker now. */
  brokerQueue: Count;
  byChannel?: FramesByChannel;
}

/**
 * The frames of each channel since the process started, in and out, and what became of those
 * received: broker is the local channel (frames from the broker, lines written to it), peer the
 * inter-node channel (frames from peers, each batch element counting; frames relayed toward the
 * peers). Counters.byChannel since 1.1.0: optional in the schema, so that a status from a 1.0
 * manager stays valid; a 1.1 manager always sends it.
 */
export interface FramesByChannel {
  broker: ChannelCounters;
  peer: ChannelCounters;
}

/**
 * One channel's frames: received (framesIn), sent (framesOut), and the outcome of each received
 * frame. framesIn is at least applied + duplicate + stale + suppressed + invalid; the rest are
 * frames with no such outcome (nodes:update, manager:status).
 */
export interface ChannelCounters {
  /**
   * Frames received on this channel (each batch element counts; a line over the frame limit or a
   * refused batch counts once).
   */
  framesIn: Count;
  /**
   * broker: lines written to the broker (responses, batch answers and notifications). peer: frames
   * relayed toward the peers, each once however many peers there are (each peer's delivery is in
   * PeerStatus.sent).
   */
  framesOut: Count;
  /** Events and removals received on this channel that changed the table. */
  applied: Count;
  /** Events and removals received on this channel and collapsed as duplicates. */
  duplicate: Count;
  /** Events received on this channel older than the newest seen for their workload. */
  stale: Count;
  /** Events received on this channel for removed (tombstoned) workloads (outcome removed). */
  suppressed: Count;
  /**
   * Frames received on this channel and refused with a JSON-RPC error or dropped as invalid
   * notifications.
   */
  invalid: Count;
}

/**
 * A counter or a gauge: an integer from 0 to 2^53-1, the largest integer that every language's JSON
 * number type holds exactly.
 */
export type Count = number;

/**
 * One peer's outbound link: where it is, whether it is connected, and what happened to the frames
 * queued for it.
 */
export interface PeerStatus {
  /** The peer's node id, from its NodeRecord. */
  nodeId: string;
  /** The address dialled, from its NodeRecord. */
  address: string;
  /** The port dialled, from its NodeRecord. */
  port: number;
  /** Whether a connection to the peer is up now. */
  connected: boolean;
  /** Negotiated protocol of the live connection, null when not connected. */
  protocol: "h2" | "http/1.1" | null;
  /** Frames waiting to be sent to the peer now (a gauge). */
  queueDepth: Count;
  /** Frames the peer accepted. */
  sent: Count;
  /** Send attempts repeated after a failure. */
  retried: Count;
  /** Queued events replaced by a newer event of the same workload. */
  coalesced: Count;
  /** Frames dropped (queue full after coalescing, retries exhausted, or refused with a 4xx). */
  dropped: Count;
  /** The last failure on this link, in words; null if there has been none. */
  lastError: string | null;
  /** When lastError happened, in epoch milliseconds; null if there has been none. */
  lastErrorAt: EpochMillis | null;
  /**
   * The contract version the peer last said it speaks (the nvpair-contract-version header of its
   * requests or responses); null until it has said one, or when it sends none (nvpair-wm 0.1.0).
   * Optional in the schema (added in 1.2.0), always sent by a 1.2 manager.
   */
  contractVersion?: string | null;
  /**
   * The nvpair-wm version the peer last said it runs (the user-agent of its requests, the server of
   * its responses: nvpair-wm/X.Y.Z); "unknown" for an nvpair-wm that names no version (0.1.0); null
   * until it has said, or when the peer is not nvpair-wm. Optional in the schema (added in 1.2.0),
   * always sent by a 1.2 manager.
   */
  softwareVersion?: string | null;
  /**
   * What the link is doing now: connected (a connection is up), connecting (no failure since the
   * last success), retrying (failures counted, backing off before the next attempt), given-up
   * (retries exhausted: its queue was dropped and it is probed every broadcast.retry_max_delay; the
   * peer is resynchronised by a snapshot once it answers), refused (the peer speaks another major
   * contract version: probed every broadcast.version_probe_interval). Optional in the schema (added
   * in 1.3.0), always sent by a 1.3 manager.
   */
  state?: "connected" | "connecting" | "retrying" | "given-up" | "refused";
  /**
   * When the peer last accepted a batch (2xx), in epoch milliseconds; null if it has not yet.
   * Optional in the schema (added in 1.3.0), always sent by a 1.3 manager.
   */
  lastSuccessAt?: EpochMillis | null;
  /**
   * How many times the link gave up (retries exhausted: its queue dropped, see state given-up).
   * Optional in the schema (added in 1.3.0), always sent by a 1.3 manager.
   */
  givenUp?: Count;
}

/**
 * Which fast paths that reach into another library's internals are on (true) or off (false: the
 * public path, slower, with the same behaviour), as checked once at start. StatusResult.fastPaths
 * since 1.3.0: optional in the schema, always sent by a 1.3 manager.
 */
export interface FastPaths {
  /** TLS records go through OpenSSL's cffi binding, past pyOpenSSL's per-call wrappers. */
  opensslDirect: boolean;
  /**
   * Writes are gathered at the end of the event loop's batch of ready callbacks (read from the
   * loop's run queue).
   */
  loopRunQueue: boolean;
  /** Reads stay under the allocator's mmap threshold (the transports' read size is set). */
  transportReadSize: boolean;
}

/**
 * The journal (what this node originated, kept in its cluster directory so that a restart forgets
 * nothing): state is off (only by configuration: no cluster directory, or journal.enabled false),
 * healthy, or failing (opening it, a write, an fsync, a rename or a compaction's install failed, at
 * start or later: the node retries with backoff and rewrites the whole current state once writing
 * works again; a crash before that loses what the peers have not received). StatusResult.journal
 * since 1.2.0: optional in the schema, so that a status from a 1.1 manager stays valid; a 1.2
 * manager always sends it.
 */
export interface JournalStatus {
  state: "off" | "healthy" | "failing";
  /** When the journal started failing (epoch milliseconds); null unless failing. */
  failingSince: EpochMillis | null;
  /**
   * What failed last (the operation and the system's reason, e.g. 'write to: No space left on
   * device'); null unless failing.
   */
  lastError: string | null;
}

/**
 * The running configuration: generation counts the configurations the node has run with (1 at
 * start, one more for each reload that applied a change: SIGHUP re-reads the --config file),
 * loadedAt is when the current one was loaded. StatusResult.config since 1.3.0: optional in the
 * schema, so that a status from a 1.2 manager stays valid; a 1.3 manager always sends it.
 */
export interface ConfigStatus {
  /** 1 at start, one more for each reload that changed something. */
  generation: number;
  /** When this configuration was loaded (epoch milliseconds). */
  loadedAt: EpochMillis;
}

/**
 * The result of manager:status: this node's version, identity and bound port, one PeerStatus per
 * current peer, the counters, the journal's state, the running configuration's generation, which
 * fast paths are on, and the limits that cap it below its member count.
 */
export interface StatusResult {
  /** nvpair-wm version (as in ready). */
  version: string;
  /**
   * Whether cluster-dir holds a usable node.crt/node.key; without one the node neither serves nor
   * sends inter-node traffic.
   */
  hasIdentity: boolean;
  /**
   * This node's certificate fingerprint (the same Fingerprint as in NodeRecord, by which peers pin
   * it); null without identity.
   */
  fingerprint: Fingerprint | null;
  /**
   * The bound inter-node port (the real one when --port 0 was given, never 0); null when not
   * listening.
   */
  port: number | null;
  /** One entry per current peer. */
  peers: PeerStatus[];
  counters: Counters;
  journal?: JournalStatus;
  config?: ConfigStatus;
  fastPaths?: FastPaths;
  /**
   * Each limit that caps this node below its member count, with the key that raises it; empty when
   * none does (the defaults follow the member count).
   */
  capacity?: CapacityShortfall[];
}

/** Answer to manager:status: the SuccessResponse whose result is a StatusResult. */
export interface StatusResponse {
  jsonrpc: "2.0";
  id: RequestId;
  result: StatusResult;
}

/**
 * A limit that caps this node below its current member count (the certificates pinned in trusted/):
 * the full mesh needs per member a handshake slot and a listen backlog entry (every member may
 * reconnect in the same second), two inbound connections (its link, and its old one while a
 * reconnect overlaps it) and descriptors for both directions. key names what raises it: a
 * configuration key (http.max_unauthenticated_connections, http.max_connections,
 * http.listen_backlog) or a system setting (RLIMIT_NOFILE, net.core.somaxconn).
 * StatusResult.capacity since 1.3.0: optional in the schema, so that a status from a 1.2 manager
 * stays valid; a 1.3 manager always sends it.
 */
export interface CapacityShortfall {
  /** The configuration key or system setting that raises the limit. */
  key: string;
  /** The limit in force. */
  limit: Count;
  /** What the current member count needs. */
  needed: Count;
  /** The member count it was computed for (certificates pinned now). */
  members: Count;
}

/**
 * One cluster member as the broker knows it. Peers are discovered only from these records (never by
 * browsing the network). A record is a peer when its fingerprint is not this node's own and is
 * currently pinned in cluster-dir/trusted/.
 */
export interface NodeRecord {
  /** The node's cluster id (the value other nodes see in originatedFrom). */
  nodeId: string;
  /**
   * Host name or IP literal (IPv6 without brackets) at which the node's inter-node port is reached.
   */
  address: string;
  /** The node's certificate fingerprint; a record is a peer only if it is pinned. */
  fingerprint: Fingerprint;
  /** Inter-node port. */
  port?: number;
}

/**
 * Lowercase hex SHA-256 of a node's DER-encoded certificate: exactly 64 characters 0-9 and a-f. The
 * length bounds repeat what the pattern says because '$' in some regex dialects (Python's among
 * them) matches before a trailing newline; with them, a trailing newline is invalid in every
 * dialect.
 */
export type Fingerprint = string;

/**
 * What a running node says of itself to an operator: the JSON of GET /status on its --metrics
 * listener, which `nvpair-wm status --json` prints as it is. The members of a manager:status result
 * (manager-status.schema.json), each required here, and the contract version the node speaks. Tools
 * read it as part of the contract: a minor version may add members, and a reader ignores those it
 * does not know.
 */
export interface NodeStatus {
  /** nvpair-wm version (as in ready). */
  version: string;
  /** The contract version the node speaks (as in ready), MAJOR.MINOR.PATCH. */
  contractVersion: string;
  /** Whether the cluster directory holds a usable node.crt/node.key. */
  hasIdentity: boolean;
  /** This node's certificate fingerprint; null without identity. */
  fingerprint: Fingerprint | null;
  /** The bound inter-node port; null when not listening. */
  port: number | null;
  /**
   * One entry per current peer, ordered by nodeId: its link's state, versions, queue, last success,
   * retries and give-ups.
   */
  peers: PeerStatus[];
  counters: Counters;
  journal: JournalStatus;
  config: ConfigStatus;
}

/**
 * Broker to manager: the full current list of cluster node records. Each snapshot replaces the
 * previous one; peers that are no longer listed, or no longer pinned, are dropped with their queues
 * and connections. The list may include this node itself (recognised by its fingerprint) and is
 * bounded at 1024 records.
 */
export interface NodesUpdate {
  method: "nodes:update";
  jsonrpc: "2.0";
  params: NodesUpdateParams;
  id?: RequestId;
}

/** The cluster's node records: the full list, replacing the previous snapshot. */
export interface NodesUpdateParams {
  nodes: NodeRecord[];
}

/**
 * Every frame a manager accepts from a pinned peer in the body of POST /v1/workloads/events, and
 * every frame it sends to its peers: the lifecycle events and workloads:remove, as one union tagged
 * on 'method'. The other InboundFrame methods (nodes:update, manager:status) are the broker's: a
 * peer that sends one gets -32601.
 */
export type PeerFrame = WorkloadSubmitted | WorkloadStarted | WorkloadCompleted | WorkloadErrored | WorkloadCancelled | WorkloadsRemove;

/**
 * Manager to broker: the first frame the manager writes on the local channel, once it is ready to
 * take frames.
 */
export interface Ready {
  method: "ready";
  jsonrpc: "2.0";
  params: ReadyParams;
}

/**
 * What the manager announces when it is ready to take frames: its program version and the contract
 * version it speaks.
 */
export interface ReadyParams {
  /** nvpair-wm program version (not the contract's). */
  version: string;
  /**
   * The semantic version of this contract (schema/VERSION) that the manager speaks,
   * MAJOR.MINOR.PATCH. A broker accepts any version with the major it knows (1) and ignores what a
   * newer minor adds (see the compatibility policy in schema/README.md).
   */
  contractVersion: string;
}

/**
 * Lifecycle notifications, accepted from the broker (local events, which the manager broadcasts to
 * peers) and from pinned peers (remote events, which the manager forwards to its broker as
 * workloads:upsert). The method decides the state; workload:cancelled is an addition to the
 * original contract so that the cancelled state is reachable.
 */
export type WorkloadEvents = unknown;

/** The workload the event is about, as its producer reported it. */
export interface LifecycleParams {
  workloadInfo: WorkloadInfo;
}

/**
 * Notification (or, with an id, request) that a workload is now queued. The manager sets
 * workloadInfo.state to 'queued' and relays the rest unchanged.
 */
export interface WorkloadSubmitted {
  method: "workload:submitted";
  jsonrpc: "2.0";
  params: LifecycleParams;
  id?: RequestId;
}

/**
 * Notification (or, with an id, request) that a workload is now running. The manager sets
 * workloadInfo.state to 'running' and relays the rest unchanged.
 */
export interface WorkloadStarted {
  method: "workload:started";
  jsonrpc: "2.0";
  params: LifecycleParams;
  id?: RequestId;
}

/**
 * Notification (or, with an id, request) that a workload is now completed. The manager sets
 * workloadInfo.state to 'completed' and relays the rest unchanged.
 */
export interface WorkloadCompleted {
  method: "workload:completed";
  jsonrpc: "2.0";
  params: LifecycleParams;
  id?: RequestId;
}

/**
 * Notification (or, with an id, request) that a workload is now failed. The manager sets
 * workloadInfo.state to 'failed' and relays the rest unchanged.
 */
export interface WorkloadErrored {
  method: "workload:errored";
  jsonrpc: "2.0";
  params: LifecycleParams;
  id?: RequestId;
}

/**
 * Notification (or, with an id, request) that a workload is now cancelled. The manager sets
 * workloadInfo.state to 'cancelled' and relays the rest unchanged.
 */
export interface WorkloadCancelled {
  method: "workload:cancelled";
  jsonrpc: "2.0";
  params: LifecycleParams;
  id?: RequestId;
}

/**
 * One inference workload as the cluster sees it. The manager relays it opaquely: only 'state' is
 * set by the manager (from the lifecycle method); every other field passes through exactly as
 * received, an absent field stays absent and a null stays null. Unknown properties are accepted on
 * input and dropped: this schema is the allow-list of what ever leaves a manager. Prompts, messages
 * and response bodies are never part of this contract. Strings are sequences of Unicode scalar
 * values (I-JSON, RFC 7493): a lone surrogate escape makes the frame unparseable. Integers may be
 * written 1, 1.0 or 1e0 (JSON Schema's data model); senders should write them without a fraction or
 * exponent.
 */
export interface WorkloadInfo {
  /**
   * Workload identifier, unique only within one runId: engine facades count from 1 and restart at 1
   * when their proxy restarts.
   */
  id: string;
  /** Model that was requested. */
  model: string;
  /** Inference engine that serves the request. */
  engine: string;
  /**
   * Nonce minted when the producing proxy process started. With id and seq it forms the
   * deduplication key (runId, id, seq).
   */
  runId: string;
  state: WorkloadState;
  /** Node id on which the request entered the cluster. */
  originatedFrom: string;
  /** Creation time, epoch milliseconds. */
  createdAt: EpochMillis;
  /** Start time, epoch milliseconds; null until started. */
  startedAt: EpochMillis | null;
  /** Completion time, epoch milliseconds; null until finished. */
  completedAt: EpochMillis | null;
  /** Normalized failure text; null unless failed. */
  error: string | null;
  /**
   * The producer's event counter for this workload, from 1. Part of the deduplication key, and the
   * order: an event whose seq is lower than the newest seen for (runId, id) is stale and is not
   * forwarded.
   */
  seq: Seq;
  /** Node id the workload was routed to. Absent (not null) until a target is chosen. */
  scheduledOn?: string;
  /** Optional client attribution. May be absent or null; the two are kept distinct. */
  requesterId?: string | null;
}

/**
 * Lifecycle state of a workload. On a lifecycle notification the manager overwrites it from the
 * method: submitted→queued, started→running, completed→completed, errored→failed,
 * cancelled→cancelled.
 */
export type WorkloadState = "queued" | "running" | "completed" | "failed" | "cancelled";

/**
 * Milliseconds since 1970-01-01T00:00:00Z. Bounded by 2^53-1 so that every language's JSON number
 * type holds it exactly.
 */
export type EpochMillis = number;

/** Event counter from 1, bounded by 2^53-1. */
export type Seq = number;

/**
 * Removal of a workload from the cluster view, in both directions: broker to manager (a local
 * removal, broadcast to peers), peer to manager, and manager to broker (a remote removal). The
 * manager keeps a tombstone on (originatedFrom, workloadId) so that a late event or a retry does
 * not bring the workload back. With runId the tombstone covers exactly that run. Without it, it
 * covers the newest run of (originatedFrom, workloadId) this manager has seen, or, if it has seen
 * none, every run until the tombstone expires: since ids restart at 1 when a proxy restarts,
 * senders should include runId whenever they know it. Managers include runId when they forward a
 * removal whose run they know; receivers must accept it.
 */
export interface WorkloadsRemove {
  method: "workloads:remove";
  jsonrpc: "2.0";
  params: RemoveParams;
  id?: RequestId;
}

/** Which workload to remove: its id and origin node, and optionally its run. */
export interface RemoveParams {
  /** The workload's id (WorkloadInfo.id). */
  workloadId: string;
  /** The node the workload entered the cluster on (WorkloadInfo.originatedFrom). */
  originatedFrom: string;
  /** Optional: narrows the removal to one run (WorkloadInfo.runId). */
  runId?: string;
}

/**
 * Manager to broker: a remote workload was created or changed. Sent once per distinct event:
 * duplicates arriving over several paths are collapsed first, and stale events are never sent, so
 * the broker's view only moves forward.
 */
export interface WorkloadsUpsert {
  method: "workloads:upsert";
  jsonrpc: "2.0";
  params: UpsertParams;
}

/** The workload after the event, with state set from the lifecycle method. */
export interface UpsertParams {
  workloadInfo: WorkloadInfo;
}

/** Every type by name: what `decode` and `encode` take. */
export interface Types {
  BrokerFrame: BrokerFrame;
  BrokerLine: BrokerLine;
  BrokerResponse: BrokerResponse;
  HttpError: HttpError;
  HttpResponseBody: HttpResponseBody;
  PeerResponse: PeerResponse;
  EventsBody: EventsBody;
  InboundFrame: InboundFrame;
  JsonRpcEnvelope: JsonRpcEnvelope;
  RequestId: RequestId;
  ErrorCode: ErrorCode;
  ErrorData: ErrorData;
  ErrorObject: ErrorObject;
  ErrorResponse: ErrorResponse;
  EventOutcome: EventOutcome;
  EventResult: EventResult;
  EventResponse: EventResponse;
  Request: Request;
  Notification: Notification;
  SuccessResponse: SuccessResponse;
  Batch: Batch;
  ManagerStatus: ManagerStatus;
  Counters: Counters;
  FramesByChannel: FramesByChannel;
  ChannelCounters: ChannelCounters;
  Count: Count;
  PeerStatus: PeerStatus;
  FastPaths: FastPaths;
  JournalStatus: JournalStatus;
  ConfigStatus: ConfigStatus;
  StatusResult: StatusResult;
  StatusResponse: StatusResponse;
  CapacityShortfall: CapacityShortfall;
  NodeRecord: NodeRecord;
  Fingerprint: Fingerprint;
  NodeStatus: NodeStatus;
  NodesUpdate: NodesUpdate;
  NodesUpdateParams: NodesUpdateParams;
  PeerFrame: PeerFrame;
  Ready: Ready;
  ReadyParams: ReadyParams;
  WorkloadEvents: WorkloadEvents;
  LifecycleParams: LifecycleParams;
  WorkloadSubmitted: WorkloadSubmitted;
  WorkloadStarted: WorkloadStarted;
  WorkloadCompleted: WorkloadCompleted;
  WorkloadErrored: WorkloadErrored;
  WorkloadCancelled: WorkloadCancelled;
  WorkloadInfo: WorkloadInfo;
  WorkloadState: WorkloadState;
  EpochMillis: EpochMillis;
  Seq: Seq;
  WorkloadsRemove: WorkloadsRemove;
  RemoveParams: RemoveParams;
  WorkloadsUpsert: WorkloadsUpsert;
  UpsertParams: UpsertParams;
}

export type Decoded<T> =
  | { ok: true; value: T }
  | { ok: false; path: string; reason: string };

/** The type names `decode` and `encode` take. */
export declare const TYPES: readonly (keyof Types)[];

export declare function decode<K extends keyof Types>(
  type: K,
  input: string | Uint8Array,
): Decoded<Types[K]>;

export declare function encode<K extends keyof Types>(type: K, value: Types[K]): string;
