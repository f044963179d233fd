package main

import (
	"testing"

	"example.com/shop/testkit"
)

// TestClaimServerRefusesASecondDemo: while one demo holds the server, a second
// claim fails and says why; once the first session ends, a claim succeeds.
func TestClaimServerRefusesASecondDemo(t *testing.T) {
	ctx := testkit.Context(t)
	server := testkit.DatabaseURL(t)
	key := int64(demoLockKey + 1) // not the demo's own: a demo may be running on this machine
	release, err := claimServer(ctx, server, key)
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if second, err := claimServer(ctx, server, key); err == nil {
		second()
		t.Fatal("a second demo claimed the server the first one holds")
	} else {
		t.Logf("second claim: %v", err)
	}
	release()
	again, err := claimServer(ctx, server, key)
	if err != nil {
		t.Fatalf("claim after the first demo ended: %v", err)
	}
	again()
}
