package httpx

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
)

// MaxBodyBytes is the largest request body accepted, in bytes (1 MiB). Larger bodies are
// answered with 413 (KindBodyTooLarge).
const MaxBodyBytes = 1 << 20

// WriteJSON writes v as JSON with the given status code and Content-Type application/json.
// A status without a body (204, 304) writes no body. If v cannot be marshalled, it writes a
// 500 problem instead, without the marshalling error. v is encoded as encoding/json
// encodes it, but every time.Time (a member, a pointer, an element) is written in
// TimeFormat: each API writes its instants one way, in UTC with milliseconds.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusNoContent || status == http.StatusNotModified {
		w.WriteHeader(status)
		return
	}
	body, err := MarshalJSON(v)
	if err != nil {
		writeProblem(w, nil, KindInternal, "the response could not be encoded", nil)
		return
	}
	w.Header().Set("Content-Type", ContentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// MarshalJSON is the encoding of WriteJSON: encoding/json's (jsonv1.DefaultOptionsV1,
// MarshalJSON methods included), with every time.Time written in TimeFormat. Its
// errors are encoding/json's.
func MarshalJSON(v any) ([]byte, error) {
	return json.Marshal(v, jsonv1.DefaultOptionsV1(), timeMarshalers)
}

// timeMarshalers writes a time.Time in TimeFormat.
var timeMarshalers = json.WithMarshalers(json.MarshalToFunc(func(enc *jsontext.Encoder, t time.Time) error {
	return enc.WriteToken(jsontext.String(FormatTime(t)))
}))

// DecodeJSON decodes the request body, one JSON value, into dst (a non-nil pointer),
// strictly: member names match dst's json tags exactly (case-sensitive), a member named
// twice or one dst does not have is refused, and so are invalid UTF-8 and data after the
// value. A JSON null is refused as a value of the wrong JSON type, but for a pointer or
// interface destination (which it leaves nil). It returns nil or an *Error:
//   - KindUnsupportedMediaType when Content-Type is not application/json (parameters
//     allowed; a charset other than utf-8 is refused) or a Content-Encoding other than
//     identity is set (bodies are read as sent, never decompressed);
//   - KindBodyTooLarge when the body exceeds MaxBodyBytes;
//   - KindInvalidRequest when the body is empty or malformed (detail gives the byte
//     offset), or when a member is duplicated, unknown, null or of the wrong JSON type;
//     Errors holds its RFC 6901 JSON Pointer, such as "/lines/1/product_id", or "" for
//     the whole body;
//   - KindInternal when dst is not a non-nil pointer (a programming error).
//
// w is used only to limit the body (http.MaxBytesReader); DecodeJSON writes nothing.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := checkJSONHeaders(r.Header); err != nil {
		return err
	}
	if r.Body == nil || r.Body == http.NoBody {
		return invalidBody("", "is empty")
	}
	return decodeStrict(&countingReader{r: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}, dst)
}

// DecodeEmptyJSON reads the body of an operation that takes no request values: no body,
// a body of JSON white space, or the object {} is accepted; anything else is refused
// as DecodeJSON refuses it (415 for a Content-Type that is not application/json in
// UTF-8 or a Content-Encoding, 413 beyond MaxBodyBytes, 400 for malformed JSON, a
// value that is not an object, or any member, which is unknown; Errors locates it).
func DecodeEmptyJSON(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return &Error{Kind: KindBodyTooLarge, Detail: fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)}
	case err != nil:
		return invalidBody("", "cannot be read")
	case strings.TrimLeft(string(body), " \t\r\n") == "":
		return nil
	}
	if err := checkJSONHeaders(r.Header); err != nil {
		return err
	}
	return decodeStrict(&countingReader{r: bytes.NewReader(body)}, &struct{}{})
}

