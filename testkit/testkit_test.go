package testkit_test

import (
	"context"
	"os"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

func TestNewDatabaseIsFreshAndMigrated(t *testing.T) {
	t.Parallel()
	fsys := migrate.Schema{{Name: "widget", FS: os.DirFS("../platform/migrate/testdata/v1")}}
	a, urlA := testkit.NewDatabase(t, fsys)
	b, urlB := testkit.NewDatabase(t, fsys)
	if urlA == urlB {
		t.Fatal("two databases share a URL")
	}
	ctx := context.Background()
	if _, err := a.Exec(ctx, `INSERT INTO widget (id, name) VALUES (1, 'a')`); err != nil {
		t.Fatalf("migrated table missing: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM widget`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d rows of the first", n)
	}
}

func TestNewVhostIsUsable(t *testing.T) {
	t.Parallel()
	url := testkit.NewVhost(t)
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	defer conn.Close()
	if conn.Config.Vhost == "/" {
		t.Fatal("connected to the default vhost")
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", false, true, false, false, nil); err != nil {
		t.Fatalf("declare in vhost: %v", err)
	}
}
