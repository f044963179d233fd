package migrations_test

import (
	"testing"

	"example.com/shop/platform/inbox/inboxtest"
	"example.com/shop/services/stock/migrations"
)

// TestInbox runs the inbox acceptance suite on stock's own processed_event
// table (docs/architecture.md, rule 3).
func TestInbox(t *testing.T) {
	inboxtest.Run(t, migrations.FS)
}
