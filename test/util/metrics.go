package util

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue reads, from a registry of this process, the value of the
// counter or gauge name in the series whose labels include labels (nil:
// the only series). found is false when there is no such series: a vector
// that has counted nothing yet has none, and neither has a metric that was
// renamed, so a caller that expects the series fails on !found.
func MetricValue(g prometheus.Gatherer, name string, labels map[string]string) (value float64, found bool, err error) {
	families, err := g.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		if labels == nil && len(f.GetMetric()) != 1 {
			return 0, false, fmt.Errorf("metric %s has %d series; name the labels of one", name, len(f.GetMetric()))
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true, nil
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true, nil
			}
			return 0, false, fmt.Errorf("metric %s is neither a counter nor a gauge", name)
		}
	}
	return 0, false, nil
}
