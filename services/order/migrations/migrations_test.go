package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/order/migrations"
)

// platform/outbox tests its writer and relay on a copy of the outbox table
// (platform may not import a service); this keeps the copy in step.
func TestOutboxSchemaMatchesPlatformCopy(t *testing.T) {
	ours, err := migrations.FS.ReadFile("00002_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../../../platform/outbox/testdata/schema/00001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if string(ours) != string(theirs) {
		t.Fatal("services/order/migrations/00002_outbox.sql and platform/outbox/testdata/schema/00001_outbox.sql differ; change both")
	}
}
