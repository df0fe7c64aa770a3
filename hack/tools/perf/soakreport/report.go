package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// report is the part of e2e/soak's soak-report.json the page shows; the
// suite's report type (e2e/soak/report_test.go) documents each field.
type report struct {
	Shape      string                    `json:"shape"`
	Seed       uint64                    `json:"seed"`
	Started    time.Time                 `json:"started"`
	Duration   time.Duration             `json:"duration"`
	Tenants    int                       `json:"tenants"`
	Ops        map[string]map[string]int `json:"operations"`
	Faults     []fault                   `json:"faults"`
	Checks     map[string]int            `json:"checks"`
	Violations []violation               `json:"violations"`
	Failures   []string                  `json:"failures"`
	Shortfalls []string                  `json:"shortfalls"`
	Memory     *memory                   `json:"memory"`
}

type fault struct {
	Kind      string        `json:"kind"`
	Component string        `json:"component"`
	At        time.Time     `json:"at"`
	Took      time.Duration `json:"took"`
	Error     string        `json:"error"`
}

// violation is test/soak/invariants.Violation, whose fields have no JSON
// names.
type violation struct {
	Family    string
	Invariant string
	Seen      time.Time
	Message   string
}

type memory struct {
	Every               time.Duration     `json:"every"`
	HeapMetric          string            `json:"heapMetric"`
	WarmUp              time.Duration     `json:"warmUp"`
	Window              time.Duration     `json:"window"`
	HeapRatioLimit      float64           `json:"heapRatioLimit"`
	GoroutineRatioLimit float64           `json:"goroutineRatioLimit"`
	Components          []componentMemory `json:"components"`
}

type componentMemory struct {
	Component         string     `json:"component"`
	Readings          int        `json:"readings"`
	ReadErrors        int        `json:"readErrors"`
	LastReadError     string     `json:"lastReadError"`
	Judged            int        `json:"judged"`
	MaxHeapRatio      float64    `json:"maxHeapRatio"`
	MaxGoroutineRatio float64    `json:"maxGoroutineRatio"`
	Lifetimes         []lifetime `json:"lifetimes"`
}

type lifetime struct {
	Started    time.Time     `json:"started"`
	From       time.Time     `json:"from"`
	To         time.Time     `json:"to"`
	Span       time.Duration `json:"span"`
	Judged     bool          `json:"judged"`
	NotJudged  string        `json:"notJudged"`
	Violations []string      `json:"violations"`
	Samples    []sample      `json:"samples"`
}

type sample struct {
	At          time.Time `json:"at"`
	HeapAfterGC uint64    `json:"heapAfterGC"`
	Goroutines  int       `json:"goroutines"`
}

// readReport reads a soak-report.json.
func readReport(path string) (*report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Shape == "" {
		return nil, fmt.Errorf("%s: the report names no shape (a run of e2e/soak sets it)", path)
	}
	if r.Duration <= 0 {
		return nil, fmt.Errorf("%s: the report's run lasted %s", path, r.Duration)
	}
	return &r, nil
}
