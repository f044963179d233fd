// Package config reads a binary's settings from environment variables through an injected
// getenv function, with defaults, collecting every bad variable into one error.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultAMQPURL is the broker every binary uses unless AMQP_URL says otherwise: the
// local RabbitMQ with its guest user. Each binary keeps its other defaults (database,
// listen address) with its own configuration.
const DefaultAMQPURL = "amqp://guest:guest@localhost:5672/"

// VarError describes one environment variable whose value could not be used.
// Its message has the form `config: STOCK_WORKERS: "abc" is not an integer`.
type VarError struct {
	// Key is the name of the environment variable.
	Key string
	// Reason says what is wrong, usually quoting the value.
	Reason string
}

// Error returns "config: KEY: reason".
func (e *VarError) Error() string {
	return "config: " + e.Key + ": " + e.Reason
}

// Env reads typed settings through a getenv function. A variable that is unset or empty
// yields the default. A value that cannot be parsed also yields the default and records a
// *VarError, so a caller reads every setting first and then checks Err once.
//
// An Env is not safe for concurrent use; binaries build their configuration once at start-up.
type Env struct {
	getenv func(string) string
	errs   []error
	vars   []Var
}

// Var is one environment variable an Env was asked for, with the default it
// was given, for a command's help.
type Var struct {
	// Key is the variable's name, e.g. "HTTP_ADDR".
	Key string
	// Default is the default as text ("" for none, "(required)" for Required).
	Default string
}

// Vars returns every variable read so far, once each, in the order of the
// first read. Reading a command's configuration through NewEnv(nil) and then
// calling Vars lists what the command reads and its defaults.
func (e *Env) Vars() []Var {
	return append([]Var(nil), e.vars...)
}

// record notes that key was read with default def.
func (e *Env) record(key, def string) {
	for _, v := range e.vars {
		if v.Key == key {
			return
		}
	}
	e.vars = append(e.vars, Var{Key: key, Default: def})
}

// NewEnv returns an Env reading through getenv, usually os.Getenv in main and a map lookup
// in tests. A nil getenv behaves as if no variable were set.
func NewEnv(getenv func(string) string) *Env {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &Env{getenv: getenv}
}

// lookup returns the trimmed value of key and whether it is set to something non-empty.
func (e *Env) lookup(key string) (string, bool) {
	v := strings.TrimSpace(e.getenv(key))
	return v, v != ""
}

// Errorf records a *VarError for key. Binaries use it for checks of their own, such as a
// value that parses but is out of range, so that Err reports them with the others.
func (e *Env) Errorf(key, format string, args ...any) {
	e.errs = append(e.errs, &VarError{Key: key, Reason: fmt.Sprintf(format, args...)})
}

// String returns the value of key, or def when it is unset or empty. The value is returned
// as set, surrounding white space included.
func (e *Env) String(key, def string) string {
	e.record(key, def)
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

// Required returns the value of key. When it is unset or empty it records an error
// ("is required") and returns "".
func (e *Env) Required(key string) string {
	e.record(key, "(required)")
	v := e.getenv(key)
	if v == "" {
		e.Errorf(key, "is required")
	}
	return v
}

// parse reads key with conv: it returns def and false when key is unset; when conv
// rejects the value it records "<value> is not <what>" and returns def and false;
// otherwise the parsed value and true.
func parse[T any](e *Env, key string, def T, what string, conv func(string) (T, error)) (T, bool) {
	e.record(key, fmt.Sprint(def))
	v, ok := e.lookup(key)
	if !ok {
		return def, false
	}
	x, err := conv(v)
	if err != nil {
		e.Errorf(key, "%q is not %s", v, what)
		return def, false
	}
	return x, true
}

const (
	anInteger = "an integer"
	aDuration = `a duration (want e.g. "500ms", "5s", "1h")`
	aBoolean  = "a boolean (want true or false)"
)

// Int returns the value of key parsed as a base-10 integer, or def when it is unset.
// A value that is not an integer records an error and yields def.
func (e *Env) Int(key string, def int) int {
	n, _ := parse(e, key, def, anInteger, strconv.Atoi)
	return n
}

// PositiveInt is Int for settings that must be greater than zero, such as a worker count.
// A value below 1 records an error and yields def.
func (e *Env) PositiveInt(key string, def int) int {
	n, set := parse(e, key, def, anInteger, strconv.Atoi)
	if set && n < 1 {
		e.Errorf(key, "%d must be greater than zero", n)
		return def
	}
	return n
}

// Duration returns the value of key parsed by time.ParseDuration ("250ms", "5s", "1h30m"),
// or def when it is unset. A value that does not parse records an error and yields def.
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	d, _ := parse(e, key, def, aDuration, time.ParseDuration)
	return d
}

