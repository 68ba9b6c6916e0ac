package wm

import (
	"encoding/json"
	"fmt"
)

// JSONRPC is the only jsonrpc value.
const JSONRPC = "2.0"

// Methods: every frame type is tagged by its method.
const (
	MethodSubmitted     = "workload:submitted"
	MethodStarted       = "workload:started"
	MethodCompleted     = "workload:completed"
	MethodErrored       = "workload:errored"
	MethodCancelled     = "workload:cancelled"
	MethodRemove        = "workloads:remove"
	MethodUpsert        = "workloads:upsert"
	MethodNodesUpdate   = "nodes:update"
	MethodManagerStatus = "manager:status"
	MethodReady         = "ready"
)

// LifecycleMethods are the five workload events.
var LifecycleMethods = []string{MethodSubmitted, MethodStarted, MethodCompleted, MethodErrored, MethodCancelled}

var workloadStates = []string{"queued", "running", "completed", "failed", "cancelled"}

// ---- workload-info.schema.json ---------------------------------------------------------------

// WorkloadInfo is one workload as the cluster sees it.
type WorkloadInfo struct {
	ID             string      `json:"id"`
	Model          string      `json:"model"`
	Engine         string      `json:"engine"`
	RunID          string      `json:"runId"`
	State          string      `json:"state"`
	OriginatedFrom string      `json:"originatedFrom"`
	ScheduledOn    *string     `json:"scheduledOn,omitempty"` // may be absent, never null
	CreatedAt      Int         `json:"createdAt"`
	StartedAt      *Int        `json:"startedAt"` // required, may be null
	CompletedAt    *Int        `json:"completedAt"`
	Error          *string     `json:"error"`
	RequesterID    Opt[string] `json:"requesterId"` // may be absent, null or a string
	Seq            Int         `json:"seq"`
}

type workloadInfoJSON WorkloadInfo

var workloadInfoRules = rules{
	required: []string{"id", "model", "engine", "runId", "state", "originatedFrom", "createdAt", "startedAt", "completedAt", "error", "seq"},
	nonNull:  []string{"id", "model", "engine", "runId", "state", "originatedFrom", "scheduledOn", "createdAt", "seq"},
}

func (w *WorkloadInfo) UnmarshalJSON(b []byte) error {
	var v workloadInfoJSON
	if err := decodeObject(b, workloadInfoRules, &v); err != nil {
		return fmt.Errorf("WorkloadInfo: %w", err)
	}
	if err := oneOf(v.State, workloadStates...); err != nil {
		return fmt.Errorf("WorkloadInfo.state: %w", err)
	}
	*w = WorkloadInfo(v)
	return nil
}

func (w WorkloadInfo) MarshalJSON() ([]byte, error) {
	return encodeObject(workloadInfoJSON(w), map[string]setter{"requesterId": w.RequesterID})
}

// ---- workload-events.schema.json -------------------------------------------------------------

// LifecycleParams carries the workload of an event.
type LifecycleParams struct {
	WorkloadInfo WorkloadInfo `json:"workloadInfo"`
}

type lifecycleParamsJSON LifecycleParams

func (p *LifecycleParams) UnmarshalJSON(b []byte) error {
	var v lifecycleParamsJSON
	if err := decodeObject(b, rules{required: []string{"workloadInfo"}, nonNull: []string{"workloadInfo"}}, &v); err != nil {
		return fmt.Errorf("params: %w", err)
	}
	*p = LifecycleParams(v)
	return nil
}

// WorkloadEvent is any of the five lifecycle frames; Method says which. It is a request when
// ID is set (even to null) and a notification when ID is absent.
type WorkloadEvent struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  LifecycleParams `json:"params"`
	ID      Opt[RequestID]  `json:"id"`
}

type workloadEventJSON WorkloadEvent

var frameRules = rules{
	required: []string{"jsonrpc", "method", "params"},
	nonNull:  []string{"jsonrpc", "method", "params"},
	consts:   map[string]string{"jsonrpc": `"2.0"`},
}

