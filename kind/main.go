// Command gantry-cluster brings Gantry's development and e2e cluster up and
// down (`make up`, `make down`, `bazel run //kind:up`).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gantry-dev/gantry/kind/pkg/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cmd.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
