package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// otlpSink is an OTLP/HTTP endpoint that reads and drops every export, so
// that a traced run pays for recording and exporting its spans, not for a
// collector.
type otlpSink struct {
	srv            *httptest.Server
	exports, bytes atomic.Int64
}

func newOTLPSink() *otlpSink {
	s := &otlpSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	return s
}

func (s *otlpSink) close() { s.srv.Close() }

func (s *otlpSink) String() string {
	return fmt.Sprintf("%d OTLP exports, %.1f MiB", s.exports.Load(), float64(s.bytes.Load())/(1<<20))
}

// randomTraceparent is a sampled W3C traceparent of a new trace.
func randomTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// measureTracedRelay drains a copy of the relay's outbox whose every row
// holds a trace context (as the API stores it for a traced request), with
// one relay in this process (one partition, pipelined confirms) recording a
// send span per message and exporting them over OTLP/HTTP through the SDK's
// default batch span processor. Its baseline is relay_p1_r1, the same relay
// untraced in a bin/order relay process.
func (e *env) measureTracedRelay(ctx context.Context) error {
	s := e.cfg.Sizes
	const name = "relay_pipelined_traced"
	dbURL, err := e.createDatabase(ctx, e.dbName(name), e.dbName("relay-src"))
	if err != nil {
		return err
	}
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `UPDATE outbox SET trace_context = jsonb_build_object('traceparent',
		'00-' || md5(id::text) || '-' || left(md5(id::text || 'span'), 16) || '-01')`)
	if err == nil {
		err = settle(ctx, pool, "outbox")
	}
	pool.Close()
	if err != nil {
		return fmt.Errorf("%s: store trace contexts: %w", name, err)
	}
	amqpURL, err := e.vhostURL("relay-traced")
	if err != nil {
		return err
	}
	sink := newOTLPSink()
	defer sink.close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.srv.URL+"/v1/traces"))
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("bench-relay"))))
	rate, published, err := e.runRelay(ctx, dbURL, amqpURL, "pipelined", 0, outbox.WithTracerProvider(tp))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = errors.Join(err, tp.Shutdown(sctx))
	cancel()
	if err2 := emptyVhost(amqpURL); err2 != nil {
		e.progress("   %v", err2)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if sink.exports.Load() == 0 {
		return fmt.Errorf("%s: no span reached the OTLP endpoint", name)
	}
	e.results.set(name, rate, fmt.Sprintf("%d of %d rows with a trace context, a send span each, exported over OTLP/HTTP (%s)", published, s.RelayRows, sink))
	e.progress("   %-28s %10.0f events/s (%s)", name, rate, sink)
	return nil
}

// measureTracedConsumer runs bin/stock with DefaultWorkers on events that
// carry a sampled traceparent, exporting its process, inbox and handler
// spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT).
func (e *env) measureTracedConsumer(ctx context.Context) error {
	s := e.cfg.Sizes
	name := tracedConsumerName(s.DefaultWorkers)
	dbURL, err := e.cloneDatabase(ctx, tplStock, "consumer-traced")
	if err != nil {
		return err
	}
	amqpURL, err := e.vhostURL("consumer-traced")
	if err != nil {
		return err
	}
	sink := newOTLPSink()
	defer sink.close()
	rate, _, err := e.runConsumer(ctx, stockBin, dbURL, amqpURL, s.DefaultWorkers, s.ConsumerEvents,
		[]string{"OTEL_SDK_DISABLED=false", "OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.srv.URL})
	if err2 := emptyVhost(amqpURL); err2 != nil {
		e.progress("   %v", err2)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if sink.exports.Load() == 0 {
		return fmt.Errorf("%s: no span reached the OTLP endpoint", name)
	}
	e.results.set(name, rate, "bin/stock, STOCK_WORKERS="+strconv.Itoa(s.DefaultWorkers)+", events with a sampled traceparent, spans exported over OTLP/HTTP ("+sink.String()+")")
	e.progress("   %-28s %10.0f events/s (%s)", name, rate, sink)
	return nil
}
