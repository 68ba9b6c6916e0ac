// Package wm holds Go types for the nvpair-wm frames (schema/*.schema.json), standard library
// only, decoded with encoding/json.
//
// encoding/json alone loses three things the contract keeps, so this file adds them:
//
//   - absent versus null: a pointer field cannot tell them apart (null and absent both leave
//     it nil), so members that may be absent or null (requesterId, a frame's id) use Opt[T],
//     whose UnmarshalJSON runs only when the member is present, and objects drop unset Opt
//     members when they are encoded;
//   - required members and non-null members: encoding/json ignores a missing member and lets
//     null leave a string or a number unchanged, so every object lists its required and its
//     non-nullable members and checks them before decoding;
//   - integers written 1.0 or 1e3: Int accepts every integral number within ±(2^53-1).
package wm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// MaxSafeInt bounds every integer of the contract.
const MaxSafeInt = 1<<53 - 1

// Int is an integer of the contract: 1, 1.0 and 1e0 are the same integer; 1.5 and true are not.
type Int int64

func (n *Int) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return fmt.Errorf("null is not an integer")
	}
	if len(b) == 0 || !(b[0] == '-' || (b[0] >= '0' && b[0] <= '9')) {
		return fmt.Errorf("%s is not an integer", b)
	}
	if i, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		if i > MaxSafeInt || i < -MaxSafeInt {
			return fmt.Errorf("%s is out of range", b)
		}
		*n = Int(i)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("%s is not a finite number", b)
	}
	if f != math.Trunc(f) || math.Abs(f) > MaxSafeInt {
		return fmt.Errorf("%s is not an integer within ±(2^53-1)", b)
	}
	*n = Int(f)
	return nil
}

// Opt is a member that may be absent (Set false) or null (Null true).
type Opt[T any] struct {
	Set  bool
	Null bool
	V    T
}

// Some is a present, non-null member.
func Some[T any](v T) Opt[T] { return Opt[T]{Set: true, V: v} }

// Null is a present null member.
func Null[T any]() Opt[T] { return Opt[T]{Set: true, Null: true} }

func (o *Opt[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.V)
}

func (o Opt[T]) MarshalJSON() ([]byte, error) {
	if !o.Set || o.Null {
		return []byte("null"), nil // an unset member is dropped by its object's encoder
	}
	return json.Marshal(o.V)
}

func (o Opt[T]) isSet() bool { return o.Set }

type setter interface{ isSet() bool }

// RequestID is a JSON-RPC id: a string, an integer within ±(2^53-1), or null.
type RequestID struct{ raw json.RawMessage }

// IDString and IDInt make ids.
func IDString(s string) RequestID { b, _ := json.Marshal(s); return RequestID{b} }
func IDInt(n int64) RequestID     { return RequestID{json.RawMessage(strconv.FormatInt(n, 10))} }

func (r *RequestID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if len([]rune(s)) > 256 {
			return fmt.Errorf("id longer than 256 characters")
		}
	default:
		var n Int
		if err := n.UnmarshalJSON(b); err != nil {
			return fmt.Errorf("id: %w", err)
		}
		b = []byte(strconv.FormatInt(int64(n), 10))
	}
	r.raw = append(json.RawMessage(nil), b...)
	return nil
}

func (r RequestID) MarshalJSON() ([]byte, error) {
	if len(r.raw) == 0 {
		return []byte("null"), nil
	}
	return r.raw, nil
}

// rules are what encoding/json does not check for one object type.
type rules struct {
	required []string
	nonNull  []string
	consts   map[string]string // member -> the JSON text it must equal
}

// checkObject decodes b as an object, applies r, and returns its members (the last of
// duplicate names wins, as encoding/json's own decoding does).
func checkObject(b []byte, r rules) (map[string]json.RawMessage, error) {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("not an object: %.40s", b)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, k := range r.required {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("missing member %q", k)
		}
	}
	for _, k := range r.nonNull {
		if v, ok := m[k]; ok && string(bytes.TrimSpace(v)) == "null" {
			return nil, fmt.Errorf("member %q may not be null", k)
		}
	}
	for k, want := range r.consts {
		var got, exp any
		if err := json.Unmarshal(m[k], &got); err != nil {
			return nil, fmt.Errorf("member %q: %w", k, err)
		}
		_ = json.Unmarshal([]byte(want), &exp)
		if got != exp {
			return nil, fmt.Errorf("member %q is %s, must be %s", k, m[k], want)
		}
	}
	return m, nil
}

// decodeObject checks b against r and decodes it into v (a pointer to a struct type without
// methods, so that encoding/json does the member work). encoding/json alone would read the
// first of duplicate members where it fails and match member names case-insensitively, so v
// is decoded from the members that remain: the last of each name, and only exact field names.
func decodeObject(b []byte, r rules, v any) error {
	m, err := checkObject(b, r)
	if err != nil {
		return err
	}
	names := fieldNames(reflect.TypeOf(v).Elem())
	for k := range m {
		if !names[k] {
			delete(m, k) // unknown members are accepted and dropped
		}
	}
	clean, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(clean, v)
}

// fieldNames are the JSON member names of a struct type's fields.
func fieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		if tag != "" && tag != "-" {
			names[tag] = true
		}
	}
	return names
}

// encodeObject encodes v (a type without methods) and drops the members whose Opt is unset.
func encodeObject(v any, opts map[string]setter) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(opts) == 0 {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, o := range opts {
		if !o.isSet() {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}

func oneOf(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %v", s, allowed)
}
