package probe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/services/auditor/internal/probe"
	"example.com/shop/testkit"
)

func TestCountersSumEveryLabelSetAndNameWhatFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# TYPE inbox_duplicates_total counter
inbox_duplicates_total{consumer="stock"} 3
# TYPE amqp_consumer_retries_total counter
amqp_consumer_retries_total{consumer="stock",queue="a"} 2
amqp_consumer_retries_total{consumer="stock",queue="b"} 5
`))
	}))
	defer srv.Close()
	p := probe.New(map[string]string{"stock": srv.URL, "shipping": "http://127.0.0.1:1/metrics"}, "amqp://127.0.0.1:1/", nil)
	defer p.Close()
	got, err := p.Counters(context.Background(), "inbox_duplicates_total", "amqp_consumer_retries_total")
	if err == nil {
		t.Fatal("no error for the consumer that does not answer")
	}
	if _, ok := got["shipping"]; ok {
		t.Fatalf("a consumer that could not be scraped has counts: %v", got)
	}
	if s := got["stock"]; s["inbox_duplicates_total"] != 3 || s["amqp_consumer_retries_total"] != 7 {
		t.Fatalf("stock counters %v, want 3 duplicates and 7 retries", s)
	}
}

func TestQueueDepthsReadsWithoutConsuming(t *testing.T) {
	url := testkit.NewVhost(t)
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q.dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := ch.PublishWithDeferredConfirm("", "q.dlq", false, false, amqp091.Publishing{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatal("nacked")
		}
	}
	p := probe.New(nil, url, nil)
	defer p.Close()
	for range 2 { // reading twice finds the same messages: nothing was consumed
		depths, err := p.QueueDepths(context.Background(), "q.dlq", "no.such.queue")
		if err == nil {
			t.Fatal("no error for a missing queue")
		}
		if depths["q.dlq"] != 3 {
			t.Fatalf("depths %v, want q.dlq 3", depths)
		}
	}
	// The missing queue was not created by the passive declare.
	if _, err := ch.QueueDeclarePassive("no.such.queue", true, false, false, false, nil); err == nil {
		t.Fatal("the probe created a queue")
	}
}
