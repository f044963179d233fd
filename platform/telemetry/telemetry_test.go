package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestExporting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "order"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
	} {
		on, err := exporting(func(k string) string { return c.env[k] })
		if on != c.on || (err != nil) != c.bad {
			t.Errorf("%v: exporting %v, %v; want %v, error %v", c.env, on, err, c.on, c.bad)
		}
	}
}

// TestSetupExportsToTheOTLPEndpoint sets OTEL_EXPORTER_OTLP_ENDPOINT to an
// OTLP/HTTP receiver: a span ends up there, with the service name, once
// shutdown flushed it. Not parallel: it sets the environment and the
// OpenTelemetry globals.
func TestSetupExportsToTheOTLPEndpoint(t *testing.T) {
	got := make(chan *coltrace.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	shutdown, err := Setup(t.Context(), "unit")
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "work")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		rs := req.GetResourceSpans()[0]
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		if service != "unit" || rs.GetScopeSpans()[0].GetSpans()[0].GetName() != "work" {
			t.Errorf("exported %v", req)
		}
	default:
		t.Fatal("nothing exported")
	}
	if _, ok := otel.GetTextMapPropagator().(propagation.TextMapPropagator); !ok || len(otel.GetTextMapPropagator().Fields()) < 2 {
		t.Errorf("propagator fields %v, want traceparent, tracestate and baggage", otel.GetTextMapPropagator().Fields())
	}
}
