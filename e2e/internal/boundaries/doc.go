// Package boundaries checks the layout's rules (docs/architecture.md, "Layout and
// boundaries"): which part may import which, that platform names no service, that
// event handlers never see the broker and that domain packages hold no SQL or
// transport.
package boundaries
