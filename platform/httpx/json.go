package httpx

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// MaxBodyBytes is the largest request body accepted, in bytes (1 MiB). Larger bodies are
// answered with 413 Request Entity Too Large.
const MaxBodyBytes = 1 << 20

// WriteJSON writes v as JSON with the given status code and Content-Type application/json.
// A status without a body (204, 304) writes no body. If v cannot be marshalled, it writes a
// 500 problem instead, without the marshalling error.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusNoContent || status == http.StatusNotModified {
		w.WriteHeader(status)
		return
	}
	body, err := json.Marshal(v)
	if err != nil {
		WriteProblem(w, nil, NewProblem(http.StatusInternalServerError, "the response could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", ContentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// DecodeJSON decodes the request body, one JSON value, into dst (a non-nil pointer). It
// returns nil on success, or the Problem to send:
//   - 415 when Content-Type is not application/json (parameters allowed; a charset other
//     than utf-8 is refused);
//   - 413 when the body exceeds MaxBodyBytes;
//   - 400 when the body is empty, malformed (detail gives the byte offset), holds a field
//     dst does not have (Field names it), a value of the wrong type (Field names it), or
//     data after the first value;
//   - 500 when dst is not a non-nil pointer (a programming error).
//
// w is used only to limit the body (http.MaxBytesReader); DecodeJSON writes nothing.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any) *Problem {
	if p := checkJSONContentType(r.Header.Get("Content-Type")); p != nil {
		return p
	}
	if r.Body == nil {
		p := NewProblem(http.StatusBadRequest, "request body is empty")
		return &p
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeProblem(err, body.n)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case isTooLarge(err):
		return decodeProblem(err, body.n)
	default:
		p := NewProblem(http.StatusBadRequest, "request body must hold a single JSON value")
		return &p
	}
}

func checkJSONContentType(ct string) *Problem {
	unsupported := func() *Problem {
		p := NewProblem(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return &p
	}
	if ct == "" {
		return unsupported()
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != ContentTypeJSON {
		return unsupported()
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return unsupported()
	}
	return nil
}

func isTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// decodeProblem maps an error of json.Decoder.Decode to a client-facing Problem; read is
// the number of body bytes read, the offset of a premature end.
func decodeProblem(err error, read int64) *Problem {
	bad := func(detail, field string) *Problem {
		p := NewProblem(http.StatusBadRequest, detail)
		p.Field = field
		return &p
	}
	var (
		syntaxErr  *json.SyntaxError
		typeErr    *json.UnmarshalTypeError
		invalidErr *json.InvalidUnmarshalError
		tooLarge   *http.MaxBytesError
	)
	switch {
	case errors.As(err, &tooLarge):
		p := NewProblem(http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit))
		return &p
	case errors.Is(err, io.EOF):
		return bad("request body is empty", "")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad(fmt.Sprintf("malformed JSON at byte offset %d: the body ends in the middle of a value", read), "")
	case errors.As(err, &syntaxErr):
		return bad(fmt.Sprintf("malformed JSON at byte offset %d", syntaxErr.Offset), "")
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return bad(fmt.Sprintf("request body must be %s, not %s", jsonKind(typeErr.Type), typeErr.Value), "")
		}
		return bad(fmt.Sprintf("field %q must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value), typeErr.Field)
	case errors.As(err, &invalidErr):
		p := NewProblem(http.StatusInternalServerError, "the request could not be decoded")
		return &p
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, uerr := strconv.Unquote(name); uerr == nil {
			name = unq
		}
		return bad(fmt.Sprintf("unknown field %q", name), name)
	}
	// Errors returned by UnmarshalJSON or UnmarshalText methods of the target's types,
	// such as "invalid UUID length: 3": they describe the value the client sent.
	return bad("invalid value: "+err.Error(), "")
}

// jsonKind names the JSON kind a Go type is decoded from, with an article, for messages
// that must not expose Go type names.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	if t.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "a JSON value"
	}
}

// ErrNotUUID is the error of ParseUUID.
var ErrNotUUID = errors.New("not a UUID in its canonical form, such as 0190a7c4-7c1e-7d2a-9f3b-5a8c2e1d4b6f")

// ParseUUID parses s as a UUID in its canonical 36-character form (8-4-4-4-12 hex
// digits, either case); the other forms uuid.Parse accepts (braces, urn:uuid:, no
// hyphens) and "" return ErrNotUUID. Every UUID an API reads goes through it.
func ParseUUID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return uuid.Nil, ErrNotUUID
	}
	return id, nil
}

// URLParamUUID returns the chi URL parameter name parsed with ParseUUID. When it is
// missing or malformed it returns a 400 Problem whose detail and Field name the
// parameter.
func URLParamUUID(r *http.Request, name string) (uuid.UUID, *Problem) {
	id, err := ParseUUID(chi.URLParam(r, name))
	if err != nil {
		p := NewProblem(http.StatusBadRequest, fmt.Sprintf("path parameter %q must be a UUID", name))
		p.Field = name
		return uuid.UUID{}, &p
	}
	return id, nil
}
