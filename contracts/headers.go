package contracts

import "time"

// Message headers: the AMQP application properties every published event carries beside
// its properties (message_id, type, content_type, timestamp, persistent delivery mode) and
// its envelope body. The CloudEvents attributes follow the CloudEvents AMQP protocol
// binding in binary content mode, with the "cloudEvents_" prefix; the body stays the
// envelope, so a consumer that ignores the headers loses nothing.
const (
	// HeaderCloudEventsPrefix starts the name of every CloudEvents attribute header.
	HeaderCloudEventsPrefix = "cloudEvents_"
	// HeaderSpecVersion is the CloudEvents specversion, always [CloudEventsSpecVersion].
	HeaderSpecVersion = "cloudEvents_specversion"
	// HeaderID is the CloudEvents id: the envelope's event_id.
	HeaderID = "cloudEvents_id"
	// HeaderSource is the CloudEvents source: the producing service as a URI reference,
	// [CloudEventsSource] of the envelope's producer ("/order").
	HeaderSource = "cloudEvents_source"
	// HeaderType is the CloudEvents type: the event name, e.g. [EventOrderPlaced].
	HeaderType = "cloudEvents_type"
	// HeaderTime is the CloudEvents time: the envelope's occurred_at, RFC 3339 in UTC with
	// milliseconds ([CloudEventsTime]).
	HeaderTime = "cloudEvents_time"
	// HeaderSubject is the CloudEvents subject: the payload's [SubjectField], the order id.
	HeaderSubject = "cloudEvents_subject"

	// HeaderTraceparent is the W3C Trace Context traceparent of the span that published the
	// message ("00-<trace id>-<span id>-<flags>"); absent when the request that caused the
	// event was not traced.
	HeaderTraceparent = "traceparent"
	// HeaderTracestate is the W3C Trace Context tracestate that goes with
	// [HeaderTraceparent], when there is one.
	HeaderTracestate = "tracestate"

	// CloudEventsSpecVersion is the value of [HeaderSpecVersion].
	CloudEventsSpecVersion = "1.0"
	// SubjectField is the payload field whose value is an event's CloudEvents subject. Every
	// event of the contract is about one order and carries its order_id.
	SubjectField = "order_id"
)

// CloudEventsHeaders returns the names of the CloudEvents headers of every event message,
// in a fresh slice.
func CloudEventsHeaders() []string {
	return []string{HeaderSpecVersion, HeaderID, HeaderSource, HeaderType, HeaderTime, HeaderSubject}
}

// CloudEventsSource is the CloudEvents source of events written by producer: "/" followed
// by the producer name, a URI reference ("/order").
func CloudEventsSource(producer string) string { return "/" + producer }

// CloudEventsTime is the CloudEvents time of an event that occurred at t: RFC 3339 in UTC
// with exactly three fraction digits, as occurred_at is written in the envelope.
func CloudEventsTime(t time.Time) string { return t.UTC().Format(occurredAtLayout) }
