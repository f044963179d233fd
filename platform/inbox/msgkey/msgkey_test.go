package msgkey_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"example.com/shop/platform/inbox/msgkey"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", msgkey.MaxLen+1)
	httpHeaders := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name string
		got  func() (string, error)
		want string // "" means ErrNoKey
	}{
		{"cloudEvents AMQP with source", func() (string, error) {
			return msgkey.CloudEventsAMQP(map[string]any{"cloudEvents_id": "0199b1d4", "cloudEvents_source": "/orders"})
		}, "/orders 0199b1d4"},
		{"cloudEvents: prefix, []byte values", func() (string, error) {
			return msgkey.CloudEventsAMQP(map[string]any{"cloudEvents:id": []byte("e1"), "cloudEvents:source": []byte("/s")})
		}, "/s e1"},
		{"cloudEvents AMQP without source", func() (string, error) {
			return msgkey.CloudEventsAMQP(map[string]any{"cloudEvents_id": "e1"})
		}, "e1"},
		{"cloudEvents AMQP without id", func() (string, error) {
			return msgkey.CloudEventsAMQP(map[string]any{"cloudEvents_source": "/s", "cloudEvents_id": 7})
		}, ""},
		{"AMQP message_id", func() (string, error) { return msgkey.AMQPMessageID("m-1") }, "m-1"},
		{"AMQP message_id empty", func() (string, error) { return msgkey.AMQPMessageID("") }, ""},
		{"AMQP header", func() (string, error) { return msgkey.AMQPHeader(map[string]any{"x-id": "h"}, "x-id") }, "h"},
		{"AMQP header missing", func() (string, error) { return msgkey.AMQPHeader(nil, "x-id") }, ""},
		{"cloudEvents HTTP", func() (string, error) {
			return msgkey.CloudEventsHTTP(httpHeaders("ce-id", "A234-1234", "ce-source", "https://example.com/cloudevents/pull"))
		}, "https://example.com/cloudevents/pull A234-1234"},
		{"cloudEvents HTTP without ce-id", func() (string, error) { return msgkey.CloudEventsHTTP(httpHeaders("ce-source", "/s")) }, ""},
		{"structured cloudEvent", func() (string, error) {
			return msgkey.CloudEventsJSON([]byte(`{"specversion":"1.0","id":"A1","source":"/shop","data":{}}`))
		}, "/shop A1"},
		{"structured cloudEvent with a numeric id", func() (string, error) { return msgkey.CloudEventsJSON([]byte(`{"id":1}`)) }, ""},
		{"structured cloudEvent not JSON", func() (string, error) { return msgkey.CloudEventsJSON([]byte(`{`)) }, ""},
		{"header", func() (string, error) { return msgkey.Header(httpHeaders("X-Webhook-Id", "wh_1"), "x-webhook-id") }, "wh_1"},
		{"header missing", func() (string, error) { return msgkey.Header(http.Header{}, "X-Webhook-Id") }, ""},
		{"field", func() (string, error) {
			return msgkey.Field([]byte(`{"data":{"transaction_id":"tx-9"}}`), "data.transaction_id")
		}, "tx-9"},
		{"numeric field", func() (string, error) { return msgkey.Field([]byte(`{"data":{"n":12345678901234567890}}`), "data.n") }, "12345678901234567890"},
		{"field missing", func() (string, error) { return msgkey.Field([]byte(`{"data":{}}`), "data.transaction_id") }, ""},
		{"field through a non-object", func() (string, error) { return msgkey.Field([]byte(`{"data":"x"}`), "data.id") }, ""},
		{"field null", func() (string, error) { return msgkey.Field([]byte(`{"id":null}`), "id") }, ""},
		{"event_id", func() (string, error) {
			return msgkey.EventID([]byte(`{"event_id":"0199B1D4-0000-7000-8000-000000000001","event_name":"x"}`))
		}, "0199b1d4-0000-7000-8000-000000000001"},
		{"event_id not a UUID", func() (string, error) { return msgkey.EventID([]byte(`{"event_id":"abc"}`)) }, ""},
		{"event_id missing", func() (string, error) { return msgkey.EventID([]byte(`{}`)) }, ""},
		{"long key", func() (string, error) { return msgkey.Header(httpHeaders("K", long), "K") },
			// sha256 of "x" 256 times, from Python's hashlib.
			"sha256:85e62acd750c4eb56b7b6a1d66dca5bfaac5f062608a1a893410d0288936c09a"},
		{"empty", func() (string, error) { return msgkey.Normalize("") }, ""},
	}
	for _, c := range cases {
		got, err := c.got()
		switch {
		case c.want == "":
			if !errors.Is(err, msgkey.ErrNoKey) {
				t.Errorf("%s: %q, %v; want ErrNoKey", c.name, got, err)
			}
		default:
			if err != nil || got != c.want {
				t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
			}
		}
	}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	atMax := strings.Repeat("a", msgkey.MaxLen)
	if got, err := msgkey.Normalize(atMax); err != nil || got != atMax {
		t.Errorf("a %d-byte key changed: %q, %v", msgkey.MaxLen, got, err)
	}
	// sha256 of "a" 256 times, from Python's hashlib.
	const want = "sha256:02d7160d77e18c6447be80c2e355c7ed4388545271702c50253b0914c65ce5fe"
	if got, err := msgkey.Normalize(atMax + "a"); err != nil || got != want {
		t.Errorf("a %d-byte key: %q, %v; want %q", msgkey.MaxLen+1, got, err, want)
	}
	if got, err := msgkey.Join("/s", "id"); err != nil || got != "/s id" {
		t.Errorf("Join = %q, %v", got, err)
	}
	if _, err := msgkey.Join("/s", ""); !errors.Is(err, msgkey.ErrNoKey) {
		t.Errorf("Join without id: %v, want ErrNoKey", err)
	}
}