func (e *WorkloadEvent) UnmarshalJSON(b []byte) error {
	var v workloadEventJSON
	if err := decodeObject(b, frameRules, &v); err != nil {
		return fmt.Errorf("WorkloadEvent: %w", err)
	}
	if err := oneOf(v.Method, LifecycleMethods...); err != nil {
		return fmt.Errorf("WorkloadEvent.method: %w", err)
	}
	*e = WorkloadEvent(v)
	return nil
}

func (e WorkloadEvent) MarshalJSON() ([]byte, error) {
	return encodeObject(workloadEventJSON(e), map[string]setter{"id": e.ID})
}

// ---- workloads-remove.schema.json ------------------------------------------------------------

// RemoveParams names the removed workload; RunID narrows it to one run.
type RemoveParams struct {
	WorkloadID     string  `json:"workloadId"`
	OriginatedFrom string  `json:"originatedFrom"`
	RunID          *string `json:"runId,omitempty"`
}

type removeParamsJSON RemoveParams

func (p *RemoveParams) UnmarshalJSON(b []byte) error {
	var v removeParamsJSON
	r := rules{required: []string{"workloadId", "originatedFrom"}, nonNull: []string{"workloadId", "originatedFrom", "runId"}}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("RemoveParams: %w", err)
	}
	*p = RemoveParams(v)
	return nil
}

// WorkloadsRemove travels both ways (broker → manager → peers → their brokers).
type WorkloadsRemove struct {
	JSONRPC string         `json:"jsonrpc"`
	Method  string         `json:"method"`
	Params  RemoveParams   `json:"params"`
	ID      Opt[RequestID] `json:"id"`
}

type workloadsRemoveJSON WorkloadsRemove

func (f *WorkloadsRemove) UnmarshalJSON(b []byte) error {
	var v workloadsRemoveJSON
	if err := decodeTagged(b, MethodRemove, &v); err != nil {
		return err
	}
	*f = WorkloadsRemove(v)
	return nil
}

func (f WorkloadsRemove) MarshalJSON() ([]byte, error) {
	return encodeObject(workloadsRemoveJSON(f), map[string]setter{"id": f.ID})
}

func decodeTagged(b []byte, method string, v any) error {
	r := frameRules
	r.consts = map[string]string{"jsonrpc": `"2.0"`, "method": fmt.Sprintf("%q", method)}
	if err := decodeObject(b, r, v); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// ---- workloads-upsert.schema.json, ready.schema.json (manager → broker, notifications) --------

// UpsertParams carries a remote workload.
type UpsertParams = LifecycleParams

// WorkloadsUpsert tells the broker about a remote workload; always a notification.
type WorkloadsUpsert struct {
	JSONRPC string       `json:"jsonrpc"`
	Method  string       `json:"method"`
	Params  UpsertParams `json:"params"`
}

type workloadsUpsertJSON WorkloadsUpsert

func (f *WorkloadsUpsert) UnmarshalJSON(b []byte) error {
	var v workloadsUpsertJSON
	if err := decodeTagged(b, MethodUpsert, &v); err != nil {
		return err
	}
	*f = WorkloadsUpsert(v)
	return nil
}

// ReadyParams says which program version is running and which contract version it speaks.
type ReadyParams struct {
	Version         string `json:"version"`
	ContractVersion string `json:"contractVersion"`
}

type readyParamsJSON ReadyParams

func (p *ReadyParams) UnmarshalJSON(b []byte) error {
	var v readyParamsJSON
	r := rules{required: []string{"version", "contractVersion"}, nonNull: []string{"version", "contractVersion"}}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("ReadyParams: %w", err)
	}
	*p = ReadyParams(v)
	return nil
}

// Ready is the manager's first frame.
type Ready struct {
	JSONRPC string      `json:"jsonrpc"`
	Method  string      `json:"method"`
	Params  ReadyParams `json:"params"`
}

type readyJSON Ready

func (f *Ready) UnmarshalJSON(b []byte) error {
	var v readyJSON
	if err := decodeTagged(b, MethodReady, &v); err != nil {
		return err
	}
	*f = Ready(v)
	return nil
}

