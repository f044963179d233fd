package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
)

// TestMessageContentIsUnchanged: the content hashed with every key is the
// envelope as json.Marshal encodes it, byte for byte, so keys stored before
// keep matching their duplicates (a mismatch would be a conflict).
func TestMessageContentIsUnchanged(t *testing.T) {
	env := contracts.Envelope{
		EventID: uuid.Must(uuid.NewV7()), EventName: contracts.EventOrderPlaced,
		OccurredAt: time.Date(2026, 12, 1, 11, 0, 0, 123e6, time.FixedZone("x", 3600)),
		Producer:   "order", SchemaVersion: 1, CorrelationID: `<a & "b">` + "\u2028",
		Payload: json.RawMessage("{\"b\": [1, 2.50],\n \"a\": \"<&>\"}"),
	}
	got, err := ContentSum(env)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(want); !bytes.Equal(got, sum[:]) {
		t.Fatalf("content sum %x, want the SHA-256 of\n%s", got, want)
	}
}
