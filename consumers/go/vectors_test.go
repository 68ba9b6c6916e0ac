package wm

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// expectation is one vector and what the contract (the Python validator) says of it, one JSON
// object per line of the file named by WM_VECTORS (tests/test_consumers.py writes it from
// nvpair_wm.conformance.codec, the cases of the kit's codec role).
type expectation struct {
	Where   string          `json:"where"`
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Valid   bool            `json:"valid"`
	Encoded json.RawMessage `json:"encoded"`
	Path    string          `json:"path"`
}

// sameValue: equal JSON values, the same members present, numbers compared as values.
func sameValue(a, b *Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindBool:
		return a.Bool == b.Bool
	case KindNumber:
		x, _ := strconv.ParseFloat(a.Number, 64)
		y, _ := strconv.ParseFloat(b.Number, 64)
		return x == y
	case KindString:
		return a.String == b.String
	case KindArray:
		if len(a.Items) != len(b.Items) {
			return false
		}
		for i := range a.Items {
			if !sameValue(a.Items[i], b.Items[i]) {
				return false
			}
		}
	case KindObject:
		if len(a.Members) != len(b.Members) {
			return false
		}
		for _, m := range a.Members {
			other := b.Get(m.Name)
			if other == nil || !sameValue(m.Value, other) {
				return false
			}
		}
	}
	return true
}

func TestEveryVector(t *testing.T) {
	file := os.Getenv("WM_VECTORS")
	if file == "" {
		t.Skip("WM_VECTORS is not set: tests/test_consumers.py writes the vectors and sets it")
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := bufio.NewScanner(f)
	in.Buffer(nil, 64<<20)
	var total, accepted, refused, roundTripped int
	for in.Scan() {
		var e expectation
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		total++
		decode, ok := Decoders[e.Type]
		if !ok {
			t.Errorf("%s: no generated type %s", e.Where, e.Type)
			continue
		}
		got, err := decode([]byte(e.Text))
		switch {
		case e.Valid && err != nil:
			t.Errorf("%s: refused a valid %s: %v", e.Where, e.Type, err)
		case e.Valid:
			accepted++
			encoded := got.AppendJSON(nil)
			mine, err1 := Parse(encoded)
			want, err2 := Parse(e.Encoded)
			if err1 != nil || err2 != nil || !sameValue(mine, want) {
				t.Errorf("%s: re-encoded as %s, the contract says %s", e.Where, encoded, e.Encoded)
				continue
			}
			roundTripped++
		case err == nil:
			t.Errorf("%s: accepted an invalid %s: %.200s", e.Where, e.Type, e.Text)
		default:
			var we *Error
			if !errors.As(err, &we) || we.Path != e.Path {
				t.Errorf("%s: refused at %v, the contract's first violation is at %s", e.Where, err, e.Path)
				continue
			}
			refused++
		}
	}
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("vectors: %d, accepted %d, refused %d, round-tripped %d", total, accepted, refused, roundTripped)
}

const info = `{"id":"17","model":"m","engine":"vllm","runId":"r1","state":"queued","originatedFrom":"a",` +
	`"createdAt":1,"startedAt":null,"completedAt":null,"error":null,"seq":1EXTRA}`

// workload is a valid WorkloadInfo text with extra members.
func workload(extra string) string { return strings.Replace(info, "EXTRA", extra, 1) }

func event(method, extra, id string) string {
	return `{"jsonrpc":"2.0","method":"` + method + `","params":{"workloadInfo":` +
		workload(extra) + `}` + id + `}`
}

func TestAbsentNullAndValueStayApart(t *testing.T) {
	for _, c := range []struct {
		extra string
		state Presence
	}{{``, Absent}, {`,"requesterId":null`, Null}, {`,"requesterId":"u"`, Present}} {
		w, err := DecodeWorkloadInfo([]byte(workload(c.extra)))
		if err != nil {
			t.Fatal(err)
		}
		if w.RequesterId.State != c.state {
			t.Errorf("requesterId %q: state %d, want %d", c.extra, w.RequesterId.State, c.state)
		}
		out := string(w.AppendJSON(nil))
		if !strings.Contains(out, c.extra) || (c.extra == "" && strings.Contains(out, "requesterId")) {
			t.Errorf("requesterId %q re-encoded as %s", c.extra, out)
		}
	}
}

func TestNotificationStaysANotificationAndNullIDStaysARequest(t *testing.T) {
	for id, want := range map[string]Presence{``: Absent, `,"id":null`: Null, `,"id":7`: Present} {
		f, err := DecodeInboundFrame([]byte(event("workload:started", "", id)))
		if err != nil {
			t.Fatal(err)
		}
		e, ok := f.(WorkloadStarted)
		if !ok {
			t.Fatalf("decoded as %T", f)
		}
		if e.Id.State != want {
			t.Errorf("id %q: state %d", id, e.Id.State)
		}
		if out := string(e.AppendJSON(nil)); strings.Contains(out, `}},"id":`) != (id != "") {
			t.Errorf("id %q re-encoded as %s", id, out)
		}
	}
}

func TestUnionPicksTheLastMethod(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"manager:status","method":"workloads:remove",` +
		`"params":{"workloadId":"17","originatedFrom":"a"}}`
	f, err := DecodeInboundFrame([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(WorkloadsRemove); !ok || f.Method() != "workloads:remove" {
		t.Fatalf("decoded as %T, want WorkloadsRemove", f)
	}
}

func TestIntegersAsJSONSchemaCountsThem(t *testing.T) {
	for _, seq := range []string{"2", "2.0", "2e0", "20e-1"} {
		w, err := DecodeWorkloadInfo([]byte(strings.Replace(workload(""), `"seq":1`, `"seq":`+seq, 1)))
		if err != nil || w.Seq != 2 {
			t.Errorf("seq %s: %v %v", seq, w.Seq, err)
		}
	}
	for _, seq := range []string{"1.5", "0", "true", "9007199254740992", "1e20"} {
		_, err := DecodeWorkloadInfo([]byte(strings.Replace(workload(""), `"seq":1`, `"seq":`+seq, 1)))
		var e *Error
		if !errors.As(err, &e) || e.Path != "$.seq" {
			t.Errorf("seq %s: %v, want an error at $.seq", seq, err)
		}
	}
}

func TestFirstViolationIsNamedByItsPath(t *testing.T) {
	text := event("workload:errored", `,"scheduledOn":null`, "")
	_, err := DecodeInboundFrame([]byte(text))
	var e *Error
	if !errors.As(err, &e) || e.Path != "$.params.workloadInfo.scheduledOn" {
		t.Fatalf("got %v", err)
	}
}

func TestEncodingJSONUsesTheContractsRules(t *testing.T) {
	var outer struct {
		Info WorkloadInfo `json:"info"`
	}
	if err := json.Unmarshal([]byte(`{"info":`+workload(`,"requesterId":null`)+`}`), &outer); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(outer)
	if err != nil || !strings.Contains(string(out), `"requesterId":null`) || strings.Contains(string(out), "scheduledOn") {
		t.Fatalf("%s %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"info":`+workload(`,"scheduledOn":null`)+`}`), &outer); err == nil {
		t.Fatal("scheduledOn null accepted through encoding/json")
	}
}
