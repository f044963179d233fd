package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/testkit/rabbitadmin"
)

// The deployment's roles and broker users, relative to the repository root
// (where `make demo` runs).
const (
	rolesSQL        = "deploy/postgres/roles.sql"
	definitionsJSON = "deploy/rabbitmq/definitions.json"
)

// servers are the PostgreSQL and RabbitMQ the demo runs on.
type servers struct {
	dbURLs    map[string]string // the demo database of each service, by name, as its owner
	amqpURL   string            // the demo vhost (or the configured one), as AMQP_URL's user
	userURLs  map[string]string // the demo vhost as each relay and consumer, by user name; nil without one
	vhostNote string            // how the vhost was obtained, for the user
}

// demoDatabases returns the URL of each service's demo database, by service name:
// demo_<its database> (contracts.Service.Database) on the server of its URL in
// dbServers. It fails on a service of the registry dbServers has no valid URL for.
func demoDatabases(dbServers map[string]string) (map[string]string, error) {
	urls := map[string]string{}
	for _, svc := range contracts.Services() {
		u, err := databaseURL(dbServers[svc.Name], "demo_"+svc.Database)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dbVar(svc.Name), err)
		}
		urls[svc.Name] = u
	}
	return urls, nil
}

// databaseURL returns u with its database replaced by name.
func databaseURL(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return "", fmt.Errorf("%q is not a postgres:// URL", u)
	}
	p.Path = "/" + name
	return p.String(), nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the configured server"
	}
	return u.Host
}

