package testkit

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func findRabbitMQ() (amqpURL, adminURL string, err error) {
	amqpURL = getenvOr("TEST_AMQP_URL", defaultAMQPURL)
	conn, dialErr := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if dialErr == nil {
		_ = conn.Close()
		return amqpURL, managementURL(amqpURL), nil
	}
	cAMQP, cAdmin, cErr := startRabbitMQContainer()
	if cErr != nil {
		return "", "", fmt.Errorf("%s does not answer (%v) and no container could be started (%v)", hostOf(amqpURL), dialErr, cErr)
	}
	return cAMQP, cAdmin, nil
}

// managementURL guesses the management API of a broker (port 15672, same
// credentials) and returns it when it answers, "" otherwise.
func managementURL(amqpURL string) string {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return ""
	}
	admin := &url.URL{Scheme: "http", User: u.User, Host: net.JoinHostPort(u.Hostname(), "15672")}
	c, err := net.DialTimeout("tcp", admin.Host, time.Second)
	if err != nil {
		return ""
	}
	c.Close()
	return admin.String()
}

// NewVhost creates a fresh virtual host on the test broker, grants the
// broker URL's user every right on it, deletes it when the test ends, and
// returns the AMQP URL that opens it. It uses the management HTTP API when
// the broker has one, else rabbitmqctl on this machine.
func NewVhost(t testing.TB) string {
	t.Helper()
	base := AMQPURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testkit: parse AMQP URL: %v", err)
	}
	vhost := "test-" + randomHex(t, 6)
	user := u.User.Username()

	if err := addVhost(found.mqAdmin, vhost, user); err != nil {
		t.Fatalf("testkit: create vhost %s: %v", vhost, err)
	}
	t.Cleanup(func() {
		if err := deleteVhost(found.mqAdmin, vhost); err != nil {
			t.Errorf("testkit: delete vhost %s: %v", vhost, err)
		}
	})
	u.Path = "/" + vhost
	u.RawPath = "/" + url.PathEscape(vhost)
	return u.String()
}

func addVhost(admin, vhost, user string) error {
	if admin != "" {
		if err := adminCall(admin, http.MethodPut, "/api/vhosts/"+url.PathEscape(vhost), ""); err != nil {
			return err
		}
		return adminCall(admin, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(user),
			`{"configure":".*","write":".*","read":".*"}`)
	}
	if err := rabbitmqctl("add_vhost", vhost); err != nil {
		return err
	}
	return rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
}

func deleteVhost(admin, vhost string) error {
	if admin != "" {
		return adminCall(admin, http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), "")
	}
	return rabbitmqctl("delete_vhost", vhost)
}

func adminCall(admin, method, path, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, admin+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}

func rabbitmqctl(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %v: %s (no management API answered either)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured broker"
	}
	return u.Host
}
