// Package outbox implements the transactional outbox: a Writer that records an
// event in the caller's database transaction, and a Relay that publishes the
// recorded events to the broker (docs/architecture.md, rules 1 and 2).
//
// The relay is one transaction, repeated (batchTx.run in batch.go):
//
//	BEGIN
//	SELECT ... FROM outbox WHERE published_at IS NULL
//	    ORDER BY occurred_at, id LIMIT $batch FOR UPDATE SKIP LOCKED
//	publish the rows to the broker, in that order
//	wait for the broker's publisher confirms
//	UPDATE outbox SET published_at = now() WHERE id = ANY($confirmed)
//	COMMIT
//
// A crash anywhere before the COMMIT leaves the rows unmarked: they are
// published again, a duplicate the consumers' inboxes skip, never a loss. A row
// the broker did not confirm is never marked, nor any row after it.
//
// Two refinements keep that shape and make it fast and parallel:
//
//   - Pipelining (docs/adr/0003-pipelined-publisher-confirms.md): one
//     transaction sends up to batchesPerTx batches on one publishing stream;
//     the next batch is selected and sent while the broker confirms the one
//     before, and a batch is marked while the broker confirms the one after.
//   - Partitions (docs/adr/0007-relay-partitions.md): a row belongs to
//     partition key_hash % Partitions, so one aggregate's rows share one. Each
//     partition is led by one relay at a time (advisory locks on the relay's
//     lock session, leader.go); its batch transactions hold its batch lock, so
//     two of them never overlap, even across a change of leader.
//
// Files: writer.go (the insert), batch.go (the transaction), worker.go (one
// partition's loop: retries, backoff, readiness), leader.go (who leads which
// partition), relay.go (configuration, guarantees, Run), replay.go and
// purge.go (the operators' tools).
package outbox
