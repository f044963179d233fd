package inboxtest

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/platform/inbox"
)

// BenchStore measures what the inbox costs per message on one store, one
// message at a time on a database of its own: "new" handles a new key whose
// handler inserts one effect row (key insert, effect, commit), "duplicate" a key
// already there (key insert refused, stored row read, commit), "effect-only" the
// same effect row in a transaction without the inbox, the baseline the inbox
// adds to.
func BenchStore[DB, Tx any](b *testing.B, st Store[DB, Tx]) {
	db, _ := st.NewDatabase(b)
	ctx := context.Background()
	if err := st.Exec(ctx, db, EffectTable); err != nil {
		b.Fatal(err)
	}
	c := inbox.NewStoreConsumer(st.Store, inbox.Config{Name: "bench"})
	effect := func(id string) inbox.TxFunc[Tx] {
		return func(ctx context.Context, tx Tx) (any, error) {
			return nil, st.ExecTx(ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES (?, 0)`, id)
		}
	}
	run := uuid.NewString()
	content := []byte(`{"account_id":"0199b1d4-7c1a-7000-8000-000000000001","cashback":"1.90"}`)
	b.Run("new", func(b *testing.B) {
		n := 0
		for b.Loop() {
			key := run + "-" + strconv.Itoa(n)
			n++
			if out, err := c.Handle(ctx, db, inbox.Message{Key: key, Content: content}, effect(key)); err != nil || out.Duplicate {
				b.Fatalf("%+v, %v", out, err)
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		key := run + "-0"
		for b.Loop() {
			if out, err := c.Handle(ctx, db, inbox.Message{Key: key, Content: content}, effect(key)); err != nil || !out.Duplicate {
				b.Fatalf("%+v, %v", out, err)
			}
		}
	})
	b.Run("effect-only", func(b *testing.B) {
		for b.Loop() {
			err := st.Store.InTx(ctx, db, func(tx Tx) error {
				return st.ExecTx(ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES (?, 0)`, run)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
