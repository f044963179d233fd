package watermillinbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	"example.com/shop/integrations/watermillinbox"
	"example.com/shop/platform/inbox"
)

// A router whose handler credits a wallet behind the inbox: the copy of a
// message is acknowledged without a second credit; a message whose handler fails
// once is credited on its next delivery.
func ExampleMiddleware() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Outside the inbox: told of every delivery once its transaction has ended.
	done := make(chan error, 8)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := h(msg)
			done <- err
			return msgs, err
		}
	})
	router.AddMiddleware(watermillinbox.Middleware(watermillinbox.Config[inbox.DB, pgx.Tx]{
		Store: inbox.PostgresStore{}, DB: db,
	}))
	var failOnce atomic.Bool
	failOnce.Store(true)
	router.AddConsumerHandler("example.cashback", "payments", pubsub, func(msg *message.Message) error {
		if msg.UUID == "paid-2" && failOnce.Swap(false) {
			return errors.New("provider timed out") // rolled back, nacked, delivered again
		}
		tx := watermillinbox.Tx[pgx.Tx](msg)
		_, err := tx.Exec(msg.Context(), `INSERT INTO wallet (user_id, cashback) VALUES ('example', 1.90)
ON CONFLICT (user_id) DO UPDATE SET cashback = wallet.cashback + 1.90`)
		return err
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	publish := func(id string) {
		msg := message.NewMessage(id, []byte(`{"cashback":"1.90"}`))
		msg.Metadata.Set("cloudEvents_id", id)
		msg.Metadata.Set("cloudEvents_source", "/orders")
		if err := pubsub.Publish("payments", msg); err != nil {
			fmt.Println(err)
		}
	}
	publish("paid-1")
	fmt.Println("paid-1:", <-done)
	publish("paid-1")
	fmt.Println("paid-1 again:", <-done)
	publish("paid-2")
	fmt.Println("paid-2:", <-done)
	fmt.Println("paid-2 redelivered:", <-done)
	_ = router.Close()
	fmt.Println("wallet:", wallet(ctx, "example"))
	// Output:
	// paid-1: <nil>
	// paid-1 again: <nil>
	// paid-2: inbox example.cashback: key "/orders paid-2": provider timed out
	// paid-2 redelivered: <nil>
	// wallet: 3.80
}
