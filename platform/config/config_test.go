package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/shop/platform/config"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultsWhenUnset(t *testing.T) {
	t.Parallel()
	e := config.NewEnv(envOf(map[string]string{"EMPTY": ""}))
	if got := e.String("EMPTY", "d"); got != "d" {
		t.Errorf("String = %q, want d", got)
	}
	if got := e.Int("X_INT", 7); got != 7 {
		t.Errorf("Int = %d, want 7", got)
	}
	if got := e.PositiveInt("X_PINT", 8); got != 8 {
		t.Errorf("PositiveInt = %d, want 8", got)
	}
	if got := e.Duration("X_DUR", time.Second); got != time.Second {
		t.Errorf("Duration = %v, want 1s", got)
	}
	if got := e.PositiveDuration("X_PDUR", 2*time.Second); got != 2*time.Second {
		t.Errorf("PositiveDuration = %v, want 2s", got)
	}
	if got := e.Bool("X_BOOL", true); !got {
		t.Errorf("Bool = false, want true")
	}
	if err := e.Err(); err != nil {
		t.Errorf("Err = %v, want nil", err)
	}
}

func TestNilGetenv(t *testing.T) {
	t.Parallel()
	e := config.NewEnv(nil)
	if got := e.String("HTTP_ADDR", ":8081"); got != ":8081" {
		t.Errorf("String = %q", got)
	}
	if err := e.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
}

func TestParsesValues(t *testing.T) {
	t.Parallel()
	e := config.NewEnv(envOf(map[string]string{
		"ADDR":    ":9000",
		"WORKERS": " 12 ",
		"NEG":     "-3",
		"POLL":    "250ms",
		"DEBUG":   "TRUE",
		"OFF":     "0",
	}))
	if got := e.String("ADDR", ":1"); got != ":9000" {
		t.Errorf("String = %q", got)
	}
	if got := e.PositiveInt("WORKERS", 1); got != 12 {
		t.Errorf("PositiveInt = %d", got)
	}
	if got := e.Int("NEG", 0); got != -3 {
		t.Errorf("Int = %d", got)
	}
	if got := e.PositiveDuration("POLL", time.Second); got != 250*time.Millisecond {
		t.Errorf("PositiveDuration = %v", got)
	}
	if got := e.Bool("DEBUG", false); !got {
		t.Errorf("Bool(DEBUG) = false")
	}
	if got := e.Bool("OFF", true); got {
		t.Errorf("Bool(OFF) = true")
	}
	if err := e.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	e := config.NewEnv(envOf(map[string]string{
		"STOCK_WORKERS":   "abc",
		"ZERO_WORKERS":    "0",
		"RELAY_POLL":      "soon",
		"RELAY_TIMEOUT":   "-1s",
		"VERBOSE":         "maybe",
		"ORDER_HTTP_ADDR": "",
	}))
	if got := e.Int("STOCK_WORKERS", 8); got != 8 {
		t.Errorf("Int on bad value = %d, want default 8", got)
	}
	e.PositiveInt("ZERO_WORKERS", 1)
	e.Duration("RELAY_POLL", time.Second)
	e.PositiveDuration("RELAY_TIMEOUT", time.Second)
	e.Bool("VERBOSE", false)
	e.Required("ORDER_HTTP_ADDR")
	e.Errorf("AMQP_URL", "scheme %q is not amqp or amqps", "http")

	err := e.Err()
	if err == nil {
		t.Fatal("Err = nil, want errors")
	}
	want := []string{
		`config: STOCK_WORKERS: "abc" is not an integer`,
		`config: ZERO_WORKERS: 0 must be greater than zero`,
		`config: RELAY_POLL: "soon" is not a duration`,
		`config: RELAY_TIMEOUT: -1s must be greater than zero`,
		`config: VERBOSE: "maybe" is not a boolean`,
		`config: ORDER_HTTP_ADDR: is required`,
		`config: AMQP_URL: scheme "http" is not amqp or amqps`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("Err has %d lines, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	var ve *config.VarError
	if !errors.As(err, &ve) || ve.Key != "STOCK_WORKERS" {
		t.Errorf("errors.As VarError = %+v, want Key STOCK_WORKERS", ve)
	}
}

func TestMaskURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"amqp://guest:guest@localhost:5672/", "amqp://guest:xxxxx@localhost:5672/"},
		{"postgres://postgres@localhost:5432/orders?sslmode=disable", "postgres://postgres@localhost:5432/orders?sslmode=disable"},
		{"postgres://app:s3cr%40t@db:5432/orders?sslmode=disable", "postgres://app:xxxxx@db:5432/orders?sslmode=disable"},
		{"postgres://app@db/orders?password=secret&sslmode=require", "postgres://app@db/orders?password=xxxxx&sslmode=require"},
		{"host=db user=app password=secret dbname=orders", "host=db user=app password=xxxxx dbname=orders"},
		{"host=db password='a b' dbname=orders", "host=db password=xxxxx dbname=orders"},
		{":8081", ":8081"},
		{"postgres://app:secret@db:bad port/x", "<unparseable URL>"},
		// A list of nodes: every entry masked.
		{"amqp://u:secret@10.0.0.1:5672/shop,amqp://u:secret@10.0.0.2:5672/shop, amqps://u:secret@10.0.0.3:5671/shop",
			"amqp://u:xxxxx@10.0.0.1:5672/shop,amqp://u:xxxxx@10.0.0.2:5672/shop,amqps://u:xxxxx@10.0.0.3:5671/shop"},
		{"amqp://u:secret@h1/shop,amqp://u:secret@h2:bad port/shop", "amqp://u:xxxxx@h1/shop,<unparseable URL>"},
		// A comma inside one URL does not split it.
		{"amqp://u:a,secret@h1/shop", "amqp://u:xxxxx@h1/shop"},
		{"amqp://u:a,secret@h1/shop,amqp://u:a,secret@h2/shop", "amqp://u:xxxxx@h1/shop,amqp://u:xxxxx@h2/shop"},
		{"postgres://app:secret@h1:5432,h2:5432/orders", "postgres://app:xxxxx@h1:5432,h2:5432/orders"},
	}
	for _, tt := range tests {
		if got := config.MaskURL(tt.in); got != tt.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(config.MaskURL(tt.in), "secret") {
			t.Errorf("MaskURL(%q) leaks the password", tt.in)
		}
	}
}

func ExampleEnv() {
	env := config.NewEnv(func(k string) string {
		return map[string]string{"APP_WORKERS": "abc"}[k]
	})
	addr := env.String("HTTP_ADDR", ":8080")
	workers := env.PositiveInt("APP_WORKERS", 8)
	_, _ = addr, workers
	if err := env.Err(); err != nil {
		fmt.Println(err)
	}
	// Output: config: APP_WORKERS: "abc" is not an integer
}

// TestVarsListWhatWasRead: Vars lists each variable once, in the order of its first
// read, with its default as text, whether it was set or not.
func TestVarsListWhatWasRead(t *testing.T) {
	t.Parallel()
	env := config.NewEnv(func(k string) string { return map[string]string{"B": "7"}[k] })
	env.String("A", "x")
	env.PositiveInt("B", 3)
	env.Duration("C", 5*time.Second)
	env.Bool("D", true)
	env.Required("E")
	env.String("A", "y")
	got := fmt.Sprint(env.Vars())
	if want := "[{A x} {B 3} {C 5s} {D true} {E (required)}]"; got != want {
		t.Errorf("Vars() = %s, want %s", got, want)
	}
}