// ---- node-record.schema.json, nodes-update.schema.json ---------------------------------------

// NodeRecord is one member of the cluster, from the broker.
type NodeRecord struct {
	NodeID      string `json:"nodeId"`
	Address     string `json:"address"`
	Port        *Int   `json:"port,omitempty"` // absent means 14320; never null
	Fingerprint string `json:"fingerprint"`
}

type nodeRecordJSON NodeRecord

func (n *NodeRecord) UnmarshalJSON(b []byte) error {
	var v nodeRecordJSON
	r := rules{required: []string{"nodeId", "address", "fingerprint"}, nonNull: []string{"nodeId", "address", "port", "fingerprint"}}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("NodeRecord: %w", err)
	}
	*n = NodeRecord(v)
	return nil
}

// NodesUpdateParams is the whole membership, replacing the last.
type NodesUpdateParams struct {
	Nodes []NodeRecord `json:"nodes"`
}

type nodesUpdateParamsJSON NodesUpdateParams

func (p *NodesUpdateParams) UnmarshalJSON(b []byte) error {
	var v nodesUpdateParamsJSON
	if err := decodeObject(b, rules{required: []string{"nodes"}, nonNull: []string{"nodes"}}, &v); err != nil {
		return fmt.Errorf("NodesUpdateParams: %w", err)
	}
	*p = NodesUpdateParams(v)
	return nil
}

// NodesUpdate is the broker's snapshot of the cluster.
type NodesUpdate struct {
	JSONRPC string            `json:"jsonrpc"`
	Method  string            `json:"method"`
	Params  NodesUpdateParams `json:"params"`
	ID      Opt[RequestID]    `json:"id"`
}

type nodesUpdateJSON NodesUpdate

func (f *NodesUpdate) UnmarshalJSON(b []byte) error {
	var v nodesUpdateJSON
	if err := decodeTagged(b, MethodNodesUpdate, &v); err != nil {
		return err
	}
	*f = NodesUpdate(v)
	return nil
}

func (f NodesUpdate) MarshalJSON() ([]byte, error) {
	return encodeObject(nodesUpdateJSON(f), map[string]setter{"id": f.ID})
}

// ---- manager-status.schema.json --------------------------------------------------------------

// ManagerStatus is a request (it always has an id); its params, if any, are {}.
type ManagerStatus struct {
	JSONRPC string           `json:"jsonrpc"`
	Method  string           `json:"method"`
	Params  *json.RawMessage `json:"params,omitempty"`
	ID      RequestID        `json:"id"`
}

type managerStatusJSON ManagerStatus

func (f *ManagerStatus) UnmarshalJSON(b []byte) error {
	var v managerStatusJSON
	r := rules{
		required: []string{"jsonrpc", "method", "id"},
		nonNull:  []string{"jsonrpc", "method", "params"},
		consts:   map[string]string{"jsonrpc": `"2.0"`, "method": `"manager:status"`},
	}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("manager:status: %w", err)
	}
	if v.Params != nil {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(*v.Params, &p); err != nil || len(p) != 0 {
			return fmt.Errorf("manager:status params must be {}")
		}
	}
	*f = ManagerStatus(v)
	return nil
}

// Counters of manager:status.
type Counters struct {
	FramesIn    Int `json:"framesIn"`
	FramesOut   Int `json:"framesOut"`
	Invalid     Int `json:"invalid"`
	Duplicates  Int `json:"duplicates"`
	Stale       Int `json:"stale"`
	Suppressed  Int `json:"suppressed"`
	Evicted     Int `json:"evicted"`
	Workloads   Int `json:"workloads"`
	Tombstones  Int `json:"tombstones"`
	BrokerQueue Int `json:"brokerQueue"`
	// ByChannel is optional in the schema (since 1.1.0; a 1.0 manager does not send it) and
	// always sent by a 1.1 manager: absent stays absent.
	ByChannel *FramesByChannel `json:"byChannel,omitempty"`
}

type countersJSON Counters

