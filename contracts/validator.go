package contracts

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// schemaFS holds the JSON Schemas: envelope.json and one <event name>.json per event.
//
//go:embed schemas/*.json
var schemaFS embed.FS

// schemaBaseURL is the base of every schema's $id; schemas are registered under it and nothing
// is ever loaded from the network.
const schemaBaseURL = "https://example.com/shop/contracts/schemas/"

// ErrUnknownEvent means the event_name is not one of [EventNames]. [Validator.Validate] returns
// a [*ValidationError] for field "event_name" that wraps it, so errors.Is works.
var ErrUnknownEvent = errors.New("unknown event")

// ValidationError reports why an event body does not satisfy the contract.
type ValidationError struct {
	// Field is the path of the offending value inside the body, such as "event_id" or
	// "payload.lines[0].quantity"; for a missing property it names that property, for an
	// unexpected property the extra one. It is empty when the body as a whole is at fault
	// (malformed JSON, not an object).
	Field string
	// Reason says what is wrong, such as "missing" or "does not match pattern".
	Reason string

	// err is the sentinel this error wraps (ErrUnknownEvent), if any.
	err error
}

// Error returns "<field>: <reason>", or "event body: <reason>" when Field is empty.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "event body: " + e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap returns [ErrUnknownEvent] for an unknown event_name, nil otherwise.
func (e *ValidationError) Unwrap() error { return e.err }

// Validator checks event bodies against the embedded schemas. The schemas are compiled once by
// [NewValidator]; a Validator is immutable and safe for concurrent use.
type Validator struct {
	envelope *jsonschema.Schema
	payloads map[string]*jsonschema.Schema // by event name
	fast     bool                          // fastValid follows the embedded schemas
}

// NewValidator compiles the envelope schema and the payload schema of every event in
// [EventNames]. It fails only when an embedded schema is missing or invalid, a programming error.
func NewValidator() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	c.LoadURL = func(url string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("load %s: only embedded schemas are allowed", url)
	}
	names := append([]string{"envelope", "event-names"}, EventNames()...)
	for _, name := range names {
		data, err := schemaFS.ReadFile("schemas/" + name + ".json")
		if err != nil {
			return nil, fmt.Errorf("contracts: read schema %s: %w", name, err)
		}
		if err := c.AddResource(schemaBaseURL+name+".json", bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("contracts: add schema %s: %w", name, err)
		}
	}
	v := &Validator{payloads: make(map[string]*jsonschema.Schema, len(EventNames()))}
	sum, err := schemasSHA256()
	if err != nil {
		return nil, fmt.Errorf("contracts: hash schemas: %w", err)
	}
	v.fast = sum == fastSchemasSHA256
	if v.envelope, err = c.Compile(schemaBaseURL + "envelope.json"); err != nil {
		return nil, fmt.Errorf("contracts: compile envelope schema: %w", err)
	}
	for _, name := range EventNames() {
		s, err := c.Compile(schemaBaseURL + name + ".json")
		if err != nil {
			return nil, fmt.Errorf("contracts: compile schema %s: %w", name, err)
		}
		v.payloads[name] = s
	}
	return v, nil
}

// Example returns the first of the examples of eventName's payload schema (its
// "examples" keyword): a payload the schema accepts, so that a test can send any event
// without a sample of its own. It wraps [ErrUnknownEvent] for a name that is not one of
// [EventNames], and fails for a schema without an example (the contract's tests require
// one in every payload schema).
func Example(eventName string) (json.RawMessage, error) {
	if !knownEvent(eventName) {
		return nil, fmt.Errorf("contracts: example of %q: %w", eventName, ErrUnknownEvent)
	}
	data, err := schemaFS.ReadFile("schemas/" + eventName + ".json")
	if err != nil {
		return nil, fmt.Errorf("contracts: read schema %s: %w", eventName, err)
	}
	var s struct {
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("contracts: schema %s: %w", eventName, err)
	}
	if len(s.Examples) == 0 {
		return nil, fmt.Errorf("contracts: schemas/%s.json has no examples", eventName)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, s.Examples[0]); err != nil {
		return nil, fmt.Errorf("contracts: schema %s: %w", eventName, err)
	}
	return b.Bytes(), nil
}

// Validate checks an event body: it must be one JSON object satisfying schemas/envelope.json,
// and its payload must satisfy the schema of its event_name.
//
// Every contract violation is returned as a [*ValidationError] naming the most specific
// offending field. An event_name that is a string but not one of [EventNames] is reported
// before anything else (the payload cannot be checked without it) and wraps [ErrUnknownEvent].
// Malformed JSON, trailing data after the object or a body that is not an object gives a
// ValidationError with an empty Field ("event body: malformed JSON: ...").
func (v *Validator) Validate(body []byte) error {
	doc, err := parseJSON(body)
	if err != nil {
		return err
	}
	return v.validateDoc(doc)
}

