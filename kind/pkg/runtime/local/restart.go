package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

// stopTimeout bounds how long a signalled component may take to exit before
// it is killed.
const stopTimeout = 30 * time.Second

// RestartComponent implements cluster.ComponentRestarter. The component's
// process is signalled and, once gone, kwokctl starts it again as it does
// every stopped component of a cluster. kwokctl truncates a component's log
// when it starts it, so the log of the process that ended is kept beside
// it as <component>.<n>.log (and exported with the others).
func (r *Runtime) RestartComponent(ctx context.Context, component string, sig syscall.Signal) error {
	if !slices.Contains(r.Components(), component) {
		return fmt.Errorf("unknown component %q: choose one of %s", component, strings.Join(r.Components(), ", "))
	}
	pidFile := r.pidFile(component)
	if pid, err := readPid(pidFile); err == nil && !gone(pid) {
		if err := stopProcess(ctx, pid, sig); err != nil {
			return fmt.Errorf("stopping %s: %w", component, err)
		}
	}
	// A pid file left behind would make kwokctl check a recycled pid.
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := r.keepLog(component); err != nil {
		return fmt.Errorf("keeping the log of %s: %w", component, err)
	}
	if component == kueue.Component {
		if err := r.startKueue(); err != nil {
			return err
		}
	} else if err := r.kwokctl(ctx, "start", "cluster", "--wait", r.o.Timeout.String(), "--timeout", r.o.Timeout.String()); err != nil {
		return err
	}
	if !alive(pidFile) {
		tail, _ := r.LogTail(component, 15)
		return fmt.Errorf("%s did not start again; last lines of its log:\n%s", component, tail)
	}
	return nil
}

func readPid(pidFile string) (int, error) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds no pid", pidFile)
	}
	return pid, nil
}

// gone reports whether pid has exited. Components are not our children (the
// kwokctl that forked them has exited), so an exited one may linger as a
// zombie until its new parent reaps it.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesized command name.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z' || stat[i+2] == 'X'
	}
	return false
}

// stopProcess signals pid and waits for it to exit, killing it if it has not
// within stopTimeout.
func stopProcess(ctx context.Context, pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(stopTimeout)
	for !gone(pid) {
		if sig != syscall.SIGKILL && time.Now().After(deadline) {
			sig = syscall.SIGKILL
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			deadline = time.Now().Add(stopTimeout)
		} else if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not exit after SIGKILL", pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// keepLog moves a component's log to the first free <component>.<n>.log.
func (r *Runtime) keepLog(component string) error {
	dir := filepath.Join(r.clusterDir(), "logs")
	src := filepath.Join(dir, component+".log")
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for n := 1; ; n++ {
		dst := filepath.Join(dir, fmt.Sprintf("%s.%d.log", component, n))
		if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
			return os.Rename(src, dst)
		}
	}
}

// exportKeptLogs copies the logs keepLog kept into the components directory
// of an export, beside the current ones kwokctl exported, and Kueue's
// current log, which kwokctl does not know of.
func (r *Runtime) exportKeptLogs(dir string) error {
	src := filepath.Join(r.clusterDir(), "logs")
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		base, ok := strings.CutSuffix(name, ".log")
		if !ok {
			continue
		}
		if base == kueue.Component {
			// Not kwokctl's: it exported none of its logs.
			if err := copyFile(filepath.Join(src, name), filepath.Join(dir, r.o.Name, "components", name)); err != nil {
				return err
			}
			continue
		}
		i := strings.LastIndexByte(base, '.')
		if i < 0 || !slices.Contains(r.Components(), base[:i]) {
			continue
		}
		if _, err := strconv.Atoi(base[i+1:]); err != nil {
			continue
		}
		// kwokctl exports into <dir>/<cluster>/components.
		if err := copyFile(filepath.Join(src, name), filepath.Join(dir, r.o.Name, "components", name)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