// PositiveDuration is Duration for settings that must be greater than zero, such as a
// timeout or a poll interval. A zero or negative value records an error and yields def.
func (e *Env) PositiveDuration(key string, def time.Duration) time.Duration {
	d, set := parse(e, key, def, aDuration, time.ParseDuration)
	if set && d <= 0 {
		e.Errorf(key, "%s must be greater than zero", d)
		return def
	}
	return d
}

// Bool returns the value of key parsed by strconv.ParseBool ("1", "t", "true", "0", "f",
// "false", any case), or def when it is unset. Any other value records an error and
// yields def.
func (e *Env) Bool(key string, def bool) bool {
	b, _ := parse(e, key, def, aBoolean, strconv.ParseBool)
	return b
}

// Err returns every error recorded so far joined with errors.Join, in the order the
// variables were read, or nil when all values were usable. Each one is a *VarError
// (errors.As finds the first).
func (e *Env) Err() error {
	return errors.Join(e.errs...)
}

// SplitURLs splits a comma-separated list of URLs, such as an AMQP_URL naming
// the nodes of a cluster ("amqp://u:p@n1/shop,amqp://u:p@n2/shop"), into its
// entries, white space around each trimmed. A new entry starts only at a comma
// followed by a scheme and "://", so a comma inside a URL (a password "a,b",
// PostgreSQL's host list "postgres://h1,h2/db") stays in its entry and a single
// URL comes back whole. A value ending in a comma keeps it on its last entry.
// "" yields one empty entry.
func SplitURLs(s string) []string {
	var entries []string
	for i, piece := range strings.Split(s, ",") {
		if i > 0 && !startsWithScheme(strings.TrimSpace(piece)) {
			entries[len(entries)-1] += "," + piece
			continue
		}
		entries = append(entries, piece)
	}
	for i := range entries {
		entries[i] = strings.TrimSpace(entries[i])
	}
	return entries
}

// scheme matches the start of an absolute URL: a scheme (RFC 3986) and "://".
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

func startsWithScheme(s string) bool { return scheme.MatchString(s) }

// MaskURL returns u with any password replaced by "xxxxx", for logs: the user-info password
// of a URL (postgres://app:secret@db/orders), a password query parameter, or the password
// keyword of a key/value connection string. A list of URLs (SplitURLs) has every entry
// masked, joined again by ",". A value that cannot be parsed as a URL is replaced entirely
// by "<unparseable URL>" (one entry of a list: that entry), since it might hold a secret.
func MaskURL(u string) string {
	if entries := SplitURLs(u); len(entries) > 1 {
		for i, e := range entries {
			entries[i] = maskOne(e)
		}
		return strings.Join(entries, ",")
	}
	return maskOne(u)
}

// maskOne is MaskURL for one URL or connection string.
func maskOne(u string) string {
	if u == "" {
		return ""
	}
	if !strings.Contains(u, "://") {
		// password=... in a key/value connection string ("host=db user=app password=secret").
		keywordPassword := regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
		if keywordPassword.MatchString(u) {
			return keywordPassword.ReplaceAllString(u, "${1}xxxxx")
		}
		return u
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return "<unparseable URL>"
	}
	q := parsed.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q[k] = []string{"xxxxx"}
			parsed.RawQuery = q.Encode()
		}
	}
	return parsed.Redacted()
}

// Load reads a command's configuration through getenv with read, which reads
// every variable through one Env; the error is env.Err, naming every variable
// that cannot be used (a *VarError each, joined).
func Load[T any](getenv func(string) string, read func(*Env) T) (T, error) {
	env := NewEnv(getenv)
	c := read(env)
	return c, env.Err()
}