// validateDoc is Validate on a parsed body. A document that fastValid accepts is
// valid; any other is checked by the schema library, which names what is wrong.
func (v *Validator) validateDoc(doc any) error {
	if v.fast && fastValid(doc) {
		return checkProducer(doc)
	}
	if obj, ok := doc.(map[string]any); ok {
		if name, ok := obj["event_name"].(string); ok {
			if _, known := v.payloads[name]; !known {
				return &ValidationError{
					Field:  "event_name",
					Reason: fmt.Sprintf("unknown event %q", name),
					err:    ErrUnknownEvent,
				}
			}
		}
	}
	if err := v.envelope.Validate(doc); err != nil {
		return toValidationError(doc, "", err)
	}
	obj := doc.(map[string]any) // the envelope schema requires an object
	payload := obj["payload"]
	if err := v.payloads[obj["event_name"].(string)].Validate(payload); err != nil {
		return toValidationError(doc, "/payload", err)
	}
	return checkProducer(doc)
}

// checkProducer checks that a valid envelope names as its producer the one the
// registry gives its event ([ProducerOf]): an event has one producer, so a
// service can neither write nor pass off another service's event (a stock
// answer sent by order's relay is refused, and dead-lettered by a consumer).
func checkProducer(doc any) error {
	obj := doc.(map[string]any) // valid: an object with a known event_name and a producer
	name, producer := obj["event_name"].(string), obj["producer"].(string)
	if p, ok := ProducerOf(name); ok && p.Name != producer {
		return &ValidationError{Field: "producer",
			Reason: fmt.Sprintf("%s is published by %q, not %q", name, p.Name, producer)}
	}
	return nil
}

// Decode validates body like [Validator.Validate] and, when it is valid, returns it as an
// Envelope. The body is parsed once: the document the schemas check also gives the Envelope's
// fields, and Payload is the payload's bytes as they are in body (a copy, found by a scan), so
// numbers and decimal strings stay exact. Errors are those of Validate, plus a
// [*ValidationError] with an empty Field when a valid body still does not fit the Go types
// (schema_version written as 1.0). A key given twice counts with its last value, as in
// encoding/json.
func (v *Validator) Decode(body []byte) (Envelope, error) {
	doc, err := parseJSON(body)
	if err != nil {
		return Envelope{}, err
	}
	if err := v.validateDoc(doc); err != nil {
		return Envelope{}, err
	}
	var env Envelope
	payload, ok := payloadBytes(body)
	if ok {
		env, err = envelopeOf(doc.(map[string]any), bytes.Clone(payload)) // the schema requires an object
	} else {
		err = json.Unmarshal(body, &env) // a top-level key written with escapes
	}
	if err != nil {
		return Envelope{}, &ValidationError{Reason: "cannot decode envelope: " + err.Error()}
	}
	return env, nil
}

// payloadBytes returns the bytes of the value of the top-level "payload" member of body, a
// valid JSON object, as they appear in body (its last occurrence, as encoding/json decodes it),
// found by one scan without decoding. ok is false when there is none, or when a top-level key
// is written with escapes (the caller then decodes instead).
func payloadBytes(body []byte) (payload []byte, ok bool) {
	depth, start := 0, -1
	key, isPayload := false, false
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			j, escaped := i+1, false
			for ; j < len(body) && body[j] != '"'; j++ {
				if body[j] == '\\' {
					escaped = true
					j++
				}
			}
			if depth == 1 && key {
				if escaped {
					return nil, false
				}
				isPayload, key = string(body[i+1:j]) == "payload", false
			}
			i = j
		case '{', '[':
			depth++
			if depth == 1 {
				key = true
			}
		case ',', '}', ']':
			if depth == 1 {
				if start >= 0 {
					payload, ok, start = body[start:i], true, -1
				}
				key = true
			}
			if body[i] != ',' {
				depth--
			}
		case ':':
			if depth == 1 && isPayload {
				start, isPayload = i+1, false
			}
		}
	}
	return bytes.TrimSpace(payload), ok
}

// envelopeOf builds the Envelope of a document that satisfies schemas/envelope.json, whose
// payload member is the bytes payload.
func envelopeOf(obj map[string]any, payload []byte) (Envelope, error) {
	var env Envelope
	var err error
	str := func(k string) string { s, _ := obj[k].(string); return s }
	if env.EventID, err = uuid.Parse(str("event_id")); err != nil {
		return env, fmt.Errorf("event_id: %w", err)
	}
	if env.OccurredAt, err = time.Parse(time.RFC3339Nano, str("occurred_at")); err != nil {
		return env, fmt.Errorf("occurred_at: %w", err)
	}
	env.OccurredAt = env.OccurredAt.UTC()
	n, _ := obj["schema_version"].(json.Number)
	version, err := strconv.ParseInt(string(n), 10, 0)
	if err != nil {
		return env, fmt.Errorf("schema_version %s is not a whole number", n)
	}
	env.SchemaVersion = int(version)
	env.EventName, env.Producer, env.CorrelationID = str("event_name"), str("producer"), str("correlation_id")
	env.Payload = payload
	return env, nil
}

