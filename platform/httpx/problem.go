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

// ProblemTypeBase is the URI every problem type starts with; the kind's name follows it
// (ProblemTypeBase + "validation"). docs/api-problems.md documents each type.
const ProblemTypeBase = "https://example.com/shop/problems/"

// Kind is a kind of problem. Each kind has one type URI (ProblemTypeBase + the kind), one
// status code and one title, the same in every service; docs/api-problems.md describes
// what each means and what a client does about it.
type Kind string

// The kinds of problem the services answer.
const (
	// KindInvalidRequest (400): the request cannot be read: malformed JSON, a duplicate or
	// unknown member, a value of the wrong JSON type, or a malformed path parameter, query
	// parameter or header. Errors locates each value at fault.
	KindInvalidRequest Kind = "invalid-request"
	// KindValidation (422): the request was read, but a value is not acceptable. Errors
	// locates each value at fault.
	KindValidation Kind = "validation"
	// KindIdempotencyKeyReused (422): the Idempotency-Key was already used with another
	// request.
	KindIdempotencyKeyReused Kind = "idempotency-key-reused"
	// KindNotFound (404): no resource at this path, or none with this id.
	KindNotFound Kind = "not-found"
	// KindMethodNotAllowed (405): the path exists but not with this method; Allow lists
	// the methods it has.
	KindMethodNotAllowed Kind = "method-not-allowed"
	// KindConflict (409): the resource's current state does not allow the request.
	KindConflict Kind = "conflict"
	// KindBodyTooLarge (413): the body exceeds MaxBodyBytes.
	KindBodyTooLarge Kind = "body-too-large"
	// KindUnsupportedMediaType (415): the body is not application/json (UTF-8).
	KindUnsupportedMediaType Kind = "unsupported-media-type"
	// KindUnavailable (503): a dependency is unavailable or the process is starting; the
	// request can be repeated later (after Retry-After seconds when given).
	KindUnavailable Kind = "unavailable"
	// KindInternal (500): an unexpected error; the detail reveals nothing internal.
	KindInternal Kind = "internal"
)

// Status is the HTTP status code of the kind; an unknown kind is 500.
func (k Kind) Status() int {
	switch k {
	case KindInvalidRequest:
		return http.StatusBadRequest
	case KindValidation, KindIdempotencyKeyReused:
		return http.StatusUnprocessableEntity
	case KindNotFound:
		return http.StatusNotFound
	case KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case KindConflict:
		return http.StatusConflict
	case KindBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case KindUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case KindUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// Title is the kind's short summary, the same for every occurrence.
func (k Kind) Title() string {
	switch k {
	case KindInvalidRequest:
		return "The request cannot be read"
	case KindValidation:
		return "A request value is not acceptable"
	case KindIdempotencyKeyReused:
		return "The Idempotency-Key was used with another request"
	case KindNotFound:
		return "Not found"
	case KindMethodNotAllowed:
		return "Method not allowed"
	case KindConflict:
		return "The resource's state does not allow this"
	case KindBodyTooLarge:
		return "The request body is too large"
	case KindUnsupportedMediaType:
		return "The request body must be JSON"
	case KindUnavailable:
		return "Service unavailable"
	default:
		return "Internal error"
	}
}

// Type is the kind's problem type URI.
func (k Kind) Type() string {
	switch k.Status() {
	case http.StatusInternalServerError:
		return ProblemTypeBase + string(KindInternal)
	default:
		return ProblemTypeBase + string(k)
	}
}

// Problem is an RFC 9457 problem details object, the body of every error response. Detail
// is written for the client and never carries internal error text.
type Problem struct {
	// Type is the URI of the problem's kind (Kind.Type).
	Type string `json:"type"`
	// Title is the kind's summary (Kind.Title).
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence to the client.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Errors locates each request value at fault, when there are any.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one request value at fault: exactly one of Pointer, Parameter and Header
// says where it is, and Detail what is wrong with it.
type FieldError struct {
	// Pointer is an RFC 6901 JSON Pointer into the request body, such as
	// "/lines/1/product_id"; "" (with no Parameter or Header) is the whole body.
	Pointer string `json:"pointer,omitempty"`
	// Parameter names a path or query parameter, such as "id" or "order_id".
	Parameter string `json:"parameter,omitempty"`
	// Header names a request header, such as "Idempotency-Key".
	Header string `json:"header,omitempty"`
	// Detail says what is wrong with the value.
	Detail string `json:"detail"`
}

// MarshalJSON writes the error with exactly one locator: pointer, parameter or header.
// A pointer of "" (the whole body) is written, not left out, when neither of the others
// is set.
func (e FieldError) MarshalJSON() ([]byte, error) {
	type plain FieldError // without this method
	if e.Pointer != "" || e.Parameter != "" || e.Header != "" {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		Pointer string `json:"pointer"`
		Detail  string `json:"detail"`
	}{e.Pointer, e.Detail})
}

// writeProblem writes the problem of kind k as application/problem+json, with the request
// path as instance.
func writeProblem(w http.ResponseWriter, r *http.Request, k Kind, detail string, errs []FieldError) {
	p := Problem{Type: k.Type(), Title: k.Title(), Status: k.Status(), Detail: detail, Errors: errs}
	if r != nil && r.URL != nil {
		p.Instance = r.URL.Path
	}
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem holds only strings and ints; this cannot happen.
		p.Status = http.StatusInternalServerError
		body = []byte(`{"type":"` + KindInternal.Type() + `","title":"Internal error","status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
