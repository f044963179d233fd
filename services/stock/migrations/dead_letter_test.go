package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/stock/migrations"
)

// platform/dlq tests its recorder and commands on a copy of the dead_letter table
// (platform may not import a service); this keeps the copy in step.
func TestDeadLetterSchemaMatchesPlatformCopy(t *testing.T) {
	ours, err := migrations.FS.ReadFile("00020_dead_letter.sql")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../../../platform/dlq/testdata/00003_dead_letter.sql")
	if err != nil {
		t.Fatal(err)
	}
	if string(ours) != string(theirs) {
		t.Fatal("services/stock/migrations/00020_dead_letter.sql and platform/dlq/testdata/00003_dead_letter.sql differ; change both")
	}
}
