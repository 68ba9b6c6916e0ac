package wm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const base = "https://schemas.nvpair.dev/wm/v1/"

// decoders maps a vector group's schema $ref to a decoder returning the Go value.
var decoders = map[string]func([]byte) (any, error){
	"inbound-frame.schema.json": func(b []byte) (any, error) { return DecodeInbound(b) },
	"broker-frame.schema.json":  func(b []byte) (any, error) { return DecodeBroker(b) },
	"workload-info.schema.json": into[WorkloadInfo],
	"workload-info.schema.json#/$defs/WorkloadState": func(b []byte) (any, error) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return s, oneOf(s, workloadStates...)
	},
	"workload-info.schema.json#/$defs/EpochMillis":         into[Int],
	"workload-info.schema.json#/$defs/Seq":                 into[Int],
	"workload-events.schema.json":                          into[json.RawMessage], // a container of $defs: anything
	"workload-events.schema.json#/$defs/LifecycleParams":   into[LifecycleParams],
	"workload-events.schema.json#/$defs/WorkloadSubmitted": event(MethodSubmitted),
	"workload-events.schema.json#/$defs/WorkloadStarted":   event(MethodStarted),
	"workload-events.schema.json#/$defs/WorkloadCompleted": event(MethodCompleted),
	"workload-events.schema.json#/$defs/WorkloadErrored":   event(MethodErrored),
	"workload-events.schema.json#/$defs/WorkloadCancelled": event(MethodCancelled),
	"workloads-remove.schema.json":                         into[WorkloadsRemove],
	"workloads-remove.schema.json#/$defs/RemoveParams":     into[RemoveParams],
	"workloads-upsert.schema.json":                         into[WorkloadsUpsert],
	"workloads-upsert.schema.json#/$defs/UpsertParams":     into[UpsertParams],
	"ready.schema.json":                                    into[Ready],
	"ready.schema.json#/$defs/ReadyParams":                 into[ReadyParams],
	"node-record.schema.json":                              into[NodeRecord],
	"node-record.schema.json#/$defs/Fingerprint":           into[string],
	"nodes-update.schema.json":                             into[NodesUpdate],
	"nodes-update.schema.json#/$defs/NodesUpdateParams":    into[NodesUpdateParams],
	"manager-status.schema.json":                           into[ManagerStatus],
	"manager-status.schema.json#/$defs/Count":              into[Int],
	"manager-status.schema.json#/$defs/Counters":           into[Counters],
	"manager-status.schema.json#/$defs/FramesByChannel":    into[FramesByChannel],
	"manager-status.schema.json#/$defs/ChannelCounters":    into[ChannelCounters],
	"manager-status.schema.json#/$defs/PeerStatus":         into[PeerStatus],
	"manager-status.schema.json#/$defs/JournalStatus":      into[JournalStatus],
	"manager-status.schema.json#/$defs/CapacityShortfall":  into[CapacityShortfall],
	"manager-status.schema.json#/$defs/StatusResult":       into[StatusResult],
	"manager-status.schema.json#/$defs/StatusResponse":     into[StatusResponse],
	"jsonrpc.schema.json":                                  into[json.RawMessage], // a container of $defs: anything
	"jsonrpc.schema.json#/$defs/RequestId":                 into[RequestID],
	"jsonrpc.schema.json#/$defs/ErrorCode":                 into[Int],
	"jsonrpc.schema.json#/$defs/ErrorData":                 into[ErrorData],
	"jsonrpc.schema.json#/$defs/ErrorObject":               into[ErrorObject],
	"jsonrpc.schema.json#/$defs/ErrorResponse":             into[ErrorResponse],
	"jsonrpc.schema.json#/$defs/EventOutcome": func(b []byte) (any, error) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return s, oneOf(s, EventOutcomes...)
	},
	"jsonrpc.schema.json#/$defs/EventResult":        into[EventResult],
	"jsonrpc.schema.json#/$defs/EventResponse":      into[EventResponse],
	"jsonrpc.schema.json#/$defs/Request":            into[Request],
	"jsonrpc.schema.json#/$defs/Notification":       into[Notification],
	"jsonrpc.schema.json#/$defs/SuccessResponse":    into[SuccessResponse],
	"jsonrpc.schema.json#/$defs/Batch":              into[Batch],
	"peer-frame.schema.json":                        func(b []byte) (any, error) { return DecodePeer(b) },
	"broker-line.schema.json":                       DecodeBrokerLine,
	"broker-line.schema.json#/$defs/BrokerResponse": DecodeBrokerResponse,
	"http-error.schema.json":                        into[HTTPError],
	"http-response.schema.json":                     DecodeHTTPResponseBody,
	"http-response.schema.json#/$defs/EventsBody":   DecodeEventsBody,
	"http-response.schema.json#/$defs/PeerResponse": DecodePeerResponse,
}

