package kind

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

//go:embed files/docker
var dockerShim []byte

// capSysResource is CAP_SYS_RESOURCE's bit in a capability set.
const capSysResource = 24

// canBePrivileged reports whether Docker can start a --privileged container
// here: runc asks for every capability, which fails when this machine's
// bounding set (inherited by dockerd) lacks one. status is /proc/self/status.
func canBePrivileged(status string) (bool, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("CapBnd %q: %w", v, err)
			}
			return set&(1<<capSysResource) != 0, nil
		}
	}
	return false, fmt.Errorf("no CapBnd line in the process status")
}

// dockerPath puts the shim (files/docker) first on PATH for kind's docker
// calls when Docker cannot grant --privileged, and says which it chose. The
// shim lives in dir; nothing else on the machine changes. status is the
// content of /proc/self/status.
func dockerPath(dir, status string) (env []string, restricted bool, err error) {
	real, err := exec.LookPath("docker")
	if err != nil {
		return nil, false, fmt.Errorf("the kind runtime needs a Docker engine and its CLI; docker is not on PATH")
	}
	// A process started by one that put the shim on PATH (an e2e suite
	// running gantry-cluster) finds the shim: the docker it stands for is
	// the one its parent found.
	if parent := os.Getenv("GANTRY_REAL_DOCKER"); parent != "" && sameFile(real, filepath.Join(dir, "docker")) {
		real = parent
	}
	ok, err := canBePrivileged(status)
	if err != nil || ok {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(filepath.Join(dir, "docker"), dockerShim, 0o755); err != nil {
		return nil, false, err
	}
	abs, err := filepath.Abs(real)
	if err != nil {
		return nil, false, err
	}
	return []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "GANTRY_REAL_DOCKER=" + abs}, true, nil
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
