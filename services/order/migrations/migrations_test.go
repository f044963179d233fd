package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/order/migrations"
)

// platform/outbox tests its writer and relay on a copy of the outbox table
// (platform may not import a service); this keeps the copy in step.
func TestOutboxSchemaMatchesPlatformCopy(t *testing.T) {
	for ours, theirs := range map[string]string{
		"00002_outbox.sql":               "00001_outbox.sql",
		"00030_outbox_partition_key.sql": "00030_outbox_partition_key.sql",
		"00035_outbox_replays.sql":       "00035_outbox_replays.sql",
	} {
		a, err := migrations.FS.ReadFile(ours)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("../../../platform/outbox/testdata/schema/" + theirs)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("services/order/migrations/%s and platform/outbox/testdata/schema/%s differ; change both", ours, theirs)
		}
	}
}
