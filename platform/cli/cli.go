// Package cli gives every binary one command-line shape: `<bin> <command> [flags]
// [args]`, where help, -h and --help, at the top or on a command, print the usage, the
// flags and the environment variables read with their defaults and succeed; --version,
// at the top or as a command's first argument, prints the build; a usage error is a *UsageError, which Exit prints once and turns
// into exit status 2.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"example.com/shop/platform/config"
)

// Command is one subcommand of a binary.
type Command struct {
	// Name is the word that selects it, e.g. "serve".
	Name string
	// Args describes the arguments after the flags for the usage line, e.g. "ID...";
	// empty means the command takes none, and an argument is a usage error.
	Args string
	// Summary is one line for the binary's list of commands.
	Summary string
	// Help is more text for the command's own help; optional.
	Help string
	// Flags declares the command's flags on fs; nil means none.
	Flags func(fs *flag.FlagSet)
	// Env reads the command's configuration through env, as Run does. Help calls it
	// with an Env that has no variable set to list what it reads with the defaults;
	// nil means the command reads none.
	Env func(env *config.Env)
	// Raw hands Run every argument unparsed (but for a first help, -h or --help),
	// for a command that parses its own, such as one with subcommands of its own.
	Raw bool
	// Run runs the command with the arguments left after the flags.
	Run func(ctx context.Context, args []string) error
}

// Program is a binary made of Commands.
type Program struct {
	// Name is the binary's name, e.g. "stock".
	Name string
	// Summary says in one line what it is.
	Summary string
	// Commands in the order help lists them.
	Commands []Command
}

// UsageError is a command line that cannot run: an unknown command or flag, a
// missing or unexpected argument. Exit prints it once and returns 2.
type UsageError struct {
	// Err says what is wrong.
	Err error
	// Help is the command whose help to suggest: "<bin> help <Help>"; "" for the binary.
	Help string
}

// Error returns the problem and where to read the usage.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError of command (name of the Command, "" for the binary)
// with the message format and args make.
func Usagef(command, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Help: command}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// isVersion reports whether arg asks for the version.
func isVersion(arg string) bool { return arg == "--version" || arg == "-version" }

// Run runs the command args select; args are os.Args (the binary's name first, then
// the command). Help and the version go to stdout and return nil. It returns a
// *UsageError for a command line that cannot run, and otherwise the command's error.
func (p Program) Run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) < 2 {
		return Usagef("", "no command given")
	}
	first, rest := args[1], args[2:]
	switch {
	case isHelp(first) && len(rest) == 0:
		p.printHelp(stdout)
		return nil
	case isHelp(first):
		c, err := p.command(rest[0])
		if err != nil {
			return err
		}
		if c.Raw && len(rest) > 1 {
			// "help dlq list": the command's own help of its subcommand.
			return c.Run(ctx, append(slices.Clone(rest[1:]), "--help"))
		}
		p.printCommandHelp(stdout, c)
		return nil
	case isVersion(first):
		fmt.Fprintf(stdout, "%s %s\n", p.Name, Version())
		return nil
	}
	c, err := p.command(first)
	if err != nil {
		return err
	}
	if len(rest) > 0 && isVersion(rest[0]) {
		fmt.Fprintf(stdout, "%s %s\n", p.Name, Version())
		return nil
	}
	if c.Raw {
		if len(rest) > 1 && isHelp(rest[0]) {
			// "dlq help list": as "dlq list --help".
			return c.Run(ctx, append(slices.Clone(rest[1:]), "--help"))
		}
		if len(rest) > 0 && isHelp(rest[0]) {
			p.printCommandHelp(stdout, c)
			return nil
		}
		return c.Run(ctx, rest)
	}
	fs := p.flagSet(c)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			p.printCommandHelp(stdout, c)
			return nil
		}
		return Usagef(c.Name, "%s: %w", c.Name, err)
	}
	if fs.NArg() > 0 && fs.Arg(0) == "help" && c.Args == "" {
		p.printCommandHelp(stdout, c)
		return nil
	}
	if c.Args == "" && fs.NArg() > 0 {
		return Usagef(c.Name, "%s: unexpected argument %q", c.Name, fs.Arg(0))
	}
	return c.Run(ctx, fs.Args())
}

// command returns the Command called name, or a *UsageError.
func (p Program) command(name string) (Command, error) {
	i := slices.IndexFunc(p.Commands, func(c Command) bool { return c.Name == name })
	if i < 0 {
		return Command{}, Usagef("", "unknown command %q", name)
	}
	return p.Commands[i], nil
}

// flagSet returns c's flags, silent: Run reports errors and help itself.
func (p Program) flagSet(c Command) *flag.FlagSet {
	fs := flag.NewFlagSet(p.Name+" "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

func (p Program) printHelp(w io.Writer) {
	fmt.Fprintf(w, "%s: %s\n\nusage: %s <command> [flags] [arguments]\n\ncommands:\n", p.Name, p.Summary, p.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range p.Commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%s help <command>, or %s <command> --help, lists a command's flags and the\n"+
		"environment variables it reads with their defaults. %s --version prints the build.\n", p.Name, p.Name, p.Name)
}

func (p Program) printCommandHelp(w io.Writer, c Command) {
	line := p.Name + " " + c.Name
	fs := p.flagSet(c)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		line += " [flags]"
	}
	if c.Args != "" {
		line += " " + c.Args
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", line, c.Summary)
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.Help, "\n"))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			if name != "" {
				name = " " + name
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(tw, "  --%s%s\t%s%s\n", f.Name, name, usage, def)
		})
		_ = tw.Flush()
	}
	if c.Env != nil {
		env := config.NewEnv(nil)
		c.Env(env)
		if vars := env.Vars(); len(vars) > 0 {
			fmt.Fprintln(w, "\nenvironment (default):")
			for _, v := range vars {
				def := v.Default
				if def == "" {
					def = `""`
				}
				fmt.Fprintf(tw, "  %s\t%s\n", v.Key, def)
			}
			_ = tw.Flush()
		}
	}
}

// version is the build's version, set at link time by `make build`:
// -ldflags "-X example.com/shop/platform/cli.version=$(git describe --always --dirty)".
// Empty in a build without it, such as `go build` or `go run`.
var version string

// Version returns the build of the running binary: the version `make build` stamps
// (git describe) or else its module version ("(devel)" for a local build), then, when
// the build recorded them, the VCS revision (12 digits, with "+dirty" for uncommitted
// changes) unless the stamped version already names the commit, and the Go version.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if version != "" {
			return version
		}
		return "(unknown build)"
	}
	if version != "" {
		return version + " " + info.GoVersion
	}
	out := info.Main.Version
	if out == "" {
		out = "(devel)"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		out += " " + rev[:min(12, len(rev))] + dirty
	}
	return out + " " + info.GoVersion
}

// Exit returns the process exit status for err, the result of Program.Run or of the
// program around it, printing err once to stderr as "<name>: <err>" first: 0 for nil,
// 2 for a *UsageError (with where to read the usage), 1 for any other error.
func Exit(stderr io.Writer, name string, err error) int {
	if err == nil {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		help := name + " help"
		if ue.Help != "" {
			help += " " + ue.Help
		}
		fmt.Fprintf(stderr, "%s: %v (see %s)\n", name, err, help)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}
