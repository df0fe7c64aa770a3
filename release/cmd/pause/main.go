// Command pause is the process of a pod's sandbox container: it holds the
// pod's namespaces, reaps the orphans that reach it when the pod shares one
// PID namespace, and exits cleanly when the runtime stops the sandbox.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set by the build (-X main.version=...).
var version = "unknown"

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "-v" {
			fmt.Printf("pause (Gantry) %s\n", version)
			return
		}
		fmt.Fprintln(os.Stderr, "usage: pause [-v]")
		os.Exit(2)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "shutting down, got signal %v\n", sig)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; signals coalesce, so one
// SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
