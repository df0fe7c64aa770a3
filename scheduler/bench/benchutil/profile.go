package benchutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Profiles is what StartProfiles captures. Each benchmark takes what
// tells its costs apart: scheduler_perf's workloads this process's CPU,
// allocations and lock contention (scheduler, kube-apiserver and harness
// share it), BenchmarkReservationCost this process's CPU and
// kube-apiserver's, BenchmarkReservationStatusWrite kube-apiserver's
// allocations.
type Profiles struct {
	// CPU profiles this process's CPU into <base>.cpu.pprof.
	CPU bool
	// AllocsAndMutex writes this process's allocation and contended-lock
	// profiles at the start and at the stop, to compare as pairs:
	// <base>.{allocs,mutex}-{start,end}.pprof (go tool pprof
	// -sample_index=alloc_space -diff_base start end). One in 10
	// contention events is recorded, from the first such profile on.
	AllocsAndMutex bool
	// APIServerCPU, when not zero, profiles kube-apiserver's CPU over that
	// long from the start (its /debug/pprof/profile, which has to be told
	// how long when asked), into <base>.apiserver.cpu.pprof.
	APIServerCPU time.Duration
	// APIServerAllocs saves kube-apiserver's allocation profile
	// (cumulative since it started) at the start and at the stop, into
	// <base>.apiserver.allocs.{before,after}.pprof: `go tool pprof -base
	// <before> <after>` shows what was allocated between.
	APIServerAllocs bool
}

// mutexSampling: one in mutexSampling contention events is recorded.
const mutexSampling = 10

// StartProfiles, when $GANTRY_BENCH_PROFILE_DIR is set, starts capturing
// what p says for the benchmark (or workload) called name, into
// <dir>/<name> (ProfileBase); apiserver reaches kube-apiserver (nil when p
// asks nothing of it). stop ends the capture and waits for kube-apiserver's
// profiles; it may be called more than once (a benchmark that fails while
// measured stops its profiles at cleanup too, so that the next can start
// its own) and returns the same error each time. Without the variable
// StartProfiles does nothing.
//
// An error in starting this process's profiles is returned with a nil
// stop, nothing left running. An error in saving kube-apiserver's first
// allocation profile is returned with a stop that still does the rest.
func StartProfiles(name string, apiserver rest.Interface, p Profiles) (stop func() error, err error) {
	dir := os.Getenv(EnvProfileDir)
	if dir == "" {
		return func() error { return nil }, nil
	}
	base := ProfileBase(dir, name)
	var stops []func() error
	if p.AllocsAndMutex {
		goruntime.SetMutexProfileFraction(mutexSampling)
		if err := writeProcessProfiles(base, "start"); err != nil {
			return nil, err
		}
		stops = append(stops, func() error {
			if err := writeProcessProfiles(base, "end"); err != nil {
				return fmt.Errorf("writing the allocation and lock profiles: %w", err)
			}
			return nil
		})
	}
	if p.CPU {
		cpu, err := os.Create(base + ".cpu.pprof")
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("starting the CPU profile (not with -test.cpuprofile): %w", err)
		}
		// The CPU profile ends first, so that the rest is not in it.
		stops = append([]func() error{func() error {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				return fmt.Errorf("writing %s: %w", cpu.Name(), err)
			}
			return nil
		}}, stops...)
	}
	if p.APIServerCPU > 0 {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*p.APIServerCPU)
			defer cancel()
			raw, err := apiserver.Get().AbsPath("/debug/pprof/profile").
				Param("seconds", strconv.Itoa(int(p.APIServerCPU/time.Second))).DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(base+".apiserver.cpu.pprof", raw, 0o644)
			}
			done <- err
		}()
		stops = append(stops, func() error {
			if err := <-done; err != nil {
				return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
			}
			return nil
		})
	}
	var startErr error
	if p.APIServerAllocs {
		startErr = saveAPIServerAllocs(apiserver, base, "before")
		stops = append(stops, func() error { return saveAPIServerAllocs(apiserver, base, "after") })
	}
	return sync.OnceValue(func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}), startErr
}

// writeProcessProfiles writes this process's allocation and contended-lock
// profiles into <base>.{allocs,mutex}-<suffix>.pprof.
func writeProcessProfiles(base, suffix string) error {
	for _, name := range []string{"allocs", "mutex"} {
		f, err := os.Create(base + "." + name + "-" + suffix + ".pprof")
		if err != nil {
			return err
		}
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// saveAPIServerAllocs saves kube-apiserver's allocation profile into
// <base>.apiserver.allocs.<when>.pprof.
func saveAPIServerAllocs(apiserver rest.Interface, base, when string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := apiserver.Get().AbsPath("/debug/pprof/allocs").DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(base+".apiserver.allocs."+when+".pprof", raw, 0o644)
	}
	if err != nil {
		return fmt.Errorf("kube-apiserver's allocation profile: %w", err)
	}
	return nil
}

// ProfileBase is where the profiles of a benchmark or workload called name
// go: <dir>/<name>, with its slashes and spaces made underscores. Its
// second and later runs (-test.count, or KEEP=1) are numbered:
// <name>.2.cpu.pprof, ...
func ProfileBase(dir, name string) string {
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(name))
	next := base
	for i := 2; ; i++ {
		if _, err := os.Stat(next + ".cpu.pprof"); err != nil {
			return next
		}
		next = fmt.Sprintf("%s.%d", base, i)
	}
}
