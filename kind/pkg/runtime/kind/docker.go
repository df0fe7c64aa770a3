package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	kindlog "sigs.k8s.io/kind/pkg/log"
	"sigs.k8s.io/yaml"
)

// Labels of what the runtime makes in Docker besides kind's node containers.
const (
	managedLabel = "dev.gantry.managed-by=gantry-cluster"
	clusterLabel = "dev.gantry.cluster"
)

// docker runs the docker CLI and returns its trimmed standard output; a
// failure carries what it printed on standard error.
func docker(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("docker %s: %s", strings.Join(args, " "), msg)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ensureNetwork creates the cluster's Docker network, labelled as
// Gantry's, unless it exists. A network of that name that Gantry did not
// make is refused rather than shared.
func (r *Runtime) ensureNetwork(ctx context.Context) error {
	labels, err := docker(ctx, "network", "inspect", "--format", "{{json .Labels}}", r.network())
	if err == nil {
		if !strings.Contains(labels, `"`+clusterLabel+`":"`+r.o.Name+`"`) {
			return fmt.Errorf("Docker network %s exists but Gantry did not make it for cluster %q; remove it or pass another --name", r.network(), r.o.Name)
		}
		return nil
	}
	_, err = docker(ctx, "network", "create", "--driver", "bridge",
		"--label", managedLabel, "--label", clusterLabel+"="+r.o.Name, r.network())
	return err
}

// removeNetwork removes the cluster's network if Gantry made it and no
// container is attached any more.
func (r *Runtime) removeNetwork(ctx context.Context) error {
	out, err := docker(ctx, "network", "inspect", "--format", `{{index .Labels "`+clusterLabel+`"}} {{len .Containers}}`, r.network())
	if err != nil {
		return nil // already gone
	}
	owner, attached, _ := strings.Cut(out, " ")
	if owner != r.o.Name {
		return nil // not Gantry's: left alone
	}
	if attached != "0" {
		return fmt.Errorf("Docker network %s still has %s containers attached; it was kept", r.network(), attached)
	}
	_, err = docker(ctx, "network", "rm", r.network())
	return err
}

// removeEmptyKubeconfig removes the kubeconfig kind emptied on delete:
// Gantry's kubeconfig path holds one cluster.
func removeEmptyKubeconfig(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var kc struct {
		Clusters []any `json:"clusters"`
	}
	if err := yaml.Unmarshal(data, &kc); err != nil || len(kc.Clusters) > 0 {
		return nil // not empty, or not a kubeconfig: not ours to remove
	}
	return os.Remove(path)
}

// fileLogger is kind's logger: everything kind says goes to a file that
// error messages point to; gantry-cluster prints its own progress.
type fileLogger struct {
	path string
	mu   sync.Mutex
}

var _ kindlog.Logger = &fileLogger{}

func (l *fileLogger) write(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", level, strings.TrimRight(msg, "\n"))
}

func (l *fileLogger) Warn(message string)                      { l.write("W", message) }
func (l *fileLogger) Warnf(format string, args ...any)         { l.write("W", fmt.Sprintf(format, args...)) }
func (l *fileLogger) Error(message string)                     { l.write("E", message) }
func (l *fileLogger) Errorf(format string, args ...any)        { l.write("E", fmt.Sprintf(format, args...)) }
func (l *fileLogger) V(level kindlog.Level) kindlog.InfoLogger { return infoLogger{l, level} }

type infoLogger struct {
	l     *fileLogger
	level kindlog.Level
}

func (i infoLogger) Info(message string)              { i.l.write("I", message) }
func (i infoLogger) Infof(format string, args ...any) { i.l.write("I", fmt.Sprintf(format, args...)) }
func (i infoLogger) Enabled() bool                    { return i.level <= 2 }
