package inbox_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/testkit"
)

// relayBody is an order.order.placed.v1 event as the relay sends it: the outbox's
// jsonb as PostgreSQL prints it (keys reordered, a space after each colon and comma).
const relayBody = `{"payload": {"lines": [{"quantity": "2.000", "product_id": "9f8e7d6c-5b4a-4c3d-8e2f-1a0b9c8d7e6f"}], "version": 2, "order_id": "7d3c6f4e-2b1a-4c5d-9e8f-0a1b2c3d4e5f", "customer_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}, "event_id": "0193a5b0-7c1a-7abc-8def-0123456789ab", "producer": "order", "event_name": "order.order.placed.v1", "occurred_at": "2026-12-01T10:00:00.123Z", "correlation_id": "req-0001", "schema_version": 1}`

// storedSHA256 is the payload_sha256 the inbox stored for relayBody before the
// payload was decoded once (computed by that code, which hashed the envelope
// re-encoded by contracts.Envelope.MarshalJSON).
const storedSHA256 = "19d7afc1c8c18a243808b87f17555d83604b46bb35ec9ee4f586998c03a4b0cb"

// TestARedeliveryMatchesTheHashStoredBefore: a database whose key for an event
// was stored by the earlier inbox recognises the event's redelivery, in the bytes
// the relay sends or in any other encoding of the same envelope, as a duplicate,
// and a copy with another content as a conflict; nothing runs twice.
func TestARedeliveryMatchesTheHashStoredBefore(t *testing.T) {
	t.Parallel()
	pool, v := newDeliveryDB(t)
	ctx := testkit.Context(t)
	sum, err := hex.DecodeString(storedSHA256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, payload_sha256) VALUES ('c', $1, $2)`,
		"0193a5b0-7c1a-7abc-8def-0123456789ab", sum); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	for _, group := range []int{1, 4} {
		ib := inbox.New(pool, "c", v, nil, nil, inbox.WithGroupCommit(group, 1))
		inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error {
			ran.Add(1)
			return nil
		})
		compact, err := json.Marshal(eventEnvelope(t, relayBody))
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{relayBody, string(compact)} {
			if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: []byte(body), Attempt: 1}); err != nil {
				t.Errorf("group %d: redelivery: %v, want a duplicate", group, err)
			}
		}
		changed := strings.Replace(relayBody, `"req-0001"`, `"req-0002"`, 1)
		if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: []byte(changed), Attempt: 1}); !errors.Is(err, inbox.ErrConflict) || !errors.Is(err, inbox.ErrPermanent) {
			t.Errorf("group %d: another content: %v, want a permanent conflict", group, err)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler ran %d times for an event processed before", n)
	}
}

// TestHandlersTakeTheDecodedPayload: every handler of an event gets its payload
// decoded into its type; a payload that does not decode into it is a permanent
// failure before any database work; handlers of one event must agree on the type.
func TestHandlersTakeTheDecodedPayload(t *testing.T) {
	t.Parallel()
	pool, v := newDeliveryDB(t)
	ctx := testkit.Context(t)
	ib := inbox.New(pool, "c", v, nil, nil)
	var got []contracts.OrderPlaced
	for range 2 {
		inbox.On(ib, contracts.EventOrderPlaced, func(_ context.Context, _ pgx.Tx, m inbox.Meta, p contracts.OrderPlaced) error {
			if m.EventName != contracts.EventOrderPlaced || m.CorrelationID != "req-0001" || m.Producer != "order" {
				t.Errorf("meta %+v", m)
			}
			got = append(got, p)
			return nil
		})
	}
	if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: []byte(relayBody)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != 2 || got[1].Lines[0].Quantity != "2.000" || got[0].OrderID.String() != "7d3c6f4e-2b1a-4c5d-9e8f-0a1b2c3d4e5f" {
		t.Errorf("payloads %+v, want the event's, once per handler", got)
	}

	env := eventEnvelope(t, relayBody) // another event, with a payload no schema checked
	env.EventID[15]++
	env.Payload = json.RawMessage(`{"order_id": 7}`)
	_, err := ib.Process(ctx, env)
	if !errors.Is(err, inbox.ErrPermanent) || !inbox.Permanent(err) || !strings.Contains(err.Error(), "decode") {
		t.Errorf("undecodable payload: %v, want a permanent decode error", err)
	}
	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil || keys != 1 {
		t.Errorf("keys = %d (%v), want 1: the undecodable event wrote nothing", keys, err)
	}

	defer func() {
		if recover() == nil {
			t.Error("a handler of another payload type for the same event did not panic")
		}
	}()
	inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, json.RawMessage) error { return nil })
}

func eventEnvelope(t *testing.T, body string) contracts.Envelope {
	t.Helper()
	var env contracts.Envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRoundsKeepEachKeyOncePerRound: the k-th event of a key goes to round k, in the
// order of the events, so one round never writes a key twice.
func TestRoundsKeepEachKeyOncePerRound(t *testing.T) {
	keys := []string{"a", "b", "a", "c", "a", "b"}
	got := inbox.Rounds(len(keys), func(i int) string { return keys[i] })
	want := [][]int{{0, 1, 3}, {2, 5}, {4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Rounds(%v) = %v, want %v", keys, got, want)
	}
	if got := inbox.Rounds(0, func(int) string { return "" }); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("Rounds of no events = %v, want one empty round", got)
	}
}
