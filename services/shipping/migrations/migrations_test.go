package migrations_test

import (
	"testing"

	"example.com/shop/platform/inbox/inboxtest"
	"example.com/shop/services/shipping/migrations"
)

// TestInbox runs the inbox acceptance suite on shipping's own processed_event
// table (docs/architecture.md, rule 3).
func TestInbox(t *testing.T) {
	inboxtest.Run(t, migrations.FS)
}
