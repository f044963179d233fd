package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// edits adds the new service to the files every service is listed in: the
// registry, the AsyncAPI document and the deploy files that e2e/registry_test.go
// checks. Each entry is a copy of the -like consumer's, renamed.
func (a *adder) edits() {
	if a.err != nil {
		return
	}
	n, like := a.d.Name, a.like
	title := strings.ToUpper(like[:1]) + like[1:]
	a.edit("contracts/contracts.go", func(s string) (string, error) {
		return cloneLines(s, "\t// Queue"+title+" is ", 4, a.rename)
	})
	a.edit("contracts/registry.go", func(s string) (string, error) {
		s, err := insertAfter(s, "\tConsumer"+title+" = \""+like+"\"\n",
			fmt.Sprintf("\t// Consumer%s is the %s service's consumer: it records the events it receives.\n\tConsumer%s = %q\n", a.d.Title, n, a.d.Title, n))
		if err != nil {
			return "", err
		}
		if s, err = cloneUntil(s, "\t\t{Name: Consumer"+title+", Queue:", "},\n", a.rename); err != nil {
			return "", err
		}
		return cloneLines(s, "\t\t{Name: Consumer"+title+", Database:", 1, a.rename)
	})
	a.edit("contracts/asyncapi.yaml", func(s string) (string, error) {
		for _, block := range []string{"  " + like + "Queue:\n", "  " + like + "DeadLetters:\n", "  " + like + "Receives:\n"} {
			var err error
			if s, err = cloneBlock(s, block, a.rename); err != nil {
				return "", err
			}
		}
		i := strings.Index(s, "\n  "+n+"Receives:\n")
		t := strings.Index(s[i+1:], "\n    title: ")
		if i < 0 || t < 0 {
			return "", fmt.Errorf("no title in %sReceives", n)
		}
		t += i + 2
		e := t + strings.Index(s[t:], "\n")
		return s[:t] + "    title: " + n + " records every event it receives" + s[e:], nil
	})
	a.edit("docker-compose.yml", func(s string) (string, error) {
		s, err := cloneLines(s, "  "+strings.ToUpper(like)+"_DATABASE_URL: postgres://postgres@", 1, a.rename)
		if err != nil {
			return "", err
		}
		for _, block := range []string{"  migrate-" + like + ":\n", "  " + like + ":\n"} {
			if s, err = cloneBlock(s, block, a.rename); err != nil {
				return "", err
			}
		}
		for _, line := range []string{"      AUDITOR_" + strings.ToUpper(like) + "_DATABASE_URL:", "      AUDITOR_" + strings.ToUpper(like) + "_METRICS_URL:"} {
			if s, err = cloneLines(s, line, 1, a.rename); err != nil {
				return "", err
			}
		}
		// The auditor waits for every migration.
		i := strings.Index(s, "\n  auditor:\n")
		if i < 0 {
			return "", fmt.Errorf("no auditor service")
		}
		head, tail := s[:i], s[i:]
		tail, err = cloneLines(tail, "      migrate-"+like+":\n", 2, a.rename)
		return head + tail, err
	})
	a.edit("docker-compose.ha.yml", func(s string) (string, error) { return cloneBlock(s, "  "+like+":\n", a.rename) })
	a.edit("deploy/prometheus/prometheus.yml", func(s string) (string, error) {
		return cloneLines(s, "  - job_name: "+like+"\n", 2, a.rename)
	})
	a.edit("deploy/postgres/roles.sql", func(s string) (string, error) {
		s, err := cloneLines(s, "--   "+like+"_app ", 1, func(l string) string { return renameColumn(l, a.rename) })
		if err != nil {
			return "", err
		}
		if s, err = cloneLines(s, "--   "+like+"_maintenance ", 1, func(l string) string { return renameColumn(l, a.rename) }); err != nil {
			return "", err
		}
		old := "'" + like + "_app', '" + like + "_maintenance',"
		return replaceOnce(s, old, old+"\n                             '"+n+"_app', '"+n+"_maintenance',")
	})
	a.edit("deploy/rabbitmq/definitions.json", func(s string) (string, error) {
		s, err := cloneObject(s, `      "name": "`+like+`",`, func(o string) string {
			o = a.rename(o)
			i := strings.Index(o, `"password_hash": "`) + len(`"password_hash": "`)
			j := strings.Index(o[i:], `"`)
			return o[:i] + rabbitHash(n) + o[i+j:]
		})
		if err != nil {
			return "", err
		}
		return cloneObject(s, `      "user": "`+like+`",`, a.rename)
	})
	k8s := "deploy/k8s/"
	if b, err := os.ReadFile(filepath.Join(a.root, k8s, like+".yaml")); err != nil {
		a.fail(err)
	} else {
		a.fail(a.write(k8s+n+".yaml", []byte(a.rename(string(b)))))
	}
	a.edit(k8s+"kustomization.yaml", func(s string) (string, error) {
		return cloneLines(s, "  - "+like+".yaml\n", 1, a.rename)
	})
	for file, marker := range map[string]string{
		"config.yaml": "\n  name: " + like + "\n", "pdb.yaml": "\n  name: " + like + "\n",
		"networkpolicy.yaml": "\n  name: " + like + "\n", "migrate-jobs.yaml": "\n  name: " + like + "-migrate\n",
		"cronjobs.yaml": "\n  name: purge-inbox-" + like + "\n",
	} {
		a.edit(k8s+file, func(s string) (string, error) { return cloneDoc(s, marker, a.rename) })
	}
	a.edit(k8s+"secret.yaml", func(s string) (string, error) {
		var err error
		for _, kind := range []string{"OWNER", "APP", "MAINTENANCE", "AMQP"} {
			prefix := "  " + strings.ToUpper(like) + "_" + kind + "_"
			if kind == "AMQP" {
				prefix = "  " + strings.ToUpper(like) + "_AMQP_URL:"
			}
			if s, err = cloneLines(s, prefix, 1, a.rename); err != nil {
				return "", err
			}
		}
		return s, nil
	})
	a.edit(k8s+"servicemonitor.yaml", func(s string) (string, error) { return addValue(s, n) })
	a.edit("deploy/k8s-ha/secret.yaml", func(s string) (string, error) {
		var err error
		for _, kind := range []string{"OWNER", "APP", "MAINTENANCE"} {
			if s, err = cloneLines(s, "  "+strings.ToUpper(like)+"_"+kind+"_", 1, a.rename); err != nil {
				return "", err
			}
		}
		return s, nil
	})
}

