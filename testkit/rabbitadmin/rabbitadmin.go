// Package rabbitadmin creates and deletes RabbitMQ virtual hosts for tests,
// the demo and the benchmarks, and closes named client connections for fault
// tests: through the broker's management HTTP API when it answers, else
// through rabbitmqctl on this machine.
package rabbitadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Time limits of one call to the broker.
const (
	probeTimeout = 2 * time.Second  // GET /api/overview when detecting the management API
	httpTimeout  = 30 * time.Second // one management API request
	ctlTimeout   = 2 * time.Minute  // one rabbitmqctl run (a batch of vhosts included)
)

// ManagementPort is the port Detect expects the management API on, on the
// host of the AMQP URL.
const ManagementPort = "15672"

// Via names the way an Admin talks to the broker.
const (
	ViaManagement  = "management API"
	ViaRabbitmqctl = "rabbitmqctl"
)

// Admin manages the virtual hosts of one broker on behalf of the user of its
// AMQP URL. It holds no connection and is safe for concurrent use.
type Admin struct {
	amqpURL    *url.URL
	user       string // gets every right on the vhosts Admin creates
	management string // management API base URL ("http://user:pass@host:port"), "" for rabbitmqctl
}

// New returns an Admin for the broker of amqpURL (amqp:// or amqps://) that
// uses the management API at managementURL (scheme, credentials and host,
// such as "http://guest:guest@127.0.0.1:15672"), or rabbitmqctl when
// managementURL is "". It returns an error when amqpURL does not parse.
func New(amqpURL, managementURL string) (*Admin, error) {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("parse AMQP URL: %w", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, fmt.Errorf("AMQP URL %q: scheme must be amqp or amqps", u.Redacted())
	}
	user := "guest" // what the AMQP client uses when the URL names nobody
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	return &Admin{amqpURL: u, user: user, management: strings.TrimRight(managementURL, "/")}, nil
}

// Detect returns an Admin for the broker of amqpURL. It uses the management
// API on the same host, port 15672, with the URL's credentials (guest:guest
// when it has none) when GET /api/overview answers 200 within 2 s, and
// rabbitmqctl otherwise. It returns an error only when amqpURL does not parse.
func Detect(ctx context.Context, amqpURL string) (*Admin, error) {
	a, err := New(amqpURL, "")
	if err != nil {
		return nil, err
	}
	creds := a.amqpURL.User
	if creds == nil {
		creds = url.UserPassword("guest", "guest")
	}
	m := (&url.URL{Scheme: "http", User: creds, Host: net.JoinHostPort(a.amqpURL.Hostname(), ManagementPort)}).String()
	if managementAnswers(ctx, m) {
		a.management = m
	}
	return a, nil
}

// Management returns the base URL of the management API the Admin uses, ""
// when it uses rabbitmqctl.
func (a *Admin) Management() string { return a.management }

// Via returns ViaManagement or ViaRabbitmqctl.
func (a *Admin) Via() string {
	if a.management != "" {
		return ViaManagement
	}
	return ViaRabbitmqctl
}

// Check returns nil when the Admin can reach the broker: the management API
// was found, or `rabbitmqctl ping` succeeds (which takes a second or two).
// Otherwise it returns the rabbitmqctl error. (`rabbitmqctl status`, which
// walks the node's supervisors, once failed here with exit 69 while other
// tests changed vhosts.)
func (a *Admin) Check(ctx context.Context) error {
	if a.management != "" {
		return nil
	}
	return rabbitmqctl(ctx, "ping")
}

// VhostURL returns the AMQP URL of a with its virtual host set to name (path
// escaped, so "a/b" opens vhost "a/b").
func (a *Admin) VhostURL(name string) string {
	u := *a.amqpURL
	u.Path = "/" + name
	u.RawPath = "/" + url.PathEscape(name)
	return u.String()
}

// AddVhost creates the virtual host name (an existing one is kept) and grants
// the AMQP URL's user configure, write and read rights on everything in it.
// It returns the failing request's status and body, or rabbitmqctl's output.
func (a *Admin) AddVhost(ctx context.Context, name string) error {
	if a.management != "" {
		if err := a.call(ctx, http.MethodPut, "/api/vhosts/"+url.PathEscape(name), ""); err != nil {
			return fmt.Errorf("add vhost %s: %w", name, err)
		}
		if err := a.call(ctx, http.MethodPut, "/api/permissions/"+url.PathEscape(name)+"/"+url.PathEscape(a.user),
			`{"configure":".*","write":".*","read":".*"}`); err != nil {
			return fmt.Errorf("add vhost %s: %w", name, err)
		}
		return nil
	}
	if err := rabbitmqctl(ctx, "add_vhost", name); err != nil {
		return fmt.Errorf("add vhost %s: %w", name, err)
	}
	if err := rabbitmqctl(ctx, "set_permissions", "-p", name, a.user, ".*", ".*", ".*"); err != nil {
		return fmt.Errorf("add vhost %s: %w", name, err)
	}
	return nil
}

