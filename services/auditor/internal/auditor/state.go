// Package auditor holds the auditor's rules: what each consumer should have done with
// each published event (the consumers come from contracts), the continuous audit that
// pages through the outbox and counts the events no consumer accounts for, and the
// journey of an order or event through every table. It reads through the store and
// writes nothing.
package auditor

import (
	"time"

	"example.com/shop/services/auditor/internal/store"
)

// State is what one consumer has done with one event.
type State string

// The states of a consumer for an event, as the journey and the audit report them.
const (
	// StateProcessed: the consumer holds the event's processed_event key; its effect
	// committed with the key (docs/architecture.md, rule 3).
	StateProcessed State = "processed"
	// StateDeadLettered: the consumer recorded the event in its dead_letter table and
	// nobody has replayed or dropped it yet. The record keeps the message (the
	// dead-letter queue usually holds a copy too), but the event is not delivered:
	// the audit counts it as dead-lettered, awaiting a decision.
	StateDeadLettered State = "dead_lettered"
	// StateDropped: the event was dead-lettered and an operator dropped it on purpose.
	StateDropped State = "dropped"
	// StateNotPublished: the relay has not published the event yet.
	StateNotPublished State = "not_published"
	// StateInRetry: no key yet, but the event was published (or replayed from the
	// dead-letter queue) less than the grace period ago: it is in flight, or waits in a
	// retry queue.
	StateInRetry State = "in_retry"
	// StateMissing: published more than the grace period ago, and the consumer has
	// neither processed nor dead-lettered it. The audit counts it as unaccounted.
	StateMissing State = "missing"
)

// Accounted reports whether the state needs no further delivery: processed, or
// dropped on purpose. An open dead letter is not: it awaits a decision.
func (s State) Accounted() bool {
	return s == StateProcessed || s == StateDropped
}

// classify decides one consumer's state for ev at time now, from its key (processed,
// nil when absent) and its latest dead-letter record (nil when none).
func classify(ev store.OutboxRow, processed *time.Time, dead *store.DeadLetter, now time.Time, grace time.Duration) State {
	switch {
	case processed != nil:
		return StateProcessed
	case dead != nil && dead.ResolvedAt == nil:
		return StateDeadLettered
	case dead != nil && dead.Resolution == "dropped":
		return StateDropped
	case ev.PublishedAt == nil:
		return StateNotPublished
	}
	since := *ev.PublishedAt
	if dead != nil && dead.ResolvedAt != nil && dead.ResolvedAt.After(since) {
		since = *dead.ResolvedAt // replayed: it travels again
	}
	if now.Sub(since) < grace {
		return StateInRetry
	}
	return StateMissing
}
