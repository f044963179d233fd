package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// TestAuditorSeesEveryConsumerReceiveEveryEvent: an order placed and then
// cancelled; the auditor's journey of the order shows every event published and
// processed by every consumer of the registry whose entry names the event, and its
// audit counts nothing unaccounted and nothing dead-lettered. It follows the
// registry, so a service added with `make service` is checked with no edit here
// (e2e/cmd/service's test runs it in a fork with one more consumer).
func TestAuditorSeesEveryConsumerReceiveEveryEvent(t *testing.T) {
	s := newShop(t, options{auditor: true, env: auditorEnv()})
	ctx := testkit.Context(t)
	o := s.createOrder(ctx, 1)
	s.place(ctx, o.ID, 200)
	if got, err := s.api.Cancel(ctx, o.ID); err != nil || got != http.StatusOK {
		t.Fatalf("cancel %s: status %d, err %v", o.ID, got, err)
	}
	eventually(t, "every consumer processes every event it receives", func() string {
		type delivery struct {
			Consumer string `json:"consumer"`
			State    string `json:"state"`
		}
		var j struct {
			Events []struct {
				EventName   string     `json:"event_name"`
				PublishedAt *string    `json:"published_at"`
				Deliveries  []delivery `json:"deliveries"`
			} `json:"events"`
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+s.sys.Auditor.Addr+"/orders/"+o.ID+"/journey", nil)
		if err != nil {
			return err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&j); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("journey: status %d, %v", resp.StatusCode, err)
		}
		var names, missing []string
		for _, ev := range j.Events {
			names = append(names, ev.EventName)
			if ev.PublishedAt == nil {
				missing = append(missing, ev.EventName+" not published")
			}
			for _, c := range contracts.ConsumersOf(ev.EventName) {
				if !slices.Contains(ev.Deliveries, delivery{Consumer: c.Name, State: "processed"}) {
					missing = append(missing, fmt.Sprintf("%s not processed by %s", ev.EventName, c.Name))
				}
			}
		}
		for _, want := range []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled} {
			if !slices.Contains(names, want) {
				missing = append(missing, want+" not in the journey")
			}
		}
		if len(missing) > 0 {
			return strings.Join(missing, "; ")
		}
		r, err := s.api.Audit(ctx)
		if err != nil {
			return err.Error()
		}
		if r.Audited < int64(len(j.Events)) || r.UnaccountedTotal != 0 || r.DeadLetteredTotal != 0 {
			return fmt.Sprintf("audit %+v", r)
		}
		return ""
	})
}
