package inbox_test

import (
	"embed"
	"io/fs"
	"testing"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/inboxtest"
)

//go:embed testdata/migrations/*.sql
var testMigrations embed.FS

func TestInbox(t *testing.T) {
	t.Parallel()
	migrations, err := fs.Sub(testMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.Run(t, migrations)
}

func TestInboxWithGroupCommit(t *testing.T) {
	t.Parallel()
	migrations, err := fs.Sub(testMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.Run(t, migrations, inbox.WithGroupCommit(8, 2))
}

// TestEightProcessesRaceOverTripledMessages runs the race of real processes
// (inboxtest.RunRace) on PostgreSQL.
func TestEightProcessesRaceOverTripledMessages(t *testing.T) {
	migrations, err := fs.Sub(testMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunRace(t, inboxtest.Postgres(migrations))
}

// BenchmarkStore measures the inbox's cost per message on PostgreSQL
// (inboxtest.BenchStore).
func BenchmarkStore(b *testing.B) {
	migrations, err := fs.Sub(testMigrations, "testdata/migrations")
	if err != nil {
		b.Fatal(err)
	}
	inboxtest.BenchStore(b, inboxtest.Postgres(migrations))
}
