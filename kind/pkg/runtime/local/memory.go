package local

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

var _ cluster.ResidentMemoryReader = (*Runtime)(nil)

// ResidentMemory implements cluster.ResidentMemoryReader: the resident set
// of the component's process (VmRSS of /proc/<pid>/status), in bytes.
func (r *Runtime) ResidentMemory(component string) (int64, error) {
	pid, err := readPid(r.pidFile(component))
	if err != nil {
		return 0, fmt.Errorf("the process of %s: %w", component, err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("the memory of %s (pid %d): %w", component, pid, err)
	}
	defer f.Close()
	rss, err := parseVmRSS(f)
	if err != nil {
		return 0, fmt.Errorf("the memory of %s (pid %d): %w", component, pid, err)
	}
	return rss, nil
}

// parseVmRSS reads the VmRSS line of a /proc/<pid>/status file, in bytes.
func parseVmRSS(r io.Reader) (int64, error) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		value, ok := strings.CutPrefix(s.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want <number> kB", s.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("VmRSS line %q: not a size", s.Text())
		}
		return kb << 10, nil
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS line (a process that has exited, or a kernel thread)")
}
