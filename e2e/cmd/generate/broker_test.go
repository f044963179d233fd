package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"testing"
)

// rabbitVerifies checks password against hash as RabbitMQ does
// (rabbit_password_hashing_sha256: a 4-byte salt, then SHA-256 of salt and password).
func rabbitVerifies(hash, password string) bool {
	b, err := base64.StdEncoding.DecodeString(hash)
	if err != nil || len(b) != 4+sha256.Size {
		return false
	}
	sum := sha256.Sum256(append(b[:4:4], password...))
	return bytes.Equal(b[4:], sum[:])
}

// rabbitHash makes what RabbitMQ makes, the same on every run.
func TestRabbitHash(t *testing.T) {
	// guest's hash as RabbitMQ wrote it, with a random salt.
	if !rabbitVerifies("iz5h1Ez+Yhn5uDNj8/RqqY8ibpa9oH7f2SZzBxM5V/6hGT1K", "guest") {
		t.Fatal("rabbitVerifies refuses a hash RabbitMQ made")
	}
	for _, user := range []string{"guest", "order-relay", "auditor"} {
		h := rabbitHash(user)
		if !rabbitVerifies(h, user) || rabbitVerifies(h, user+"x") {
			t.Errorf("rabbitHash(%s) = %s does not verify its name, or verifies another password", user, h)
		}
		if rabbitHash(user) != h {
			t.Errorf("rabbitHash(%s) differs between runs", user)
		}
	}
	if rabbitHash("order") == rabbitHash("stock") {
		t.Error("two users have the same hash")
	}
}
