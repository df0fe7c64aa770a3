package cluster

import (
	"fmt"
	"io"
	"time"
)

// progress prints one line when a step starts and one when it ends, with the
// step's duration and the time since the command began.
type progress struct {
	out   io.Writer
	start time.Time
}

func newProgress(out io.Writer) *progress { return &progress{out: out, start: time.Now()} }

func (p *progress) elapsed() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(p.start).Seconds())
}

// step runs fn as a named step.
func (p *progress) step(name string, fn func() (string, error)) error {
	fmt.Fprintf(p.out, "%s • %s ...\n", p.elapsed(), name)
	began := time.Now()
	detail, err := fn()
	took := time.Since(began).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(p.out, "%s ✗ %s failed after %s\n", p.elapsed(), name, took)
		return err
	}
	if detail != "" {
		detail = ": " + detail
	}
	fmt.Fprintf(p.out, "%s ✓ %s (%s)%s\n", p.elapsed(), name, took, detail)
	return nil
}

func (p *progress) info(format string, args ...any) {
	fmt.Fprintf(p.out, "%s   "+format+"\n", append([]any{p.elapsed()}, args...)...)
}
