package wm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ---- peer-frame.schema.json ------------------------------------------------------------------

// PeerFrame is what a peer may send in POST /v1/workloads/events: *WorkloadEvent or
// *WorkloadsRemove.
type PeerFrame interface{ peer() }

func (*WorkloadEvent) peer()   {}
func (*WorkloadsRemove) peer() {}

// DecodePeer decodes one frame of a peer's body.
func DecodePeer(b []byte) (PeerFrame, error) {
	m, err := method(b)
	if err != nil {
		return nil, err
	}
	var f PeerFrame
	switch m {
	case MethodSubmitted, MethodStarted, MethodCompleted, MethodErrored, MethodCancelled:
		f = &WorkloadEvent{}
	case MethodRemove:
		f = &WorkloadsRemove{}
	default:
		return nil, fmt.Errorf("method %q is not accepted from peers", m)
	}
	return f, json.Unmarshal(b, f)
}

// ---- responses, broker-line.schema.json, http-*.schema.json ----------------------------------

// firstOf decodes b with the first decoder that accepts it (JSON Schema's anyOf).
func firstOf(b []byte, decoders ...func([]byte) (any, error)) (any, error) {
	var errs []string
	for _, d := range decoders {
		v, err := d(b)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("none of %d types: %s", len(decoders), strings.Join(errs, "; "))
}

func decodeAs[T any](b []byte) (any, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

func decodeArray(b []byte, each func([]byte) (any, error)) (any, error) {
	var raws []json.RawMessage
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '[' {
		return nil, fmt.Errorf("not an array")
	}
	if err := json.Unmarshal(b, &raws); err != nil {
		return nil, err
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("an empty array")
	}
	out := make([]any, len(raws))
	for i, r := range raws {
		v, err := each(r)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// DecodeBrokerResponse decodes the answer to one request of the broker: *EventResponse,
// *StatusResponse or *ErrorResponse.
func DecodeBrokerResponse(b []byte) (any, error) {
	return firstOf(b, decodeAs[EventResponse], decodeAs[StatusResponse], decodeAs[ErrorResponse])
}

// DecodeBrokerLine decodes any line a manager writes to its broker: a BrokerFrame, one
// response, or a batch's array of responses.
func DecodeBrokerLine(b []byte) (any, error) {
	return firstOf(b,
		func(b []byte) (any, error) { return DecodeBroker(b) },
		DecodeBrokerResponse,
		func(b []byte) (any, error) { return decodeArray(b, DecodeBrokerResponse) },
	)
}

// HTTPError is the body of every HTTP error status but 400: {"error": "..."}.
type HTTPError struct {
	Error string `json:"error"`
	// Since contract 1.2.0, in a 409 only: the two contract versions (absent elsewhere).
	ServerContractVersion  Opt[string] `json:"serverContractVersion"`
	RequestContractVersion Opt[string] `json:"requestContractVersion"`
}

type httpErrorJSON HTTPError

func (e *HTTPError) UnmarshalJSON(b []byte) error {
	var v httpErrorJSON
	if err := decodeObject(b, rules{required: []string{"error"}, nonNull: []string{"error", "serverContractVersion", "requestContractVersion"}}, &v); err != nil {
		return fmt.Errorf("HttpError: %w", err)
	}
	*e = HTTPError(v)
	return nil
}

func (e HTTPError) MarshalJSON() ([]byte, error) {
	return encodeObject(httpErrorJSON(e), map[string]setter{
		"serverContractVersion": e.ServerContractVersion, "requestContractVersion": e.RequestContractVersion,
	})
}

// DecodePeerResponse decodes the answer to one frame of a peer's body.
func DecodePeerResponse(b []byte) (any, error) {
	return firstOf(b, decodeAs[EventResponse], decodeAs[ErrorResponse])
}

// DecodeEventsBody decodes a 200 or 400 body: one PeerResponse, or an array for a batch.
func DecodeEventsBody(b []byte) (any, error) {
	return firstOf(b, DecodePeerResponse, func(b []byte) (any, error) { return decodeArray(b, DecodePeerResponse) })
}

// DecodeHTTPResponseBody decodes any body of POST /v1/workloads/events.
func DecodeHTTPResponseBody(b []byte) (any, error) {
	return firstOf(b, DecodeEventsBody, decodeAs[HTTPError])
}
