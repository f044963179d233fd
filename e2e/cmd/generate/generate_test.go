package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed files are what the registry makes (CI refuses a stale one through this
// test, `make test`): each differing or no longer made file is named with the command.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	m, err := NewModel("../../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Render(m)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := Sync("../../..", files, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Errorf("%s is not what the registry makes: run make generate", s)
	}
}

// Sync writes what differs, removes a generated file no longer made, keeps hand-written
// files, and finds nothing stale afterwards.
func TestSync(t *testing.T) {
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("deploy/old.yaml", Header("#")+"\n")
	write("deploy/hand.yaml", "# by hand\n")
	write("deploy/same.yaml", Header("#")+"\nsame\n")
	files := map[string][]byte{"deploy/same.yaml": []byte(Header("#") + "\nsame\n"), "deploy/new.yaml": []byte(Header("#") + "\nnew\n")}
	stale, err := Sync(root, files, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(stale, ", "); got != "deploy/new.yaml, deploy/old.yaml (no longer made)" {
		t.Errorf("Sync = %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy/old.yaml")); !os.IsNotExist(err) {
		t.Errorf("deploy/old.yaml is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy/hand.yaml")); err != nil {
		t.Errorf("deploy/hand.yaml was removed: %v", err)
	}
	if stale, err := Sync(root, files, true); err != nil || len(stale) > 0 {
		t.Errorf("Sync after Sync = %v, %v", stale, err)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"order.order.placed.v1": "orderPlaced", "stock.reservation.confirmed.v1": "stockReservationConfirmed", "a.b.c_d.v2": "aBCDV2"} {
		if got := camel(in); got != want {
			t.Errorf("camel(%s) = %s, want %s", in, got, want)
		}
	}
	if got := title("order-api"); got != "OrderApi" {
		t.Errorf("title(order-api) = %s", got)
	}
}
