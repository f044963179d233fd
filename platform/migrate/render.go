package migrate

import (
	"bytes"
	"fmt"
	"io/fs"
	"text/template"
)

// Files returns the migrations as goose reads them: FS, with each file read
// through text/template with Roles as its data when the set has Roles.
func (s Set) Files() fs.FS {
	if s.Roles == nil {
		return s.FS
	}
	return rendered{s.FS, s.Roles}
}

type rendered struct {
	fs.FS
	roles map[string]string
}

func (r rendered) Open(name string) (fs.File, error) {
	f, err := r.FS.Open(name)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil || info.IsDir() {
		return f, err
	}
	defer f.Close()
	text, err := fs.ReadFile(r.FS, name)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("migration %s: %w", name, err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, r.roles); err != nil {
		return nil, fmt.Errorf("migration %s: %w", name, err)
	}
	return renderedFile{bytes.NewReader(out.Bytes()), info}, nil
}

type renderedFile struct {
	*bytes.Reader
	info fs.FileInfo
}

func (f renderedFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f renderedFile) Close() error               { return nil }
