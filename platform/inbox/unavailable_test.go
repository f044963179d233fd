package inbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestUnavailableTellsTheDatabaseFromTheEvent(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("handler 1: %w", &pgconn.PgError{Code: code}) }
	for err, want := range map[error]bool{
		pg("57P01"):                     true,  // terminating connection due to administrator command
		pg("08006"):                     true,  // connection failure
		pg("53300"):                     true,  // too many connections
		pg("40001"):                     true,  // serialization failure
		pg("40P01"):                     true,  // deadlock
		pg("25006"):                     true,  // read-only transaction on a standby
		pg("23505"):                     false, // unique violation: the handler's
		pg("22P02"):                     false, // invalid text representation: the event's
		errors.New("handler refused"):   false,
		fmt.Errorf("x: %w", errFakeNet): true,
	} {
		if got := unavailable(err); got != want {
			t.Errorf("unavailable(%v) = %v, want %v", err, got, want)
		}
	}
}

var errFakeNet = &fakeNetErr{}

type fakeNetErr struct{}

func (*fakeNetErr) Error() string   { return "read tcp: connection reset by peer" }
func (*fakeNetErr) Timeout() bool   { return false }
func (*fakeNetErr) Temporary() bool { return false }