func into[T any](b []byte) (any, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

func event(m string) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		v := new(WorkloadEvent)
		if err := json.Unmarshal(b, v); err != nil {
			return nil, err
		}
		if v.Method != m {
			return nil, fmt.Errorf("method %q, want %q", v.Method, m)
		}
		return v, nil
	}
}

type vectorTest struct {
	Description string          `json:"description"`
	Data        json.RawMessage `json:"data"`
	JSON        *string         `json:"json"`
	Valid       bool            `json:"valid"`
}

type vectorGroup struct {
	Description string `json:"description"`
	Schema      struct {
		Ref string `json:"$ref"`
	} `json:"schema"`
	Tests []vectorTest `json:"tests"`
}

func schemaDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("NVPAIR_WM_SCHEMA"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "schema")
}

// registry holds every schema by $id, to tell which members a vector's schema declares.
type registry map[string]map[string]any

func loadRegistry(t *testing.T) registry {
	t.Helper()
	reg := registry{}
	files, _ := filepath.Glob(filepath.Join(schemaDir(t), "*.schema.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		id, _ := doc["$id"].(string)
		reg[id] = doc
	}
	if len(reg) < 5 {
		t.Fatalf("found only %d schemas in %s", len(reg), schemaDir(t))
	}
	return reg
}

// resolve follows $ref (absolute, relative to the document's $id, or local) to a schema node.
func (r registry) resolve(node map[string]any, docID string) (map[string]any, string) {
	for i := 0; i < 16; i++ {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node, docID
		}
		target, frag, _ := strings.Cut(ref, "#")
		if target != "" {
			if !strings.HasPrefix(target, "https://") {
				target = docID[:strings.LastIndex(docID, "/")+1] + target
			}
			docID = target
		}
		cur := any(r[docID])
		for _, part := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			if part == "" {
				continue
			}
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		node, _ = cur.(map[string]any)
		if node == nil {
			return map[string]any{}, docID
		}
	}
	return node, docID
}

// properties declared for the object in: the node's own, or those of the union branch that
// fits it (its method const matches and its required members are present), searched depth first.
func (r registry) properties(node map[string]any, docID string, in map[string]any) (map[string]any, string) {
	node, docID = r.resolve(node, docID)
	if props, ok := node["properties"].(map[string]any); ok {
		if m, ok := props["method"].(map[string]any); ok && m["const"] != nil && m["const"] != in["method"] {
			return nil, docID
		}
		required, _ := node["required"].([]any)
		for _, k := range required {
			if _, ok := in[k.(string)]; !ok {
				return nil, docID
			}
		}
		return props, docID
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		branches, _ := node[key].([]any)
		for _, b := range branches {
			bm, _ := b.(map[string]any)
			if props, pid := r.properties(bm, docID, in); props != nil {
				return props, pid
			}
		}
	}
	return nil, docID
}

// items is the item schema of an array node, or of the first array branch of a union.
func (r registry) items(node map[string]any, docID string) (map[string]any, string) {
	node, docID = r.resolve(node, docID)
	if items, ok := node["items"].(map[string]any); ok {
		return items, docID
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		branches, _ := node[key].([]any)
		for _, b := range branches {
			bm, _ := b.(map[string]any)
			if items, iid := r.items(bm, docID); items != nil {
				return items, iid
			}
		}
	}
	return nil, docID
}

