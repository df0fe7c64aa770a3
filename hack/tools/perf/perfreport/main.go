// Command perfreport turns the output of Gantry's scheduler benchmarks into
// docs/performance.md and its plot.
//
//	perfreport benchstat -set profiles|reservations -bench bench.txt [-bench qps.txt] > benchstat-input.txt
//	perfreport doc -bench bench.txt [-bench qps.txt] -items dir -benchstat benchstat.txt \
//	    -machine machine.txt -what all -count 3 -out docs/performance.md -png docs/performance.png
//
// "benchstat" rewrites throughput samples with the profile (or the number
// of reservations) as a name key, for `benchstat -col /profile` (or
// /reservations). "doc" writes the page: tables of means,
// spreads and ratios of one run, and a PNG of pods/s against nodes and
// against reservations. The page ends with the commands that regenerate
// it: -command gives them, or perfreport works them out (commands.go) from
// what `make bench-scheduler` was asked for (-what, -count, -select,
// -labels, -keep) and from the results it reads.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/hack/tools/perf/plot"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "perfreport:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: perfreport benchstat|doc [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	var benches, commands multi
	fs.Var(&benches, "bench", "go test -bench output (repeatable)")
	set := fs.String("set", "profiles", "benchstat: which comparison to write (profiles, reservations)")
	items := fs.String("items", "", "scheduler_perf's data-items directory (with reservations.jsonl)")
	bs := fs.String("benchstat", "", "benchstat's output, shown as it is")
	machine := fs.String("machine", "", "a file describing the machine")
	fs.Var(&commands, "command", "a command that regenerates the page (repeatable; instead of -what...)")
	var in runInfo
	fs.StringVar(&in.what, "what", "", "the run's WHAT (perf, all), for the commands that regenerate the page")
	fs.IntVar(&in.count, "count", 0, "the run's COUNT")
	fs.StringVar(&in.bench, "select", "", "the run's BENCH, if set")
	fs.StringVar(&in.labels, "labels", "", "the run's LABELS, if set")
	fs.BoolVar(&in.keep, "keep", false, "the run's KEEP=1")
	out := fs.String("out", "", "the Markdown file to write")
	pngPath := fs.String("png", "", "the plot to write")
	kube := fs.String("kubernetes", "", "doc: the Kubernetes release measured, e.g. 1.37.2 (required)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	res := newResults()
	for _, b := range benches {
		f, err := os.Open(b)
		if err != nil {
			return err
		}
		err = res.readBench(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
	}
	switch {
	case len(res.order) > 0:
	case args[0] == "benchstat":
		// Nothing to compare (BenchmarkReservationStatusWrite's results,
		// say): no benchstat input.
		return nil
	default:
		return fmt.Errorf("no benchmark results in %v", benches)
	}
	switch args[0] {
	case "benchstat":
		return res.normalize(os.Stdout, *set)
	case "doc":
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	if *out == "" || *pngPath == "" || *kube == "" {
		return fmt.Errorf("doc needs -out, -png and -kubernetes")
	}
	if *items != "" {
		if err := res.readItems(*items); err != nil {
			return err
		}
	}
	if len(commands) == 0 && in.what != "" {
		commands = regenerate(in, res)
	}
	doc := docInput{res: res, commands: commands, kube: *kube}
	for _, f := range []struct {
		path string
		dst  *string
	}{{*bs, &doc.benchstat}, {*machine, &doc.machine}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return err
		}
		*f.dst = string(b)
	}
	rel, err := filepath.Rel(filepath.Dir(*out), *pngPath)
	if err != nil {
		return err
	}
	doc.plot = filepath.ToSlash(rel)

	var png bytes.Buffer
	if err := plot.Write(&png, [][]plot.Panel{plotPanels(res)}, 640, 420); err != nil {
		return err
	}
	var md bytes.Buffer
	writeDoc(&md, doc)
	if err := os.WriteFile(*pngPath, png.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(*out, md.Bytes(), 0o644)
}

func plotPanels(r *results) []plot.Panel {
	nodes := plot.Panel{Title: "SchedulingBasic, 10,000 measured pods", XLabel: "nodes", YLabel: "pods/s",
		Series: []plot.Series{nodeSeries(r, "Upstream").asPlot("upstream profile"), nodeSeries(r, "Gantry").asPlot("Gantry profile")}}
	base := reservationSeries(r, "Gantry", "half the pods own reservations")
	resv := plot.Panel{Title: "Gantry profile, 5000 nodes, 10,000 pods", XLabel: "Available reservations", YLabel: "pods/s",
		Series: []plot.Series{base.asPlot(base.name), reservationSeries(r, "GantryNonOwners", "no pod owns one").asPlot("no pod owns one")}}
	if len(base.points) > 0 && base.points[0].x == 0 {
		resv.Guide, resv.GuideLabel = 0.9*base.points[0].y.mean, "0.9x without"
	}
	return []plot.Panel{nodes, resv}
}

// asPlot is the series as the plot draws it, named name: the mean of each
// point's repetitions, with a bar from the least to the most.
func (s series) asPlot(name string) plot.Series {
	out := plot.Series{Name: name}
	for _, p := range s.points {
		out.Points = append(out.Points, plot.Point{X: p.x, Y: p.y.mean, Min: slices.Min(p.y.values), Max: slices.Max(p.y.values)})
	}
	return out
}
