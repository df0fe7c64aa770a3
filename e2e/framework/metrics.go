package framework

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Metrics is one scrape of a component's /metrics (Prometheus text format):
// the value of every sample, by series. A series is its metric name and
// its labels sorted by name, as SeriesKey writes them.
type Metrics map[string]float64

// SchedulerMetrics scrapes kube-scheduler's /metrics.
func SchedulerMetrics(ctx context.Context) (Metrics, error) {
	text, err := RequireLocal("it scrapes kube-scheduler's metrics").ComponentMetrics(ctx, SchedulerComponent)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(text)
}

// Value returns the sample of metric name with exactly the labels given
// as name, value pairs; 0 when there is none (a vector shows a series
// only from its first observation on).
func (m Metrics) Value(name string, labelPairs ...string) float64 {
	return m[SeriesKey(name, labelPairs...)]
}

// SeriesKey is the key of a series in Metrics: name{a="1",b="2"}, labels
// sorted by name, or the bare name without labels.
func SeriesKey(name string, labelPairs ...string) string {
	if len(labelPairs)%2 != 0 {
		panic("SeriesKey takes label name, value pairs")
	}
	if len(labelPairs) == 0 {
		return name
	}
	pairs := make([]string, 0, len(labelPairs)/2)
	for i := 0; i < len(labelPairs); i += 2 {
		pairs = append(pairs, labelPairs[i]+"="+strconv.Quote(labelPairs[i+1]))
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// ParseMetrics reads the samples of the Prometheus text exposition
// format; comments (HELP, TYPE) are skipped.
func ParseMetrics(text string) (Metrics, error) {
	out := Metrics{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n+1, line, err)
		}
		out[key] = value
	}
	return out, nil
}

// parseSample parses `name{label="value",...} value [timestamp]`.
func parseSample(line string) (string, float64, error) {
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return "", 0, fmt.Errorf("no metric name")
	}
	name, rest := line[:end], line[end:]
	var pairs []string
	if rest[0] == '{' {
		var err error
		if pairs, rest, err = parseLabels(rest[1:]); err != nil {
			return "", 0, err
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return "", 0, fmt.Errorf("want a value and an optional timestamp after the series")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, err
	}
	return SeriesKey(name, pairs...), v, nil
}

// parseLabels parses `a="x",b="y"}` and returns the name, value pairs and
// what follows the closing brace.
func parseLabels(s string) ([]string, string, error) {
	var pairs []string
	for {
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, "}") {
			return pairs, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, "", fmt.Errorf("bad label at %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var value strings.Builder
		closed := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					value.WriteByte('\n')
				default: // \\ and \"
					value.WriteByte(s[i])
				}
				continue
			}
			if c == '"' {
				s, closed = s[i+1:], true
				break
			}
			value.WriteByte(c)
		}
		if !closed {
			return nil, "", fmt.Errorf("unterminated value of label %s", name)
		}
		pairs = append(pairs, name, value.String())
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, ",") {
			s = s[1:]
		}
	}
}