// parseJSON decodes exactly one JSON value, keeping numbers as json.Number as the schema library
// expects.
func parseJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ValidationError{Reason: "malformed JSON: empty body"}
		}
		return nil, &ValidationError{Reason: "malformed JSON: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &ValidationError{Reason: "malformed JSON: data after the top-level value"}
	}
	return doc, nil
}

// toValidationError turns a schema library error into a ValidationError for the deepest failing
// value. prefix is the JSON pointer of the validated value inside doc.
func toValidationError(doc any, prefix string, err error) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("contracts: validate: %w", err)
	}
	var best *ValidationError
	bestDepth := -1
	for _, leaf := range leaves(ve, nil) {
		ptr := splitPointer(prefix + leaf.InstanceLocation)
		reason := reasonFor(leaf)
		keyword := leaf.KeywordLocation[strings.LastIndexByte(leaf.KeywordLocation, '/')+1:]
		switch keyword {
		case "required", "additionalProperties":
			// Name the missing or extra property itself, not the object holding it.
			if name := firstQuoted(leaf.Message); name != "" {
				ptr = append(ptr, name)
			}
		}
		cand := &ValidationError{Field: fieldPath(doc, ptr), Reason: reason}
		// Deepest wins; ties go to the lexically smaller field so the result does not
		// depend on map iteration order inside the schema library.
		if len(ptr) > bestDepth || (len(ptr) == bestDepth && cand.Field < best.Field) {
			best, bestDepth = cand, len(ptr)
		}
	}
	if best == nil {
		return &ValidationError{Reason: ve.Message}
	}
	return best
}

// leaves appends the causes of e that have no causes themselves, in tree order.
func leaves(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return append(out, e)
	}
	for _, c := range e.Causes {
		out = leaves(c, out)
	}
	return out
}

// reasonFor returns a short reason for a leaf error, keyed by the failing keyword.
func reasonFor(e *jsonschema.ValidationError) string {
	keyword := e.KeywordLocation[strings.LastIndexByte(e.KeywordLocation, '/')+1:]
	switch keyword {
	case "required":
		return "missing"
	case "additionalProperties":
		return "unknown field"
	case "pattern":
		return "does not match pattern"
	case "format":
		if i := strings.LastIndex(e.Message, " is not valid "); i >= 0 {
			return "is not a valid " + strings.Trim(e.Message[i+len(" is not valid "):], "'")
		}
	case "enum":
		return "is not one of the allowed values"
	case "minLength", "minItems":
		return "must not be empty"
	}
	return e.Message
}

// firstQuoted returns the first, in sorted order, of the single-quoted names in a schema library
// message such as "missing properties: 'a', 'b'", undoing the library's quoting (a Go %q string
// with the double quotes swapped for single ones).
func firstQuoted(msg string) string {
	var names []string
	for i := 0; i < len(msg); i++ {
		if msg[i] != '\'' {
			continue
		}
		var raw strings.Builder
		j := i + 1
		for ; j < len(msg) && msg[j] != '\''; j++ {
			switch {
			case msg[j] == '\\' && j+1 < len(msg) && msg[j+1] == '\'':
				raw.WriteByte('\'')
				j++
			case msg[j] == '\\' && j+1 < len(msg):
				raw.WriteString(msg[j : j+2])
				j++
			case msg[j] == '"':
				raw.WriteString(`\"`)
			default:
				raw.WriteByte(msg[j])
			}
		}
		if name, err := strconv.Unquote(`"` + raw.String() + `"`); err == nil {
			names = append(names, name)
		}
		i = j
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return names[0]
}

// splitPointer splits a JSON pointer ("/payload/lines/0") into unescaped tokens.
func splitPointer(ptr string) []string {
	if ptr == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// fieldPath renders pointer tokens as "payload.lines[0].quantity", walking doc to tell array
// indexes from object keys.
func fieldPath(doc any, tokens []string) string {
	var b strings.Builder
	cur := doc
	for _, tok := range tokens {
		switch node := cur.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err == nil && i >= 0 && i < len(node) {
				fmt.Fprintf(&b, "[%d]", i)
				cur = node[i]
				continue
			}
			cur = nil
		case map[string]any:
			cur = node[tok]
		default:
			cur = nil
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}
