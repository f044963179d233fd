package e2e_test

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// TestOneTraceFromTheAPICallToEveryConsumer runs the real binaries with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP/HTTP receiver served by
// the test, and places an order with a traceparent header. One trace then
// holds, with the incoming span as root: the API's SERVER span, the relay's
// PRODUCER span "send app.events" below it, one CONSUMER span "process
// <queue>" per consumer below that, and each consumer's inbox transaction
// and handlers below its process span, with the messaging attributes. The
// published message carries the CloudEvents headers and the send span's
// traceparent; the log lines of the API, the relay and both consumers carry
// the trace id, and the API's the request id.
func TestOneTraceFromTheAPICallToEveryConsumer(t *testing.T) {
	t.Parallel()
	recv := newOTLPReceiver(t)
	s := newShop(t, options{env: map[string][]string{"": {
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"LOG_LEVEL=debug",
	}}})
	ctx := testkit.Context(t)
	tap := tapEvents(t, s.amqpURL)

	o := s.createOrder(ctx, 2)
	traceID := strings.ReplaceAll(uuid.NewString(), "-", "")
	const callerSpan = "b7ad6b7169203331"
	const requestID = "req-trace-1"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.sys.OrderAPI.Addr+"/orders/"+o.ID+"/place", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Id") != requestID {
		t.Fatalf("place: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}

	// The message on the wire.
	var msg amqp091.Delivery
	select {
	case msg = <-tap:
	case <-time.After(settle):
		t.Fatal("no event published")
	}
	for k, want := range map[string]string{
		contracts.HeaderSpecVersion: "1.0",
		contracts.HeaderID:          msg.MessageId,
		contracts.HeaderSource:      "/order",
		contracts.HeaderType:        contracts.EventOrderPlaced,
		contracts.HeaderSubject:     o.ID,
	} {
		if got, _ := msg.Headers[k].(string); got != want {
			t.Errorf("message header %s = %q, want %q", k, got, want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, asString(msg.Headers[contracts.HeaderTime])); err != nil {
		t.Errorf("message header %s: %v", contracts.HeaderTime, err)
	}
	traceparent := asString(msg.Headers[contracts.HeaderTraceparent])
	if !strings.HasPrefix(traceparent, "00-"+traceID+"-") {
		t.Fatalf("message traceparent %q, want trace %s", traceparent, traceID)
	}

	// The spans. The trace goes on past the placed event (stock's answer is sent
	// and processed in it too, with spans of the same names): the placed
	// event's spans are found below the API span.
	stockQueue, shippingQueue := contracts.QueueStock, contracts.QueueShipping
	var tr trace
	var api, send *span
	deadline := time.Now().Add(settle)
	for {
		tr = recv.trace(traceID)
		// Each process exports on its own schedule: wait for every span checked below.
		if api = tr.named("POST /orders/{id}/place"); api != nil {
			send = tr.child(api.spanID, "send "+contracts.Exchange)
		}
		if send != nil && tr.child(send.spanID, "process "+stockQueue) != nil &&
			tr.child(send.spanID, "process "+shippingQueue) != nil &&
			len(tr.all("handle "+contracts.EventOrderPlaced)) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s incomplete after %v: %v", traceID, settle, tr.names())
		}
		time.Sleep(100 * time.Millisecond)
	}
	check := func(sp *span, service string, kind tracepb.Span_SpanKind, parent string) {
		t.Helper()
		if sp.service != service || sp.kind != kind || sp.parentID != parent {
			t.Errorf("span %q: service %q kind %v parent %s, want %q %v %s", sp.name, sp.service, sp.kind, sp.parentID, service, kind, parent)
		}
	}
	check(api, "order", tracepb.Span_SPAN_KIND_SERVER, callerSpan)
	if api.attrs["http.response.header.x-request-id"] != requestID || api.attrs["http.route"] != "/orders/{id}/place" {
		t.Errorf("API span attributes %v, want the request id and the route", api.attrs)
	}
	check(send, "order-relay", tracepb.Span_SPAN_KIND_PRODUCER, api.spanID)
	if traceparent != "00-"+traceID+"-"+send.spanID+"-01" {
		t.Errorf("message traceparent %q, want the send span's (%s)", traceparent, send.spanID)
	}
	wantAttrs(t, send, map[string]string{
		"messaging.system": "rabbitmq", "messaging.operation.type": "send",
		"messaging.destination.name": contracts.Exchange, "messaging.rabbitmq.destination.routing_key": contracts.EventOrderPlaced,
		"messaging.message.id": msg.MessageId, "messaging.message.conversation_id": msg.CorrelationId,
	})
	for _, c := range []struct{ service, queue string }{{"stock", stockQueue}, {"shipping", shippingQueue}} {
		p := tr.child(send.spanID, "process "+c.queue)
		check(p, c.service, tracepb.Span_SPAN_KIND_CONSUMER, send.spanID)
		wantAttrs(t, p, map[string]string{
			"messaging.system": "rabbitmq", "messaging.operation.type": "process",
			"messaging.destination.name": c.queue, "messaging.rabbitmq.destination.routing_key": contracts.EventOrderPlaced,
			"messaging.message.id": msg.MessageId, "messaging.message.conversation_id": msg.CorrelationId,
			"messaging.consumer.group.name": c.service,
		})
		ib := tr.child(p.spanID, "inbox "+c.service)
		if ib == nil {
			t.Errorf("no inbox span below %s: %v", p.name, tr.names())
			continue
		}
		if h := tr.child(ib.spanID, "handle "+contracts.EventOrderPlaced); h == nil {
			t.Errorf("no handler span below %s's inbox span", c.service)
		}
	}

	t.Logf("trace %s:\n%s", traceID, tr.render(callerSpan))

	// The logs join the trace.
	needle := `"trace_id":"` + traceID + `"`
	for _, p := range []struct {
		name, out, also string
	}{
		{"order API", s.sys.OrderAPI.Output(), `"request_id":"` + requestID + `"`},
		{"relay", s.sys.Relay.Output(), `"msg":"event published"`},
		{"stock", s.sys.Stock.Output(), `"msg":"event processed"`},
		{"shipping", s.sys.Shipping.Output(), `"msg":"event processed"`},
	} {
		found := false
		for _, line := range strings.Split(p.out, "\n") {
			if strings.Contains(line, needle) && strings.Contains(line, p.also) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no %s log line with %s and %s", p.name, needle, p.also)
		}
	}
}

func wantAttrs(t *testing.T, sp *span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if sp.attrs[k] != v {
			t.Errorf("span %q (%s): %s = %q, want %q", sp.name, sp.service, k, sp.attrs[k], v)
		}
	}
}

func asString(v any) string { s, _ := v.(string); return s }

// tapEvents binds a private queue to every routing key of app.events and
// returns its messages.
func tapEvents(t *testing.T, amqpURL string) <-chan amqp091.Delivery {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, "#", contracts.Exchange, false, nil)
	}
	if err != nil {
		t.Fatalf("tap queue: %v", err)
	}
	d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// span is one exported span, flattened.
