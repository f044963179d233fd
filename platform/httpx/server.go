package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server timeouts set by Serve and ServeListener.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 60 * time.Second
	// ShutdownTimeout bounds the graceful shutdown once ctx is done (10 s).
	ShutdownTimeout = 10 * time.Second
)

// Serve listens on the TCP address addr (":8081", "127.0.0.1:0") and serves h as
// ServeListener does. A listen failure is returned wrapped with the address.
func Serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, logger)
}

// ServeListener serves h on ln, which it closes, with ReadHeaderTimeout, ReadTimeout,
// WriteTimeout and IdleTimeout set, until ctx is done. It then stops accepting
// connections and waits up to ShutdownTimeout for requests in flight to finish (their
// contexts are not cancelled by ctx). It returns nil after a clean shutdown, the server
// error if serving fails first, or the shutdown error (context.DeadlineExceeded wrapped)
// when requests outlive ShutdownTimeout, in which case their connections are closed.
// A nil logger discards logs.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	addr := ln.Addr().String()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context {
			// Keep ctx's values but not its cancellation: shutdown lets requests finish.
			return context.WithoutCancel(ctx)
		},
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.InfoContext(ctx, "http server listening", slog.String("addr", addr))

	select {
	case err := <-errc:
		return fmt.Errorf("http serve %s: %w", addr, err)
	case <-ctx.Done():
	}

	logger.InfoContext(ctx, "http server shutting down", slog.String("addr", addr))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		<-errc
		return fmt.Errorf("http shutdown %s: %w", addr, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve %s: %w", addr, err)
	}
	logger.InfoContext(ctx, "http server stopped", slog.String("addr", addr))
	return nil
}

// Bound returns middleware that gives each request a context ending d after the
// request starts, so that no handler waits on a dependency for ever: a database call
// past it fails with context.DeadlineExceeded, which pg.Unavailable reports (a 503
// with Retry-After under a service's error rules). d is a duration such as 5 s.
func Bound(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}
