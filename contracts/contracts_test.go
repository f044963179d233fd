package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
)

// newValidator compiles the embedded schemas or fails the test.
func newValidator(t testing.TB) *contracts.Validator {
	t.Helper()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatalf("NewValidator: %v", err)
	}
	return v
}

// samplePlaced is a valid order.order.placed.v1 payload.
func samplePlaced() contracts.OrderPlaced {
	return contracts.OrderPlaced{
		OrderID:    uuid.MustParse("0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d"),
		CustomerID: uuid.MustParse("6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"),
		Lines: []contracts.OrderLine{
			{ProductID: uuid.MustParse("11111111-2222-4333-8444-555555555555"), Quantity: "2.000"},
			{ProductID: uuid.MustParse("66666666-7777-4888-9999-aaaaaaaaaaaa"), Quantity: "0.5"},
		},
		Version: 2,
	}
}

// example is the example of eventName's payload schema (contracts.Example), which
// every payload schema must have: a test of every event sends it.
func example(t testing.TB, eventName string) json.RawMessage {
	t.Helper()
	p, err := contracts.Example(eventName)
	if err != nil {
		t.Fatalf("%v: give the schema an \"examples\" list with a valid payload first", err)
	}
	return p
}

// TestExample: every event's schema has an example (TestValidateAndDecodeValid checks
// that the schema accepts it); an unknown event has none.
func TestExample(t *testing.T) {
	t.Parallel()
	for _, name := range contracts.EventNames() {
		example(t, name)
	}
	if _, err := contracts.Example("order.order.shipped.v1"); !errors.Is(err, contracts.ErrUnknownEvent) {
		t.Errorf("Example(unknown) = %v, want ErrUnknownEvent", err)
	}
}

// producerOf returns the registry's producer of eventName.
func producerOf(t testing.TB, eventName string) string {
	t.Helper()
	p, ok := contracts.ProducerOf(eventName)
	if !ok {
		t.Fatalf("no producer publishes %s", eventName)
	}
	return p.Name
}

// TestValidateRefusesAnotherProducersEvent: an event has one producer; an envelope
// naming another is refused, on the fast path and the schema library's alike.
func TestValidateRefusesAnotherProducersEvent(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	for _, name := range contracts.EventNames() {
		env, err := contracts.NewEnvelope(name, "shipping", "c", example(t, name), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		var ve *contracts.ValidationError
		if err := v.Validate(raw); !errors.As(err, &ve) || ve.Field != "producer" {
			t.Errorf("Validate(%s from shipping) = %v, want a ValidationError on producer", name, err)
		}
		if _, err := v.Decode(raw); !errors.As(err, &ve) || ve.Field != "producer" {
			t.Errorf("Decode(%s from shipping) = %v, want a ValidationError on producer", name, err)
		}
	}
}

// validBody returns a valid envelope of eventName marshalled to JSON.
func validBody(t testing.TB, eventName string) []byte {
	t.Helper()
	env, err := contracts.NewEnvelope(eventName, contracts.ProducerOrder, "corr-1", samplePlaced(),
		time.Date(2026, 11, 30, 3, 39, 28, 123456789, time.FixedZone("x", 3600)))
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("marshal envelope: %v", err)
	}
	return body
}

// mutate decodes body into a generic map, applies fn and re-encodes it.
func mutate(t *testing.T, body []byte, fn func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return out
}

// payloadOf returns the payload object of a decoded envelope map.
func payloadOf(m map[string]any) map[string]any { return m["payload"].(map[string]any) }

// firstLine returns lines[0] of the payload of a decoded envelope map.
func firstLine(m map[string]any) map[string]any {
	return payloadOf(m)["lines"].([]any)[0].(map[string]any)
}

func setQuantity(q any) func(map[string]any) {
	return func(m map[string]any) { firstLine(m)["quantity"] = q }
}

