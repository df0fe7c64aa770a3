package invariants

import (
	"strings"
	"testing"
	"time"
)

// readings are a component's readings every 10 s for 20 minutes, of 100
// MiB and 100 goroutines, changed by end for the last minute's readings.
func readings(end func(*MemSample)) []MemSample {
	var out []MemSample
	for d := time.Duration(0); d <= 20*time.Minute; d += 10 * time.Second {
		s := MemSample{Time: at(d), HeapAfterGC: 100 << 20, Goroutines: 100}
		if d >= 19*time.Minute && end != nil {
			end(&s)
		}
		out = append(out, s)
	}
	return out
}

func TestLeaks(t *testing.T) {
	cases := map[string]struct {
		samples []MemSample
		want    []want
		wantErr string
	}{
		"flat": {
			samples: readings(nil),
		},
		"heap at its limit, goroutines at theirs": {
			samples: readings(func(s *MemSample) { s.HeapAfterGC, s.Goroutines = 150<<20, 110 }),
		},
		"heap doubled": {
			samples: readings(func(s *MemSample) { s.HeapAfterGC = 200 << 20 }),
			want: []want{{InvariantHeapGrowth, []string{"component kube-scheduler: heap after GC at the end is 200.0 MiB (median of 7 readings, 2026-03-01T12:19:00Z to 2026-03-01T12:20:00Z)",
				"2.00x its 100.0 MiB after warm-up (median of 7 readings, 2026-03-01T12:05:00Z to 2026-03-01T12:06:00Z)", "above the 1.50x limit (150.0 MiB) by 50.0 MiB"}}},
		},
		"goroutines past ten percent": {
			samples: readings(func(s *MemSample) { s.Goroutines = 111 }),
			want:    []want{{InvariantGoroutineGrowth, []string{"goroutine count at the end is 111.0", "1.11x its 100.0 after warm-up", "above the 1.10x limit (110.0) by 1.0"}}},
		},
		"one reading taken mid-burst": {
			samples: func() []MemSample {
				s := readings(nil)
				s[len(s)-1].HeapAfterGC, s[len(s)-1].Goroutines = 400<<20, 300
				return s
			}(),
		},
		"a run too short": {
			samples: readings(nil)[:40],
			wantErr: "do not hold a warm-up of 5m0s and two windows of 1m0s",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := NewChecker(DefaultConfig())
			got, err := c.CheckLeaks("kube-scheduler", tc.samples)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d violations, want %d:\n%s", len(got), len(tc.want), describe(got))
			}
			for _, w := range tc.want {
				if !anySays(got, w) {
					t.Errorf("no %s violation says all of %q; got:\n%s", w.invariant, w.says, describe(got))
				}
			}
			if n := c.Checks()[FamilyLeak]; n != 2 {
				t.Errorf("%d leak checks made, want 2", n)
			}
			// The same readings again report nothing new.
			if again, err := c.CheckLeaks("kube-scheduler", tc.samples); err != nil || len(again) != 0 {
				t.Errorf("checked again: %v, %v; want nothing new", again, err)
			}
		})
	}
}
