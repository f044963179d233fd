package main

import (
	"strings"
	"testing"
)

// The committed events.go and schemas/event-names.json are what the schemas make.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	stale, err := run("../..", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("not current, run make generate: %s", strings.Join(stale, ", "))
	}
}

func TestIdent(t *testing.T) {
	for _, c := range [][5]string{
		{"order", "order", "placed", "v1", "EventOrderPlaced"},
		{"stock", "reservation", "confirmed", "v1", "EventStockReservationConfirmed"},
		{"order", "order", "placed", "v2", "EventOrderPlacedV2"},
		{"ledger", "entry", "written_off", "v1", "EventLedgerEntryWrittenOff"},
	} {
		if got := ident(c[0], c[1], c[2], c[3]); got != c[4] {
			t.Errorf("ident(%v) = %s, want %s", c[:4], got, c[4])
		}
	}
}
