package main

import (
	"math"

	"github.com/gantry-dev/gantry/hack/tools/perf/plot"
)

// memoryPanels are the plot's rows, one a run: each component's heap
// after GC (MiB) and goroutines against minutes into the run, a line
// broken where the component was restarted.
func memoryPanels(runs []*report) [][]plot.Panel {
	rows := make([][]plot.Panel, 0, len(runs))
	for _, r := range runs {
		heap := plot.Panel{Title: r.Shape + ": heap after GC", XLabel: "minutes into the run", YLabel: "MiB"}
		gr := plot.Panel{Title: r.Shape + ": goroutines", XLabel: "minutes into the run", YLabel: "goroutines"}
		if r.Memory != nil {
			origin := r.Started
			for _, c := range r.Memory.Components {
				for _, l := range c.Lifetimes {
					if len(l.Samples) > 0 && l.Samples[0].At.Before(origin) {
						origin = l.Samples[0].At
					}
				}
			}
			end := 0.0
			for _, c := range r.Memory.Components {
				name := c.Component
				if c.Readings == 0 {
					name += " (no readings)"
				}
				hs, gs := plot.Series{Name: name, Plain: true}, plot.Series{Name: name, Plain: true}
				for _, l := range c.Lifetimes {
					for i, s := range l.Samples {
						x := s.At.Sub(origin).Minutes()
						end = max(end, x)
						mib := float64(s.HeapAfterGC) / (1 << 20)
						g := float64(s.Goroutines)
						hs.Points = append(hs.Points, plot.Point{X: x, Y: mib, Min: mib, Max: mib, Break: i == 0})
						gs.Points = append(gs.Points, plot.Point{X: x, Y: g, Min: g, Max: g, Break: i == 0})
					}
				}
				heap.Series, gr.Series = append(heap.Series, hs), append(gr.Series, gs)
			}
			end = max(end, (r.Started.Sub(origin) + r.Duration).Minutes())
			heap.XMax, gr.XMax = xMax(end), xMax(end)
		}
		rows = append(rows, []plot.Panel{heap, gr})
	}
	return rows
}

// xMax is the x axis's end for a run of minutes: a multiple of 5, so that
// its five ticks fall on whole minutes. A run measures its work a little
// past what it was asked (30m0.3s): seconds past a multiple are left out.
func xMax(minutes float64) float64 {
	return max(5, 5*math.Ceil((minutes-0.1)/5))
}
