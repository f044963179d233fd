// Command testservers starts PostgreSQL and RabbitMQ (with its management API)
// in containers through testcontainers-go, for running the tests on a machine
// that has Docker but not the servers. It prints the variables that point the
// tests at them, as shell exports on stdout, and keeps the containers until it
// is interrupted (SIGINT or SIGTERM), then removes them; testcontainers' reaper
// removes them too if the command dies. Each container gets 3 minutes to start.
//
//	go run example.com/shop/testkit/cmd/testservers   # in one terminal
//	export TEST_DATABASE_URL=... TEST_AMQP_URL=... TEST_RABBITMQ_ADMIN_URL=...
//	make test                                          # in another
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testservers:", err)
		fmt.Fprintln(os.Stderr, "testservers: it needs a running Docker engine that can pull or has the images; "+
			"without one, start PostgreSQL and RabbitMQ yourself and set TEST_DATABASE_URL and TEST_AMQP_URL")
		os.Exit(1)
	}
}

// run starts both containers, prints their variables and waits for ctx to end.
func run(ctx context.Context) error {
	pg, pgURL, err := startPostgres(ctx)
	if pg != nil {
		defer terminate(pg)
	}
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	mq, amqpURL, adminURL, err := startRabbitMQ(ctx)
	if mq != nil {
		defer terminate(mq)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	fmt.Printf("export TEST_DATABASE_URL='%s'\nexport TEST_AMQP_URL='%s'\nexport TEST_RABBITMQ_ADMIN_URL='%s'\n",
		pgURL, amqpURL, adminURL)
	fmt.Fprintln(os.Stderr, "testservers: up; interrupt (Ctrl-C) to remove the containers")
	<-ctx.Done()
	return nil
}

func terminate(c testcontainers.Container) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Terminate(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testservers: remove container:", err)
	}
}

func startPostgres(ctx context.Context) (testcontainers.Container, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:17-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if c == nil { // a typed nil would pass run's check
		return nil, "", err
	}
	if err != nil {
		return c, "", err
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	return c, url, err
}

func startRabbitMQ(ctx context.Context) (testcontainers.Container, string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, "rabbitmq:4-management-alpine",
		testcontainers.WithExposedPorts("5672/tcp", "15672/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("5672/tcp"), wait.ForListeningPort("15672/tcp")),
	)
	if c == nil {
		return nil, "", "", err
	}
	if err != nil {
		return c, "", "", err
	}
	amqpEndpoint, err := c.PortEndpoint(ctx, "5672/tcp", "")
	if err != nil {
		return c, "", "", err
	}
	adminEndpoint, err := c.PortEndpoint(ctx, "15672/tcp", "")
	if err != nil {
		return c, "", "", err
	}
	return c, "amqp://guest:guest@" + amqpEndpoint + "/", "http://guest:guest@" + adminEndpoint, nil
}
