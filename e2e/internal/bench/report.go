package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints results as an aligned text table: name, value, unit,
// baseline, ratio, goal and whether it was met.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measurement\tvalue\tunit\tbaseline\tratio\tgoal\tmet\t")
	for _, r := range results {
		ratio, met := "", ""
		if r.Ratio != nil {
			ratio = strconv.FormatFloat(*r.Ratio, 'f', 2, 64)
		}
		switch {
		case r.Met != nil && *r.Met:
			met = "yes"
		case r.Met != nil:
			met = "no"
		case r.Goal != "":
			met = "not judged"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, formatValue(r.Value, r.Unit), r.Unit, r.Baseline, ratio, r.Goal, met)
	}
	return tw.Flush()
}

// formatValue rounds v for reading: rates to whole numbers, the rest to
// one or two decimals.
func formatValue(v float64, unit string) string {
	switch unit {
	case "ms":
		if v < 1 {
			return strconv.FormatFloat(v, 'f', 3, 64) // CPU time per event: tenths of a ms would hide it
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	case "MiB", "%":
		return strconv.FormatFloat(v, 'f', 1, 64)
	case "x", "cores":
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// WriteJSON writes results as an indented JSON array of Result.
func WriteJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}
