package benchutil

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RecordCPU appends to $ARTIFACTS/cpu.jsonl, for the workload benchmark,
// the wall time from now (its nodes and reservations in place) to its end
// and the CPU time spent meanwhile by this process (scheduler,
// kube-apiserver and harness) and by its child processes (etcd), with the
// machine's CPU count. A workload that kept every CPU busy is bound by CPU;
// one that left CPUs idle while pods waited was held up by something else
// (a lock, a round trip, a timer). The garbage collector's CPU time and
// the live heap say how much of the process's time was its; the
// goroutines, whether earlier workloads left work running. It costs two
// reads of /proc and of runtime/metrics, so it is always on.
func RecordCPU(tc T, benchmark string) {
	if Artifacts() == "" {
		return
	}
	start, self, children, gc, goroutines := time.Now(), SelfCPU(), ChildrenCPU(), readGC(), runtime.NumGoroutine()
	tc.Cleanup(func() {
		end := readGC()
		err := AppendJSON(CPUFile, map[string]any{"benchmark": benchmark, "cpus": runtime.NumCPU(),
			"wallSeconds": time.Since(start).Seconds(), "processCPUSeconds": (SelfCPU() - self).Seconds(),
			"childCPUSeconds": (ChildrenCPU() - children).Seconds(),
			"gcCPUSeconds":    end[gcCPU] - gc[gcCPU], "gcCycles": end[gcCycles] - gc[gcCycles],
			"liveHeapStartMB": gc[liveHeap] / (1 << 20), "liveHeapEndMB": end[liveHeap] / (1 << 20),
			"goroutinesStart": goroutines, "goroutinesEnd": runtime.NumGoroutine()})
		if err != nil {
			tc.Logf("recording CPU use: %v", err)
		}
	})
}

// The garbage collector's share: its CPU time (estimated by the runtime),
// its cycles, and the heap it found live at the last one.
const (
	gcCPU    = "/cpu/classes/gc/total:cpu-seconds"
	gcCycles = "/gc/cycles/total:gc-cycles"
	liveHeap = "/gc/heap/live:bytes"
)

func readGC() map[string]float64 {
	samples := []metrics.Sample{{Name: gcCPU}, {Name: gcCycles}, {Name: liveHeap}}
	metrics.Read(samples)
	out := map[string]float64{}
	for _, s := range samples {
		switch s.Value.Kind() {
		case metrics.KindFloat64:
			out[s.Name] = s.Value.Float64()
		case metrics.KindUint64:
			out[s.Name] = float64(s.Value.Uint64())
		}
	}
	return out
}

// SelfCPU is the CPU time, user and system, this process has spent so far.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ChildrenCPU is the CPU time of this process's running children, from
// /proc (getrusage counts only children that have exited).
func ChildrenCPU() time.Duration {
	var sum time.Duration
	for _, d := range childCPUByName() {
		sum += d
	}
	return sum
}

// ProcessCPU is the CPU time so far of this process (key "") and of its
// running children, by command name ("etcd", "kube-apiserver").
func ProcessCPU() map[string]time.Duration {
	cpu := childCPUByName()
	cpu[""] = SelfCPU()
	return cpu
}

// childCPUByName reads /proc for the user and system time of this
// process's running children, in clock ticks of 1/100 s (Linux's USER_HZ),
// summed by command name.
func childCPUByName() map[string]time.Duration {
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	ppid := strconv.Itoa(os.Getpid())
	cpu := map[string]time.Duration{}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: fields
		// are counted after its closing parenthesis.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
		if len(f) < 13 || f[1] != ppid {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu[s[open+1:end]] += time.Duration(u+st) * 10 * time.Millisecond
	}
	return cpu
}
