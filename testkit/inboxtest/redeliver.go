package inboxtest

import (
	"context"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
)

// Redeliver processes env with ib as the consumer's runtime delivers it: again, up to
// attempts times in all, while the failure is not permanent (inbox.Permanent), for
// example a deadlock between concurrent transactions, which PostgreSQL ends by rolling
// one back (docs/architecture.md, rule 3). It returns the last error, nil once a
// delivery was processed or found a duplicate.
func Redeliver(ctx context.Context, ib *inbox.Inbox, env contracts.Envelope, attempts int) error {
	var err error
	for range max(attempts, 1) {
		if _, err = ib.Process(ctx, env); err == nil || inbox.Permanent(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}
