package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Upgrader is implemented by runtimes that can move a running cluster made
// by an earlier Gantry release to this checkout's release in place, one
// component at a time, in the order of docs/upgrade.md.
type Upgrader interface {
	// UpgradeSteps are the steps of an upgrade, in the order they must run:
	// each names what it upgrades (a component, or "crds").
	UpgradeSteps() []string
	// Upgrade runs one step and returns, with what it did, once the
	// upgraded component serves. A step whose component runs this
	// release already changes nothing.
	Upgrade(ctx context.Context, step string) (string, error)
}

// UpgradeSteps are the steps `upgrade` runs on this cluster, in order.
func (c *Cluster) UpgradeSteps() ([]string, error) {
	u, ok := c.runtime.(Upgrader)
	if !ok {
		return nil, &NotSupportedError{Runtime: c.runtime.Name(), Reason: "it cannot upgrade a cluster in place (its components run from this checkout's binaries: `down` and `up` instead)"}
	}
	return u.UpgradeSteps(), nil
}

// Upgrade runs the named steps of the upgrade in the runtime's order (all
// of them when none is named), and prints each. A step it does not know is
// refused before any runs.
func (c *Cluster) Upgrade(ctx context.Context, steps []string) error {
	all, err := c.UpgradeSteps()
	if err != nil {
		return err
	}
	for _, s := range steps {
		if !slices.Contains(all, s) {
			return fmt.Errorf("unknown upgrade step %q: the %s runtime's steps are, in order, %s", s, c.runtime.Name(), strings.Join(all, ", "))
		}
	}
	state, err := c.runtime.State(ctx)
	if err != nil {
		return err
	}
	if state != StateRunning {
		return fmt.Errorf("cluster %q is %s: only a running cluster is upgraded (`make up` starts it)", c.opts.Name, state)
	}
	u := c.runtime.(Upgrader)
	for _, s := range all {
		if len(steps) > 0 && !slices.Contains(steps, s) {
			continue
		}
		if err := c.p.step("upgrading "+s, func() (string, error) { return u.Upgrade(ctx, s) }); err != nil {
			return c.explain(ctx, err)
		}
	}
	return nil
}