var counterNames = []string{"framesIn", "framesOut", "invalid", "duplicates", "stale", "suppressed", "evicted", "workloads", "tombstones", "brokerQueue"}

func (c *Counters) UnmarshalJSON(b []byte) error {
	var v countersJSON
	r := rules{required: counterNames, nonNull: append([]string{"byChannel"}, counterNames...)}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("Counters: %w", err)
	}
	*c = Counters(v)
	return nil
}

// FramesByChannel holds the frame counters of the local channel (broker) and of the inter-node
// channel (peer), since 1.1.0.
type FramesByChannel struct {
	Broker ChannelCounters `json:"broker"`
	Peer   ChannelCounters `json:"peer"`
}

type framesByChannelJSON FramesByChannel

func (f *FramesByChannel) UnmarshalJSON(b []byte) error {
	var v framesByChannelJSON
	names := []string{"broker", "peer"}
	if err := decodeObject(b, rules{required: names, nonNull: names}, &v); err != nil {
		return fmt.Errorf("FramesByChannel: %w", err)
	}
	*f = FramesByChannel(v)
	return nil
}

// ChannelCounters are one channel's frames in and out and the outcome of those received.
type ChannelCounters struct {
	FramesIn   Int `json:"framesIn"`
	FramesOut  Int `json:"framesOut"`
	Applied    Int `json:"applied"`
	Duplicate  Int `json:"duplicate"`
	Stale      Int `json:"stale"`
	Suppressed Int `json:"suppressed"`
	Invalid    Int `json:"invalid"`
}

type channelCountersJSON ChannelCounters

var channelCounterNames = []string{"framesIn", "framesOut", "applied", "duplicate", "stale", "suppressed", "invalid"}

func (c *ChannelCounters) UnmarshalJSON(b []byte) error {
	var v channelCountersJSON
	r := rules{required: channelCounterNames, nonNull: channelCounterNames}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("ChannelCounters: %w", err)
	}
	*c = ChannelCounters(v)
	return nil
}

// PeerStatus is one peer link in manager:status.
type PeerStatus struct {
	NodeID      string  `json:"nodeId"`
	Address     string  `json:"address"`
	Port        Int     `json:"port"`
	Connected   bool    `json:"connected"`
	Protocol    *string `json:"protocol"`
	QueueDepth  Int     `json:"queueDepth"`
	Sent        Int     `json:"sent"`
	Retried     Int     `json:"retried"`
	Coalesced   Int     `json:"coalesced"`
	Dropped     Int     `json:"dropped"`
	LastError   *string `json:"lastError"`
	LastErrorAt *Int    `json:"lastErrorAt"`
	// Since contract 1.2.0: optional, null while the peer has not said (absent stays absent).
	ContractVersion Opt[string] `json:"contractVersion"`
	SoftwareVersion Opt[string] `json:"softwareVersion"`
}

type peerStatusJSON PeerStatus

func (p *PeerStatus) UnmarshalJSON(b []byte) error {
	var v peerStatusJSON
	r := rules{
		required: []string{"nodeId", "address", "port", "connected", "protocol", "queueDepth", "sent", "retried", "coalesced", "dropped", "lastError", "lastErrorAt"},
		nonNull:  []string{"nodeId", "address", "port", "connected", "queueDepth", "sent", "retried", "coalesced", "dropped"},
	}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("PeerStatus: %w", err)
	}
	if v.Protocol != nil {
		if err := oneOf(*v.Protocol, "h2", "http/1.1"); err != nil {
			return fmt.Errorf("PeerStatus.protocol: %w", err)
		}
	}
	*p = PeerStatus(v)
	return nil
}

func (p PeerStatus) MarshalJSON() ([]byte, error) {
	return encodeObject(peerStatusJSON(p), map[string]setter{
		"contractVersion": p.ContractVersion, "softwareVersion": p.SoftwareVersion,
	})
}

