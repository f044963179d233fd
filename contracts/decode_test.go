package contracts_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"example.com/shop/contracts"
)

// jsonbBody is validBody as PostgreSQL's jsonb prints it (the relay publishes
// envelope::text): keys reordered, a space after every colon and comma.
const jsonbBody = `{"payload": {"lines": [{"quantity": "2.000", "product_id": "11111111-2222-4333-8444-555555555555"}], ` +
	`"version": 2, "order_id": "0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d", "customer_id": "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}, ` +
	`"event_id": "0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8e", "producer": "order", "event_name": "order.order.placed.v1", ` +
	`"occurred_at": "2026-11-30T02:39:28.123Z", "correlation_id": "c \"quoted\" , : {x}", "schema_version": 1}`

// decodeBodies are valid envelopes in the shapes Decode must read like encoding/json.
func decodeBodies(t testing.TB) map[string][]byte {
	body := validBody(t, contracts.EventOrderPlaced)
	swapped := bytes.Replace([]byte(jsonbBody), []byte(`"payload": {`), []byte(`"payload":{"lines":[{"quantity":"1","product_id":"11111111-2222-4333-8444-555555555555"}],"version":1,"order_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d","customer_id":"6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}, "payload": {`), 1)
	return map[string][]byte{
		"compact, payload last":        body,
		"jsonb, payload first":         []byte(jsonbBody),
		"indented":                     indent(t, body),
		"payload given twice":          swapped,
		"escaped key (decoded anyway)": bytes.Replace([]byte(jsonbBody), []byte(`"producer"`), []byte(`"produc\u0065r"`), 1),
		"escaped payload key":          bytes.Replace([]byte(jsonbBody), []byte(`"payload"`), []byte(`"p\u0061yload"`), 1),
		"offset occurred_at":           bytes.Replace([]byte(jsonbBody), []byte(`02:39:28.123Z`), []byte(`03:39:28.123+01:00`), 1),
	}
}

func indent(t testing.TB, body []byte) []byte {
	var b bytes.Buffer
	if err := json.Indent(&b, body, "", "\t"); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDecodeReadsEnvelopesLikeEncodingJSON: Decode parses a body once, yet its
// Envelope is the one json.Unmarshal gives, payload bytes included, so the
// inbox's content hash (the envelope re-encoded) is unchanged.
func TestDecodeReadsEnvelopesLikeEncodingJSON(t *testing.T) {
	v := newValidator(t)
	for name, body := range decodeBodies(t) {
		got, err := v.Decode(body)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var want contracts.Envelope
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		sameEnvelope(t, name, got, want)
	}
}

func sameEnvelope(t *testing.T, name string, got, want contracts.Envelope) {
	t.Helper()
	if got.EventID != want.EventID || got.EventName != want.EventName || !got.OccurredAt.Equal(want.OccurredAt) ||
		got.OccurredAt.Location() != want.OccurredAt.Location() || got.Producer != want.Producer ||
		got.SchemaVersion != want.SchemaVersion || got.CorrelationID != want.CorrelationID ||
		!bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("%s: Decode gave\n%+v (payload %s), json.Unmarshal\n%+v (payload %s)", name, got, got.Payload, want, want.Payload)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s: re-encoded envelopes differ:\n%s\n%s", name, g, w)
	}
}

// FuzzDecodeMatchesUnmarshal: whatever body Decode accepts, it reads as
// encoding/json does.
func FuzzDecodeMatchesUnmarshal(f *testing.F) {
	for _, body := range decodeBodies(f) {
		f.Add(body)
	}
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := v.Decode(body)
		if err != nil {
			if !strings.Contains(err.Error(), ":") {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		var want contracts.Envelope
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("Decode accepted a body json.Unmarshal refuses (%v): %s", err, body)
		}
		sameEnvelope(t, "fuzzed", got, want)
	})
}
