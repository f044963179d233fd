package testkit

import (
	"context"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Containers started here live as long as the test binary; testcontainers'
// reaper removes them when it exits.

func startPostgresContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:17-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func startRabbitMQContainer() (amqpURL, adminURL string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, "rabbitmq:4-management-alpine",
		testcontainers.WithExposedPorts("5672/tcp", "15672/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("5672/tcp"), wait.ForListeningPort("15672/tcp")),
	)
	if err != nil {
		return "", "", err
	}
	amqpEndpoint, err := c.PortEndpoint(ctx, "5672/tcp", "")
	if err != nil {
		return "", "", err
	}
	adminEndpoint, err := c.PortEndpoint(ctx, "15672/tcp", "")
	if err != nil {
		return "", "", err
	}
	return "amqp://guest:guest@" + amqpEndpoint + "/", "http://guest:guest@" + adminEndpoint, nil
}
