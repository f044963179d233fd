// Package msgkey reads the key that identifies a message for deduplication (its
// message key) from the places the usual protocols put it: CloudEvents attributes
// on AMQP and HTTP, the AMQP message_id, a header or a payload field of the
// caller's choice, and the event_id of this project's envelope.
//
// Every function returns a key that package inbox can store: at most MaxLen bytes
// (a longer one is replaced by its SHA-256, see Normalize), never empty. A message
// that carries no key gets an error wrapping ErrNoKey: processing it without
// deduplication would be silent, so a consumer dead-letters it (docs/architecture.md
// rule 3).
//
// When the protocol names the message's source as well as its id (CloudEvents
// guarantees only that the pair source + id is unique), the key is "source id",
// the two joined by one space.
package msgkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

// ErrNoKey means a message carries no usable key: the attribute, header or field
// is missing or empty, or the body cannot be read for it.
var ErrNoKey = errors.New("message has no key")

// MaxLen is the longest key stored as it is, in bytes.
const MaxLen = 255

// HashPrefix starts a key that is the SHA-256 (lower-case hex) of a key longer than
// MaxLen bytes.
const HashPrefix = "sha256:"

// Normalize returns key when it is 1 to MaxLen bytes long, and HashPrefix followed by
// the hex SHA-256 of key when it is longer (71 bytes). An empty key is ErrNoKey.
func Normalize(key string) (string, error) {
	switch {
	case key == "":
		return "", ErrNoKey
	case len(key) <= MaxLen:
		return key, nil
	}
	sum := sha256.Sum256([]byte(key))
	return HashPrefix + hex.EncodeToString(sum[:]), nil
}

// Join returns the key of a message with id from source: "source id", or id alone
// when source is empty, normalized. An empty id is ErrNoKey.
func Join(source, id string) (string, error) {
	if id == "" {
		return "", ErrNoKey
	}
	if source == "" {
		return Normalize(id)
	}
	return Normalize(source + " " + id)
}

// CloudEventsAMQP returns the key of a CloudEvent sent over AMQP in binary mode: the
// application headers cloudEvents_id and cloudEvents_source (the AMQP binding's
// names; the older "cloudEvents:" prefix is accepted too), joined as "source id".
// headers is the message's header table (amqp091.Table is one); string and []byte
// values are read. A message without an id is ErrNoKey.
func CloudEventsAMQP(headers map[string]any) (string, error) {
	id := tableString(headers, "cloudEvents_id", "cloudEvents:id")
	if id == "" {
		return "", fmt.Errorf("%w: no cloudEvents_id header", ErrNoKey)
	}
	return Join(tableString(headers, "cloudEvents_source", "cloudEvents:source"), id)
}

// AMQPMessageID returns the AMQP message_id property as the key, or ErrNoKey when it
// is empty.
func AMQPMessageID(messageID string) (string, error) {
	if messageID == "" {
		return "", fmt.Errorf("%w: no message_id", ErrNoKey)
	}
	return Normalize(messageID)
}

// AMQPHeader returns the application header name of an AMQP message as the key
// (string or []byte values), or ErrNoKey when it is missing or empty.
func AMQPHeader(headers map[string]any, name string) (string, error) {
	v := tableString(headers, name)
	if v == "" {
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
	return Normalize(v)
}

// CloudEventsHTTP returns the key of a CloudEvent sent over HTTP in binary mode: the
// ce-id and ce-source headers joined as "source id". A request without ce-id is
// ErrNoKey. A structured-mode request (application/cloudevents+json) carries its
// attributes in the body instead: use CloudEventsJSON.
func CloudEventsHTTP(h http.Header) (string, error) {
	id := h.Get("Ce-Id")
	if id == "" {
		return "", fmt.Errorf("%w: no ce-id header", ErrNoKey)
	}
	return Join(h.Get("Ce-Source"), id)
}

// CloudEventsJSON returns the key of a CloudEvent in structured mode, a JSON object
// with the attributes id and source, joined as "source id". A body that is not a
// JSON object, or has no string id, is ErrNoKey.
func CloudEventsJSON(body []byte) (string, error) {
	var ce struct {
		ID     any `json:"id"`
		Source any `json:"source"`
	}
	if err := json.Unmarshal(body, &ce); err != nil {
		return "", fmt.Errorf("%w: structured CloudEvent: %v", ErrNoKey, err)
	}
	id, _ := ce.ID.(string)
	if id == "" {
		return "", fmt.Errorf("%w: structured CloudEvent without a string id", ErrNoKey)
	}
	source, _ := ce.Source.(string)
	return Join(source, id)
}

// Header returns the HTTP header name (for example "X-Webhook-Id") as the key, or
// ErrNoKey when it is missing or empty.
func Header(h http.Header, name string) (string, error) {
	v := h.Get(name)
	if v == "" {
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
	return Normalize(v)
}

// Field returns the field of a JSON payload at a dotted path (for example
// "data.transaction_id") as the key. A string is taken as it is, a number in its
// JSON text ("42", not "42.0"); anything else (an object, an array, a boolean,
// null, a missing field or a body that is not JSON) is ErrNoKey.
func Field(payload []byte, path string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: payload: %v", ErrNoKey, err)
	}
	for _, name := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("%w: no field %s", ErrNoKey, path)
		}
		if v, ok = obj[name]; !ok {
			return "", fmt.Errorf("%w: no field %s", ErrNoKey, path)
		}
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			return "", fmt.Errorf("%w: field %s is empty", ErrNoKey, path)
		}
		return Normalize(v)
	case json.Number:
		return Normalize(v.String())
	default:
		return "", fmt.Errorf("%w: field %s is not a string or a number", ErrNoKey, path)
	}
}

// EventID returns the event_id of this project's JSON envelope as the key, in the
// canonical lower-case text of a UUID ("0199b1d4-..."); stock and shipping key their
// events this way. A body without an event_id that parses as a UUID is ErrNoKey.
func EventID(body []byte) (string, error) {
	var env struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return "", fmt.Errorf("%w: envelope: %v", ErrNoKey, err)
	}
	id, err := uuid.Parse(env.EventID)
	if err != nil || id == uuid.Nil {
		return "", fmt.Errorf("%w: envelope event_id %q is not a UUID", ErrNoKey, env.EventID)
	}
	return id.String(), nil
}

// tableString returns the first of names present in t as a string.
func tableString(t map[string]any, names ...string) string {
	for _, name := range names {
		switch v := t[name].(type) {
		case string:
			if v != "" {
				return v
			}
		case []byte:
			if len(v) > 0 {
				return string(v)
			}
		}
	}
	return ""
}