// StatusResult is the result of manager:status.
type StatusResult struct {
	Version     string       `json:"version"`
	HasIdentity bool         `json:"hasIdentity"`
	Fingerprint *string      `json:"fingerprint"`
	Port        *Int         `json:"port"`
	Peers       []PeerStatus `json:"peers"`
	Counters    Counters     `json:"counters"`
	// Journal is optional in the schema (since 1.2.0; a 1.1 manager does not send it) and
	// always sent by a 1.2 manager: absent stays absent.
	Journal *JournalStatus `json:"journal,omitempty"`
	// Capacity is optional in the schema (since 1.3.0) and always sent by a 1.3 manager, an
	// empty list when no limit caps it: a pointer, so that absent and [] stay apart.
	Capacity *[]CapacityShortfall `json:"capacity,omitempty"`
}

// CapacityShortfall is a limit that caps the manager below its member count (since 1.3.0).
type CapacityShortfall struct {
	Key     string `json:"key"`
	Limit   Int    `json:"limit"`
	Needed  Int    `json:"needed"`
	Members Int    `json:"members"`
}

type capacityShortfallJSON CapacityShortfall

func (c *CapacityShortfall) UnmarshalJSON(b []byte) error {
	var v capacityShortfallJSON
	names := []string{"key", "limit", "needed", "members"}
	if err := decodeObject(b, rules{required: names, nonNull: names}, &v); err != nil {
		return fmt.Errorf("CapacityShortfall: %w", err)
	}
	if v.Limit < 0 || v.Needed < 0 || v.Members < 0 {
		return fmt.Errorf("CapacityShortfall: negative count")
	}
	*c = CapacityShortfall(v)
	return nil
}

// JournalStatus says whether the journal keeps what the node originated (since 1.2.0).
type JournalStatus struct {
	State        string  `json:"state"`
	FailingSince *Int    `json:"failingSince"`
	LastError    *string `json:"lastError"`
}

type journalStatusJSON JournalStatus

func (j *JournalStatus) UnmarshalJSON(b []byte) error {
	var v journalStatusJSON
	r := rules{required: []string{"state", "failingSince", "lastError"}, nonNull: []string{"state"}}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("JournalStatus: %w", err)
	}
	if err := oneOf(v.State, "off", "healthy", "failing"); err != nil {
		return fmt.Errorf("JournalStatus.state: %w", err)
	}
	if v.FailingSince != nil && *v.FailingSince < 0 {
		return fmt.Errorf("JournalStatus.failingSince: negative")
	}
	*j = JournalStatus(v)
	return nil
}

type statusResultJSON StatusResult

func (s *StatusResult) UnmarshalJSON(b []byte) error {
	var v statusResultJSON
	r := rules{
		required: []string{"version", "hasIdentity", "fingerprint", "port", "peers", "counters"},
		nonNull:  []string{"version", "hasIdentity", "peers", "counters", "journal", "capacity"},
	}
	if err := decodeObject(b, r, &v); err != nil {
		return fmt.Errorf("StatusResult: %w", err)
	}
	*s = StatusResult(v)
	return nil
}

// StatusResponse answers manager:status.
type StatusResponse struct {
	JSONRPC string       `json:"jsonrpc"`
	ID      RequestID    `json:"id"`
	Result  StatusResult `json:"result"`
}

type statusResponseJSON StatusResponse

var responseRules = func(member string) rules {
	return rules{
		required: []string{"jsonrpc", "id", member},
		nonNull:  []string{"jsonrpc", member},
		consts:   map[string]string{"jsonrpc": `"2.0"`},
	}
}

func (s *StatusResponse) UnmarshalJSON(b []byte) error {
	var v statusResponseJSON
	if err := decodeObject(b, responseRules("result"), &v); err != nil {
		return fmt.Errorf("StatusResponse: %w", err)
	}
	*s = StatusResponse(v)
	return nil
}

// ---- jsonrpc.schema.json ---------------------------------------------------------------------

// ErrorData says where and why a frame was refused.
type ErrorData struct {
	Reason string  `json:"reason"`
	Path   *string `json:"path,omitempty"`
	Index  *Int    `json:"index,omitempty"`
}

type errorDataJSON ErrorData