// pingPostgres connects to the server of dbURL (its "postgres" database).
func pingPostgres(ctx context.Context, dbURL string) error {
	admin, err := databaseURL(dbURL, "postgres")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func pingRabbitMQ(amqpURL string) error {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// ensureServers checks that PostgreSQL (for each database URL) and RabbitMQ
// answer. When one does not and `docker compose` is available it runs
// `docker compose up -d postgres rabbitmq` and waits up to 90 s for both;
// otherwise it returns an error that says what to start.
func ensureServers(ctx context.Context, out io.Writer, dbURLs []string, amqpURL string) error {
	problems := func() []string {
		var p []string
		seen := map[string]bool{}
		for _, u := range dbURLs {
			if h := hostOf(u); !seen[h] {
				seen[h] = true
				if err := pingPostgres(ctx, u); err != nil {
					p = append(p, fmt.Sprintf("PostgreSQL at %s: %v", h, err))
				}
			}
		}
		if err := pingRabbitMQ(amqpURL); err != nil {
			p = append(p, fmt.Sprintf("RabbitMQ at %s: %v", hostOf(amqpURL), err))
		}
		return p
	}
	p := problems()
	if len(p) == 0 {
		return nil
	}
	for _, line := range p {
		fmt.Fprintf(out, "      %s\n", line)
	}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() != nil {
		return fmt.Errorf("%s\nstart PostgreSQL and RabbitMQ first (for example `docker compose up -d postgres rabbitmq`),\n"+
			"or point each service's <NAME>_DATABASE_URL (ORDER_DATABASE_URL, ...) and AMQP_URL at running servers",
			strings.Join(p, "\n"))
	}
	fmt.Fprintln(out, "  running `docker compose up -d postgres rabbitmq` ...")
	cmd := exec.CommandContext(ctx, "docker", "compose", "up", "-d", "postgres", "rabbitmq")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker compose up -d postgres rabbitmq: %w\n%s", err, b)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if p = problems(); len(p) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not answering 90 s after docker compose up:\n%s", strings.Join(p, "\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// demoLockKey is the session-level advisory lock a running demo holds on the
// PostgreSQL server of its order database: any constant no other lock uses.
const demoLockKey = 7_304_215_002

// claimServer takes the advisory lock key (the demo's: demoLockKey) on the
// server of dbURL and holds it in a session of its own until release or the
// demo's death, so that a second demo refuses to start instead of dropping the
// databases under the first one (DROP DATABASE ... WITH (FORCE) would end its
// sessions). release unlocks the key, waiting at most 5 s for the server, and
// closes the session: closing alone would leave the key held until the server
// notices, and a claim right after could fail. It returns an error when another
// session holds the lock or the server does not answer.
func claimServer(ctx context.Context, dbURL string, key int64) (release func(), err error) {
	admin, err := databaseURL(dbURL, "postgres")
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("demo lock: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil || !got {
		conn.Close(context.WithoutCancel(ctx))
		if err == nil {
			err = fmt.Errorf("another demo is running against the PostgreSQL server of %s (it uses the same demo_* databases and vhost): stop it first", hostOf(dbURL))
		}
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
		conn.Close(ctx)
	}, nil
}

// recreateDatabase drops the database of dbURL (closing its connections);
// `migrate` creates it again.
func recreateDatabase(ctx context.Context, dbURL string) error {
	p, err := url.Parse(dbURL)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(p.Path, "/")
	admin, err := databaseURL(dbURL, "postgres")
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// freshVhost deletes and re-creates vhost on the broker of amqpURL, grants
// the URL's user every right on it, gives users their permissions on it, and
// returns the AMQP URL that opens it (as amqpURL's user), the URL of each of
// users by name, and a note for the user. It uses the management HTTP API
// (port 15672, same credentials) when it answers, else rabbitmqctl on this
// machine. When neither works it returns amqpURL unchanged, no user URLs and a
// note: the demo then runs in the configured vhost as its user, and purges the
// queues it reads so that the counts start at zero.
func freshVhost(ctx context.Context, amqpURL, vhost string, users []rabbitadmin.User) (string, map[string]string, string, error) {
	admin, err := rabbitadmin.Detect(ctx, amqpURL)
	if err != nil {
		return "", nil, "", fmt.Errorf("AMQP_URL: %w", err)
	}
	if admin.Check(ctx) != nil {
		return amqpURL, nil, "no management API or rabbitmqctl to make a fresh vhost and users: using AMQP_URL's vhost and user as they are", nil
	}
	if err := admin.DeleteVhost(ctx, vhost); err != nil {
		return "", nil, "", err
	}
	if err := admin.AddVhost(ctx, vhost); err != nil {
		return "", nil, "", err
	}
	if err := admin.AddUsers(ctx, vhost, users); err != nil {
		return "", nil, "", err
	}
	urls := make(map[string]string, len(users))
	for _, u := range users {
		urls[u.Name] = admin.UserURL(vhost, u)
	}
	return admin.VhostURL(vhost), urls, fmt.Sprintf("fresh vhost %q with the users of %s (made with %s)", vhost, definitionsJSON, admin.Via()), nil
}

// applyRoles runs the re-runnable roles file on the server of each database URL
// (its "postgres" database), as the URL's user, a superuser.
func applyRoles(ctx context.Context, dbURLs ...string) error {
	sql, err := os.ReadFile(rolesSQL)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, u := range dbURLs {
		admin, err := databaseURL(u, "postgres")
		if err != nil {
			return err
		}
		if seen[hostOf(u)] {
			continue
		}
		seen[hostOf(u)] = true
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return fmt.Errorf("apply %s: %w", rolesSQL, err)
		}
		_, err = conn.Exec(ctx, string(sql))
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("apply %s on %s: %w", rolesSQL, hostOf(u), err)
		}
	}
	return nil
}

// readRoles returns the roles the file at path (rolesSQL) creates: every quoted
// lower-case name in it.
func readRoles(path string) (map[string]bool, error) {
	sql, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roles := map[string]bool{}
	for _, m := range regexp.MustCompile(`'([a-z0-9_]+)'`).FindAllStringSubmatch(string(sql), -1) {
		roles[m[1]] = true
	}
	return roles, nil
}

// urlAs returns dbURL with its user set to role and no password (local trust
// authentication; a deployment sets the roles' passwords).
func urlAs(dbURL, role string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.User = url.User(role)
	return u.String()
}

// purgeQueues empties the named queues that exist, for a run in a shared vhost.
func purgeQueues(amqpURL string, queues ...string) error {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if _, err := ch.QueuePurge(q, false); err != nil {
			var aerr *amqp091.Error
			if !errors.As(err, &aerr) || aerr.Code != amqp091.NotFound {
				errs = append(errs, fmt.Errorf("purge %s: %w", q, err))
			}
			continue
		}
		_ = ch.Close()
	}
	return errors.Join(errs...)
}
