//go:build soak

package soak

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// recorder keeps what a run did, for its report; tenants and the fault
// loop write to it from their goroutines.
type recorder struct {
	mu     sync.Mutex
	ops    map[string]map[string]int // kind → result (or "failed") → count
	errors map[string][]string       // kind → the first errors
	faults []fault
}

// fault is one injected fault.
type fault struct {
	Kind      string        `json:"kind"`
	Component string        `json:"component"`
	At        time.Time     `json:"at"`
	Took      time.Duration `json:"took"`
	Error     string        `json:"error,omitempty"`
}

// keptErrors is how many errors of a kind the report keeps.
const keptErrors = 10

func newRecorder() *recorder {
	return &recorder{ops: map[string]map[string]int{}, errors: map[string][]string{}}
}

func (r *recorder) op(kind, result string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		result = "failed"
		if len(r.errors[kind]) < keptErrors {
			r.errors[kind] = append(r.errors[kind], err.Error())
		}
	}
	if r.ops[kind] == nil {
		r.ops[kind] = map[string]int{}
	}
	r.ops[kind][result]++
}

func (r *recorder) fault(f fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

// report is a run's outcome, written as soak-report.json beside the
// suite's artifacts and printed as text.
type report struct {
	Seed       uint64                    `json:"seed"`
	Started    time.Time                 `json:"started"`
	Duration   time.Duration             `json:"duration"`
	Tenants    int                       `json:"tenants"`
	Ops        map[string]map[string]int `json:"operations"`
	Errors     map[string][]string       `json:"errors,omitempty"`
	Faults     []fault                   `json:"faults"`
	Checks     invariants.Counts         `json:"checks"`
	Violations []invariants.Violation    `json:"violations"`
	// Shortfalls are the kinds of operation done less often than
	// minPerMinute asks, and the fault kinds injected fewer than
	// minFaults times.
	Shortfalls []string `json:"shortfalls,omitempty"`
}

// minFaults is how many faults of each kind a run must inject.
const minFaults = 3

func (r *recorder) report(seed uint64, started time.Time, d time.Duration, tenants int, c *invariants.Checker, faultKinds []string) *report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &report{Seed: seed, Started: started, Duration: d, Tenants: tenants, Ops: map[string]map[string]int{},
		Errors: maps.Clone(r.errors), Faults: slices.Clone(r.faults), Checks: c.Checks(), Violations: c.Violations()}
	for k, v := range r.ops {
		rep.Ops[k] = maps.Clone(v)
	}
	for _, kind := range slices.Sorted(maps.Keys(minPerMinute)) {
		done, want := rep.Ops[kind][resultDone], minPerMinute[kind]*d.Minutes()
		if float64(done) < want {
			rep.Shortfalls = append(rep.Shortfalls, fmt.Sprintf("%s: %d done, the run needs %.0f (%.1f a minute)", kind, done, want, minPerMinute[kind]))
		}
	}
	injected := map[string]int{}
	for _, f := range rep.Faults {
		if f.Error == "" {
			injected[f.Kind]++
		}
	}
	for _, kind := range faultKinds {
		if injected[kind] < minFaults {
			rep.Shortfalls = append(rep.Shortfalls, fmt.Sprintf("fault %s: injected %d times, the run needs %d", kind, injected[kind], minFaults))
		}
	}
	return rep
}

func (rep *report) write(path string) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func (rep *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak run of %s from %s, seed %d, %d tenants\n", rep.Duration, rep.Started.UTC().Format(time.RFC3339), rep.Seed, rep.Tenants)
	b.WriteString("operations:\n")
	for _, kind := range slices.Sorted(maps.Keys(rep.Ops)) {
		var parts []string
		for _, res := range slices.Sorted(maps.Keys(rep.Ops[kind])) {
			parts = append(parts, fmt.Sprintf("%s %d", res, rep.Ops[kind][res]))
		}
		fmt.Fprintf(&b, "  %s: %s\n", kind, strings.Join(parts, ", "))
		for _, e := range rep.Errors[kind] {
			fmt.Fprintf(&b, "    error: %s\n", e)
		}
	}
	byKind := map[string]int{}
	for _, f := range rep.Faults {
		byKind[f.Kind]++
	}
	fmt.Fprintf(&b, "faults: %d", len(rep.Faults))
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		fmt.Fprintf(&b, ", %s %d", k, byKind[k])
	}
	b.WriteString("\n")
	for _, f := range rep.Faults {
		fmt.Fprintf(&b, "  %s %s at %s (%s)", f.Kind, f.Component, f.At.UTC().Format(time.RFC3339), f.Took.Round(100*time.Millisecond))
		if f.Error != "" {
			fmt.Fprintf(&b, ": %s", f.Error)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s\n", rep.Checks)
	fmt.Fprintf(&b, "violations: %d\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, s := range rep.Shortfalls {
		fmt.Fprintf(&b, "shortfall: %s\n", s)
	}
	return b.String()
}