func (d *ErrorData) UnmarshalJSON(b []byte) error {
	var v errorDataJSON
	if err := decodeObject(b, rules{required: []string{"reason"}, nonNull: []string{"reason", "path", "index"}}, &v); err != nil {
		return fmt.Errorf("ErrorData: %w", err)
	}
	*d = ErrorData(v)
	return nil
}

// ErrorObject is a JSON-RPC error.
type ErrorObject struct {
	Code    Int        `json:"code"`
	Message string     `json:"message"`
	Data    *ErrorData `json:"data,omitempty"`
}

type errorObjectJSON ErrorObject

func (e *ErrorObject) UnmarshalJSON(b []byte) error {
	var v errorObjectJSON
	if err := decodeObject(b, rules{required: []string{"code", "message"}, nonNull: []string{"code", "message", "data"}}, &v); err != nil {
		return fmt.Errorf("ErrorObject: %w", err)
	}
	*e = ErrorObject(v)
	return nil
}

// ErrorResponse answers a request that was refused.
type ErrorResponse struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      RequestID   `json:"id"`
	Error   ErrorObject `json:"error"`
}

type errorResponseJSON ErrorResponse

func (e *ErrorResponse) UnmarshalJSON(b []byte) error {
	var v errorResponseJSON
	if err := decodeObject(b, responseRules("error"), &v); err != nil {
		return fmt.Errorf("ErrorResponse: %w", err)
	}
	*e = ErrorResponse(v)
	return nil
}

// EventResult is what the manager did with an event sent as a request.
type EventResult struct {
	Outcome string `json:"outcome"`
}

type eventResultJSON EventResult

// EventOutcomes are the values of EventResult.Outcome.
var EventOutcomes = []string{"applied", "duplicate", "stale", "removed"}

func (r *EventResult) UnmarshalJSON(b []byte) error {
	var v eventResultJSON
	if err := decodeObject(b, rules{required: []string{"outcome"}, nonNull: []string{"outcome"}}, &v); err != nil {
		return fmt.Errorf("EventResult: %w", err)
	}
	if err := oneOf(v.Outcome, EventOutcomes...); err != nil {
		return fmt.Errorf("EventResult.outcome: %w", err)
	}
	*r = EventResult(v)
	return nil
}

// EventResponse answers a lifecycle event or a removal sent as a request.
type EventResponse struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      RequestID   `json:"id"`
	Result  EventResult `json:"result"`
}

type eventResponseJSON EventResponse

func (e *EventResponse) UnmarshalJSON(b []byte) error {
	var v eventResponseJSON
	if err := decodeObject(b, responseRules("result"), &v); err != nil {
		return fmt.Errorf("EventResponse: %w", err)
	}
	*e = EventResponse(v)
	return nil
}

// Request is the generic JSON-RPC request envelope.
type Request struct {
	JSONRPC string           `json:"jsonrpc"`
	Method  string           `json:"method"`
	Params  *json.RawMessage `json:"params,omitempty"`
	ID      RequestID        `json:"id"`
}

type requestJSON Request

func (r *Request) UnmarshalJSON(b []byte) error {
	var v requestJSON
	rl := rules{required: []string{"jsonrpc", "method", "id"}, nonNull: []string{"jsonrpc", "method", "params"}, consts: map[string]string{"jsonrpc": `"2.0"`}}
	if err := decodeObject(b, rl, &v); err != nil {
		return fmt.Errorf("Request: %w", err)
	}
	if err := isObject(v.Params); err != nil {
		return fmt.Errorf("Request.params: %w", err)
	}
	*r = Request(v)
	return nil
}

// Notification is the generic notification envelope (receivers test for id before anything).
type Notification struct {
	JSONRPC string           `json:"jsonrpc"`
	Method  string           `json:"method"`
	Params  *json.RawMessage `json:"params,omitempty"`
}

type notificationJSON Notification

