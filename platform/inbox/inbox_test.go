package inbox_test

import (
	"testing"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/inboxtest"
	"example.com/shop/platform/migrate"
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
