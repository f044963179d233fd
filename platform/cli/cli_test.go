package cli_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
)

// program is a binary with a command of flags and environment, one of raw arguments,
// and one taking arguments; ran records what ran.
func program(ran *[]string) cli.Program {
	var horizon time.Duration
	return cli.Program{
		Name:    "tool",
		Summary: "does things",
		Commands: []cli.Command{{
			Name:    "run",
			Summary: "run the thing",
			Env: func(env *config.Env) {
				env.String("APP_DATABASE_URL", "postgres://app:pw@localhost/app")
				env.PositiveInt("APP_WORKERS", 8)
			},
			Run: func(context.Context, []string) error { *ran = append(*ran, "run"); return nil },
		}, {
			Name:    "purge",
			Summary: "purge old rows",
			Flags: func(fs *flag.FlagSet) {
				fs.DurationVar(&horizon, "older-than", 0, "delete rows older than this `duration`")
			},
			Run: func(context.Context, []string) error {
				*ran = append(*ran, "purge "+horizon.String())
				return nil
			},
		}, {
			Name: "drop", Args: "ID...", Summary: "drop rows",
			Run: func(_ context.Context, args []string) error {
				*ran = append(*ran, "drop "+strings.Join(args, ","))
				return nil
			},
		}, {
			Name: "raw", Args: "SUB ...", Summary: "parses its own", Raw: true,
			Run: func(_ context.Context, args []string) error {
				*ran = append(*ran, "raw "+strings.Join(args, ","))
				return nil
			},
		}},
	}
}

func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"tool: does things", "run", "run the thing", "purge", "tool help <command>"}},
		{[]string{"-h"}, []string{"commands:"}},
		{[]string{"--help"}, []string{"commands:"}},
		{[]string{"help", "run"}, []string{"usage: tool run\n", "APP_DATABASE_URL", "postgres://app:pw@localhost/app", "APP_WORKERS", "8"}},
		{[]string{"run", "--help"}, []string{"usage: tool run\n", "APP_WORKERS"}},
		{[]string{"run", "-h"}, []string{"usage: tool run\n"}},
		{[]string{"run", "help"}, []string{"usage: tool run\n"}},
		{[]string{"purge", "--help"}, []string{"usage: tool purge [flags]", "--older-than duration", "delete rows older than this duration"}},
		{[]string{"drop", "-h"}, []string{"usage: tool drop ID..."}},
		{[]string{"raw", "help"}, []string{"usage: tool raw SUB ..."}},
		{[]string{"raw", "--help"}, []string{"usage: tool raw SUB ..."}},
		{[]string{"--version"}, []string{"tool ", "go1."}},
		{[]string{"purge", "--version"}, []string{"tool ", "go1."}},
		{[]string{"raw", "-version"}, []string{"tool ", "go1."}},
	} {
		var ran []string
		var out bytes.Buffer
		if err := program(&ran).Run(context.Background(), append([]string{"tool"}, tt.args...), &out); err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
		for _, want := range tt.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v printed %q, want it to contain %q", tt.args, out.String(), want)
			}
		}
		if len(ran) > 0 {
			t.Errorf("%v ran %v", tt.args, ran)
		}
	}
}

func TestCommandsRun(t *testing.T) {
	t.Parallel()
	var ran []string
	p := program(&ran)
	for _, args := range [][]string{{"run"}, {"purge", "--older-than", "2h"}, {"purge", "-older-than=1m"}, {"drop", "a", "b"}, {"raw", "x", "--y"}} {
		if err := p.Run(context.Background(), append([]string{"tool"}, args...), &bytes.Buffer{}); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	if got := strings.Join(ran, ";"); got != "run;purge 2h0m0s;purge 1m0s;drop a,b;raw x,--y" {
		t.Errorf("ran %s", got)
	}
}

// The help of a raw command's subcommand is the command's own: "help raw sub"
// and "raw help sub" run it as "raw sub --help".
func TestRawSubcommandHelpGoesToTheCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help", "raw", "sub"}, {"raw", "help", "sub"}, {"raw", "--help", "sub"}} {
		var ran []string
		if err := program(&ran).Run(context.Background(), append([]string{"tool"}, args...), &bytes.Buffer{}); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if got := strings.Join(ran, ";"); got != "raw sub,--help" {
			t.Errorf("%v ran %q, want raw sub,--help", args, got)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
		help string
	}{
		{nil, "no command given", ""},
		{[]string{"dance"}, `unknown command "dance"`, ""},
		{[]string{"help", "dance"}, `unknown command "dance"`, ""},
		{[]string{"run", "extra"}, `run: unexpected argument "extra"`, "run"},
		{[]string{"purge", "--older-than", "soon"}, "invalid value", "purge"},
		{[]string{"purge", "--sooner"}, "flag provided but not defined: -sooner", "purge"},
	} {
		var ran []string
		var out bytes.Buffer
		err := program(&ran).Run(context.Background(), append([]string{"tool"}, tt.args...), &out)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) || ue.Help != tt.help {
			t.Errorf("%v: err = %#v, want a *UsageError of %q containing %q", tt.args, err, tt.help, tt.want)
		}
		if out.Len() > 0 || len(ran) > 0 {
			t.Errorf("%v printed %q and ran %v", tt.args, out.String(), ran)
		}
	}
}

// TestExit prints an error once, with where to find the usage for a usage error, and
// maps it to the exit status.
func TestExit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err    error
		status int
		want   string
	}{
		{nil, 0, ""},
		{errors.New("database down"), 1, "tool: database down\n"},
		{cli.Usagef("purge", "purge: bad"), 2, "tool: purge: bad (see tool help purge)\n"},
		{cli.Usagef("", "no command given"), 2, "tool: no command given (see tool help)\n"},
	} {
		var stderr bytes.Buffer
		if got := cli.Exit(&stderr, "tool", tt.err); got != tt.status || stderr.String() != tt.want {
			t.Errorf("Exit(%v) = %d, %q; want %d, %q", tt.err, got, stderr.String(), tt.status, tt.want)
		}
	}
}