func (n *Notification) UnmarshalJSON(b []byte) error {
	var v notificationJSON
	rl := rules{required: []string{"jsonrpc", "method"}, nonNull: []string{"jsonrpc", "method", "params"}, consts: map[string]string{"jsonrpc": `"2.0"`}}
	if err := decodeObject(b, rl, &v); err != nil {
		return fmt.Errorf("Notification: %w", err)
	}
	if err := isObject(v.Params); err != nil {
		return fmt.Errorf("Notification.params: %w", err)
	}
	*n = Notification(v)
	return nil
}

func isObject(raw *json.RawMessage) error {
	if raw == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(*raw, &m); err != nil || m == nil {
		return fmt.Errorf("not an object")
	}
	return nil
}

// SuccessResponse is the generic success envelope; Result is any JSON value, null included.
type SuccessResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      RequestID       `json:"id"`
	Result  json.RawMessage `json:"result"`
}

type successResponseJSON SuccessResponse

func (s *SuccessResponse) UnmarshalJSON(b []byte) error {
	var v successResponseJSON
	rl := rules{required: []string{"jsonrpc", "id", "result"}, nonNull: []string{"jsonrpc"}, consts: map[string]string{"jsonrpc": `"2.0"`}}
	if err := decodeObject(b, rl, &v); err != nil {
		return fmt.Errorf("SuccessResponse: %w", err)
	}
	*s = SuccessResponse(v)
	return nil
}

// Batch is a non-empty array of objects, each handled as if it came alone.
type Batch []json.RawMessage

func (bt *Batch) UnmarshalJSON(b []byte) error {
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || v == nil {
		return fmt.Errorf("Batch: not an array")
	}
	if len(v) == 0 {
		return fmt.Errorf("Batch: empty")
	}
	for i, e := range v {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(e, &m); err != nil || m == nil {
			return fmt.Errorf("Batch[%d]: not an object", i)
		}
	}
	*bt = v
	return nil
}

// ---- the unions (inbound-frame.schema.json, broker-frame.schema.json) --------------------------

// InboundFrame is every frame a manager accepts: *WorkloadEvent, *WorkloadsRemove,
// *NodesUpdate or *ManagerStatus.
type InboundFrame interface{ inbound() }

func (*WorkloadEvent) inbound()   {}
func (*WorkloadsRemove) inbound() {}
func (*NodesUpdate) inbound()     {}
func (*ManagerStatus) inbound()   {}

// BrokerFrame is every notification a manager writes to its broker: *Ready, *WorkloadsUpsert
// or *WorkloadsRemove.
type BrokerFrame interface{ broker() }

func (*Ready) broker()           {}
func (*WorkloadsUpsert) broker() {}
func (*WorkloadsRemove) broker() {}

// method reads the tag: the last "method" member, as the contract says.
func method(b []byte) (string, error) {
	m, err := checkObject(b, rules{required: []string{"method"}})
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(m["method"], &s); err != nil {
		return "", fmt.Errorf("method is not a string")
	}
	return s, nil
}

// DecodeInbound decodes and dispatches one inbound frame on its method.
func DecodeInbound(b []byte) (InboundFrame, error) {
	m, err := method(b)
	if err != nil {
		return nil, err
	}
	var f InboundFrame
	switch m {
	case MethodSubmitted, MethodStarted, MethodCompleted, MethodErrored, MethodCancelled:
		f = &WorkloadEvent{}
	case MethodRemove:
		f = &WorkloadsRemove{}
	case MethodNodesUpdate:
		f = &NodesUpdate{}
	case MethodManagerStatus:
		f = &ManagerStatus{}
	default:
		return nil, fmt.Errorf("method %q is not inbound", m)
	}
	return f, json.Unmarshal(b, f)
}

// DecodeBroker decodes one frame written to the broker.
func DecodeBroker(b []byte) (BrokerFrame, error) {
	m, err := method(b)
	if err != nil {
		return nil, err
	}
	var f BrokerFrame
	switch m {
	case MethodReady:
		f = &Ready{}
	case MethodUpsert:
		f = &WorkloadsUpsert{}
	case MethodRemove:
		f = &WorkloadsRemove{}
	default:
		return nil, fmt.Errorf("method %q is not written to the broker", m)
	}
	return f, json.Unmarshal(b, f)
}
