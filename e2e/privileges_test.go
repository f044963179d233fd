package e2e_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/testkit"
	"example.com/shop/testkit/rabbitadmin"
)

// Files of the deployment the suite runs under: every process connects as its own
// PostgreSQL role and RabbitMQ user, as in docker-compose.yml and deploy/k8s.
const (
	rolesSQL        = "../deploy/postgres/roles.sql"
	definitionsJSON = "../deploy/rabbitmq/definitions.json"
)

// brokerUsers are the users of deploy/rabbitmq/definitions.json other than guest,
// with their permissions on the "/" vhost, to be given on a test's vhost. Their
// password in tests is their name.
func brokerUsers(t testing.TB) []rabbitadmin.User {
	t.Helper()
	users, err := system.BrokerUsers(definitionsJSON)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

// leastPrivilege returns, per process of system.New, the URLs that run it under its
// own role and broker user: order serve as order_api and order, each relay as
// <producer>_relay and <producer>-relay (which then declares no consumer queue), stock
// serve as stock_app and stock, shipping serve as shipping_app and shipping, the
// auditor as the broker user auditor. The databases must be migrated by their owner
// first (system.Migrate does).
func leastPrivilege(t testing.TB, orderURL, stockURL, shippingURL string, brokerURLs map[string]string) map[string][]string {
	t.Helper()
	testkit.ApplySQLFile(t, rolesSQL)
	return map[string][]string{
		"order": {"ORDER_DATABASE_URL=" + testkit.URLAs(t, orderURL, "order_api"), "AMQP_URL=" + brokerURLs["order"],
			"RELAY_USERS=" + contracts.RelayUsers()},
		"order-relay": {"ORDER_DATABASE_URL=" + testkit.URLAs(t, orderURL, "order_relay"),
			"AMQP_URL=" + brokerURLs["order-relay"], "RELAY_DECLARE_QUEUES=false"},
		"stock": {"STOCK_DATABASE_URL=" + testkit.URLAs(t, stockURL, "stock_app"), "AMQP_URL=" + brokerURLs["stock"],
			"RELAY_USERS=" + contracts.RelayUsers()},
		"stock-relay": {"STOCK_DATABASE_URL=" + testkit.URLAs(t, stockURL, "stock_relay"),
			"AMQP_URL=" + brokerURLs["stock-relay"], "RELAY_DECLARE_QUEUES=false"},
		"shipping": {"SHIPPING_DATABASE_URL=" + testkit.URLAs(t, shippingURL, "shipping_app"), "AMQP_URL=" + brokerURLs["shipping"],
			"RELAY_USERS=" + contracts.RelayUsers()},
		"auditor": {"AMQP_URL=" + brokerURLs["auditor"]},
	}
}

// TestDatabaseRolesAreLimited migrates the three databases as their owner and checks
// what each role of deploy/postgres/roles.sql may do: order_api cannot mark an event
// published nor delete an order; order_relay can neither read nor write orders; the
// auditor can SELECT every table of the three databases and do nothing else. What
// each role needs to work is proven by the rest of the suite, which runs under them.
func TestDatabaseRolesAreLimited(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	urls := map[string]string{
		"order": testkit.EmptyDatabaseURL(t), "stock": testkit.EmptyDatabaseURL(t), "shipping": testkit.EmptyDatabaseURL(t),
	}
	sys, err := system.New(system.Config{BinDir: os.Getenv(binDirEnv),
		DBURLs: urls})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.ApplySQLFile(t, rolesSQL)
	as := func(db, role string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, testkit.URLAs(t, urls[db], role))
		if err != nil {
			t.Fatalf("connect to %s as %s: %v", db, role, err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	denied := func(conn *pgx.Conn, sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: %s: err = %v, want permission denied (42501)", conn.Config().User, sql, err)
		}
	}
	allowed := func(conn *pgx.Conn, sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Errorf("%s: %s: %v", conn.Config().User, sql, err)
		}
	}

	api := as("order", "order_api")
	denied(api, `UPDATE outbox SET published_at = now()`)
	denied(api, `DELETE FROM orders`)
	denied(api, `DELETE FROM outbox`)
	allowed(api, `UPDATE orders SET updated_at = now() WHERE false`)

	relay := as("order", "order_relay")
	denied(relay, `SELECT count(*) FROM orders`)
	denied(relay, `UPDATE orders SET updated_at = now()`)
	denied(relay, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at)
		VALUES (gen_random_uuid(), gen_random_uuid(), 'draft', 1, now(), now())`)
	denied(relay, `UPDATE outbox SET envelope = '{}'`)
	denied(relay, `DELETE FROM outbox`)
	allowed(relay, `SELECT id FROM outbox WHERE published_at IS NULL FOR UPDATE SKIP LOCKED`)
	allowed(relay, `UPDATE outbox SET published_at = now(), attempts = attempts + 1, last_error = NULL WHERE false`)

	denied(as("stock", "stock_app"), `DELETE FROM processed_event`)
	denied(as("stock", "stock_app"), `UPDATE dead_letter SET resolution = 'dropped'`)
	allowed(as("stock", "stock_maintenance"), `UPDATE dead_letter SET resolved_at = now(), resolution = 'dropped' WHERE false`)
	denied(as("stock", "stock_maintenance"), `DELETE FROM reservation`)
	allowed(as("stock", "stock_maintenance"), `INSERT INTO processed_event (consumer, message_key, payload_sha256, outcome)
		SELECT 'stock', 'k', NULL, 'dropped' WHERE false`) // dlq drop
	denied(as("stock", "stock_maintenance"), `UPDATE processed_event SET outcome = NULL WHERE false`)
	allowed(as("order", "order_maintenance"), `SELECT status, version FROM orders WHERE false`) // is an answer stale
	denied(as("order", "order_maintenance"), `SELECT customer_id FROM orders WHERE false`)

	for _, db := range []string{"order", "stock", "shipping"} {
		auditor := as(db, "auditor")
		rows, err := auditor.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(tables) < 3 {
			t.Fatalf("%s tables: %v %v", db, tables, err)
		}
		for _, table := range tables {
			allowed(auditor, `SELECT * FROM `+pgx.Identifier{table}.Sanitize()+` LIMIT 1`)
			var any bool
			err := auditor.QueryRow(ctx, `SELECT has_table_privilege($1, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')`,
				table).Scan(&any)
			if err != nil || any {
				t.Errorf("auditor on %s.%s: a privilege besides SELECT (%v)", db, table, err)
			}
		}
		_, err = auditor.Exec(ctx, `CREATE TABLE auditor_scratch (x int)`)
		if err == nil {
			t.Errorf("auditor created a table in %s", db)
		}
	}
}