// addValue appends v to the values of servicemonitor.yaml's selector, the list of
// the Services it scrapes.
func addValue(s, v string) (string, error) {
	const key = "{key: app.kubernetes.io/name, operator: In, values: ["
	i := strings.Index(s, key)
	j := strings.Index(s[max(i, 0):], "]}")
	if i < 0 || j < 0 {
		return "", fmt.Errorf("no %q", key)
	}
	j += i
	return s[:j] + ", " + v + s[j:], nil
}

// rename turns a copy of the -like consumer's text into the new service's: its
// name in three spellings, and its port.
func (a *adder) rename(s string) string {
	like, n := a.like, a.d.Name
	s = strings.NewReplacer(like, n, strings.ToUpper(like[:1])+like[1:], a.d.Title, strings.ToUpper(like), a.d.Upper).Replace(s)
	return strings.ReplaceAll(s, a.likePort, strings.TrimPrefix(a.d.HTTPAddr, ":"))
}

// renameColumn renames with rename a comment line "--   <role>   <what>" and keeps
// <what> in its column.
func renameColumn(line string, rename func(string) string) string {
	m := roleLine.FindStringSubmatch(line)
	if m == nil {
		return rename(line)
	}
	role := rename(m[2])
	pad := max(len(m[2])+len(m[3])-len(role), 2)
	return m[1] + role + strings.Repeat(" ", pad) + rename(m[4])
}

var roleLine = regexp.MustCompile(`^(--\s+)(\S+)(\s+)(.*\n)$`)

// edit rewrites one file of the repository with fn.
func (a *adder) edit(rel string, fn func(string) (string, error)) {
	if a.err != nil {
		return
	}
	name := filepath.Join(a.root, filepath.FromSlash(rel))
	b, err := os.ReadFile(name)
	if err != nil {
		a.fail(err)
		return
	}
	s, err := fn(string(b))
	if err != nil {
		a.fail(fmt.Errorf("%s: %w", rel, err))
		return
	}
	a.fail(os.WriteFile(name, []byte(s), 0o644))
	a.files = append(a.files, rel)
}

