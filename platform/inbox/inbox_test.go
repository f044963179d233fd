package inbox_test

import (
	"testing"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit/inboxtest"
)

// testSchema is the inbox's own migrations, with the roles of this package's tests.
var testSchema = migrate.Schema{inbox.Migrations(inbox.Roles{App: "test_app", Maintenance: "test_maintenance"})}

func TestInbox(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, testSchema)
}

func TestInboxWithGroupCommit(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, testSchema, inbox.WithGroupCommit(8, 2))
}

// TestEightProcessesRaceOverTripledMessages runs the race of real processes
// (inboxtest.RunRace) on PostgreSQL.
func TestEightProcessesRaceOverTripledMessages(t *testing.T) {
	inboxtest.RunRace(t, inboxtest.Postgres(testSchema))
}

// BenchmarkStore measures the inbox's cost per message on PostgreSQL
// (inboxtest.BenchStore).
func BenchmarkStore(b *testing.B) {
	inboxtest.BenchStore(b, inboxtest.Postgres(testSchema))
}
