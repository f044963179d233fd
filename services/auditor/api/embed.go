// Package apidoc holds the auditor's OpenAPI document, embedded so that the binary
// serves it at GET /openapi.yaml.
package apidoc

import _ "embed"

// OpenAPI is api/openapi.yaml (OpenAPI 3.1).
//
//go:embed openapi.yaml
var OpenAPI []byte
