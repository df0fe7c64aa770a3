package benchutil

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// The files of $ARTIFACTS the recorders append to, one line (or, for
// pods.csv, one line a pod) per workload run. perfreport reads
// reservations.jsonl; the others are for reading by hand.
const (
	ReservationsFile = "reservations.jsonl" // perf: reservations and owners (BenchmarkPerfScheduling)
	CountersFile     = "counters.jsonl"     // WatchCounters
	CPUFile          = "cpu.jsonl"          // RecordCPU
	PodTraceFile     = "pods.csv"           // TracePods
)

// AppendJSON appends v as one line of JSON to $ARTIFACTS/<file>. Without
// $ARTIFACTS it records nothing.
func AppendJSON(file string, v any) error {
	dir := Artifacts()
	if dir == "" {
		return nil
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return appendLine(filepath.Join(dir, file), line)
}

// AppendLines appends lines (without a final newline; one is added) to
// $ARTIFACTS/<file>. Without $ARTIFACTS it records nothing.
func AppendLines(file, lines string) error {
	dir := Artifacts()
	if dir == "" {
		return nil
	}
	return appendLine(filepath.Join(dir, file), []byte(lines))
}

// appendLine appends line and a newline to the file at path.
func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// T is what the recorders need of the benchmark they record: testing.TB
// and scheduler_perf's ktesting.TContext (a workload) both have it.
type T interface {
	Cleanup(func())
	Logf(format string, args ...any)
}
