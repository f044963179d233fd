package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches an inline Markdown link or image: [text](target) or
// [text](target "title"), capturing the target.
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestMarkdownLinks checks every relative link of every tracked Markdown file:
// the file or folder it names exists, and a #fragment names a heading of the
// target file under GitHub's anchor rules. External links (a scheme) are not
// followed; links inside code (fenced blocks, `inline`) are not links.
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files, want the README and docs/", len(files))
	}
	anchors := map[string]map[string]bool{} // file -> heading anchors, read once
	checked := 0
	for _, file := range files {
		links, err := markdownLinks(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			target := filepath.Join(root, file)
			if path != "" {
				target = filepath.Join(filepath.Dir(target), filepath.FromSlash(path))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.target, path)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			set, ok := anchors[target]
			if !ok {
				if set, err = headingAnchors(target); err != nil {
					t.Fatal(err)
				}
				anchors[target] = set
			}
			if !set[frag] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", file, l.line, l.target, frag, filepath.Base(target))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser is broken")
	}
	t.Logf("%d relative links in %d Markdown files", checked, len(files))
}

type link struct {
	target string
	line   int
}

// markdownLinks returns the inline links of a Markdown file outside fenced
// code blocks and inline code spans.
func markdownLinks(path string) ([]link, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var links []link
	fenced := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCodeSpans(line), -1) {
			links = append(links, link{target: m[1], line: n})
		}
	}
	return links, sc.Err()
}

// withoutCodeSpans blanks the `code spans` of a line.
func withoutCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation other than '-' and '_' dropped, spaces turned
// into '-', and "-1", "-2", ... after a repeated anchor.
func headingAnchors(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	set := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			set[fmt.Sprintf("%s-%d", anchor, n)] = true
		} else {
			set[anchor] = true
		}
		seen[anchor]++
	}
	return set, sc.Err()
}