func TestEnvelopeMarshalFormat(t *testing.T) {
	t.Parallel()
	body := validBody(t, contracts.EventOrderPlaced)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	// 03:39:28.123456789+01:00 -> 02:39:28.123Z: UTC, truncated to milliseconds.
	if got, want := m["occurred_at"], "2026-11-30T02:39:28.123Z"; got != want {
		t.Errorf("occurred_at = %v, want %v", got, want)
	}
	for _, key := range []string{"event_id", "event_name", "occurred_at", "producer", "schema_version", "correlation_id", "payload"} {
		if _, ok := m[key]; !ok {
			t.Errorf("marshalled envelope lacks %q: %s", key, body)
		}
	}
	if len(m) != 7 {
		t.Errorf("marshalled envelope has %d keys, want 7: %s", len(m), body)
	}

	// Whole seconds still get three fraction digits.
	env, err := contracts.NewEnvelope(contracts.EventOrderCancelled, "order", "c", samplePlaced(),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"occurred_at":"2026-01-02T03:04:05.000Z"`)) {
		t.Errorf("whole-second occurred_at not padded: %s", out)
	}
}

func TestNewEnvelope(t *testing.T) {
	t.Parallel()
	now := time.Now()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", samplePlaced(), now)
	if err != nil {
		t.Fatal(err)
	}
	if env.EventID.Version() != 7 {
		t.Errorf("event id version = %d, want 7", env.EventID.Version())
	}
	if env.OccurredAt.Location() != time.UTC {
		t.Errorf("occurred_at location = %v, want UTC", env.OccurredAt.Location())
	}
	if want := now.UTC().Truncate(time.Millisecond); !env.OccurredAt.Equal(want) || env.OccurredAt.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("occurred_at = %v, want %v", env.OccurredAt, want)
	}
	if env.SchemaVersion != contracts.SchemaVersion || env.Producer != contracts.ProducerOrder || env.CorrelationID != "corr" {
		t.Errorf("unexpected metadata: %+v", env)
	}
	other, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", samplePlaced(), now)
	if err != nil {
		t.Fatal(err)
	}
	if other.EventID == env.EventID {
		t.Error("two envelopes share an event id")
	}

	// A raw payload is kept byte for byte.
	raw := json.RawMessage(`{"order_id":"x","n":1.50}`)
	env, err = contracts.NewEnvelope(contracts.EventOrderPlaced, "order", "c", raw, now)
	if err != nil {
		t.Fatal(err)
	}
	if string(env.Payload) != string(raw) {
		t.Errorf("payload = %s, want %s", env.Payload, raw)
	}

	if _, err := contracts.NewEnvelope("order.order.shipped.v1", "order", "c", samplePlaced(), now); !errors.Is(err, contracts.ErrUnknownEvent) {
		t.Errorf("unknown event: err = %v, want ErrUnknownEvent", err)
	}
	if _, err := contracts.NewEnvelope(contracts.EventOrderPlaced, "order", "c", func() {}, now); err == nil {
		t.Error("unmarshalable payload: want error")
	}
}

func TestValidateAndDecodeValid(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	for _, name := range contracts.EventNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := contracts.NewEnvelope(name, producerOf(t, name), "corr-42", example(t, name), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			body, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Validate(body); err != nil {
				t.Fatalf("Validate(%s) = %v", body, err)
			}
			got, err := v.Decode(body)
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			if got.EventID != want.EventID || got.EventName != want.EventName || !got.OccurredAt.Equal(want.OccurredAt) ||
				got.OccurredAt.Location() != time.UTC || got.Producer != want.Producer ||
				got.SchemaVersion != want.SchemaVersion || got.CorrelationID != want.CorrelationID ||
				!bytes.Equal(got.Payload, want.Payload) {
				t.Errorf("Decode round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestValidateAcceptsVariants(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	base := validBody(t, contracts.EventOrderPlaced)
	tests := []struct {
		name string
		fn   func(m map[string]any)
	}{
		{"quantity 0.001", setQuantity("0.001")},
		{"quantity 2.000", setQuantity("2.000")},
		{"quantity 999999999.999", setQuantity("999999999.999")},
		{"quantity 1", setQuantity("1")},
		{"quantity 0.5", setQuantity("0.5")},
		{"quantity 0.05", setQuantity("0.05")},
		{"quantity 10.01", setQuantity("10.01")},
		{"quantity 100", setQuantity("100")},
		{"occurred_at with offset", func(m map[string]any) { m["occurred_at"] = "2026-11-30T03:39:28.123+01:00" }},
		{"occurred_at negative offset", func(m map[string]any) { m["occurred_at"] = "2026-11-30T03:39:28.000-05:30" }},
		{"schema_version 2", func(m map[string]any) { m["schema_version"] = 2 }},
		{"payload order_id v4", func(m map[string]any) { payloadOf(m)["order_id"] = uuid.NewString() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := mutate(t, base, tt.fn)
			if err := v.Validate(body); err != nil {
				t.Errorf("Validate(%s) = %v, want nil", body, err)
			}
			if _, err := v.Decode(body); err != nil {
				t.Errorf("Decode = %v, want nil", err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	base := validBody(t, contracts.EventOrderPlaced)
	tests := []struct {
		name      string
		body      []byte               // used when set
		fn        func(map[string]any) // otherwise applied to base
		field     string
		reason    string // substring of Reason; empty = any
		isUnknown bool
	}{
		{name: "missing event_id", fn: func(m map[string]any) { delete(m, "event_id") }, field: "event_id", reason: "missing"},
		{name: "v4 event_id", fn: func(m map[string]any) { m["event_id"] = uuid.NewString() }, field: "event_id", reason: "does not match pattern"},
		{name: "uppercase event_id", fn: func(m map[string]any) { m["event_id"] = strings.ToUpper(m["event_id"].(string)) }, field: "event_id"},
		{name: "event_id abc", fn: func(m map[string]any) { m["event_id"] = "abc" }, field: "event_id", reason: "does not match pattern"},
		{name: "event_id number", fn: func(m map[string]any) { m["event_id"] = 7 }, field: "event_id", reason: "expected string"},
		{name: "occurred_at yesterday", fn: func(m map[string]any) { m["occurred_at"] = "yesterday" }, field: "occurred_at"},
		{name: "occurred_at without milliseconds", fn: func(m map[string]any) { m["occurred_at"] = "2026-11-30T03:39:28Z" }, field: "occurred_at", reason: "does not match pattern"},
		{name: "occurred_at microseconds", fn: func(m map[string]any) { m["occurred_at"] = "2026-11-30T03:39:28.123456Z" }, field: "occurred_at"},
		{name: "occurred_at no zone", fn: func(m map[string]any) { m["occurred_at"] = "2026-11-30T03:39:28.123" }, field: "occurred_at"},
		{name: "occurred_at Feb 30", fn: func(m map[string]any) { m["occurred_at"] = "2026-02-30T03:39:28.123Z" }, field: "occurred_at", reason: "date-time"},
		{name: "missing occurred_at", fn: func(m map[string]any) { delete(m, "occurred_at") }, field: "occurred_at", reason: "missing"},
		{name: "empty producer", fn: func(m map[string]any) { m["producer"] = "" }, field: "producer"},
		{name: "empty correlation_id", fn: func(m map[string]any) { m["correlation_id"] = "" }, field: "correlation_id"},
		// It travels as the AMQP correlation_id, a short string of at most 255 bytes.
		{name: "correlation_id of 256", fn: func(m map[string]any) { m["correlation_id"] = strings.Repeat("c", 256) }, field: "correlation_id"},
		{name: "correlation_id not ASCII", fn: func(m map[string]any) { m["correlation_id"] = "café" }, field: "correlation_id", reason: "does not match pattern"},
		{name: "correlation_id with NUL", fn: func(m map[string]any) { m["correlation_id"] = "a\x00b" }, field: "correlation_id", reason: "does not match pattern"},
		{name: "schema_version 0", fn: func(m map[string]any) { m["schema_version"] = 0 }, field: "schema_version"},
		{name: "schema_version string", fn: func(m map[string]any) { m["schema_version"] = "1" }, field: "schema_version"},
		{name: "schema_version fraction", fn: func(m map[string]any) { m["schema_version"] = 1.5 }, field: "schema_version"},
		{name: "payload not an object", fn: func(m map[string]any) { m["payload"] = []any{} }, field: "payload"},
		{name: "missing payload", fn: func(m map[string]any) { delete(m, "payload") }, field: "payload", reason: "missing"},
		{name: "unknown event_name", fn: func(m map[string]any) { m["event_name"] = "order.order.shipped.v1" }, field: "event_name", reason: "unknown event", isUnknown: true},
		{name: "unknown event_name beats other errors", fn: func(m map[string]any) { m["event_name"] = "x"; delete(m, "event_id") }, field: "event_name", isUnknown: true},
		{name: "event_name not a string", fn: func(m map[string]any) { m["event_name"] = 1 }, field: "event_name", reason: "expected string"},
		{name: "extra top-level field", fn: func(m map[string]any) { m["priority"] = "high" }, field: "priority", reason: "unknown field"},
		{name: "extra field with odd name", fn: func(m map[string]any) { m[`we'ird/"x"~`] = 1 }, field: `we'ird/"x"~`, reason: "unknown field"},
		{name: "extra payload field", fn: func(m map[string]any) { payloadOf(m)["status"] = "placed" }, field: "payload.status", reason: "unknown field"},
		{name: "extra line field", fn: func(m map[string]any) { firstLine(m)["price"] = "1.00" }, field: "payload.lines[0].price", reason: "unknown field"},
		{name: "empty lines", fn: func(m map[string]any) { payloadOf(m)["lines"] = []any{} }, field: "payload.lines", reason: "must not be empty"},
		{name: "101 lines", fn: func(m map[string]any) {
			line := firstLine(m)
			lines := make([]any, 101)
			for i := range lines {
				lines[i] = line
			}
			payloadOf(m)["lines"] = lines
		}, field: "payload.lines"},
		{name: "lines not an array", fn: func(m map[string]any) { payloadOf(m)["lines"] = map[string]any{} }, field: "payload.lines", reason: "expected array"},
		{name: "missing lines", fn: func(m map[string]any) { delete(payloadOf(m), "lines") }, field: "payload.lines", reason: "missing"},
		{name: "missing payload.version", fn: func(m map[string]any) { delete(payloadOf(m), "version") }, field: "payload.version", reason: "missing"},
		{name: "payload.version 0", fn: func(m map[string]any) { payloadOf(m)["version"] = 0 }, field: "payload.version"},
		{name: "missing order_id", fn: func(m map[string]any) { delete(payloadOf(m), "order_id") }, field: "payload.order_id", reason: "missing"},
		{name: "bad customer_id", fn: func(m map[string]any) { payloadOf(m)["customer_id"] = "not-a-uuid" }, field: "payload.customer_id", reason: "does not match pattern"},
		{name: "missing product_id", fn: func(m map[string]any) { delete(firstLine(m), "product_id") }, field: "payload.lines[0].product_id", reason: "missing"},
		{name: "second line bad", fn: func(m map[string]any) {
			payloadOf(m)["lines"].([]any)[1].(map[string]any)["quantity"] = "0"
		}, field: "payload.lines[1].quantity", reason: "does not match pattern"},
		{name: "quantity 0", fn: setQuantity("0"), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity 0.000", fn: setQuantity("0.000"), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity 0.0", fn: setQuantity("0.0"), field: "payload.lines[0].quantity"},
		{name: "quantity -1", fn: setQuantity("-1"), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity 1.2345", fn: setQuantity("1.2345"), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity abc", fn: setQuantity("abc"), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity empty", fn: setQuantity(""), field: "payload.lines[0].quantity", reason: "does not match pattern"},
		{name: "quantity 10 integer digits", fn: setQuantity("1000000000"), field: "payload.lines[0].quantity"},
		{name: "quantity leading zero", fn: setQuantity("01"), field: "payload.lines[0].quantity"},
		{name: "quantity trailing dot", fn: setQuantity("1."), field: "payload.lines[0].quantity"},
		{name: "quantity leading dot", fn: setQuantity(".5"), field: "payload.lines[0].quantity"},
		{name: "quantity plus sign", fn: setQuantity("+1"), field: "payload.lines[0].quantity"},
		{name: "quantity exponent", fn: setQuantity("1e3"), field: "payload.lines[0].quantity"},
		{name: "quantity spaces", fn: setQuantity(" 1"), field: "payload.lines[0].quantity"},
		{name: "quantity comma", fn: setQuantity("1,5"), field: "payload.lines[0].quantity"},
		{name: "quantity number", fn: setQuantity(2), field: "payload.lines[0].quantity", reason: "expected string"},
		{name: "quantity null", fn: setQuantity(nil), field: "payload.lines[0].quantity", reason: "expected string"},
		{name: "malformed JSON", body: []byte(`{"event_id":`), field: "", reason: "malformed JSON"},
		{name: "empty body", body: []byte(``), field: "", reason: "malformed JSON"},
		{name: "trailing data", body: append(append([]byte{}, base...), []byte(` {}`)...), field: "", reason: "malformed JSON"},
		{name: "not an object", body: []byte(`[1,2]`), field: "", reason: "expected object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := tt.body
			if body == nil {
				body = mutate(t, base, tt.fn)
			}
			for op, err := range map[string]error{
				"Validate": v.Validate(body),
				"Decode":   func() error { _, err := v.Decode(body); return err }(),
			} {
				var ve *contracts.ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("%s(%s) = %v (%T), want *ValidationError", op, body, err, err)
				}
				if ve.Field != tt.field {
					t.Errorf("%s: Field = %q, want %q (error %q)", op, ve.Field, tt.field, err)
				}
				if !strings.Contains(ve.Reason, tt.reason) {
					t.Errorf("%s: Reason = %q, want it to contain %q", op, ve.Reason, tt.reason)
				}
				if tt.field != "" && !strings.HasPrefix(err.Error(), tt.field+": ") {
					t.Errorf("%s: Error() = %q, want prefix %q", op, err.Error(), tt.field+": ")
				}
				if got := errors.Is(err, contracts.ErrUnknownEvent); got != tt.isUnknown {
					t.Errorf("%s: errors.Is(err, ErrUnknownEvent) = %v, want %v", op, got, tt.isUnknown)
				}
			}
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	body := mutate(t, validBody(t, contracts.EventOrderPlaced), setQuantity("1.2345"))
	if got, want := fmt.Sprint(v.Validate(body)), "payload.lines[0].quantity: does not match pattern"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	body = mutate(t, validBody(t, contracts.EventOrderPlaced), func(m map[string]any) { delete(m, "event_id") })
	if got, want := fmt.Sprint(v.Validate(body)), "event_id: missing"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := fmt.Sprint(v.Validate([]byte(`{"event_id":`))), "event body: malformed JSON: unexpected EOF"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestDecodeIntegerWithFraction(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	body := bytes.Replace(validBody(t, contracts.EventOrderPlaced), []byte(`"schema_version":1`), []byte(`"schema_version":1.0`), 1)
	if err := v.Validate(body); err != nil {
		t.Fatalf("Validate(%s) = %v; JSON Schema counts 1.0 as an integer", body, err)
	}
	var ve *contracts.ValidationError
	if _, err := v.Decode(body); !errors.As(err, &ve) {
		t.Errorf("Decode = %v (%T), want *ValidationError", err, err)
	}
}

// TestValidateDeterministic checks that several errors at the same depth always produce the
// same report, whatever the schema library's map order.
func TestValidateDeterministic(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	body := mutate(t, validBody(t, contracts.EventOrderPlaced), func(m map[string]any) {
		delete(m, "producer")
		delete(m, "event_id")
		m["zzz"] = 1
		m["aaa"] = 1
	})
	want := v.Validate(body).Error()
	for range 50 {
		if got := v.Validate(body).Error(); got != want {
			t.Fatalf("Validate = %q, earlier %q", got, want)
		}
	}
	if want != "aaa: unknown field" {
		t.Errorf("Validate = %q, want %q", want, "aaa: unknown field")
	}
}

func TestValidatorConcurrent(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	good := validBody(t, contracts.EventOrderPlaced)
	bad := mutate(t, good, setQuantity("0"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := v.Validate(good); err != nil {
					t.Errorf("Validate(good) = %v", err)
					return
				}
				if err := v.Validate(bad); err == nil {
					t.Error("Validate(bad) = nil")
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSchemasMatchEventNames keeps the envelope's event_name enum, the schema files and
// EventNames in step.
func TestSchemasMatchEventNames(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("schemas/event-names.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	names := contracts.EventNames()
	if !slices.Equal(s.Enum, names) {
		t.Errorf("event-names.json's enum %v != EventNames %v", s.Enum, names)
	}
	entries, err := os.ReadDir("schemas")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && name != "envelope" && name != "event-names" {
			files = append(files, name)
		}
	}
	if !slices.Equal(files, slices.Sorted(slices.Values(names))) {
		t.Errorf("payload schema files %v != EventNames %v", files, names)
	}
	names[0] = "changed"
	if contracts.EventNames()[0] == "changed" {
		t.Error("EventNames returns shared state")
	}
}

func BenchmarkValidate(b *testing.B) {
	v := newValidator(b)
	body := validBody(b, contracts.EventOrderPlaced)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	v := newValidator(b)
	body := validBody(b, contracts.EventOrderPlaced)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The answer events and the order's answer-driven events follow their schemas: the
// rejection's reason is one word, available may be zero but requested may not, and
// every list of lines has at least one.
func TestValidateAnswerEvents(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	body := func(t *testing.T, name string, change func(map[string]any)) []byte {
		t.Helper()
		env, err := contracts.NewEnvelope(name, producerOf(t, name), "c", example(t, name), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return mutate(t, raw, func(m map[string]any) { change(m["payload"].(map[string]any)) })
	}
	firstShort := func(p map[string]any) map[string]any {
		if r, ok := p["rejection"].(map[string]any); ok {
			p = r
		}
		return p["lines"].([]any)[0].(map[string]any)
	}
	tests := []struct {
		name   string
		event  string
		change func(map[string]any)
		field  string // "" when valid
	}{
		{"confirmed as built", contracts.EventStockReservationConfirmed, func(map[string]any) {}, ""},
		{"rejected as built", contracts.EventStockReservationRejected, func(map[string]any) {}, ""},
		{"order rejected as built", contracts.EventOrderRejected, func(map[string]any) {}, ""},
		{"confirmed without order_version", contracts.EventStockReservationConfirmed, func(p map[string]any) { delete(p, "order_version") }, "payload.order_version"},
		{"confirmed with no lines", contracts.EventStockReservationConfirmed, func(p map[string]any) { p["lines"] = []any{} }, "payload.lines"},
		{"rejected for another reason", contracts.EventStockReservationRejected, func(p map[string]any) { p["reason"] = "no_reason" }, "payload.reason"},
		{"rejected with negative available", contracts.EventStockReservationRejected, func(p map[string]any) { firstShort(p)["available"] = "-1.000" }, "payload.lines[0].available"},
		{"rejected with zero requested", contracts.EventStockReservationRejected, func(p map[string]any) { firstShort(p)["requested"] = "0.000" }, "payload.lines[0].requested"},
		{"rejected with a float", contracts.EventStockReservationRejected, func(p map[string]any) { firstShort(p)["available"] = 1.5 }, "payload.lines[0].available"},
		{"order rejected without rejection", contracts.EventOrderRejected, func(p map[string]any) { delete(p, "rejection") }, "payload.rejection"},
		{"order rejected with no short lines", contracts.EventOrderRejected, func(p map[string]any) { p["rejection"].(map[string]any)["lines"] = []any{} }, "payload.rejection.lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := v.Validate(body(t, tt.event, tt.change))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ve *contracts.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field {
				t.Fatalf("Validate = %v, want a ValidationError on %s", err, tt.field)
			}
		})
	}
}
