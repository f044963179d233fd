package amqp

import (
	"strings"
	"testing"

	"example.com/shop/platform/config"
)

func TestURLFromEnv(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"":                             true, // the default
		"amqp://u:secret@h:5672/vhost": true,
		"amqps://h/":                   true,
		"http://u:secret@h/":           false,
		"amqp://u:secret@h:%zz/":       false,
		"::bad":                        false,
	} {
		env := config.NewEnv(func(string) string { return raw })
		URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL)
		err := env.Err()
		if (err == nil) != ok {
			t.Errorf("%q: err = %v, want ok = %v", raw, err, ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "AMQP_URL") || strings.Contains(err.Error(), "secret")) {
			t.Errorf("%q: err = %v, want it to name the variable and hide the password", raw, err)
		}
	}
}
