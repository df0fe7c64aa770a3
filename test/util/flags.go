package util

import (
	"testing"

	"github.com/spf13/pflag"
)

// FlagAdder is a binary's options type: it declares its flags on a flag set.
type FlagAdder interface{ AddFlags(fs *pflag.FlagSet) }

// ParseFlags returns the options newOptions makes after parsing args with the
// flags their AddFlags declares, failing the test on a parse error. With no
// args it shows that registering the flags keeps newOptions' defaults.
func ParseFlags[T FlagAdder](t testing.TB, newOptions func() T, args ...string) T {
	t.Helper()
	o := newOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return o
}
