package pg_test

import (
	"strings"
	"testing"

	"example.com/shop/platform/config"
	"example.com/shop/platform/pg"
)

func TestURLFromEnv(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"":                                  true, // the default
		"postgres://u:secret@h:5432/db":     true,
		"host=h user=u dbname=db":           true,
		"::bad":                             false,
		"postgres://u:secret@h:notaport/db": false,
	} {
		env := config.NewEnv(func(string) string { return raw })
		got := pg.URLFromEnv(env, "X_DATABASE_URL", "postgres://localhost/db")
		err := env.Err()
		if (err == nil) != ok {
			t.Errorf("%q: err = %v, want ok = %v", raw, err, ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "X_DATABASE_URL") || strings.Contains(err.Error(), "secret")) {
			t.Errorf("%q: err = %v, want it to name the variable and hide the password", raw, err)
		}
		if raw != "" && got != raw {
			t.Errorf("%q: got %q", raw, got)
		}
	}
}