// lineStart returns the index of the first line of s that starts with prefix.
func lineStart(s, prefix string) int {
	if strings.HasPrefix(s, prefix) {
		return 0
	}
	if i := strings.Index(s, "\n"+prefix); i >= 0 {
		return i + 1
	}
	return -1
}

// cloneLines inserts, after the n lines starting at the line that starts with
// prefix, those lines changed by fn.
func cloneLines(s, prefix string, n int, fn func(string) string) (string, error) {
	i := lineStart(s, prefix)
	if i < 0 {
		return "", fmt.Errorf("no line starts with %q", strings.TrimSpace(prefix))
	}
	end := i
	for range n {
		j := strings.Index(s[end:], "\n")
		if j < 0 {
			return "", fmt.Errorf("fewer than %d lines after %q", n, strings.TrimSpace(prefix))
		}
		end += j + 1
	}
	return s[:end] + fn(s[i:end]) + s[end:], nil
}

// cloneUntil inserts, after the lines from the line that starts with prefix to
// the first line that ends with end, those lines changed by fn.
func cloneUntil(s, prefix, end string, fn func(string) string) (string, error) {
	i := lineStart(s, prefix)
	if i < 0 {
		return "", fmt.Errorf("no line starts with %q", strings.TrimSpace(prefix))
	}
	for j := i; ; {
		k := strings.Index(s[j:], "\n")
		if k < 0 {
			return "", fmt.Errorf("no line ends with %q after %q", strings.TrimSpace(end), strings.TrimSpace(prefix))
		}
		j += k + 1
		if strings.HasSuffix(s[i:j], end) {
			return s[:j] + fn(s[i:j]) + s[j:], nil
		}
	}
}

// cloneBlock inserts, after the YAML block whose first line is header (a key and
// everything indented deeper below it), that block changed by fn.
func cloneBlock(s, header string, fn func(string) string) (string, error) {
	i := lineStart(s, header)
	if i < 0 {
		return "", fmt.Errorf("no block %q", strings.TrimSpace(header))
	}
	indent := len(header) - len(strings.TrimLeft(header, " "))
	end := i + len(header)
	for end < len(s) {
		j := strings.Index(s[end:], "\n")
		if j < 0 {
			j = len(s) - end - 1
		}
		line := s[end : end+j]
		if strings.TrimSpace(line) != "" && len(line)-len(strings.TrimLeft(line, " ")) <= indent {
			break
		}
		end += j + 1
	}
	block := strings.TrimRight(s[i:end], "\n") + "\n"
	sep := s[i+len(block) : end]
	return s[:i+len(block)] + sep + fn(block) + s[i+len(block):], nil
}

// cloneDoc appends to a multi-document YAML file a copy, changed by fn, of the
// document that contains marker.
func cloneDoc(s, marker string, fn func(string) string) (string, error) {
	for doc := range strings.SplitSeq(s, "\n---\n") {
		if strings.Contains("\n"+doc, marker) {
			return strings.TrimRight(s, "\n") + "\n---\n" + fn(strings.TrimPrefix(strings.TrimRight(doc, "\n"), "---\n")) + "\n", nil
		}
	}
	return "", fmt.Errorf("no document with %q", strings.TrimSpace(marker))
}

// cloneObject inserts after the JSON object (of an array, one per line of
// braces, indented four spaces) holding the line that starts with member a copy
// changed by fn.
func cloneObject(s, member string, fn func(string) string) (string, error) {
	i := lineStart(s, member)
	if i < 0 {
		return "", fmt.Errorf("no object with %q", strings.TrimSpace(member))
	}
	start := strings.LastIndex(s[:i], "\n    {\n") + 1
	end := i + strings.Index(s[i:], "\n    }") + len("\n    }")
	if start <= 0 || end < i {
		return "", fmt.Errorf("the object with %q is not laid out one member a line", strings.TrimSpace(member))
	}
	return s[:end] + ",\n" + fn(s[start:end]) + s[end:], nil
}

func insertAfter(s, line, add string) (string, error) {
	return replaceOnce(s, line, line+add)
}

func replaceOnce(s, old, new string) (string, error) {
	if !strings.Contains(s, old) {
		return "", fmt.Errorf("no %q", strings.TrimSpace(old))
	}
	return strings.Replace(s, old, new, 1), nil
}
