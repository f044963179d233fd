package migrate

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// Command is `<service> migrate`: it creates the service's database if it is
// missing and applies schema (Apply), logging each migration and the outcome as
// JSON on stderr with the service attribute <service>-migrate; running it again
// applies nothing. It reads, through getenv:
//
//	<envPrefix>DATABASE_URL  PostgreSQL URL of the service's database (default defaultURL)
//	LOG_LEVEL                debug, info, warn or error (default info)
//
// A failure is returned wrapped with the URL, its password masked.
func Command(service, envPrefix, defaultURL string, schema Schema, getenv func(string) string, stderr io.Writer) cli.Command {
	load := func(env *config.Env) commandConfig {
		return commandConfig{DatabaseURL: pg.URLFromEnv(env, envPrefix+"DATABASE_URL", defaultURL), LogLevel: logging.LevelFromEnv(env)}
	}
	return cli.Command{
		Name:    "migrate",
		Summary: "create the " + service + " database if missing and apply the embedded migrations",
		Env:     func(env *config.Env) { load(env) },
		Run: func(ctx context.Context, _ []string) error {
			cfg, err := config.Load(getenv, load)
			if err != nil {
				return err
			}
			logger := logging.New(stderr, cfg.LogLevel, service+"-migrate")
			if err := Apply(ctx, cfg.DatabaseURL, schema, logger); err != nil {
				return fmt.Errorf("migrate %s: %w", config.MaskURL(cfg.DatabaseURL), err)
			}
			return nil
		},
	}
}

// commandConfig is what Command reads.
type commandConfig struct {
	DatabaseURL string
	LogLevel    slog.Level
}
