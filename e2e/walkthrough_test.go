package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// TestWalkthroughRuns keeps docs/walkthrough.md true to the code: against a
// running system, every SQL statement of its sql blocks is parsed and planned
// by PostgreSQL in a database that has its tables (a wrong table, column or
// type fails; named placeholders such as $envelope are taken as parameters;
// BEGIN and COMMIT are skipped), and every command of its sh blocks runs with
// the services' default addresses pointed at the running ones, exits 0 and,
// where the block shows the answer in a comment below the command, answers
// JSON with the same keys.
func TestWalkthroughRuns(t *testing.T) {
	t.Parallel()
	blocks, err := codeBlocks(filepath.Join("..", "docs", "walkthrough.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := newShop(t, options{})
	ctx := testkit.Context(t)
	dbs := map[string]*pgxpool.Pool{"order": s.dbs.Order, "stock": s.dbs.Stock, "shipping": s.dbs.Shipping}
	var statements, commands int
	for _, b := range blocks {
		switch b.lang {
		case "sql":
			for _, stmt := range sqlStatements(b.text) {
				statements++
				if err := plans(ctx, dbs, stmt); err != nil {
					t.Errorf("walkthrough.md:%d: %v\n%s", b.line, err, stmt)
				}
			}
		case "sh":
			for _, c := range shellCommands(b.text) {
				commands++
				if err := s.runCommand(ctx, c); err != nil {
					t.Errorf("walkthrough.md:%d: %s: %v", b.line, c.command, err)
				}
			}
		}
	}
	if statements < 10 || commands < 1 {
		t.Errorf("checked %d SQL statements and %d commands, want the walkthrough's (at least 10 and 1)", statements, commands)
	}
}

// codeBlock is one fenced block of a Markdown file.
type codeBlock struct {
	lang string
	line int // of its opening fence
	text string
}

func codeBlocks(path string) ([]codeBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []codeBlock
	var cur *codeBlock
	var body strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &codeBlock{lang: strings.TrimPrefix(line, "```"), line: n}
			body.Reset()
		case cur != nil && line == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(sc.Text() + "\n")
		}
	}
	return out, sc.Err()
}

// namedParam is a placeholder the walkthrough names instead of numbering.
var namedParam = regexp.MustCompile(`\$[a-z_][a-z0-9_]*`)

// sqlStatements splits an SQL block at the semicolons outside quotes and
// comments, numbers its named placeholders, and leaves out transaction
// control and statements that are only comments.
func sqlStatements(block string) []string {
	var out []string
	var cur strings.Builder
	inQuote, inComment := false, false
	for i := 0; i < len(block); i++ {
		c := block[i]
		switch {
		case inComment:
			if c == '\n' {
				inComment = false
			}
		case inQuote:
			if c == '\'' {
				inQuote = false
			}
		case c == '\'':
			inQuote = true
		case c == '-' && i+1 < len(block) && block[i+1] == '-':
			inComment = true
			continue
		case c == ';':
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		if !inComment {
			cur.WriteByte(c)
		}
	}
	out = append(out, cur.String())
	var stmts []string
	for _, s := range out {
		s = strings.TrimSpace(s)
		switch strings.ToUpper(s) {
		case "", "BEGIN", "COMMIT", "ROLLBACK":
			continue
		}
		names := map[string]string{}
		s = namedParam.ReplaceAllStringFunc(s, func(name string) string {
			if _, ok := names[name]; !ok {
				names[name] = fmt.Sprintf("$%d", 1000+len(names)) // apart from $1, $2...
			}
			return names[name]
		})
		stmts = append(stmts, fillParams(s))
	}
	return stmts
}

// fillParams renumbers the statement's placeholders $1..$n in order of first
// appearance: PostgreSQL wants no number below the highest left unused.
func fillParams(s string) string {
	num := regexp.MustCompile(`\$[0-9]+`)
	seen := map[string]string{}
	return num.ReplaceAllStringFunc(s, func(p string) string {
		if _, ok := seen[p]; !ok {
			seen[p] = fmt.Sprintf("$%d", len(seen)+1)
		}
		return seen[p]
	})
}

// plans prepares stmt (PostgreSQL parses, analyses and plans it, executing
// nothing) in each database until one accepts it; it returns the errors of
// all of them when none does.
func plans(ctx context.Context, dbs map[string]*pgxpool.Pool, stmt string) error {
	var errs []string
	for _, name := range slices.Sorted(maps.Keys(dbs)) {
		conn, err := dbs[name].Acquire(ctx)
		if err != nil {
			return err
		}
		_, err = conn.Conn().Prepare(ctx, "", stmt)
		conn.Release()
		if err == nil {
			return nil
		}
		errs = append(errs, name+": "+err.Error())
	}
	return fmt.Errorf("no database takes it: %s", strings.Join(errs, "; "))
}

// shellCommand is one command of an sh block and the JSON answer the block
// shows below it in a comment ("" when it shows none).
type shellCommand struct {
	command string
	answer  string
}

// shellCommands reads the commands of an sh block: backslash continuations
// joined, each followed by an optional "# {...}" comment with its answer.
func shellCommands(block string) []shellCommand {
	var out []shellCommand
	var cur strings.Builder
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "#"):
			if len(out) > 0 && cur.Len() == 0 && out[len(out)-1].answer == "" {
				out[len(out)-1].answer = strings.TrimSpace(strings.TrimPrefix(trimmed, "#"))
			}
		case strings.HasSuffix(trimmed, `\`):
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
		case trimmed != "":
			cur.WriteString(trimmed)
			out = append(out, shellCommand{command: cur.String()})
			cur.Reset()
		}
	}
	return out
}

// runCommand runs c with every service's default address (localhost:8082
// for stock) replaced by its process's, and compares its answer's keys with
// the answer the walkthrough shows.
func (s *testSystem) runCommand(ctx context.Context, c shellCommand) error {
	command := c.command
	for _, svc := range contracts.Services() {
		if p := s.sys.Process(svc.Name); p != nil {
			command = strings.ReplaceAll(command, "localhost"+svc.HTTPAddr, p.Addr)
		}
	}
	out, err := exec.CommandContext(ctx, "bash", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	if !strings.HasPrefix(c.answer, "{") {
		return nil
	}
	got, want := map[string]any{}, map[string]any{}
	if err := json.Unmarshal(out, &got); err != nil {
		return fmt.Errorf("answer %q is not a JSON object: %v", out, err)
	}
	// The walkthrough elides ids ("5f0c6a7e-..."), so it is compared by keys.
	if err := json.Unmarshal([]byte(c.answer), &want); err != nil {
		return fmt.Errorf("the walkthrough's answer %q is not a JSON object: %v", c.answer, err)
	}
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		return fmt.Errorf("answer keys %v, the walkthrough shows %v (%s)", g, w, out)
	}
	return nil
}
