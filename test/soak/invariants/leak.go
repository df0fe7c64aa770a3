package invariants

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Invariants of the Leak family.
const (
	// InvariantHeapGrowth: a component's heap after GC grew past
	// HeapRatio of its level after warm-up.
	InvariantHeapGrowth = "HeapGrowth"
	// InvariantGoroutineGrowth: its goroutines grew past GoroutineRatio
	// of their level after warm-up.
	InvariantGoroutineGrowth = "GoroutineGrowth"
)

// MemSample is one reading of a component: its heap after the last GC
// (bytes) and its goroutine count.
type MemSample struct {
	Time        time.Time
	HeapAfterGC uint64
	Goroutines  int
}

// level is a window's median of a component's readings.
type level struct {
	from, to   time.Time
	n          int
	heap       uint64
	goroutines int
}

// CheckLeaks judges one component's readings over a run (any order): its
// level at the end, the median of the readings of the last LeakWindow, must
// be within HeapRatio (heap) and GoroutineRatio (goroutines) of its level
// after warm-up, the median of the readings of the LeakWindow that starts
// LeakWarmUp after the first reading. Medians keep one reading taken
// mid-burst from deciding. It is an error for the readings not to hold
// both windows apart. A violation is reported once per component and
// invariant while it holds.
func (c *Checker) CheckLeaks(component string, samples []MemSample) ([]Violation, error) {
	if len(samples) == 0 {
		return nil, fmt.Errorf("component %s: no readings", component)
	}
	s := slices.Clone(samples)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Time.Before(s[j].Time) })
	warm := s[0].Time.Add(c.cfg.LeakWarmUp)
	endFrom := s[len(s)-1].Time.Add(-c.cfg.LeakWindow)
	if endFrom.Before(warm.Add(c.cfg.LeakWindow)) {
		return nil, fmt.Errorf("component %s: readings from %s to %s do not hold a warm-up of %s and two windows of %s",
			component, stamp(s[0].Time), stamp(s[len(s)-1].Time), c.cfg.LeakWarmUp, c.cfg.LeakWindow)
	}
	base := median(s, warm, warm.Add(c.cfg.LeakWindow))
	end := median(s, endFrom, s[len(s)-1].Time)
	if base.n == 0 {
		return nil, fmt.Errorf("component %s: no reading between %s and %s to take its level after warm-up from", component, stamp(warm), stamp(warm.Add(c.cfg.LeakWindow)))
	}
	obj := []ObjectRef{{Kind: "Component", Name: component}}
	var out []Violation
	judge := func(invariant, what string, baseV, endV float64, ratio float64, show func(float64) string) {
		c.checks[FamilyLeak]++
		key := "leak/" + component + "/" + invariant
		limit := baseV * ratio
		if endV <= limit {
			delete(c.leaks, key)
			return
		}
		if c.leaks[key] {
			return
		}
		c.leaks[key] = true
		got := "unbounded"
		if baseV > 0 {
			got = fmt.Sprintf("%.2fx", endV/baseV)
		}
		out = append(out, Violation{
			Family: FamilyLeak, Invariant: invariant, Objects: obj, Since: base.from, Seen: end.to,
			Message: fmt.Sprintf("component %s: %s at the end is %s (median of %d readings, %s to %s), %s its %s after warm-up (median of %d readings, %s to %s), above the %.2fx limit (%s) by %s",
				component, what, show(endV), end.n, stamp(end.from), stamp(end.to), got, show(baseV), base.n, stamp(base.from), stamp(base.to),
				ratio, show(limit), show(endV-limit)),
		})
	}
	judge(InvariantHeapGrowth, "heap after GC", float64(base.heap), float64(end.heap), c.cfg.HeapRatio, func(v float64) string {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	})
	judge(InvariantGoroutineGrowth, "goroutine count", float64(base.goroutines), float64(end.goroutines), c.cfg.GoroutineRatio, func(v float64) string {
		return fmt.Sprintf("%.1f", v)
	})
	c.reported = append(c.reported, out...)
	return out, nil
}

// Level is a window's median of a component's readings, as CheckLeaks
// takes it: From and To are its first and last reading's times.
type Level struct {
	From, To    time.Time
	Readings    int
	HeapAfterGC uint64
	Goroutines  int
}

// MedianLevel is the level CheckLeaks takes of the readings of s (sorted by
// time) from from to to, inclusive, for reports that show it.
func MedianLevel(s []MemSample, from, to time.Time) Level {
	l := median(s, from, to)
	return Level{From: l.from, To: l.to, Readings: l.n, HeapAfterGC: l.heap, Goroutines: l.goroutines}
}

// median is the median level of the readings of s (sorted by time) from
// from to to, inclusive; from and to become the first and last reading's
// times.
func median(s []MemSample, from, to time.Time) level {
	var heaps []uint64
	var gs []int
	l := level{}
	for _, x := range s {
		if x.Time.Before(from) || x.Time.After(to) {
			continue
		}
		if l.n == 0 {
			l.from = x.Time
		}
		l.to = x.Time
		l.n++
		heaps = append(heaps, x.HeapAfterGC)
		gs = append(gs, x.Goroutines)
	}
	if l.n == 0 {
		return l
	}
	slices.Sort(heaps)
	slices.Sort(gs)
	l.heap, l.goroutines = heaps[len(heaps)/2], gs[len(gs)/2]
	if len(heaps)%2 == 0 {
		l.heap = heaps[len(heaps)/2-1]/2 + heaps[len(heaps)/2]/2
		l.goroutines = (gs[len(gs)/2-1] + gs[len(gs)/2]) / 2
	}
	return l
}
