package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
)

// rabbitHash is the password hash RabbitMQ keeps of a user whose password is its name
// (rabbit_password_hashing_sha256: base64 of a 4-byte salt followed by SHA-256 of the salt
// and the password). The salt is the first 4 bytes of SHA-256 of the name, so the
// definitions are the same on every run; the passwords are public, for a local broker
// only.
func rabbitHash(user string) string {
	name := sha256.Sum256([]byte(user))
	salt := name[:4:4]
	sum := sha256.Sum256(append(salt, user...))
	return base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
}

// jsonRegexp is s as a regular expression matching s literally, written inside a JSON
// string: "stock.events" is stock\\.events.
func jsonRegexp(s string) string {
	return strings.Trim(jsonString(regexp.QuoteMeta(s)), `"`)
}

// jsonString is s as a JSON string, quotes included, with <, > and & as they are.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonHeader is the first line of a generated JSON file: its opening brace and a
// "_comment" member holding Header's sentence and then more, e.g. what the file is.
func jsonHeader(more string) string {
	return `{"_comment": ` + jsonString(strings.TrimSpace(Header("")+" "+more)) + ","
}
