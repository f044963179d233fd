// Package watermillinbox runs Watermill handlers (github.com/ThreeDotsLabs/watermill)
// through the inbox (package inbox): a router middleware that writes each
// message's key in the same database transaction as the handler's effect, so a
// redelivered message is acknowledged without running the handler again and a
// failed one is processed on its next delivery (docs/architecture.md, rule 3).
//
//	router.AddMiddleware(watermillinbox.Middleware(watermillinbox.Config[inbox.DB, pgx.Tx]{
//	    Store: inbox.PostgresStore{}, DB: pool,
//	}))
//	router.AddConsumerHandler("billing.cashback", "payments", sub, func(msg *message.Message) error {
//	    tx := watermillinbox.Tx[pgx.Tx](msg)
//	    _, err := tx.Exec(msg.Context(), `UPDATE wallet SET cashback = cashback + $1 WHERE user_id = $2`, amount, user)
//	    return err
//	})
//
// It is a module of its own so that Watermill stays out of the dependencies of
// package inbox and of every service that does not use it.
package watermillinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/msgkey"
)

// Config configures Middleware.
type Config[DB, Tx any] struct {
	// Store is the inbox store: inbox.PostgresStore{} or mysqlinbox.Store{} (required).
	Store inbox.Store[DB, Tx]
	// DB is where the transactions run: a pool or *sql.DB (required).
	DB DB
	// Mode is what a duplicate gets (default inbox.Skip, which acknowledges it).
	// In mode Fail a duplicate is an error wrapping inbox.ErrDuplicate, nacked.
	Mode inbox.Mode
	// Logger receives key conflicts; nil discards.
	Logger *slog.Logger
	// Registerer gets the inbox counters, one consumer label per handler; nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// txKey is the context key of the inbox transaction.
type txKey struct{}

// Middleware returns a router middleware that handles every message once per
// handler: the consumer is the handler's name (message.HandlerNameFromCtx), the
// key is Key(msg), the content checked against a reused key is the payload.
//
// A new message runs the handler inside the inbox transaction (Tx returns it)
// and commits its effect with the key when the handler returns nil; its
// messages are returned to the router, which publishes them after the commit.
// A handler error rolls back the key with the effect and is returned, so the
// router nacks and the broker delivers the message again. A duplicate returns no
// error and no messages: the router acknowledges it without calling the handler.
// A message without a key or with a reused key returns an error for which
// inbox.Permanent is true (route it to a poison queue, see
// middleware.PoisonQueueWithFilter). It panics on a Config without Store.
func Middleware[DB, Tx any](cfg Config[DB, Tx]) message.HandlerMiddleware {
	if cfg.Store == nil {
		panic("watermillinbox: Middleware without a Store")
	}
	var consumers sync.Map // handler name -> *inbox.StoreConsumer[DB, Tx]
	consumer := func(name string) *inbox.StoreConsumer[DB, Tx] {
		if c, ok := consumers.Load(name); ok {
			return c.(*inbox.StoreConsumer[DB, Tx])
		}
		c, _ := consumers.LoadOrStore(name, inbox.NewStoreConsumer(cfg.Store,
			inbox.Config{Name: name, Mode: cfg.Mode, Logger: cfg.Logger, Registerer: cfg.Registerer}))
		return c.(*inbox.StoreConsumer[DB, Tx])
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			name := message.HandlerNameFromCtx(msg.Context())
			if name == "" {
				return nil, fmt.Errorf("watermillinbox: message %s outside a router handler: %w", msg.UUID, inbox.ErrPermanent)
			}
			key, err := Key(msg)
			if err != nil {
				return nil, fmt.Errorf("inbox %s: message %s: %w", name, msg.UUID, err)
			}
			var produced []*message.Message
			out, err := consumer(name).Handle(msg.Context(), cfg.DB, inbox.Message{Key: key, Content: msg.Payload},
				func(ctx context.Context, tx Tx) (any, error) {
					outer := msg.Context()
					msg.SetContext(context.WithValue(ctx, txKey{}, tx))
					defer msg.SetContext(outer)
					var err error
					produced, err = h(msg)
					return nil, err
				})
			if err != nil || out.Duplicate {
				return nil, err
			}
			return produced, nil
		}
	}
}

// Tx returns the inbox transaction of msg inside a handler that Middleware
// wraps: every write of the handler's effect goes through it, never a commit or a
// rollback. It panics outside such a handler or for another Tx type, a
// programming error.
func Tx[T any](msg *message.Message) T {
	tx, ok := msg.Context().Value(txKey{}).(T)
	if !ok {
		panic(fmt.Sprintf("watermillinbox: no %T inbox transaction in the message's context (is the handler behind Middleware?)", tx))
	}
	return tx
}

// Key returns the inbox key of msg: the CloudEvents id and source in its
// metadata (the AMQP binding's cloudEvents_id and cloudEvents_source, the older
// cloudEvents: prefix, or the Kafka binding's ce_id and ce_source) joined as
// "source id", else the message's UUID. Keys over 255 bytes become their SHA-256
// (msgkey.Normalize). A message with none of them is msgkey.ErrNoKey.
func Key(msg *message.Message) (string, error) {
	headers := make(map[string]any, len(msg.Metadata))
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	key, err := msgkey.CloudEventsAMQP(headers)
	if !errors.Is(err, msgkey.ErrNoKey) {
		return key, err
	}
	if id := msg.Metadata.Get("ce_id"); id != "" {
		return msgkey.Join(msg.Metadata.Get("ce_source"), id)
	}
	if msg.UUID == "" {
		return "", fmt.Errorf("%w: no CloudEvents id in the metadata and no UUID", msgkey.ErrNoKey)
	}
	return msgkey.Normalize(msg.UUID)
}