// TestBrokerUsersAreLimited gives the users of deploy/rabbitmq/definitions.json their
// permissions on a fresh vhost: each relay and consumer declares its own part of the
// topology, but a consumer cannot publish to app.events, a relay cannot publish another
// producer's events, and order-relay cannot consume stock.events. No user but the
// administrator may publish through the default exchange, a consumer's copies exchange
// takes only its own user's messages, a relay may not bind app.events to its
// alternate exchange, the auditor may only count a dead-letter queue's messages (a
// passive declare; its write permission on them lets it neither bind, purge, delete
// nor read them), and the broker refuses a user_id other than the connection's user
// (docs/architecture.md, rule 8).
func TestBrokerUsersAreLimited(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	users := brokerUsers(t)
	_, urls := testkit.NewVhostWithUsers(t, users)

	topology := map[string]amqp.Topology{}
	for _, p := range contracts.Producers() {
		topology[p.RelayUser] = amqp.PublisherTopology() // RELAY_DECLARE_QUEUES=false
	}
	for _, c := range contracts.Consumers() {
		topology[c.Name] = amqp.EventTopology(amqp.ConsumerQueue(c, []time.Duration{time.Second}))
	}
	for user, topo := range topology {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		conn, err := amqp.Dial(dctx, urls[user], topo, nil)
		cancel()
		if err != nil {
			t.Fatalf("%s cannot declare its topology: %v", user, err)
		}
		_ = conn.Close()
	}

	// channel opens a channel as user, closed when the test ends.
	channel := func(user string) *amqp091.Channel {
		t.Helper()
		conn, err := amqp091.Dial(urls[user])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	// refusedWith checks that the broker answers fn, run as user, with code.
	refusedWith := func(code int, user, what string, fn func(ch *amqp091.Channel) error) {
		t.Helper()
		ch := channel(user)
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		err := fn(ch)
		if err == nil {
			select {
			case e := <-closed:
				if e != nil {
					err = e
				}
			case <-time.After(10 * time.Second):
			}
		}
		var amqpErr *amqp091.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != code {
			t.Errorf("%s %s: err = %v, want reply code %d (403 ACCESS_REFUSED, 406 PRECONDITION_FAILED)", user, what, err, code)
		}
	}
	refused := func(user, what string, fn func(ch *amqp091.Channel) error) {
		t.Helper()
		refusedWith(amqp091.AccessRefused, user, what, fn)
	}
	refused("stock-relay", "publishing order's event", func(ch *amqp091.Channel) error {
		return ch.PublishWithContext(ctx, contracts.Exchange, contracts.EventOrderPlaced, false, false,
			amqp091.Publishing{Body: []byte(`{}`)})
	})
	refused("order-relay", "publishing stock's answer", func(ch *amqp091.Channel) error {
		return ch.PublishWithContext(ctx, contracts.Exchange, contracts.EventStockReservationConfirmed, false, false,
			amqp091.Publishing{Body: []byte(`{}`)})
	})
	refused("stock", "publishing to app.events", func(ch *amqp091.Channel) error {
		return ch.PublishWithContext(ctx, contracts.Exchange, contracts.EventOrderPlaced, false, false,
			amqp091.Publishing{Body: []byte(`{}`)})
	})
	refused("order-relay", "consuming stock.events", func(ch *amqp091.Channel) error {
		_, err := ch.Consume(contracts.QueueStock, "", false, false, false, false, nil)
		return err
	})
	refused("order-relay", "reading stock.events.dlq", func(ch *amqp091.Channel) error {
		_, _, err := ch.Get(contracts.QueueStockDLQ, false)
		return err
	})
	refused("stock", "consuming shipping.events", func(ch *amqp091.Channel) error {
		_, err := ch.Consume(contracts.QueueShipping, "", false, false, false, false, nil)
		return err
	})
	publish := func(exchange, key, userID string) func(ch *amqp091.Channel) error {
		return func(ch *amqp091.Channel) error {
			return ch.PublishWithContext(ctx, exchange, key, false, false, amqp091.Publishing{Body: []byte(`{}`), UserId: userID})
		}
	}
	for _, u := range users {
		refused(u.Name, "publishing to order.events through the default exchange", publish("", contracts.QueueOrder, ""))
	}
	refused("stock", "publishing to order's copies exchange", publish(amqp.CopiesExchange(contracts.QueueOrder), contracts.QueueOrder, ""))
	refused("stock-relay", "publishing to order's copies exchange", publish(amqp.CopiesExchange(contracts.QueueOrder), contracts.QueueOrder, ""))
	for _, user := range []string{"order", "shipping", "auditor"} {
		refused(user, "publishing stock's answer", publish(contracts.Exchange, contracts.EventStockReservationConfirmed, ""))
	}
	refused("auditor", "reading stock.events.dlq", func(ch *amqp091.Channel) error {
		_, _, err := ch.Get(contracts.QueueStockDLQ, false)
		return err
	})
	refused("auditor", "declaring a queue", func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("auditor.scratch", false, true, false, false, nil)
		return err
	})
	for _, c := range contracts.Consumers() {
		if _, err := channel("auditor").QueueDeclarePassive(c.DeadLetterQueue, true, false, false, false, nil); err != nil {
			t.Errorf("auditor cannot count the messages of %s: %v", c.DeadLetterQueue, err)
		}
		// Its write permission on the dead-letter queues (which RabbitMQ 4.2.7 and later ask
		// of a passive declare) lets it neither bind them, purge them, delete them nor read them.
		dlq := c.DeadLetterQueue
		for _, x := range []string{contracts.Exchange, contracts.DeadLetterExchange, contracts.AlternateExchange, amqp.CopiesExchange(c.Queue)} {
			refused("auditor", "binding "+dlq+" to "+x, func(ch *amqp091.Channel) error {
				return ch.QueueBind(dlq, "#", x, false, nil)
			})
		}
		refused("auditor", "purging "+dlq, func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge(dlq, false)
			return err
		})
		refused("auditor", "deleting "+dlq, func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete(dlq, false, false, false)
			return err
		})
		refused("auditor", "consuming "+dlq, func(ch *amqp091.Channel) error {
			_, err := ch.Consume(dlq, "", false, false, false, false, nil)
			return err
		})
		refused("auditor", "publishing to "+dlq+" through app.events.dlx", publish(contracts.DeadLetterExchange, dlq, ""))
	}
	// A relay may not bind app.events to its alternate exchange, which would route
	// what it publishes to app.events.alternate past its topic permission.
	for _, p := range contracts.Producers() {
		refused(p.RelayUser, "binding app.events to app.events.alternate", func(ch *amqp091.Channel) error {
			return ch.ExchangeBind(contracts.Exchange, "#", contracts.AlternateExchange, false, nil)
		})
		refused(p.RelayUser, "binding app.events.unroutable to app.events", func(ch *amqp091.Channel) error {
			return ch.QueueBind(contracts.UnroutableQueue, "#", contracts.Exchange, false, nil)
		})
	}

	// What each needs, it may: a relay publishes its own events under its own
	// user_id, a consumer its copies through its own exchange.
	confirmed := func(user, what string, fn func(ch *amqp091.Channel) error) {
		t.Helper()
		ch := channel(user)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		if err := fn(ch); err != nil {
			t.Errorf("%s %s: %v", user, what, err)
			return
		}
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Errorf("%s %s: nacked", user, what)
			}
		case e := <-closed:
			t.Errorf("%s %s: channel closed: %v", user, what, e)
		case <-time.After(10 * time.Second):
			t.Errorf("%s %s: no confirm", user, what)
		}
	}
	confirmed("stock-relay", "publishing its answer as itself", publish(contracts.Exchange, contracts.EventStockReservationConfirmed, "stock-relay"))
	confirmed("order-relay", "publishing its event as itself", publish(contracts.Exchange, contracts.EventOrderPlaced, "order-relay"))
	confirmed("order", "publishing a copy to its own queue", publish(amqp.CopiesExchange(contracts.QueueOrder), contracts.QueueOrder, ""))

	refusedWith(amqp091.PreconditionFailed, "order-relay", "publishing with user_id stock-relay",
		publish(contracts.Exchange, contracts.EventOrderPlaced, "stock-relay"))
}

