package httpx_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"example.com/shop/platform/httpx"
)

// TestTimeIsUTCWithMilliseconds: every instant is written with exactly three
// fractional digits in UTC, whatever its zone and precision, through WriteJSON too.
func TestTimeIsUTCWithMilliseconds(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for in, want := range map[time.Time]string{
		time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC):              "2026-12-01T10:00:00.000Z",
		time.Date(2026, 12, 1, 10, 0, 0, 120_000_000, time.UTC):    "2026-12-01T10:00:00.120Z",
		time.Date(2026, 12, 1, 10, 0, 0, 123_456_789, time.UTC):    "2026-12-01T10:00:00.123Z",
		time.Date(2026, 12, 1, 11, 0, 0, 999_999_999, paris):       "2026-12-01T10:00:00.999Z",
		time.Date(2026, 12, 31, 23, 59, 59, 999_600_000, time.UTC): "2026-12-31T23:59:59.999Z",
	} {
		if got := httpx.FormatTime(in); got != want {
			t.Errorf("FormatTime(%v) = %s, want %s", in, got, want)
		}
		rec := httptest.NewRecorder()
		httpx.WriteJSON(rec, 200, struct {
			At  httpx.Time  `json:"at"`
			Opt *httpx.Time `json:"opt,omitempty"`
		}{At: httpx.Time(in), Opt: httpx.TimeOf(&in)})
		if got := rec.Body.String(); got != `{"at":"`+want+`","opt":"`+want+`"}`+"\n" && got != `{"at":"`+want+`","opt":"`+want+`"}` {
			t.Errorf("WriteJSON: %s, want at and opt %s", got, want)
		}
		b, err := json.Marshal(httpx.Time(in))
		if err != nil || string(b) != `"`+want+`"` {
			t.Errorf("json.Marshal: %s, %v", b, err)
		}
		var back httpx.Time
		if err := json.Unmarshal(b, &back); err != nil || !time.Time(back).Equal(in.Truncate(time.Millisecond)) {
			t.Errorf("round trip of %s: %v, %v", b, time.Time(back), err)
		}
	}
	if httpx.TimeOf(nil) != nil {
		t.Error("TimeOf(nil) is not nil")
	}
}
