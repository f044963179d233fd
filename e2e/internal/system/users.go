package system

import (
	"encoding/json"
	"fmt"
	"os"

	"example.com/shop/platform/testkit/rabbitadmin"
)

// BrokerUsers reads a RabbitMQ definitions file (deploy/rabbitmq/definitions.json)
// and returns its users other than guest with their permissions on the "/" vhost,
// to be given on another vhost. Their password is their name (local servers only).
// It fails when the file is unreadable or does not hold exactly the three users
// order-relay, stock and shipping.
func BrokerUsers(path string) ([]rabbitadmin.User, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var defs struct {
		Permissions []struct {
			User, Vhost, Configure, Write, Read string
		}
	}
	if err := json.Unmarshal(raw, &defs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var users []rabbitadmin.User
	for _, p := range defs.Permissions {
		if p.User != "guest" && p.Vhost == "/" {
			users = append(users, rabbitadmin.User{Name: p.User, Password: p.User,
				Configure: p.Configure, Write: p.Write, Read: p.Read})
		}
	}
	if len(users) != 3 {
		return nil, fmt.Errorf("%s: %d users besides guest, want order-relay, stock and shipping", path, len(users))
	}
	return users, nil
}
