package system

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metric scrapes GET /metrics of p and returns the sum of every sample of
// the metric called name whose labels include all of labels (nil matches
// every sample). A metric with no matching sample is 0. It reads the
// Prometheus text format only as far as needed: one sample per line, label
// values without escaped quotes or commas.
func (p *Process) Metric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s metrics: status %d", p.Name, resp.StatusCode)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric whose name starts with name
		}
		if !labelsMatch(lbls, labels) {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s metrics: %q: %w", p.Name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	return sum, nil
}

func labelsMatch(lbls string, want map[string]string) bool {
	have := map[string]string{}
	for _, kv := range strings.Split(lbls, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			have[strings.TrimSpace(k)] = strings.Trim(v, `"`)
		}
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
