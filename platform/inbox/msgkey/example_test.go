package msgkey_test

import (
	"fmt"
	"net/http"
	"strings"

	"example.com/shop/platform/inbox/msgkey"
)

// A CloudEvent on AMQP, as the relay publishes it (binary mode, application headers).
func ExampleCloudEventsAMQP() {
	fmt.Println(msgkey.CloudEventsAMQP(map[string]any{
		"cloudEvents_id":     "0199b1d4-7c1a-7000-8000-000000000001",
		"cloudEvents_source": "/orders",
	}))
	fmt.Println(msgkey.CloudEventsAMQP(map[string]any{"cloudEvents:id": "e-1"})) // older prefix, no source
	// Output:
	// /orders 0199b1d4-7c1a-7000-8000-000000000001 <nil>
	// e-1 <nil>
}

func ExampleAMQPMessageID() {
	fmt.Println(msgkey.AMQPMessageID("0199b1d4-7c1a-7000-8000-000000000001"))
	fmt.Println(msgkey.AMQPMessageID(""))
	// Output:
	// 0199b1d4-7c1a-7000-8000-000000000001 <nil>
	//  message has no key: no message_id
}

// A CloudEvent over HTTP in binary mode.
func ExampleCloudEventsHTTP() {
	h := http.Header{}
	h.Set("ce-id", "A234-1234-1234")
	h.Set("ce-source", "https://github.com/cloudevents/spec/pull")
	fmt.Println(msgkey.CloudEventsHTTP(h))
	// Output:
	// https://github.com/cloudevents/spec/pull A234-1234-1234 <nil>
}

// A CloudEvent in structured mode (application/cloudevents+json).
func ExampleCloudEventsJSON() {
	fmt.Println(msgkey.CloudEventsJSON([]byte(`{"specversion":"1.0","id":"A1","source":"/shop","type":"paid"}`)))
	// Output:
	// /shop A1 <nil>
}

// A webhook that names its delivery in a header of its own.
func ExampleHeader() {
	h := http.Header{}
	h.Set("X-Webhook-Id", "wh_0192")
	fmt.Println(msgkey.Header(h, "X-Webhook-Id"))
	// Output:
	// wh_0192 <nil>
}

func ExampleField() {
	payload := []byte(`{"type":"payment","data":{"transaction_id":"tx_81","amount":190}}`)
	fmt.Println(msgkey.Field(payload, "data.transaction_id"))
	fmt.Println(msgkey.Field(payload, "data.refund_id"))
	// Output:
	// tx_81 <nil>
	//  message has no key: no field data.refund_id
}

// This project's envelope: stock and shipping key their events by event_id.
func ExampleEventID() {
	fmt.Println(msgkey.EventID([]byte(`{"event_id":"0199B1D4-7C1A-7000-8000-000000000001","event_name":"order.order.placed.v1"}`)))
	// Output:
	// 0199b1d4-7c1a-7000-8000-000000000001 <nil>
}

// A key longer than 255 bytes is stored as its SHA-256.
func ExampleNormalize() {
	fmt.Println(msgkey.Normalize(strings.Repeat("a", 256)))
	// Output:
	// sha256:02d7160d77e18c6447be80c2e355c7ed4388545271702c50253b0914c65ce5fe <nil>
}
