package main

import (
	"strings"
	"text/template"
)

// funcs are the functions the templates may call, besides text/template's own.
func funcs() template.FuncMap {
	return template.FuncMap{
		"header": Header,
		"upper":  strings.ToUpper,
		"title":  title,
		"join":   strings.Join,
		"purge":  newPurgeJob,
	}
}