// TestBrokerDefinitionsLoad imports deploy/rabbitmq/definitions.json into a private
// RabbitMQ node, as docker-compose.yml's broker does at boot, and signs in as each of its
// users with the password the file gives it, its name: the file loads on this machine's
// RabbitMQ, its first line's comment included, and its password hashes are right.
func TestBrokerDefinitionsLoad(t *testing.T) {
	t.Parallel()
	file, err := filepath.Abs(definitionsJSON)
	if err != nil {
		t.Fatal(err)
	}
	node := testkit.StartRabbitNode(t)
	node.Ctl(t, "import_definitions", file)
	names := []string{"guest"}
	for _, u := range brokerUsers(t) {
		names = append(names, u.Name)
	}
	for _, name := range names {
		u, err := url.Parse(node.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(name, name)
		// The import runs in the background: the users appear within moments.
		deadline := time.Now().Add(30 * time.Second)
		for {
			conn, err := amqp091.Dial(u.String())
			if err == nil {
				_ = conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s cannot sign in with its password: %v", name, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestCCRoutedEventIsRefusedByItsConsumer: order-relay publishes under its own routing
// key with a CC header naming stock's answer. RabbitMQ before 4.0.3 does not check CC
// and BCC against the topic permission (RabbitMQ 4.0.3 and later refuse the publish),
// so on such a broker the message reaches order.events, bound to stock's answers; the
// consumer's check of rule 8 refuses it there, because its user_id, which the broker
// verifies, is order-relay's and not stock-relay's, whatever the routing keys.
func TestCCRoutedEventIsRefusedByItsConsumer(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	_, urls := testkit.NewVhostWithUsers(t, brokerUsers(t))
	order, ok := contracts.ConsumerNamed(contracts.ConsumerOrder)
	if !ok {
		t.Fatal("no consumer order")
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := amqp.Dial(dctx, urls["order"], amqp.EventTopology(amqp.ConsumerQueue(order, nil)), nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	relay, err := amqp091.Dial(urls["order-relay"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	ch, err := relay.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = ch.PublishWithContext(pctx, contracts.Exchange, contracts.EventOrderPlaced, false, false, amqp091.Publishing{
		Body: []byte(`{}`), UserId: "order-relay", Type: contracts.EventStockReservationConfirmed,
		Headers: amqp091.Table{"CC": []any{contracts.EventStockReservationConfirmed}},
	})
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	consumer, err := amqp091.Dial(urls["order"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close() })
	cch, err := consumer.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var d amqp091.Delivery
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got bool
		if d, got, err = cch.Get(order.Queue, true); err != nil {
			t.Fatal(err)
		}
		if got {
			break
		}
		select {
		case e := <-closed:
			t.Logf("the broker refused the CC publish (RabbitMQ 4.0.3 or later): %v", e)
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Log("the CC copy reached no queue of order (RabbitMQ 4.0.3 or later refuses it)")
			return
		}
	}
	t.Logf("this broker routed the CC copy to %s (routing key %q): it does not check CC", order.Queue, d.RoutingKey)
	publishers := inbox.Publishers{Exchange: contracts.Exchange, Users: map[string]string{}}
	for _, p := range contracts.Producers() {
		publishers.Users[p.Name] = p.RelayUser
	}
	err = publishers.Check(contracts.EventStockReservationConfirmed, amqp.OriginOf(order.Queue, d.Exchange, d.UserId, d.Headers))
	if err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("order's consumer accepts stock's answer sent by order-relay through CC: %v", err)
	}
}
