package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/shipping/migrations"
)

// platform/dlq tests its recorder and commands on a copy of the dead_letter table
// (platform may not import a service); this keeps the copy in step.
func TestDeadLetterSchemaMatchesPlatformCopy(t *testing.T) {
	for ours, theirs := range map[string]string{
		"00020_dead_letter.sql":         "00003_dead_letter.sql",
		"00040_dead_letter_message.sql": "00040_dead_letter_message.sql",
	} {
		a, err := migrations.FS.ReadFile(ours)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("../../../platform/dlq/testdata/" + theirs)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("services/shipping/migrations/%s and platform/dlq/testdata/%s differ; change both", ours, theirs)
		}
	}
}