// declaredKept says which member the schema declares that the re-encoding lost.
func (r registry) declaredKept(node map[string]any, docID string, in, out any, path string) error {
	switch a := in.(type) {
	case map[string]any:
		b, _ := out.(map[string]any)
		props, pid := r.properties(node, docID, a)
		for k, av := range a {
			sub, declared := props[k].(map[string]any)
			if !declared {
				continue
			}
			bv, ok := b[k]
			if !ok {
				return fmt.Errorf("%s.%s: declared member %v was dropped", path, k, av)
			}
			if err := r.declaredKept(sub, pid, av, bv, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		b, _ := out.([]any)
		items, nid := r.items(node, docID)
		if items == nil || len(b) != len(a) {
			return nil
		}
		for i := range a {
			if err := r.declaredKept(items, nid, a[i], b[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameJSON says why out is not in (decoded by encoding/json into any, so numbers compare by
// value: 1.0 and 1 are equal): every member of out comes from in with the same value, so
// null and absent differ; what out may drop is checked by declaredKept.
func sameJSON(in, out any, path string) error {
	switch a := in.(type) {
	case map[string]any:
		b, ok := out.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: object became %v", path, out)
		}
		for k, bv := range b {
			av, ok := a[k]
			if !ok {
				return fmt.Errorf("%s.%s: absent member came back as %v", path, k, bv)
			}
			if err := sameJSON(av, bv, path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		b, ok := out.([]any)
		if !ok || len(a) != len(b) {
			return fmt.Errorf("%s: array became %v", path, out)
		}
		for i := range a {
			if err := sameJSON(a[i], b[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	default:
		if !reflect.DeepEqual(in, out) {
			return fmt.Errorf("%s: %v became %v", path, in, out)
		}
		return nil
	}
}

func TestEveryValidShapeVectorRoundTrips(t *testing.T) {
	reg := loadRegistry(t)
	files, err := filepath.Glob(filepath.Join(schemaDir(t), "conformance", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s", schemaDir(t))
	}
	total := 0
	missing := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var groups []vectorGroup
		if err := json.Unmarshal(raw, &groups); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range groups {
			ref := strings.TrimPrefix(g.Schema.Ref, base)
			decode, ok := decoders[ref]
			if !ok {
				missing[ref] = true
				continue
			}
			for _, tc := range g.Tests {
				if !tc.Valid {
					continue
				}
				total++
				text := []byte(tc.Data)
				if tc.JSON != nil {
					text = []byte(*tc.JSON)
				}
				name := filepath.Base(f) + ": " + g.Description + ": " + tc.Description
				v, err := decode(text)
				if err != nil {
					t.Errorf("%s: a valid vector did not decode: %v", name, err)
					continue
				}
				out, err := json.Marshal(v)
				if err != nil {
					t.Errorf("%s: encode: %v", name, err)
					continue
				}
				var a, b any
				if err := json.Unmarshal(text, &a); err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if err := json.Unmarshal(out, &b); err != nil {
					t.Errorf("%s: re-encoded text is not JSON: %v", name, err)
					continue
				}
				err = sameJSON(a, b, "$")
				if err == nil {
					err = reg.declaredKept(map[string]any{"$ref": g.Schema.Ref}, "", a, b, "$")
				}
				if err != nil {
					t.Errorf("%s: %v\n  in:  %s\n  out: %s", name, err, text, out)
				}
			}
		}
	}
	if len(missing) > 0 {
		refs := make([]string, 0, len(missing))
		for r := range missing {
			refs = append(refs, r)
		}
		sort.Strings(refs)
		t.Errorf("no Go type for the vector schemas %v", refs)
	}
	if total < 100 {
		t.Fatalf("only %d valid vectors found", total)
	}
	t.Logf("%d valid vectors decoded and re-encoded", total)
}

const info = `{"id":"17","model":"m","engine":"vllm","runId":"r","state":"running","originatedFrom":"a","createdAt":1,"startedAt":null,"completedAt":null,"error":null,"seq":2}`

func topLevel(t *testing.T, text string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func reencode(t *testing.T, text string) string {
	t.Helper()
	f, err := DecodeInbound([]byte(text))
	if err != nil {
		t.Fatalf("decode %s: %v", text, err)
	}
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The faults quicktype's Go output has, each pinned down here.

func TestNotificationStaysANotification(t *testing.T) {
	out := reencode(t, `{"jsonrpc":"2.0","method":"workload:started","params":{"workloadInfo":`+info+`}}`)
	if _, ok := topLevel(t, out)["id"]; ok {
		t.Fatalf("a notification gained an id (and became a request): %s", out)
	}
	out = reencode(t, `{"jsonrpc":"2.0","method":"workload:started","params":{"workloadInfo":`+info+`},"id":null}`)
	if id, ok := topLevel(t, out)["id"]; !ok || string(id) != "null" {
		t.Fatalf("a request with id null lost its id (and became a notification): %s", out)
	}
}

func TestAbsentRequesterIDStaysAbsentAndNullStaysNull(t *testing.T) {
	out := reencode(t, `{"jsonrpc":"2.0","method":"workload:started","params":{"workloadInfo":`+info+`}}`)
	if strings.Contains(out, "requesterId") {
		t.Fatalf("absent requesterId came back: %s", out)
	}
	withNull := strings.Replace(info, `"seq":2`, `"seq":2,"requesterId":null`, 1)
	out = reencode(t, `{"jsonrpc":"2.0","method":"workload:started","params":{"workloadInfo":`+withNull+`}}`)
	if !strings.Contains(out, `"requesterId":null`) {
		t.Fatalf("requesterId null was lost: %s", out)
	}
}

func TestIntegralFloatIsAnInteger(t *testing.T) {
	var w WorkloadInfo
	if err := json.Unmarshal([]byte(strings.Replace(info, `"seq":2`, `"seq":1.0`, 1)), &w); err != nil || w.Seq != 1 {
		t.Fatalf("seq 1.0: %v %v", w.Seq, err)
	}
	if err := json.Unmarshal([]byte(strings.Replace(info, `"seq":2`, `"seq":1e3`, 1)), &w); err != nil || w.Seq != 1000 {
		t.Fatalf("seq 1e3: %v %v", w.Seq, err)
	}
	for _, bad := range []string{"1.5", "true", `"1"`, "9007199254740992", "1e400"} {
		if err := json.Unmarshal([]byte(strings.Replace(info, `"seq":2`, `"seq":`+bad, 1)), &w); err == nil {
			t.Errorf("seq %s accepted", bad)
		}
	}
}

func TestScheduledOnNullIsRefused(t *testing.T) {
	var w WorkloadInfo
	if err := json.Unmarshal([]byte(strings.Replace(info, `"seq":2`, `"seq":2,"scheduledOn":null`, 1)), &w); err == nil {
		t.Fatal("scheduledOn null accepted")
	}
	if err := json.Unmarshal([]byte(strings.Replace(info, `"startedAt":null,`, ``, 1)), &w); err == nil {
		t.Fatal("a missing required member (startedAt) accepted")
	}
}

func TestUnionDispatchesOnTheLastMethod(t *testing.T) {
	f, err := DecodeInbound([]byte(`{"jsonrpc":"2.0","method":"nope","method":"manager:status","id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*ManagerStatus); !ok {
		t.Fatalf("got %T", f)
	}
	if _, err := DecodeInbound([]byte(`{"jsonrpc":"2.0","method":"ready","params":{"version":"1","contractVersion":"1.0.0"}}`)); err == nil {
		t.Fatal("ready is not inbound")
	}
	if !bytes.Contains([]byte(reencode(t, `{"jsonrpc":"2.0","method":"manager:status","id":"x"}`)), []byte(`"id":"x"`)) {
		t.Fatal("manager:status lost its id")
	}
}
