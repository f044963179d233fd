package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"time"
)

// fastSchemasSHA256 is the SHA-256 of the schemas fastValid was written for:
// envelope.json and the payload schemas of fastEvents, in name order, each name and
// content without its "$id" line (a schema's name, no rule: a fork renames it,
// docs/fork.md). The other events, and so the list of names, are the library's, and
// adding one changes nothing here. NewValidator turns fastValid off when one of these
// schemas differs, so a schema change can never be checked by an outdated copy of its
// rules (TestFastCheckFollowsTheSchemas fails then, as a reminder to update both).
const fastSchemasSHA256 = "4893d0e18e6aea0e12231d815d37e0b8f886ba0367e56817fe78b2804ef337cf"

// fastEvents are the events whose payloads fastValid checks.
var fastEvents = []string{EventOrderCancelled, EventOrderConfirmed, EventOrderPlaced, EventStockReservationConfirmed}

// schemaID matches a schema's "$id" line.
var schemaID = regexp.MustCompile(`(?m)^[ \t]*"\$id":.*\n`)

// schemasSHA256 returns the hash fastSchemasSHA256 is compared with.
func schemasSHA256() (string, error) {
	h := sha256.New()
	for _, name := range append([]string{"envelope"}, fastEvents...) { // in name order
		data, err := schemaFS.ReadFile("schemas/" + name + ".json")
		if err != nil {
			return "", err
		}
		h.Write([]byte(name + ".json"))
		h.Write([]byte{0})
		h.Write(schemaID.ReplaceAll(data, nil))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Patterns of schemas/ that fastValid checks with a regular expression, as the
// schema library does (Go's regexp, anchored).
var (
	occurredAtPattern = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)
	quantityPattern   = regexp.MustCompile(`^(?:[1-9][0-9]{0,8}(?:\.[0-9]{1,3})?|0\.(?:[1-9][0-9]{0,2}|0[1-9][0-9]?|00[1-9]))$`)
)

// fastValid reports whether doc, a body parsed by parseJSON, satisfies
// schemas/envelope.json and the payload schema of its event_name, by checking
// their rules directly on the parsed values: an order of magnitude cheaper than
// the general schema library, which the consumers pay on every delivery and
// stock on every answer it writes. It checks the three order events that carry
// the order and stock's confirmation, and leaves the rejections, which are rare,
// to the library. It never says true for a document the schemas refuse; it may
// say false for one they accept, and Validate then asks the library, which also
// explains any failure. The schemas it follows are those hashed in
// fastSchemasSHA256.
func fastValid(doc any) bool {
	obj, ok := doc.(map[string]any)
	if !ok || len(obj) != 7 { // additionalProperties: false, seven required
		return false
	}
	id, ok := obj["event_id"].(string)
	if !ok || !isUUID(id, true) {
		return false
	}
	at, ok := obj["occurred_at"].(string)
	if !ok || !occurredAtPattern.MatchString(at) {
		return false
	}
	if _, err := time.Parse(time.RFC3339Nano, at); err != nil { // format: date-time
		return false
	}
	if !nonEmptyString(obj["producer"]) || !isCorrelationID(obj["correlation_id"]) || !isInt32Positive(obj["schema_version"]) {
		return false
	}
	payload, ok := obj["payload"].(map[string]any)
	if !ok {
		return false
	}
	switch obj["event_name"] {
	case EventOrderPlaced, EventOrderCancelled, EventOrderConfirmed: // three payloads, the same rules
		return len(payload) == 4 && isUUIDValue(payload["order_id"]) && isUUIDValue(payload["customer_id"]) &&
			isInt32Positive(payload["version"]) && validLines(payload["lines"])
	case EventStockReservationConfirmed:
		return len(payload) == 3 && isUUIDValue(payload["order_id"]) &&
			isInt32Positive(payload["order_version"]) && validLines(payload["lines"])
	}
	return false // the other events are left to the library
}

// validLines reports whether v is the lines array of an order or of a
// reservation: 1 to 100 lines, each a product_id and a quantity.
func validLines(v any) bool {
	lines, ok := v.([]any)
	if !ok || len(lines) < 1 || len(lines) > 100 {
		return false
	}
	for _, l := range lines {
		line, ok := l.(map[string]any)
		if !ok || len(line) != 2 || !isUUIDValue(line["product_id"]) {
			return false
		}
		if s, ok := line["quantity"].(string); !ok || !quantityPattern.MatchString(s) {
			return false
		}
	}
	return true
}

// isUUIDValue reports whether v is a string holding a UUID of any version.
func isUUIDValue(v any) bool {
	s, ok := v.(string)
	return ok && isUUID(s, false)
}

// isUUID reports whether s is a UUID in canonical lower-case form; v7 asks for
// version 7 and the RFC 4122 variant, as the envelope's event_id pattern does.
func isUUID(s string, v7 bool) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return !v7 || (s[14] == '7' && (s[19] == '8' || s[19] == '9' || s[19] == 'a' || s[19] == 'b'))
}

func nonEmptyString(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}

// isCorrelationID reports whether v is a correlation_id: 1 to 255 printable ASCII
// characters (pattern ^[\x20-\x7e]+$, maxLength 255).
func isCorrelationID(v any) bool {
	s, ok := v.(string)
	if !ok || len(s) < 1 || len(s) > 255 {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// isInt32Positive reports whether v is a JSON number written as a whole number
// from 1 to 2147483647 without sign, exponent, fraction or leading zero (the
// schemas' integer with minimum 1 and maximum 2147483647 accepts more spellings,
// such as 2.0; those go to the library).
func isInt32Positive(v any) bool {
	n, ok := v.(json.Number)
	if !ok || len(n) == 0 || len(n) > 10 || n[0] < '1' || n[0] > '9' {
		return false
	}
	var x int64
	for i := range len(n) {
		c := n[i]
		if c < '0' || c > '9' {
			return false
		}
		x = x*10 + int64(c-'0')
	}
	return x <= 2147483647
}