type span struct {
	service, name             string
	kind                      tracepb.Span_SpanKind
	traceID, spanID, parentID string
	attrs                     map[string]string
	start, end                uint64 // Unix ns
}

type trace []*span

func (tr trace) named(name string) *span {
	for _, s := range tr {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (tr trace) all(name string) []*span {
	var out []*span
	for _, s := range tr {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr trace) child(parent, name string) *span {
	for _, s := range tr {
		if s.parentID == parent && s.name == name {
			return s
		}
	}
	return nil
}

// render draws the span tree below root as text: service, name, kind, and
// start offset and duration in ms from the first span.
func (tr trace) render(root string) string {
	var first uint64
	for _, s := range tr {
		if first == 0 || s.start < first {
			first = s.start
		}
	}
	var b strings.Builder
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		var kids []*span
		for _, s := range tr {
			if s.parentID == parent {
				kids = append(kids, s)
			}
		}
		slices.SortFunc(kids, func(a, b *span) int { return cmp.Compare(a.start, b.start) })
		for i, s := range kids {
			branch, next := "├─ ", "│  "
			if i == len(kids)-1 {
				branch, next = "└─ ", "   "
			}
			kind := strings.TrimPrefix(s.kind.String(), "SPAN_KIND_")
			fmt.Fprintf(&b, "%s%s%-9s %-34s %-9s +%6.1f ms %6.1f ms\n", indent, branch, s.service, s.name, kind,
				float64(s.start-first)/1e6, float64(s.end-s.start)/1e6)
			walk(s.spanID, indent+next)
		}
	}
	walk(root, "")
	return b.String()
}

func (tr trace) names() []string {
	var out []string
	for _, s := range tr {
		out = append(out, s.service+": "+s.name)
	}
	return out
}

// otlpReceiver is an OTLP/HTTP (protobuf) trace endpoint that keeps every
// span it is sent.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		msg := &coltrace.ExportTraceServiceRequest{}
		if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, msg) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.add(msg)
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *otlpReceiver) add(msg *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.GetResourceSpans() {
		service := attrMap(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				parent := ""
				if len(s.GetParentSpanId()) > 0 {
					parent = hex.EncodeToString(s.GetParentSpanId())
				}
				r.spans = append(r.spans, &span{
					service: service, name: s.GetName(), kind: s.GetKind(),
					traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()), parentID: parent,
					attrs: attrMap(s.GetAttributes()), start: s.GetStartTimeUnixNano(), end: s.GetEndTimeUnixNano(),
				})
			}
		}
	}
}

// trace returns the spans of traceID received so far.
func (r *otlpReceiver) trace(traceID string) trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out trace
	for _, s := range r.spans {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyString(kv.GetValue())
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, anyString(e))
		}
		return strings.Join(parts, ",")
	}
	return ""
}
