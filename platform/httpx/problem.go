// Package httpx holds the HTTP plumbing every binary shares: a chi router with request ids,
// logging, panic recovery, body limits, request metrics and the /healthz, /readyz and
// /metrics endpoints; RFC 9457 problem responses; strict JSON decoding; and a server with
// timeouts and graceful shutdown.
package httpx

import (
	"encoding/json"
	"net/http"
)

// ContentTypeProblem is the media type of an RFC 9457 problem response.
const ContentTypeProblem = "application/problem+json"

// ContentTypeJSON is the media type of JSON responses and of the request bodies DecodeJSON
// accepts.
const ContentTypeJSON = "application/json"

// Problem is an RFC 9457 problem details object, the body of every error response
// (RFC 9457 application/problem+json). Detail is written for the
// client and must never carry internal error text.
type Problem struct {
	// Type is a URI identifying the problem type; WriteProblem uses "about:blank" when empty.
	Type string `json:"type"`
	// Title is a short summary of the problem type; WriteProblem uses the status text when empty.
	Title string `json:"title"`
	// Status is the HTTP status code; WriteProblem uses 500 when zero.
	Status int `json:"status"`
	// Detail explains this occurrence to the client.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence; WriteProblem uses the request path when empty.
	Instance string `json:"instance,omitempty"`
	// Field names the request body field or URL parameter at fault, when there is one.
	Field string `json:"field,omitempty"`
}

// NewProblem returns a Problem with the given status, its standard title and detail.
func NewProblem(status int, detail string) Problem {
	return Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
}

// WriteProblem writes p as application/problem+json with p.Status as the status code,
// filling Type, Title, Status and Instance when they are empty.
func WriteProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Instance == "" && r != nil && r.URL != nil {
		p.Instance = r.URL.Path
	}
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem holds only strings and an int; this cannot happen.
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