// DeleteVhost deletes the virtual host name with everything in it. A vhost
// that does not exist is not an error.
func (a *Admin) DeleteVhost(ctx context.Context, name string) error {
	if a.management != "" {
		if err := a.call(ctx, http.MethodDelete, "/api/vhosts/"+url.PathEscape(name), ""); err != nil {
			return fmt.Errorf("delete vhost %s: %w", name, err)
		}
		return nil
	}
	if err := rabbitmqctl(ctx, "delete_vhost", name); err != nil && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("delete vhost %s: %w", name, err)
	}
	return nil
}

// AddVhosts does AddVhost for every name. Without the management API it does
// them all in one `rabbitmqctl eval` (each rabbitmqctl run costs seconds),
// which fails as a whole.
func (a *Admin) AddVhosts(ctx context.Context, names []string) error {
	if a.management != "" || len(names) < 2 {
		for _, n := range names {
			if err := a.AddVhost(ctx, n); err != nil {
				return err
			}
		}
		return nil
	}
	code := fmt.Sprintf(`lists:foreach(fun(V) -> ok = rabbit_vhost:add(V, %[1]s), `+
		`ok = rabbit_auth_backend_internal:set_permissions(%[1]s, V, <<".*">>, <<".*">>, <<".*">>, %[1]s) end, %[2]s), ok.`,
		erlangBinary(a.user), erlangBinaries(names))
	if err := rabbitmqctl(ctx, "eval", code); err != nil {
		return fmt.Errorf("add %d vhosts: %w", len(names), err)
	}
	return nil
}

// DeleteVhosts does DeleteVhost for every name and returns the errors joined.
// Without the management API it does them all in one `rabbitmqctl eval`.
func (a *Admin) DeleteVhosts(ctx context.Context, names []string) error {
	if a.management != "" || len(names) < 2 {
		var errs []error
		for _, n := range names {
			errs = append(errs, a.DeleteVhost(ctx, n))
		}
		return errors.Join(errs...)
	}
	code := fmt.Sprintf(`lists:foreach(fun(V) -> rabbit_vhost:delete(V, %s) end, %s), ok.`,
		erlangBinary(a.user), erlangBinaries(names))
	if err := rabbitmqctl(ctx, "eval", code); err != nil {
		return fmt.Errorf("delete %d vhosts: %w", len(names), err)
	}
	return nil
}

// CloseConnections makes the broker close every client connection whose
// connection_name client property is name (amqp.Options.Name sets it), as
// an operator or a failing node would, with reason sent to the client in
// connection.close. It returns how many it closed, 0 when none carries that
// name yet (the management API lists a new connection after a few seconds;
// rabbitmqctl sees it at once but only on the local node). Errors are the
// failing request's status and body, or rabbitmqctl's output.
func (a *Admin) CloseConnections(ctx context.Context, name, reason string) (int, error) {
	if a.management == "" {
		// A connection still in its handshake has no client properties yet (the atom none).
		code := fmt.Sprintf(`Ps = [proplists:get_value(pid, I) || I <- rabbit_networking:connection_info_all([pid, client_properties]), `+
			`CP <- [proplists:get_value(client_properties, I, [])], is_list(CP), `+
			`lists:keyfind(<<"connection_name">>, 1, CP) =:= {<<"connection_name">>, longstr, %s}], `+
			`[rabbit_networking:close_connection(P, binary_to_list(%s)) || P <- Ps], length(Ps).`, erlangBinary(name), erlangBinary(reason))
		out, err := rabbitmqctlOutput(ctx, "eval", code)
		if err != nil {
			return 0, fmt.Errorf("close connection %s: %w", name, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			return 0, fmt.Errorf("close connection %s: rabbitmqctl printed %q", name, out)
		}
		return n, nil
	}
	var conns []struct {
		Name             string `json:"name"`
		ClientProperties struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	body, err := a.get(ctx, "/api/connections?columns=name,client_properties.connection_name")
	if err != nil {
		return 0, fmt.Errorf("close connection %s: %w", name, err)
	}
	if err := json.Unmarshal(body, &conns); err != nil {
		return 0, fmt.Errorf("close connection %s: decode connections: %w", name, err)
	}
	n := 0
	for _, c := range conns {
		if c.ClientProperties.ConnectionName != name {
			continue
		}
		if err := a.callHeader(ctx, http.MethodDelete, "/api/connections/"+url.PathEscape(c.Name), "", reason); err != nil {
			return n, fmt.Errorf("close connection %s: %w", name, err)
		}
		n++
	}
	return n, nil
}

// get sends one management API GET and returns the body of a 200.
func (a *Admin) get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, httpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.management+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.512s", path, resp.Status, body)
	}
	return body, nil
}

// call sends one management API request; a DELETE answered 404 succeeds.
func (a *Admin) call(ctx context.Context, method, path, body string) error {
	return a.callHeader(ctx, method, path, body, "")
}

