package system

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"example.com/shop/contracts"
	"example.com/shop/testkit/rabbitadmin"
)

// BrokerUsers reads a RabbitMQ definitions file (deploy/rabbitmq/definitions.json)
// and returns its users other than guest with their permissions and topic
// permissions on the "/" vhost,
// to be given on another vhost. Their password is their name (local servers only).
// It fails when the file is unreadable or its users are not exactly those of the
// registry: "<producer>-relay" for each producer (RelayName), one per consumer
// (order-relay, stock-relay, stock, shipping and order), and auditor.
func BrokerUsers(path string) ([]rabbitadmin.User, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var defs struct {
		Permissions []struct {
			User, Vhost, Configure, Write, Read string
		}
		TopicPermissions []struct {
			User, Vhost, Exchange, Write, Read string
		} `json:"topic_permissions"`
	}
	if err := json.Unmarshal(raw, &defs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	users, got := []string{"auditor"}, []string(nil)
	var out []rabbitadmin.User
	for _, p := range defs.Permissions {
		if p.User != "guest" && p.Vhost == "/" {
			u := rabbitadmin.User{Name: p.User, Password: p.User, Configure: p.Configure, Write: p.Write, Read: p.Read}
			for _, tp := range defs.TopicPermissions {
				if tp.User == p.User && tp.Vhost == "/" {
					u.Topic = append(u.Topic, rabbitadmin.TopicPermission{Exchange: tp.Exchange, Write: tp.Write, Read: tp.Read})
				}
			}
			out = append(out, u)
			got = append(got, p.User)
		}
	}
	for _, p := range contracts.Producers() {
		users = append(users, RelayName(p.Name))
	}
	for _, c := range contracts.Consumers() {
		users = append(users, c.Name)
	}
	slices.Sort(users)
	slices.Sort(got)
	if !slices.Equal(got, users) {
		return nil, fmt.Errorf("%s: users %v besides guest, want the registry's %v", path, got, users)
	}
	return out, nil
}
