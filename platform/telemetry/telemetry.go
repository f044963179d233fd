// Package telemetry sets up OpenTelemetry tracing for one process from the
// standard OTEL_* environment variables, so that one trace follows an order
// from the API call through the outbox and the broker to every consumer
// (docs/architecture.md, "Tracing").
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"example.com/shop/platform/logging"
)

// ShutdownTimeout bounds the flush of the spans left when a process ends.
const ShutdownTimeout = 5 * time.Second

// Setup installs the process's tracer provider and propagator (the
// OpenTelemetry globals, which otelhttp and the platform packages read when
// they are built) and returns the function that flushes the spans not yet
// exported and stops the provider: call Setup once, early in a binary's run,
// and shutdown on the way out. shutdown waits at most ShutdownTimeout, even
// when its ctx has ended already, and returns the exporter's error.
//
// It reads only the standard variables, through the OpenTelemetry SDK:
//
//   - Nothing is exported unless OTEL_TRACES_EXPORTER is "otlp", or it is
//     unset and OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. "none", OTEL_SDK_DISABLED=true
//     or no variable at all install no SDK: spans cost next to nothing, yet an
//     incoming traceparent still travels on (W3C Trace Context is always
//     installed, and a span that is not recorded carries its parent's context).
//   - OTEL_EXPORTER_OTLP_PROTOCOL (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) is
//     "http/protobuf" (the default) or "grpc"; the endpoint, headers, timeout
//     and TLS variables are those of the OTLP exporters.
//   - OTEL_SERVICE_NAME (default serviceName) and OTEL_RESOURCE_ATTRIBUTES
//     name the resource; OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
//     choose the sampler (default parentbased_always_on); OTEL_BSP_* tune the
//     batch span processor.
//
// It returns an error for an exporter or protocol it does not know, or when
// the exporter cannot be built; it never waits for the collector.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	noop := func(context.Context) error { return nil }

	on, err := exporting(os.Getenv)
	if err != nil || !on {
		return noop, err
	}
	exp, err := newExporter(ctx, os.Getenv)
	if err != nil {
		return noop, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: flush spans: %w", err)
		}
		return nil
	}, nil
}

// exporting reports whether the environment asks for spans to be exported.
func exporting(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER %q: want otlp or none", v)
	}
}

// newExporter builds the OTLP span exporter of the configured protocol; the
// exporter reads its endpoint and options from the environment itself.
func newExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	return exp, nil
}

// Start is Setup for a long-running command that logs: the returned stop flushes
// the spans left (bounded by ShutdownTimeout, also once ctx has ended) and logs a
// warning "tracing: spans not flushed" on logger when the exporter fails. Errors
// are Setup's.
func Start(ctx context.Context, serviceName string, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := Setup(ctx, serviceName)
	if err != nil {
		return nil, err
	}
	return func() {
		if err := shutdown(ctx); err != nil {
			logger.WarnContext(ctx, "tracing: spans not flushed", slog.Any("error", err))
		}
	}, nil
}

// StartProcess begins a long-running command (serve, relay): its logger
// (logging.New: JSON records on w at level, with the service attribute name), its
// tracing (Start) and the record msg ("starting") holding the configuration cfg,
// whose LogValue masks its passwords. It returns the logger and stop, which
// flushes the spans and is called when the command ends. Errors are Start's.
func StartProcess(ctx context.Context, w io.Writer, level slog.Level, name, msg string, cfg any) (*slog.Logger, func(), error) {
	logger := logging.New(w, level, name)
	stop, err := Start(ctx, name, logger)
	if err != nil {
		return nil, nil, err
	}
	logger.InfoContext(ctx, msg, slog.Any("config", cfg))
	return logger, stop, nil
}