// callHeader is call with an X-Reason header when reason is not "" (the
// management API passes it on when it closes a connection).
func (a *Admin) callHeader(ctx context.Context, method, path, body, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, httpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.management+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if reason != "" {
		req.Header.Set("X-Reason", reason)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && !(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}

func managementAnswers(ctx context.Context, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/overview", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func rabbitmqctl(ctx context.Context, args ...string) error {
	_, err := rabbitmqctlOutput(ctx, args...)
	return err
}

// rabbitmqctlOutput runs rabbitmqctl -q with args, bounded by ctlTimeout,
// and returns what it printed.
func rabbitmqctlOutput(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ctlTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// erlangBinary writes s as an Erlang binary of its bytes, <<97,98>> for
// "ab", which needs no quoting whatever s holds.
func erlangBinary(s string) string {
	bytes := make([]string, len(s))
	for i := range len(s) {
		bytes[i] = strconv.Itoa(int(s[i]))
	}
	return "<<" + strings.Join(bytes, ",") + ">>"
}

// erlangBinaries writes names as an Erlang list of binaries.
func erlangBinaries(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = erlangBinary(n)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// User is a broker user with its permissions on one virtual host: configure, write
// and read are the regular expressions of RabbitMQ's permission model, Topic its
// topic permissions (none: every routing key).
type User struct {
	Name, Password         string
	Configure, Write, Read string
	Topic                  []TopicPermission
}

// TopicPermission limits the routing keys a user may publish with (Write) and
// bind with (Read) on the topic exchange Exchange: regular expressions.
type TopicPermission struct {
	Exchange, Write, Read string
}

// AddUsers creates each user that is missing (users are node-wide; an existing one
// keeps its tags), sets its password, and sets its permissions and topic
// permissions on the virtual host vhost. Without the management API it does them
// all in one `rabbitmqctl eval`.
func (a *Admin) AddUsers(ctx context.Context, vhost string, users []User) error {
	if a.management != "" {
		for _, u := range users {
			body := fmt.Sprintf(`{"password":%s,"tags":""}`, strconv.Quote(u.Password))
			if err := a.call(ctx, http.MethodPut, "/api/users/"+url.PathEscape(u.Name), body); err != nil {
				return fmt.Errorf("add user %s: %w", u.Name, err)
			}
			body = fmt.Sprintf(`{"configure":%s,"write":%s,"read":%s}`,
				strconv.Quote(u.Configure), strconv.Quote(u.Write), strconv.Quote(u.Read))
			if err := a.call(ctx, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(u.Name), body); err != nil {
				return fmt.Errorf("set permissions of %s: %w", u.Name, err)
			}
			for _, tp := range u.Topic {
				body = fmt.Sprintf(`{"exchange":%s,"write":%s,"read":%s}`,
					strconv.Quote(tp.Exchange), strconv.Quote(tp.Write), strconv.Quote(tp.Read))
				if err := a.call(ctx, http.MethodPut, "/api/topic-permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(u.Name), body); err != nil {
					return fmt.Errorf("set topic permissions of %s on %s: %w", u.Name, tp.Exchange, err)
				}
			}
		}
		return nil
	}
	tuples := make([]string, len(users))
	for i, u := range users {
		topics := make([]string, len(u.Topic))
		for j, tp := range u.Topic {
			topics[j] = "{" + strings.Join([]string{erlangBinary(tp.Exchange), erlangBinary(tp.Write), erlangBinary(tp.Read)}, ", ") + "}"
		}
		tuples[i] = "{" + strings.Join([]string{erlangBinary(u.Name), erlangBinary(u.Password),
			erlangBinary(u.Configure), erlangBinary(u.Write), erlangBinary(u.Read), "[" + strings.Join(topics, ", ") + "]"}, ", ") + "}"
	}
	acting := erlangBinary(a.user)
	code := fmt.Sprintf(`lists:foreach(fun({U, P, C, W, R, T}) -> `+
		`case rabbit_auth_backend_internal:lookup_user(U) of {ok, _} -> ok; `+
		`_ -> catch rabbit_auth_backend_internal:add_user(U, P, %[1]s) end, `+
		`ok = rabbit_auth_backend_internal:change_password(U, P, %[1]s), `+
		`ok = rabbit_auth_backend_internal:set_permissions(U, %[2]s, C, W, R, %[1]s), `+
		`lists:foreach(fun({X, TW, TR}) -> ok = rabbit_auth_backend_internal:set_topic_permissions(U, %[2]s, X, TW, TR, %[1]s) end, T) `+
		`end, [%[3]s]), ok.`,
		acting, erlangBinary(vhost), strings.Join(tuples, ", "))
	if err := rabbitmqctl(ctx, "eval", code); err != nil {
		return fmt.Errorf("add %d users to %s: %w", len(users), vhost, err)
	}
	return nil
}

// UserURL returns the AMQP URL of a with the virtual host vhost and the credentials
// of user.
func (a *Admin) UserURL(vhost string, user User) string {
	u, _ := url.Parse(a.VhostURL(vhost))
	u.User = url.UserPassword(user.Name, user.Password)
	return u.String()
}