// decodeStrict decodes one JSON value from body into dst; see DecodeJSON.
func decodeStrict(body *countingReader, dst any) error {
	err := json.UnmarshalRead(body, dst, json.RejectUnknownMembers(true), json.WithUnmarshalers(refuseNull))
	if err == nil {
		return nil
	}
	var (
		tooLarge *http.MaxBytesError
		syn      *jsontext.SyntacticError
		sem      *json.SemanticError
	)
	switch {
	case errors.As(err, &tooLarge):
		return &Error{Kind: KindBodyTooLarge, Detail: fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)}
	case errors.Is(err, io.ErrUnexpectedEOF) && !body.content:
		return invalidBody("", "is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidBody("", fmt.Sprintf("is malformed JSON at byte offset %d: it ends in the middle of a value", body.n))
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn):
		return invalidBody(string(syn.JSONPointer), "member appears twice")
	case errors.As(err, &syn):
		return invalidBody(string(syn.JSONPointer), fmt.Sprintf("is malformed JSON at byte offset %d: %v", syn.ByteOffset, syn.Err))
	case errors.As(err, &sem) && sem.GoType == nil:
		// dst is not a non-nil pointer: the handler's mistake, not the client's.
		return &Error{Kind: KindInternal, Err: err}
	case errors.As(err, &sem) && errors.Is(sem.Err, errNull):
		return invalidBody(string(sem.JSONPointer), "must not be null")
	case errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName):
		return invalidBody(string(sem.JSONPointer), "unknown member")
	case errors.As(err, &sem):
		want := "must be " + jsonKind(sem.GoType)
		if sem.JSONKind != jsontext.Kind(0) && jsonKindName(sem.JSONKind) != jsonKind(sem.GoType) {
			want += ", not " + jsonKindName(sem.JSONKind)
		} else if sem.Err != nil {
			// The value has the right JSON kind but its text is refused, such as a
			// malformed UUID or a number out of range.
			want = "is not a valid value: " + sem.Err.Error()
		}
		return invalidBody(string(sem.JSONPointer), want)
	}
	return invalidBody("", "cannot be decoded")
}

// errNull is refuseNull's error.
var errNull = errors.New("null where a value is required")

// refuseNull refuses a JSON null decoded into anything but a pointer or an interface:
// null is no string, number, boolean, object or array, so a required member given as
// null is a value of the wrong JSON type (400), not a missing one. Other values go to
// the default decoding.
var refuseNull = json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v any) error {
	if dec.PeekKind() != 'n' {
		return errors.ErrUnsupported
	}
	switch reflect.TypeOf(v).Elem().Kind() {
	case reflect.Pointer, reflect.Interface:
		return errors.ErrUnsupported
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	return errNull
})

// invalidBody is a KindInvalidRequest error about the body value at pointer ("" for
// the whole body); detail is a predicate such as "is empty" or "must not be null".
func invalidBody(pointer, detail string) *Error {
	where := "request body "
	if pointer != "" {
		where = pointer + ": "
	}
	return &Error{Kind: KindInvalidRequest, Detail: where + detail,
		Errors: []FieldError{{Pointer: pointer, Detail: detail}}}
}

// checkJSONHeaders refuses, as DecodeJSON says, a request body that is not
// uncompressed application/json in UTF-8.
func checkJSONHeaders(h http.Header) error {
	if enc := h.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return &Error{Kind: KindUnsupportedMediaType, Detail: "Content-Encoding is not supported: send the body uncompressed",
			Errors: []FieldError{{Header: "Content-Encoding", Detail: "must be absent or identity"}}}
	}
	ct := h.Get("Content-Type")
	unsupported := &Error{Kind: KindUnsupportedMediaType, Detail: "Content-Type must be application/json",
		Errors: []FieldError{{Header: "Content-Type", Detail: "must be application/json"}}}
	if ct == "" {
		return unsupported
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != ContentTypeJSON {
		return unsupported
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return unsupported
	}
	return nil
}

// countingReader counts the bytes read through it and notes whether any was not JSON
// white space.
type countingReader struct {
	r       io.Reader
	n       int64
	content bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if !c.content {
		c.content = strings.TrimLeft(string(p[:n]), " \t\r\n") != ""
	}
	return n, err
}

// jsonKindName names a JSON kind with an article.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	default:
		return "a JSON value"
	}
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
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
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

// PathUUID returns the chi URL parameter name parsed as a UUID in its canonical
// 36-character form. A missing or malformed one is a KindInvalidRequest *Error naming the
// parameter.
func PathUUID(r *http.Request, name string) (uuid.UUID, error) {
	return parseParamUUID(chi.URLParam(r, name), name, "path")
}

// QueryUUID returns the query parameter name parsed as a UUID in its canonical
// 36-character form. A missing, repeated or malformed one is a KindInvalidRequest *Error
// naming the parameter.
func QueryUUID(r *http.Request, name string) (uuid.UUID, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(vals[name]) != 1 {
		return uuid.Nil, paramError(name, "query", "must be given once")
	}
	return parseParamUUID(vals[name][0], name, "query")
}

func parseParamUUID(s, name, in string) (uuid.UUID, error) {
	id, err := ParseUUID(s)
	if err != nil {
		return uuid.Nil, paramError(name, in, "must be a UUID such as 0190a7c4-7c1e-7d2a-9f3b-5a8c2e1d4b6f")
	}
	return id, nil
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

func paramError(name, in, detail string) *Error {
	return &Error{Kind: KindInvalidRequest, Detail: fmt.Sprintf("%s parameter %q %s", in, name, detail),
		Errors: []FieldError{{Parameter: name, Detail: detail}}}
}
