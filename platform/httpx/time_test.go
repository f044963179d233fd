package httpx_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"example.com/shop/platform/httpx"
)

// TestWriteJSONWritesInstantsInUTCWithMilliseconds: every time.Time a response
// holds, as a value, a pointer or an element, is written with exactly three
// fractional digits in UTC, whatever its zone and precision.
func TestWriteJSONWritesInstantsInUTCWithMilliseconds(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	for in, want := range map[time.Time]string{
		time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC):              "2026-12-01T10:00:00.000Z",
		time.Date(2026, 12, 1, 10, 0, 0, 120_000_000, time.UTC):    "2026-12-01T10:00:00.120Z",
		time.Date(2026, 12, 1, 10, 0, 0, 123_456_789, time.UTC):    "2026-12-01T10:00:00.123Z",
		time.Date(2026, 12, 1, 11, 0, 0, 999_999_999, cet):         "2026-12-01T10:00:00.999Z",
		time.Date(2026, 12, 31, 23, 59, 59, 999_600_000, time.UTC): "2026-12-31T23:59:59.999Z",
	} {
		if got := httpx.FormatTime(in); got != want {
			t.Errorf("FormatTime(%v) = %s, want %s", in, got, want)
		}
		rec := httptest.NewRecorder()
		httpx.WriteJSON(rec, 200, struct {
			At   time.Time            `json:"at"`
			Opt  *time.Time           `json:"opt,omitempty"`
			None *time.Time           `json:"none,omitempty"`
			List []time.Time          `json:"list"`
			Map  map[string]time.Time `json:"map"`
		}{At: in, Opt: &in, List: []time.Time{in}, Map: map[string]time.Time{"k": in}})
		q := `"` + want + `"`
		if got, w := rec.Body.String(), `{"at":`+q+`,"opt":`+q+`,"list":[`+q+`],"map":{"k":`+q+`}}`+"\n"; got != w {
			t.Errorf("WriteJSON:\n%s\nwant\n%s", got, w)
		}
	}
}

type custom struct{}

func (custom) MarshalJSON() ([]byte, error) { return []byte(`"mine"`), nil }

// TestWriteJSONEncodesAsEncodingJSON: but for instants, a response is the bytes
// encoding/json gives: MarshalJSON methods, nil slices and maps as null, omitempty,
// HTML characters escaped, map keys sorted.
func TestWriteJSONEncodesAsEncodingJSON(t *testing.T) {
	v := struct {
		C     custom            `json:"c"`
		Nil   []int             `json:"nil"`
		NilM  map[string]int    `json:"nil_m"`
		Empty string            `json:"empty,omitempty"`
		HTML  string            `json:"html"`
		M     map[string]string `json:"m"`
		Raw   json.RawMessage   `json:"raw"`
		F     float64           `json:"f"`
		Any   any               `json:"any"`
	}{HTML: "<a&b>", M: map[string]string{"b": "2", "a": "1"}, Raw: json.RawMessage(`{"x": 1}`), F: 1e21, Any: []any{1, "x"}}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	httpx.WriteJSON(rec, 200, v)
	if got := rec.Body.String(); got != string(want)+"\n" {
		t.Errorf("WriteJSON:\n%s\nencoding/json:\n%s", got, want)
	}
}
