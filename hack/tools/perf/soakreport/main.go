// Command soakreport turns the reports of soak runs (e2e/soak's
// soak-report.json, one a shape of cluster) into docs/reliability.md and
// its plot.
//
//	soakreport -report soak-report.json [-report other.json] [-machine machine.txt] \
//	    -out docs/reliability.md -png docs/reliability.png
//
// The page shows, per shape, the run's work, its faults, the invariant
// checks and their violations, the leak verdicts per component, and the
// components' memory over the run; it ends with the commands that
// regenerate it: -command gives them, or soakreport works them out from
// the runs (a run on the local cluster is `make soak`).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-dev/gantry/hack/tools/perf/plot"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "soakreport:", err)
		os.Exit(1)
	}
}

// Each panel of the plot is panelW x panelH pixels.
const panelW, panelH = 640, 420

func run(args []string) error {
	fs := flag.NewFlagSet("soakreport", flag.ContinueOnError)
	var reports, commands multi
	fs.Var(&reports, "report", "a soak run's soak-report.json (repeatable: one a shape)")
	fs.Var(&commands, "command", "a command that regenerates the page (repeatable; instead of those worked out from the runs)")
	machine := fs.String("machine", "", "a file describing the machine the runs were on")
	out := fs.String("out", "", "the Markdown file to write")
	pngPath := fs.String("png", "", "the plot to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(reports) == 0 || *out == "" || *pngPath == "" {
		return fmt.Errorf("usage: soakreport -report soak-report.json [-report ...] -out reliability.md -png reliability.png")
	}
	in := pageInput{commands: commands}
	for _, path := range reports {
		r, err := readReport(path)
		if err != nil {
			return err
		}
		in.runs = append(in.runs, r)
	}
	if len(in.commands) == 0 {
		var err error
		if in.commands, err = regenerate(in.runs); err != nil {
			return err
		}
	}
	if *machine != "" {
		b, err := os.ReadFile(*machine)
		if err != nil {
			return err
		}
		in.machine = string(b)
	}
	rel, err := filepath.Rel(filepath.Dir(*out), *pngPath)
	if err != nil {
		return err
	}
	in.plot = filepath.ToSlash(rel)

	var png, md bytes.Buffer
	if err := plot.Write(&png, memoryPanels(in.runs), panelW, panelH); err != nil {
		return err
	}
	writePage(&md, in)
	if err := os.WriteFile(*pngPath, png.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(*out, md.Bytes(), 0o644)
}

// shapeRun is how a shape's run is made: its make command, and where it
// writes its report (the Makefile's SOAK_ARTIFACTS), relative to the
// repository.
type shapeRun struct{ command, report string }

// makeSoak is the run of each shape, by shape.
var makeSoak = map[string]shapeRun{
	"local":      {"make soak", "_output/e2e-artifacts-soak/soak-report.json"},
	"kind/stock": {"make soak RUNTIME=kind CONTROL_PLANE=stock", "_output/e2e-artifacts-soak-kind-stock/soak-report.json"},
}

// fromPerf is the repository relative to hack/tools/perf, where soakreport
// runs (in its module).
const fromPerf = "../../../"

// regenerate is the commands that make the runs again and write the page
// from their reports: known for the shapes of makeSoak only.
func regenerate(runs []*report) ([]string, error) {
	var out, reportFlags []string
	for _, r := range runs {
		run, ok := makeSoak[r.Shape]
		if !ok {
			return nil, fmt.Errorf("no command is known to make a run of shape %q: give the page's commands with -command", r.Shape)
		}
		out = append(out, fmt.Sprintf("%s DURATION=%s SEED=%d", run.command, durationFlag(r.Duration), r.Seed))
		reportFlags = append(reportFlags, "-report "+fromPerf+run.report)
	}
	return append(out, fmt.Sprintf("(cd hack/tools/perf && go run ./soakreport %s -out %sdocs/reliability.md -png %sdocs/reliability.png)",
		strings.Join(reportFlags, " "), fromPerf, fromPerf)), nil
}
