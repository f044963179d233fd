package contracts

import (
	"strings"
	"testing"
)

// fastBody is a valid envelope of eventName whose payload has the given lines.
func fastBody(eventName, lines string) string {
	return `{"event_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8e","event_name":"` + eventName + `",` +
		`"occurred_at":"2026-11-30T02:39:28.123Z","producer":"order","schema_version":1,"correlation_id":"c-1",` +
		`"payload":{"order_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d","customer_id":"6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f",` +
		`"lines":` + lines + `,"version":2}}`
}

const oneLine = `[{"product_id":"11111111-2222-4333-8444-555555555555","quantity":"2.000"}]`

// libraryValid is what the schema library alone says of body.
func libraryValid(t testing.TB, v *Validator, body []byte) (doc any, ok bool) {
	t.Helper()
	doc, err := parseJSON(body)
	if err != nil {
		return nil, false
	}
	lib := *v
	lib.fast = false
	return doc, lib.validateDoc(doc) == nil
}

// fastCases are valid bodies and bodies that break one rule of the schemas each,
// near the edges of the rules fastValid checks itself.
func fastCases() []string {
	placed, cancelled := fastBody(EventOrderPlaced, oneLine), fastBody(EventOrderCancelled, oneLine)
	answer := `{"event_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8e","event_name":"` + EventStockReservationConfirmed + `",` +
		`"occurred_at":"2026-11-30T02:39:28.123Z","producer":"stock","schema_version":1,"correlation_id":"c-1",` +
		`"payload":{"order_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d","order_version":2,"lines":` + oneLine + `}}`
	cases := []string{placed, cancelled, fastBody(EventOrderConfirmed, oneLine), answer}
	for _, swap := range [][2]string{{`"order_version":2`, `"order_version":0`}, {`"order_version":2`, `"version":2`},
		{`"order_version":2`, `"order_version":2,"customer_id":"6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"`},
		{`"lines":` + oneLine, `"lines":[]`}, {`"quantity":"2.000"`, `"quantity":"0"`},
		{`"event_name":"` + EventStockReservationConfirmed, `"event_name":"` + EventStockReservationRejected}} {
		cases = append(cases, strings.Replace(answer, swap[0], swap[1], 1))
	}
	swap := func(old, new string) { cases = append(cases, strings.Replace(placed, old, new, 1)) }
	for _, q := range []string{"1", "999999999", "1000000000", "1.5", "1.500", "1.5000", "0.001", "0.000", "0.010", "0.1",
		"0", "01", "-1", "1e3", "1.", ".5", " 1", "0.0001", "00.1"} {
		swap(`"quantity":"2.000"`, `"quantity":"`+q+`"`)
	}
	swap(`"quantity":"2.000"`, `"quantity":2`)
	for _, v := range []string{"0", "1", "2147483647", "2147483648", "-1", "2.0", "2e0", "2.5", `"2"`, "null", "9999999999", "10000000000"} {
		swap(`"version":2`, `"version":`+v)
		swap(`"schema_version":1`, `"schema_version":`+v)
	}
	for _, id := range []string{"0193a1f2-6c3e-6b1a-9c2d-3e4f5a6b7c8e", "0193a1f2-6c3e-7b1a-7c2d-3e4f5a6b7c8e",
		"0193A1F2-6c3e-7b1a-9c2d-3e4f5a6b7c8e", "0193a1f26c3e-7b1a-9c2d-3e4f5a6b7c8e-", "0193a1f2-6c3e-7b1a-bc2d-3e4f5a6b7c8e",
		"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8", "{0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8}"} {
		swap(`"event_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8e"`, `"event_id":"`+id+`"`)
		swap(`"order_id":"0193a1f2-6c3e-7b1a-9c2d-3e4f5a6b7c8d"`, `"order_id":"`+id+`"`)
		swap(`"product_id":"11111111-2222-4333-8444-555555555555"`, `"product_id":"`+id+`"`)
	}
	for _, at := range []string{"2026-02-29T02:39:28.123Z", "2028-02-29T02:39:28.123Z", "2026-04-31T02:39:28.123Z",
		"2026-11-30T24:00:00.000Z", "2026-11-30T02:39:60.123Z", "2026-11-30T02:39:28.12Z", "2026-11-30T02:39:28.123+01:00",
		"2026-11-30T02:39:28.123+24:00", "2026-11-30T02:39:28.123z", "2026-11-30t02:39:28.123Z", "2026-11-30T02:39:28.123",
		"2026-13-30T02:39:28.123Z", "2026-11-30 02:39:28.123Z"} {
		swap(`"occurred_at":"2026-11-30T02:39:28.123Z"`, `"occurred_at":"`+at+`"`)
	}
	for _, name := range []string{EventOrderRejected, EventStockReservationConfirmed, EventStockReservationRejected, "order.order.shipped.v1"} {
		swap(`"event_name":"`+EventOrderPlaced+`"`, `"event_name":"`+name+`"`) // an order payload under another event's name
	}
	swap(`"producer":"order"`, `"producer":""`)
	swap(`"producer":"order"`, `"producer":1`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":""`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"`+strings.Repeat("c", 255)+`"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"`+strings.Repeat("c", 256)+`"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"a\u0000b"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"a\tb"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"café"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"a b ~"`)
	swap(`"correlation_id":"c-1"`, `"correlation_id":"c-1","extra":1`)
	swap(`"correlation_id":"c-1"`, `"x":"c-1"`)
	swap(`"event_name":"order.order.placed.v1"`, `"event_name":"order.order.shipped.v1"`)
	swap(`"version":2}`, `"version":2,"extra":true}`)
	swap(`"version":2}`, `"note":2}`)
	swap(`"quantity":"2.000"}`, `"quantity":"2.000","x":1}`)
	swap(`"quantity":"2.000"}`, `"qty":"2.000"}`)
	swap(`"lines":`+oneLine, `"lines":[]`)
	swap(`"lines":`+oneLine, `"lines":{}`)
	swap(`"lines":`+oneLine, `"lines":[1]`)
	swap(`"lines":`+oneLine, `"lines":`+lines(100))
	swap(`"lines":`+oneLine, `"lines":`+lines(101))
	swap(`"payload":{`, `"payload":{"order_id":"x",`) // a key given twice: the last one counts
	cases = append(cases, `[]`, `{}`, `"x"`, `1`)
	return cases
}

// lines is a lines array of n lines.
func lines(n int) string {
	line := oneLine[1 : len(oneLine)-1]
	return "[" + strings.TrimSuffix(strings.Repeat(line+",", n), ",") + "]"
}

// fastValid never accepts a body the schema library refuses, and accepts the
// valid ones (so the consumers' path really is the fast one).
func TestFastCheckNeverAcceptsWhatTheSchemasRefuse(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	if !v.fast {
		t.Fatal("the fast check is off: see TestFastCheckFollowsTheSchemas")
	}
	accepted, refused := 0, 0
	for n, body := range fastCases() {
		doc, lib := libraryValid(t, v, []byte(body))
		if doc == nil {
			t.Fatalf("case does not parse: %s", body)
		}
		fast := fastValid(doc)
		if fast && !lib {
			t.Errorf("fastValid accepts what the schemas refuse: %s", body)
		}
		if lib {
			accepted++
		} else {
			refused++
		}
		if lib && !fast && n < 4 {
			t.Errorf("fastValid refuses a plain valid body: %s", body)
		}
	}
	if accepted < 10 || refused < 40 {
		t.Errorf("%d cases valid, %d invalid: the table lost its edges", accepted, refused)
	}
}

// FuzzFastCheck: whatever fastValid accepts, the schema library accepts too.
func FuzzFastCheck(f *testing.F) {
	for _, body := range fastCases() {
		f.Add([]byte(body))
	}
	v, err := NewValidator()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, lib := libraryValid(t, v, body)
		if doc != nil && fastValid(doc) && !lib {
			t.Errorf("fastValid accepts what the schemas refuse: %s", body)
		}
	})
}

// The fast check is on only for the schemas it was written for. When this fails,
// a schema changed: bring fastValid (fastcheck.go) in line with every schema
// and then set fastSchemasSHA256 to the hash printed here.
func TestFastCheckFollowsTheSchemas(t *testing.T) {
	sum, err := schemasSHA256()
	if err != nil {
		t.Fatal(err)
	}
	if sum != fastSchemasSHA256 {
		t.Fatalf("the schemas changed (sha256 %s, fastValid follows %s): update fastValid, then fastSchemasSHA256", sum, fastSchemasSHA256)
	}
}
