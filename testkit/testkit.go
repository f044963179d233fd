// Package testkit gives integration tests their own PostgreSQL database and
// RabbitMQ namespace on real servers: the ones named by TEST_DATABASE_URL and
// TEST_AMQP_URL, else the local defaults. Without local servers, `go run
// example.com/shop/testkit/cmd/testservers` starts both in containers
// (testcontainers-go) and prints the variables that point the tests at them.
// Logger gives a test a logger whose output it can read.
//
// A test never skips: when no server can be had it fails with a message that
// says what was tried. The servers found are cached for the life of the test
// binary, which is the only state this package keeps.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/shop/testkit/rabbitadmin"
)

// Local defaults, the services DEVELOPERS and CI machines run.
const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	// startServers is the advice of the failure when a server does not answer.
	startServers = "start it, set TEST_DATABASE_URL and TEST_AMQP_URL, or run `go run example.com/shop/testkit/cmd/testservers` for containers"
)

// servers holds what was found once per test binary.
type servers struct {
	pgOnce  sync.Once
	pgURL   string
	pgErr   error
	mqOnce  sync.Once
	mqURL   string
	mqAdmin *rabbitadmin.Admin
	mqErr   error
	tmplMu  sync.Mutex
	tmpl    map[string]string // migrations hash -> template database name
}

var found = &servers{tmpl: map[string]string{}}

// DatabaseURL returns the URL of a reachable PostgreSQL server (its
// "postgres" maintenance database), failing t when none can be had.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	found.pgOnce.Do(func() { found.pgURL, found.pgErr = findPostgres() })
	if found.pgErr != nil {
		t.Fatalf("testkit: no PostgreSQL for tests: %v", found.pgErr)
	}
	return found.pgURL
}

// AMQPURL returns the URL of a reachable RabbitMQ server (default vhost),
// failing t when none can be had.
func AMQPURL(t testing.TB) string {
	t.Helper()
	found.mqOnce.Do(func() { found.mqURL, found.mqAdmin, found.mqErr = findRabbitMQ() })
	if found.mqErr != nil {
		t.Fatalf("testkit: no RabbitMQ for tests: %v", found.mqErr)
	}
	return found.mqURL
}

// UniqueName returns prefix followed by a dot and 8 random hex characters,
// for per-test exchange and queue names.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	return prefix + "." + randomHex(t, 4)
}

// Context returns a context cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

func getenvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testkit: random: %v", err)
	}
	return hex.EncodeToString(b)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// dbName derives a valid, unique database name (<= 63 bytes) from the test name.
func dbName(t testing.TB) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return fmt.Sprintf("t_%s_%s", strings.Trim(base, "_"), randomHex(t, 5))
}

func bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}
